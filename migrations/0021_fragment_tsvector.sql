-- A fragment's full-text vector: the words of its text under the configuration of its
-- language and as written (`simple`), as the worker stores it. A text search vector holds at
-- most 1 MB, which the words of a fragment of several hundred kilobytes of text with few
-- repeated words (hashes, identifiers, encoded data) can exceed: Postgres refuses such a
-- vector, and the fragment could never be stored. Its vector then holds the words of the
-- longest beginning of its text that fits, found by shortening the text by a quarter at a time.
-- Natural text stays far below the limit: 1.9 MB of manual pages make a vector of 290 KB.

CREATE FUNCTION fragment_tsvector(config regconfig, content text) RETURNS tsvector
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE AS $$
DECLARE
    characters integer := length(content);
BEGIN
    LOOP
        BEGIN
            RETURN to_tsvector(config, left(content, characters))
                || to_tsvector('simple', left(content, characters));
        EXCEPTION WHEN program_limit_exceeded THEN
            characters := characters * 3 / 4;
        END;
    END LOOP;
END
$$;
