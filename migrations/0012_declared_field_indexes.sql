-- An index on every declared top-level field that is not an object, unless the schema says
-- "x-trove-index": false (on the property, else at the top of the schema): one per field and
-- type, over the pipeline id and the typed expression the filter compiles, holding the
-- fragments where the expression has a value; shared by the pipelines declaring the field so.
-- The names and expressions of src/store/indexes.rs (sync_declared_field_indexes), which keeps
-- them in step with the schemas from now on.
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
        WHERE coalesce(property.value -> 'x-trove-index', p.metadata_schema -> 'x-trove-index',
                       'true'::jsonb) <> 'false'::jsonb
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
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON fragments (pipeline_id, %s) WHERE %s IS NOT NULL',
            'mfidx_' || left(encode(sha256(convert_to(declared || ':' || r.field, 'UTF8')), 'hex'), 24),
            expression, expression);
    END LOOP;
END
$$;
