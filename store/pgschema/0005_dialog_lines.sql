-- interrupted mirrors the top-level "interrupted" member of metadata (true: the partial text of a
-- run that did not complete). The model's history window (ListDialogLinesBefore) reads it with the
-- dialog's text and never touches metadata, which holds a final answer's citations and excerpts.
ALTER TABLE messages ADD COLUMN interrupted boolean NOT NULL DEFAULT false;
UPDATE messages SET interrupted = true
    WHERE kind IN ('u', 'a') AND metadata LIKE '%"interrupted"%' AND (metadata::jsonb -> 'interrupted') = 'true'::jsonb;
