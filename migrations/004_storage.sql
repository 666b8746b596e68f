-- Readable data (issues 16 and 17): the raw MatchDto and TimelineDto are
-- kept as Riot served them, in json columns (the text exactly as sent,
-- queryable with -> and ->>) compressed with lz4 in TOAST; participants get
-- the columns analysts use. See docs/storage.md for the measurements behind
-- the choice.
--
-- The old gzip bytes stay in raw_gzip until store.Migrate's conversion step
-- (convertRawDocuments) has moved each row to raw; a document that a json
-- column cannot hold byte-equal (not UTF-8, a NUL byte, not JSON) keeps
-- raw_gzip and a NULL raw, and readers fall back to it.

DROP VIEW IF EXISTS visible_matches;

ALTER TABLE matches RENAME COLUMN raw TO raw_gzip;
ALTER TABLE matches ADD COLUMN raw json COMPRESSION lz4;
ALTER TABLE match_timelines RENAME COLUMN raw TO raw_gzip;
ALTER TABLE match_timelines ADD COLUMN raw json COMPRESSION lz4;

ALTER TABLE match_participants
    ADD COLUMN individual_position  text NOT NULL DEFAULT '',
    ADD COLUMN role                 text NOT NULL DEFAULT '',
    ADD COLUMN lane                 text NOT NULL DEFAULT '',
    ADD COLUMN items                int[] NOT NULL DEFAULT '{}',
    ADD COLUMN summoner1_id         int  NOT NULL DEFAULT 0,
    ADD COLUMN summoner2_id         int  NOT NULL DEFAULT 0,
    ADD COLUMN gold_spent           int  NOT NULL DEFAULT 0,
    ADD COLUMN total_damage_taken   int  NOT NULL DEFAULT 0,
    ADD COLUMN damage_to_objectives int  NOT NULL DEFAULT 0,
    ADD COLUMN wards_placed         int  NOT NULL DEFAULT 0,
    ADD COLUMN wards_killed         int  NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS match_participants_champion_idx ON match_participants (champion_id);

{{ template "shared/visible_matches.sql" . }}

---- create above / drop below ----

-- Lossy: documents already moved to raw (json) are dropped; only rows still
-- in raw_gzip come back.
DROP VIEW IF EXISTS visible_matches;
DROP INDEX IF EXISTS match_participants_champion_idx;
ALTER TABLE match_participants
    DROP COLUMN individual_position, DROP COLUMN role, DROP COLUMN lane, DROP COLUMN items,
    DROP COLUMN summoner1_id, DROP COLUMN summoner2_id, DROP COLUMN gold_spent,
    DROP COLUMN total_damage_taken, DROP COLUMN damage_to_objectives, DROP COLUMN wards_placed,
    DROP COLUMN wards_killed;
ALTER TABLE match_timelines DROP COLUMN raw;
ALTER TABLE match_timelines RENAME COLUMN raw_gzip TO raw;
ALTER TABLE matches DROP COLUMN raw;
ALTER TABLE matches RENAME COLUMN raw_gzip TO raw;
{{ template "shared/visible_matches.sql" . }}
