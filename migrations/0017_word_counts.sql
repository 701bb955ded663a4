-- Each pipeline's word statistics for the lexical list of a hybrid search (BM25): for every
-- word of its current fragments' full-text vectors, how many fragments hold it and their
-- total length (the size of their stored text); the word '' stands for every such fragment.
-- A fragment counts while it is current (`expired_at` null) and has a full-text vector.
--
-- The rows are changes: triggers on `fragments` add one row per word for each statement that
-- changes what counts (an insert, an expiry, a delete), so that concurrent writers never wait
-- for each other on a common word, and a word's figures are the sum of its rows. The worker
-- folds a pipeline's rows into one per word from time to time (`store::words::fold`).

CREATE TABLE word_counts (
    pipeline_id uuid NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
    word        text NOT NULL,
    fragments   bigint NOT NULL,
    length      bigint NOT NULL
);

CREATE INDEX word_counts_idx ON word_counts (pipeline_id, word) INCLUDE (fragments, length);

-- Adds the changes of one statement on `fragments`: +1 for each fragment it made count, -1 for
-- each it made no longer count, per word of their full-text vectors and for ''. The fragments
-- of a pipeline being deleted (`trove.deleting_pipeline`, set by the delete's transaction) are
-- left out: its rows go with it.
CREATE FUNCTION count_fragment_words() RETURNS trigger LANGUAGE plpgsql AS $$
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
         FROM (%s) c
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

CREATE TRIGGER fragments_count_inserted_words AFTER INSERT ON fragments
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_fragment_words();
CREATE TRIGGER fragments_count_updated_words AFTER UPDATE ON fragments
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_fragment_words();
CREATE TRIGGER fragments_count_deleted_words AFTER DELETE ON fragments
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION count_fragment_words();

-- The fragments stored before these statistics.
INSERT INTO word_counts (pipeline_id, word, fragments, length)
SELECT f.pipeline_id, w.word, count(*), sum(octet_length(f.content))
FROM fragments f
CROSS JOIN LATERAL (SELECT '' AS word UNION ALL SELECT unnest(tsvector_to_array(f.tsv))) w
WHERE f.expired_at IS NULL AND f.tsv IS NOT NULL
GROUP BY f.pipeline_id, w.word;
