-- The word statistics' trigger (migration 17) with its fragments read in a subquery that is
-- not pulled up (`OFFSET 0`): pulled up, the length of each fragment, `octet_length(content)`,
-- was computed above the join with the fragment's words, so that every word's row carried the
-- fragment's text and full-text vector into the sort that groups them. A fragment of 1.6 MB of
-- 68,000 distinct words made the sort write tens of gigabytes of temporary files (when the
-- planner sorted rather than hashed); now the rows hold the pipeline, the word, the sign and
-- the length only.

CREATE OR REPLACE FUNCTION count_fragment_words() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    counted constant text := '%1$s.expired_at IS NULL AND %1$s.tsv IS NOT NULL
        AND %1$s.pipeline_id IS DISTINCT FROM
            nullif(current_setting(''trove.deleting_pipeline'', true), '''')::uuid';
    added constant text := format('SELECT n.pipeline_id, n.tsv,
        octet_length(n.content)::bigint AS len, 1 AS sign FROM new_rows n WHERE ' || counted, 'n');
    removed constant text := format('SELECT o.pipeline_id, o.tsv,
        octet_length(o.content)::bigint AS len, -1 AS sign FROM old_rows o WHERE ' || counted, 'o');
BEGIN
    EXECUTE format(
        'INSERT INTO word_counts (pipeline_id, word, fragments, length)
         SELECT c.pipeline_id, w.word, sum(c.sign), sum(c.sign * c.len)
         FROM (%s OFFSET 0) c
         CROSS JOIN LATERAL (SELECT '''' AS word UNION ALL SELECT unnest(tsvector_to_array(c.tsv))) w
         GROUP BY c.pipeline_id, w.word
         HAVING sum(c.sign) <> 0 OR sum(c.sign * c.len) <> 0',
        CASE TG_OP
            WHEN 'INSERT' THEN added
            WHEN 'DELETE' THEN removed
            ELSE added || ' UNION ALL ' || removed
        END);
    RETURN NULL;
END
$$;
