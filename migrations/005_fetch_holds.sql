-- Fetch holds (issues 25 and 27): a fetch waiting in a JetStream message
-- schedule (a rate-limit wait, a key wait or the backoff before its next
-- attempt) is held by that schedule until it fires. The match-fetcher
-- records the hold when it schedules (held_by: the schedule's token, which
-- the scheduled FetchCommand carries as "hold"; held_until: when it fires),
-- so the retry-sweeper re-publishes a fetch only when nothing holds it,
-- and a fetch command that is not the holder makes no Riot call while the
-- hold lasts. Idempotent, as 003.
ALTER TABLE match_fetches ADD COLUMN IF NOT EXISTS held_until timestamptz;
ALTER TABLE match_fetches ADD COLUMN IF NOT EXISTS held_by text;

---- create above / drop below ----

ALTER TABLE match_fetches DROP COLUMN IF EXISTS held_by;
ALTER TABLE match_fetches DROP COLUMN IF EXISTS held_until;
