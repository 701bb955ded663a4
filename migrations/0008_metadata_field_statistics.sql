-- Planner statistics on the typed expression of every declared top-level metadata field (one
-- object per field and type, shared by the pipelines declaring it so; the names and
-- expressions of src/store/indexes.rs): a filter on a field without a metadata index is then
-- estimated from the data instead of a fixed guess. Filled by the next ANALYZE of fragments.
DO $$
DECLARE
    r record;
    declared text;
    expression text;
BEGIN
    FOR r IN
        SELECT DISTINCT property.key AS field, property.value -> 'type' AS type
        FROM pipelines AS p,
             jsonb_each(coalesce(p.metadata_schema -> 'properties', '{}'::jsonb)) AS property
    LOOP
        declared := CASE jsonb_typeof(r.type)
            WHEN 'string' THEN r.type #>> '{}'
            WHEN 'array' THEN (SELECT t FROM jsonb_array_elements_text(r.type) AS t
                               WHERE t <> 'null' LIMIT 1)
        END;
        expression := CASE declared
            WHEN 'string' THEN format('(metadata ->> %L)', r.field)
            WHEN 'integer' THEN format(
                '(JSON_VALUE(metadata, %L RETURNING numeric NULL ON ERROR))', '$."' || r.field || '"')
            WHEN 'number' THEN format(
                '(JSON_VALUE(metadata, %L RETURNING double precision NULL ON ERROR))', '$."' || r.field || '"')
            WHEN 'boolean' THEN format(
                '(JSON_VALUE(metadata, %L RETURNING boolean NULL ON ERROR))', '$."' || r.field || '"')
        END;
        CONTINUE WHEN expression IS NULL;
        EXECUTE format('CREATE STATISTICS IF NOT EXISTS %I ON %s FROM fragments',
            'mstat_' || left(encode(sha256(convert_to(declared || ':' || r.field, 'UTF8')), 'hex'), 24),
            expression);
    END LOOP;
END
$$;
