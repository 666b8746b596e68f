{{- /*
The view visible_matches (seed 000's query filter), for each migration that
creates it: 001, and 004 in both directions (m.* is expanded when a view is
created, so 004 drops the view before it changes the columns of matches and
creates it again after). tern renders every migration as a Go template and
loads the .sql files of subdirectories as shared templates, never as
migrations of their own.
*/ -}}
CREATE VIEW visible_matches AS
SELECT m.*
FROM matches m
WHERE NOT EXISTS (
    SELECT 1 FROM match_fetches f
    WHERE f.match_id = m.match_id AND f.kind = 'match'
      AND f.status = 'permanently_unfetchable');
