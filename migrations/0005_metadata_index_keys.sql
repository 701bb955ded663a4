-- Metadata indexes carried the pipeline id as a partial-index predicate (a literal), which a
-- statement binding the pipeline id cannot use under a generic plan. They become indexes on
-- (pipeline_id, expression), rebuilt from their own definitions.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS definition
        FROM pg_index AS i
        JOIN pg_class AS c ON c.oid = i.indexrelid
        WHERE i.indrelid = 'fragments'::regclass
          AND c.relname LIKE 'pidx\_%'
          AND i.indpred IS NOT NULL
    LOOP
        EXECUTE format('DROP INDEX %I', r.name);
        EXECUTE regexp_replace(
            regexp_replace(r.definition, 'USING btree \(', 'USING btree (pipeline_id, '),
            ' WHERE .*$', '');
    END LOOP;
END
$$;
