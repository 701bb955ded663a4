-- Each pipeline's postings, from which the lexical list of a hybrid search takes its first
-- candidates: one row for each word of each current fragment's full-text vector, with the
-- word's BM25 term weight in that fragment (its impact),
--
--     tf × (k1 + 1) / (tf + k1 × (1 − b + b × dl / avgdl)),  k1 = 1.2, b = 0.75
--
-- (`trove_query::hybrid::BM25_K1` and `BM25_B`), tf the word's frequency in the fragment, dl
-- the size of its stored text and avgdl the pipeline's reference length (`posting_norms`). In
-- the index, a word's fragments come best first: a search reads the first few hundred of
-- each of its words instead of every fragment that holds them.
--
-- The reference length is the average of the pipeline's first fragments and stays as it is,
-- so that a posting's impact is a function of the fragment alone (a removal finds its rows by
-- recomputing them). It orders the candidates only: the list's scores are computed again
-- from the candidates' full-text vectors with the statistics of the moment (`word_counts`).
--
-- A fragment has postings while it is current (`expired_at` null) and has a full-text vector,
-- as it counts in `word_counts`; triggers on `fragments` add and remove them. The rows carry
-- the fragment's classification, so that a scope's classifications are matched in the index.
-- A word of more than 1,000 bytes (a long token, up to the 2,046 bytes of a lexeme) has no
-- postings: with a classification of up to 255 characters it could exceed what a row of the
-- index may hold, and the fragment could not be stored.
-- No foreign key, which would look the pipeline up for each of the dozens of rows a fragment
-- writes: a pipeline's rows go with it through a trigger on `pipelines`.

CREATE TABLE posting_norms (
    pipeline_id uuid PRIMARY KEY REFERENCES pipelines (id) ON DELETE CASCADE,
    avgdl       double precision NOT NULL
);

CREATE TABLE postings (
    pipeline_id    uuid NOT NULL,
    word           text NOT NULL,
    impact         real NOT NULL,
    fragment_id    uuid NOT NULL,
    classification text NOT NULL
);

CREATE INDEX postings_idx ON postings (pipeline_id, word, impact DESC, fragment_id)
    INCLUDE (classification);

-- The impact of a word `tf` times in a fragment of length `dl`, with the reference length
-- `avgdl`: the one expression that writes and removes postings.
CREATE FUNCTION posting_impact(tf integer, dl bigint, avgdl double precision) RETURNS real
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (tf * 2.2::double precision / (tf + 1.2 * (0.25 + 0.75 * dl / avgdl)))::real;

-- Adds the postings of the fragments a statement on `fragments` made current (an insert)
-- and removes those of the fragments it made no longer current (an expiry, a delete), as
-- `count_fragment_words` counts them. An update that leaves a fragment current with the same
-- full-text vector, classification and length leaves its postings alone: the changes of an
-- update are the rows, old or new, without a counterpart on the other side, found by sorting
-- both sides together (a statement expiring thousands of fragments does not compare each with
-- every other). The fragments of a pipeline being deleted are left out: its rows go with it.
CREATE FUNCTION post_fragment_words() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    -- The rows of the transition table %3$s (as %1$s) that count, each with its side %2$s:
    -- 1 for postings to add, -1 for postings to remove.
    side constant text := 'SELECT %1$s.pipeline_id, %1$s.id, %1$s.tsv, %1$s.classification,
            octet_length(%1$s.content) AS len, %2$s AS side
        FROM %3$s %1$s WHERE %1$s.expired_at IS NULL AND %1$s.tsv IS NOT NULL
            AND %1$s.pipeline_id IS DISTINCT FROM
                nullif(current_setting(''trove.deleting_pipeline'', true), '''')::uuid';
    changes constant text := CASE TG_OP
        WHEN 'INSERT' THEN format(side, 'n', 1, 'new_rows')
        WHEN 'DELETE' THEN format(side, 'o', -1, 'old_rows')
        ELSE format('SELECT pipeline_id, id, tsv, classification, len, sum(side) AS side
            FROM (%s UNION ALL %s) c GROUP BY id, pipeline_id, tsv, classification, len
            HAVING count(*) = 1', format(side, 'o', -1, 'old_rows'),
            format(side, 'n', 1, 'new_rows'))
    END;
    -- The postings of the changes (%1$s) of side %2$s.
    postings constant text := 'SELECT c.pipeline_id, u.lexeme AS word,
            posting_impact(coalesce(cardinality(u.positions), 1), c.len, m.avgdl) AS impact,
            c.id AS fragment_id, c.classification
        FROM (%1$s) c JOIN posting_norms m USING (pipeline_id) CROSS JOIN LATERAL unnest(c.tsv) u
        WHERE c.side = %2$s AND octet_length(u.lexeme) <= 1000';
BEGIN
    IF TG_OP <> 'INSERT' THEN
        EXECUTE format('DELETE FROM postings p USING (' || postings || ') g
            WHERE p.pipeline_id = g.pipeline_id AND p.word = g.word AND p.impact = g.impact
              AND p.fragment_id = g.fragment_id', changes, -1);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        EXECUTE format('INSERT INTO posting_norms (pipeline_id, avgdl)
            SELECT c.pipeline_id, avg(c.len) FROM (%s) c WHERE c.side = 1
            GROUP BY c.pipeline_id ON CONFLICT (pipeline_id) DO NOTHING', changes);
        EXECUTE format('INSERT INTO postings (pipeline_id, word, impact, fragment_id, classification) '
            || postings, changes, 1);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER fragments_post_inserted_words AFTER INSERT ON fragments
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION post_fragment_words();
CREATE TRIGGER fragments_post_updated_words AFTER UPDATE ON fragments
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION post_fragment_words();
CREATE TRIGGER fragments_post_deleted_words AFTER DELETE ON fragments
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION post_fragment_words();

CREATE FUNCTION drop_pipeline_postings() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM postings WHERE pipeline_id = OLD.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER pipelines_drop_postings AFTER DELETE ON pipelines
    FOR EACH ROW EXECUTE FUNCTION drop_pipeline_postings();

-- The fragments stored before the postings.
INSERT INTO posting_norms (pipeline_id, avgdl)
SELECT f.pipeline_id, avg(octet_length(f.content))
FROM fragments f
WHERE f.expired_at IS NULL AND f.tsv IS NOT NULL
GROUP BY f.pipeline_id;

INSERT INTO postings (pipeline_id, word, impact, fragment_id, classification)
SELECT f.pipeline_id, u.lexeme,
       posting_impact(coalesce(cardinality(u.positions), 1), octet_length(f.content), m.avgdl),
       f.id, f.classification
FROM fragments f
JOIN posting_norms m USING (pipeline_id)
CROSS JOIN LATERAL unnest(f.tsv) u
WHERE f.expired_at IS NULL AND f.tsv IS NOT NULL AND octet_length(u.lexeme) <= 1000;
