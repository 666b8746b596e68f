-- riftflow schema v1: accounts and their syncs, match data, the fetch
-- ledger (seed 000), the job log (seed 002), league snapshots and weekly
-- reports. Applied by tern (store.Migrate); see docs in pkg/store.

CREATE TABLE accounts (
    puuid            text PRIMARY KEY,
    game_name        text NOT NULL DEFAULT '',
    tag_line         text NOT NULL DEFAULT '',
    platform         text NOT NULL DEFAULT '',
    region           text NOT NULL DEFAULT '',
    sync_status      text NOT NULL DEFAULT 'pending'
        CHECK (sync_status IN ('pending', 'syncing', 'completed', 'failed')),
    sync_progress    int  NOT NULL DEFAULT 0,
    sync_total       int  NOT NULL DEFAULT 0,
    sync_request_id  text,
    sync_error       text,
    sync_started_at  timestamptz,
    last_progress_at timestamptz,
    last_synced_at   timestamptz,
    active           boolean NOT NULL DEFAULT true,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX accounts_riot_id_idx ON accounts (lower(game_name), lower(tag_line));
CREATE INDEX accounts_sync_request_idx ON accounts (sync_request_id);
CREATE INDEX accounts_syncing_idx ON accounts (last_progress_at) WHERE sync_status = 'syncing';

CREATE TABLE matches (
    match_id           text PRIMARY KEY,
    platform           text NOT NULL DEFAULT '',
    region             text NOT NULL DEFAULT '',
    queue_id           int  NOT NULL DEFAULT 0,
    game_mode          text NOT NULL DEFAULT '',
    game_type          text NOT NULL DEFAULT '',
    game_version       text NOT NULL DEFAULT '',
    patch              text NOT NULL DEFAULT '',
    map_id             int  NOT NULL DEFAULT 0,
    game_creation      timestamptz,
    game_start         timestamptz,
    game_end           timestamptz,
    duration_s         int  NOT NULL DEFAULT 0,
    end_of_game_result text NOT NULL DEFAULT '',
    participant_count  int  NOT NULL DEFAULT 0,
    raw                bytea,
    fetched_at         timestamptz NOT NULL DEFAULT now()
);
-- raw is gzip from the client: compressing it again only burns CPU.
ALTER TABLE matches ALTER COLUMN raw SET STORAGE EXTERNAL;
CREATE INDEX matches_game_creation_idx ON matches (game_creation);

CREATE TABLE match_participants (
    match_id            text NOT NULL REFERENCES matches (match_id) ON DELETE CASCADE,
    participant_id      int  NOT NULL,
    puuid               text NOT NULL,
    riot_id_game_name   text NOT NULL DEFAULT '',
    riot_id_tagline     text NOT NULL DEFAULT '',
    team_id             int  NOT NULL DEFAULT 0,
    champion_id         int  NOT NULL DEFAULT 0,
    champion_name       text NOT NULL DEFAULT '',
    champ_level         int  NOT NULL DEFAULT 0,
    team_position       text NOT NULL DEFAULT '',
    win                 boolean NOT NULL DEFAULT false,
    kills               int  NOT NULL DEFAULT 0,
    deaths              int  NOT NULL DEFAULT 0,
    assists             int  NOT NULL DEFAULT 0,
    gold_earned         int  NOT NULL DEFAULT 0,
    cs                  int  NOT NULL DEFAULT 0,
    vision_score        int  NOT NULL DEFAULT 0,
    damage_to_champions int  NOT NULL DEFAULT 0,
    time_played_s       int  NOT NULL DEFAULT 0,
    placement           int  NOT NULL DEFAULT 0,
    PRIMARY KEY (match_id, participant_id)
);
CREATE INDEX match_participants_puuid_idx ON match_participants (puuid);

CREATE TABLE match_timelines (
    match_id          text PRIMARY KEY,
    frame_interval_ms int NOT NULL DEFAULT 0,
    frame_count       int NOT NULL DEFAULT 0,
    raw               bytea,
    fetched_at        timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE match_timelines ALTER COLUMN raw SET STORAGE EXTERNAL;

-- The fetch ledger (seed 000): one row per (match, kind).
CREATE TABLE match_fetches (
    match_id          text NOT NULL,
    kind              text NOT NULL CHECK (kind IN ('match', 'timeline')),
    status            text NOT NULL DEFAULT 'unfetched'
        CHECK (status IN ('unfetched', 'success', 'temporary_failure',
                          'permanently_unfetchable', 'outside_retention_window')),
    attempt           int  NOT NULL DEFAULT 0,
    retry_count       int  NOT NULL DEFAULT 0,
    not_found         int  NOT NULL DEFAULT 0,
    game_creation     timestamptz,
    fetched_at        timestamptz,
    last_attempt_at   timestamptz,
    last_error        text,
    http_status       int,
    listed_by_request text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (match_id, kind)
);
CREATE INDEX match_fetches_status_idx ON match_fetches (status, last_attempt_at);

CREATE TABLE sync_matches (
    request_id text NOT NULL,
    match_id   text NOT NULL,
    puuid      text NOT NULL,
    done       boolean NOT NULL DEFAULT false,
    PRIMARY KEY (request_id, match_id)
);
CREATE INDEX sync_matches_open_idx ON sync_matches (match_id) WHERE NOT done;

-- The job log (seed 002).
CREATE TABLE jobs (
    id           text PRIMARY KEY,
    type         text NOT NULL,
    puuid        text,
    status       text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'completed', 'failed', 'rejected')),
    retries      int  NOT NULL DEFAULT 0,
    error        text,
    detail       jsonb,
    requested_at timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz
);
CREATE INDEX jobs_requested_idx ON jobs (requested_at DESC);
CREATE INDEX jobs_puuid_idx ON jobs (puuid, requested_at DESC);

CREATE TABLE league_entries (
    puuid         text NOT NULL,
    queue_type    text NOT NULL,
    snapshot_date date NOT NULL,
    platform      text NOT NULL DEFAULT '',
    league_id     text NOT NULL DEFAULT '',
    tier          text NOT NULL DEFAULT '',
    rank          text NOT NULL DEFAULT '',
    league_points int  NOT NULL DEFAULT 0,
    wins          int  NOT NULL DEFAULT 0,
    losses        int  NOT NULL DEFAULT 0,
    hot_streak    boolean NOT NULL DEFAULT false,
    veteran       boolean NOT NULL DEFAULT false,
    fresh_blood   boolean NOT NULL DEFAULT false,
    inactive      boolean NOT NULL DEFAULT false,
    fetched_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (puuid, queue_type, snapshot_date)
);

CREATE TABLE weekly_reports (
    puuid         text NOT NULL,
    week_start    date NOT NULL,
    games         int  NOT NULL DEFAULT 0,
    wins          int  NOT NULL DEFAULT 0,
    kills         int  NOT NULL DEFAULT 0,
    deaths        int  NOT NULL DEFAULT 0,
    assists       int  NOT NULL DEFAULT 0,
    kda           numeric(8, 2) NOT NULL DEFAULT 0,
    top_champions jsonb NOT NULL DEFAULT '[]',
    lp_change     int,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (puuid, week_start)
);

-- Seed 000's query filter: ordinary reads hide permanently unfetchable
-- matches. Admins read matches directly, or match_fetch_failures.
{{ template "shared/visible_matches.sql" . }}

CREATE VIEW match_fetch_failures AS
SELECT match_id, kind, status, attempt, retry_count, not_found, http_status,
       last_error, last_attempt_at, game_creation, listed_by_request
FROM match_fetches
WHERE status IN ('temporary_failure', 'permanently_unfetchable', 'outside_retention_window');

---- create above / drop below ----

DROP VIEW IF EXISTS match_fetch_failures;
DROP VIEW IF EXISTS visible_matches;
DROP TABLE IF EXISTS weekly_reports;
DROP TABLE IF EXISTS league_entries;
DROP TABLE IF EXISTS jobs;
DROP TABLE IF EXISTS sync_matches;
DROP TABLE IF EXISTS match_fetches;
DROP TABLE IF EXISTS match_timelines;
DROP TABLE IF EXISTS match_participants;
DROP TABLE IF EXISTS matches;
DROP TABLE IF EXISTS accounts;
