-- The HNSW index of every association holds its vectors normalised to unit length in half
-- precision (`(l2_normalize(embedding)::halfvec(<dimension>)) halfvec_cosine_ops`) instead of
-- the vectors as stored: half the size, and a walk that reads half the bytes. Each existing
-- index is dropped here and recorded as deferred with its own build parameters (pgvector's
-- defaults, 16 and 64, for those it does not name), as the worker records an index it drops
-- for a burst of ingestion: the worker's sweep builds the new index when the service starts,
-- and searches are exact until then. An index already deferred is built the new way anyway.
DO $$
DECLARE
    association record;
    options text[];
BEGIN
    FOR association IN
        SELECT ve.id, 'vectors_' || replace(ve.id::text, '-', '') || '_hnsw' AS index_name
        FROM vector_embeddings AS ve
        WHERE ve.deferred_index_m IS NULL
    LOOP
        CONTINUE WHEN to_regclass(association.index_name) IS NULL;
        SELECT c.reloptions INTO options FROM pg_class AS c
        WHERE c.oid = to_regclass(association.index_name);
        EXECUTE format('DROP INDEX %I', association.index_name);
        UPDATE vector_embeddings
        SET deferred_index_m = COALESCE(
                (SELECT substr(o, 3)::integer FROM unnest(options) AS o WHERE o LIKE 'm=%'), 16),
            deferred_index_ef_construction = COALESCE(
                (SELECT substr(o, 17)::integer FROM unnest(options) AS o
                 WHERE o LIKE 'ef\_construction=%'), 64),
            deferred_index_at = now()
        WHERE id = association.id;
    END LOOP;
END
$$;
