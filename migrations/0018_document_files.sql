-- Files submitted as documents (extension: `POST /pipelines/{pipeline_id}/files`). A file's
-- bytes are kept encrypted in `document_texts.text` like a raw text, with the format detected
-- at submission; the worker extracts the text before splitting. NULL: a plain text.
ALTER TABLE document_texts ADD COLUMN format text;

-- Why a version failed, when a reason is known (a file whose text could not be extracted);
-- NULL otherwise.
ALTER TABLE documents ADD COLUMN status_reason text;
