-- A version's encrypted text (AES-GCM output, incompressible) is kept until the worker has
-- processed it. Stored inline and never compressed: the default storage tried to compress
-- every text above ~2 KB and then moved it to the TOAST table, a wasted compression attempt
-- and a second table and index written and cleaned per document. Texts above 8 KB still
-- move out of line, uncompressed.
ALTER TABLE document_texts ALTER COLUMN text SET STORAGE EXTERNAL;
ALTER TABLE document_texts SET (toast_tuple_target = 8160);
