-- Typed metadata fields are read through expressions that never fail (JSON_VALUE ... NULL ON
-- ERROR: NULL where the value does not convert; integers as numeric). Metadata indexes cover every
-- row of `fragments`, so with the former casts another pipeline's value under the same field
-- name (a string where this one declares an integer) made its inserts, or the index's
-- creation, fail.
--
-- Rule 6 of the filter language (a stored value that does not convert to the declared type
-- makes every filter on the field fail) is kept by recording such values: only integer fields
-- can hold them once metadata is validated (JSON Schema's integers include 5.0 and integers
-- beyond 64 bits). The record goes with its document version.
CREATE TABLE metadata_unconvertible (
    pipeline_id uuid   NOT NULL,
    field       text   NOT NULL,
    document_id uuid   NOT NULL,
    version     bigint NOT NULL,
    PRIMARY KEY (document_id, version, field),
    FOREIGN KEY (document_id, version) REFERENCES documents (id, version) ON DELETE CASCADE
);

CREATE INDEX metadata_unconvertible_field_idx ON metadata_unconvertible (pipeline_id, field);

DO $$
DECLARE
    r record;
    declared text;
    expression text;
    ix record;
BEGIN
    FOR r IN
        SELECT p.id AS pipeline_id, property.key AS field, property.value -> 'type' AS type
        FROM pipelines AS p,
             jsonb_each(coalesce(p.metadata_schema -> 'properties', '{}'::jsonb)) AS property
    LOOP
        -- `"t"` or `["t", "null"]`.
        declared := CASE jsonb_typeof(r.type)
            WHEN 'string' THEN r.type #>> '{}'
            WHEN 'array' THEN (SELECT t FROM jsonb_array_elements_text(r.type) AS t
                               WHERE t <> 'null' LIMIT 1)
        END;
        IF declared = 'integer' THEN
            INSERT INTO metadata_unconvertible (pipeline_id, field, document_id, version)
            SELECT d.pipeline_id, r.field, d.id, d.version
            FROM documents AS d
            WHERE d.pipeline_id = r.pipeline_id
              AND jsonb_typeof(d.metadata -> r.field) = 'number'
              AND NOT ((d.metadata ->> r.field) ~ '^-?[0-9]+$'
                       AND (d.metadata ->> r.field)::numeric
                           BETWEEN -9223372036854775808 AND 9223372036854775807);
        END IF;
        -- The same expressions as src/store/indexes.rs (typed_field_expression).
        expression := CASE declared
            WHEN 'integer' THEN format(
                '(JSON_VALUE(metadata, %L RETURNING numeric NULL ON ERROR))', '$."' || r.field || '"')
            WHEN 'number' THEN format(
                '(JSON_VALUE(metadata, %L RETURNING double precision NULL ON ERROR))', '$."' || r.field || '"')
            WHEN 'boolean' THEN format(
                '(JSON_VALUE(metadata, %L RETURNING boolean NULL ON ERROR))', '$."' || r.field || '"')
        END;
        CONTINUE WHEN expression IS NULL;
        FOR ix IN
            SELECT 'pidx_' || replace(i.id::text, '-', '') AS name
            FROM pipeline_indexes AS i
            WHERE i.pipeline_id = r.pipeline_id AND i.field = r.field
        LOOP
            EXECUTE format('DROP INDEX IF EXISTS %I', ix.name);
            EXECUTE format('CREATE INDEX %I ON fragments (pipeline_id, %s)', ix.name, expression);
        END LOOP;
    END LOOP;
END
$$;
