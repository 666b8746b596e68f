-- riftflow schema v2: bearer tokens for the HTTP API (docs/security.md).
-- Only the SHA-256 of a token is stored; the token itself is shown once,
-- when `riftflow token create` (or `riftflow up`) makes it.

CREATE TABLE api_tokens (
    id           text PRIMARY KEY,             -- public part of the token: rft_<id>_<secret>
    name         text NOT NULL,                -- who or what holds it
    scopes       text[] NOT NULL
        CHECK (scopes <@ ARRAY['read', 'sync', 'admin']::text[] AND cardinality(scopes) > 0),
    sha256       bytea NOT NULL CHECK (length(sha256) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_tokens_name_idx ON api_tokens (name) WHERE revoked_at IS NULL;

---- create above / drop below ----

DROP TABLE IF EXISTS api_tokens;
