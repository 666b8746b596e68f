-- Designs 000-002 in full (issue 17). Every statement is idempotent and
-- touches only what this file adds, so it applies in any order with other
-- migrations numbered after 001.

-- Design 002: who asked for a job.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS requested_by text;

---- create above / drop below ----

ALTER TABLE jobs DROP COLUMN IF EXISTS requested_by;
