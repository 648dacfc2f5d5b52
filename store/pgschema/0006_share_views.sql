-- What each share covers and how often it was viewed (store/share_views.go): messages is how many
-- messages the share page shows (USER and ASSISTANT answers up to the watermark), watermark_at when
-- the watermark message was written; views and last_viewed_at are added to in batches.
ALTER TABLE shares
    ADD COLUMN messages integer NOT NULL DEFAULT 0,
    ADD COLUMN watermark_at timestamptz,
    ADD COLUMN views bigint NOT NULL DEFAULT 0,
    ADD COLUMN last_viewed_at timestamptz;
-- Shares made before this version get their coverage now, as bbolt's Open does (coverSharesLocked).
UPDATE shares sh SET
    messages = (SELECT count(*) FROM messages m
        WHERE m.session_id = sh.session_id AND m.id <= sh.watermark AND m.kind IN ('u', 'a')),
    watermark_at = (SELECT m.created_at FROM messages m WHERE m.id = sh.watermark AND m.session_id = sh.session_id);
