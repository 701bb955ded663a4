-- Each association's vector table holds what a search's scope tests of a fragment: its
-- classification, its metadata and whether it is current (`live`), copied from `fragments`
-- (src/store/vectors.rs). An exact search reads the scope from the vector table alone. Its
-- indexes hold the live rows only: the HNSW index is dropped here and recorded as deferred with
-- its own build parameters, as migration 0013 did, so that the worker's sweep builds it again
-- on the live rows when the service starts (searches are exact until then); filling the new
-- columns does not go through it. The indexes on declared fields are created by the service at
-- start (src/store/indexes.rs, sync_vector_field_indexes).
DO $$
DECLARE
    association record;
    options text[];
BEGIN
    FOR association IN
        SELECT ve.id, ve.deferred_index_m IS NULL AS indexed,
               'vectors_' || replace(ve.id::text, '-', '') AS table_name
        FROM vector_embeddings AS ve
    LOOP
        CONTINUE WHEN to_regclass(association.table_name) IS NULL;
        IF association.indexed AND to_regclass(association.table_name || '_hnsw') IS NOT NULL THEN
            SELECT c.reloptions INTO options FROM pg_class AS c
            WHERE c.oid = to_regclass(association.table_name || '_hnsw');
            EXECUTE format('DROP INDEX %I', association.table_name || '_hnsw');
            UPDATE vector_embeddings
            SET deferred_index_m = COALESCE(
                    (SELECT substr(o, 3)::integer FROM unnest(options) AS o WHERE o LIKE 'm=%'), 16),
                deferred_index_ef_construction = COALESCE(
                    (SELECT substr(o, 17)::integer FROM unnest(options) AS o
                     WHERE o LIKE 'ef\_construction=%'), 64),
                deferred_index_at = now()
            WHERE id = association.id;
        END IF;
        EXECUTE format(
            'ALTER TABLE %I ADD COLUMN classification text, ADD COLUMN metadata jsonb,
                            ADD COLUMN live boolean',
            association.table_name);
        EXECUTE format(
            'UPDATE %I AS v SET classification = f.classification, metadata = f.metadata,
                                live = f.expired_at IS NULL
             FROM fragments AS f WHERE f.id = v.fragment_id',
            association.table_name);
        EXECUTE format(
            'ALTER TABLE %I ALTER COLUMN classification SET NOT NULL,
                            ALTER COLUMN metadata SET NOT NULL, ALTER COLUMN live SET NOT NULL',
            association.table_name);
        EXECUTE format('CREATE INDEX %I ON %I (classification) WHERE live',
            association.table_name || '_class', association.table_name);
    END LOOP;
END
$$;
