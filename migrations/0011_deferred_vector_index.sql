-- An association whose HNSW index the worker dropped for a burst of ingestion (building the
-- graph once the vectors are loaded costs a fraction of inserting each into a live graph)
-- keeps the index's build parameters here, and when it was dropped, until the index is built
-- again; all three are null while the index exists. The drop and the record commit together,
-- and so do the build and the clearing, so a process that dies in between leaves the record
-- for the next worker.
ALTER TABLE vector_embeddings
    ADD COLUMN deferred_index_m integer,
    ADD COLUMN deferred_index_ef_construction integer,
    ADD COLUMN deferred_index_at timestamptz,
    ADD CONSTRAINT vector_embeddings_deferred_index_check
        CHECK ((deferred_index_m IS NULL) = (deferred_index_ef_construction IS NULL)
               AND (deferred_index_m IS NULL) = (deferred_index_at IS NULL));
