-- Recall@5 of the HNSW walk under a `tenant` filter, against the exact ranking, on a database
-- kept by the search bench (`cargo bench --bench search -- 60000 --concurrency=0 --sweep=
-- --exact-sql=0 --keep` prints its name). The queries are 200 of the pipeline's own vectors
-- (each excluded from its own results); the walk is the service's statement shape: the vector
-- table's HNSW scan joined to `fragments`, the filter tested on each candidate, LIMIT 5.
--
--   psql <kept database URL> -v table=vectors_<id> -v pipeline=<pipeline id> \
--        -v tenants='{1,2,3,4,5}' -v ef=1000 -v ord=strict_order -f benches/sql/walk_recall.sql
--
-- `tenants`: the admitted tenants (100 tenants: five of them are a 5 % scope); `ef`:
-- `hnsw.ef_search`; `ord`: `hnsw.iterative_scan`. The bench's metadata index on `tenant` is
-- dropped first, so the filter is tested on each candidate as without an index. Prints the
-- walk's time for the 200 queries and its recall@5.
\set QUIET on
SET client_min_messages = warning;
SELECT format('DROP INDEX %I', indexname) FROM pg_indexes
 WHERE tablename = 'fragments' AND indexname LIKE 'pidx\_%' \gexec
ANALYZE fragments;
DROP TABLE IF EXISTS pg_temp.walk_queries, pg_temp.walk_exact, pg_temp.walk_found;
CREATE TEMP TABLE walk_queries AS
  SELECT v.fragment_id AS qid, v.embedding AS e FROM :"table" v ORDER BY md5(v.fragment_id::text) LIMIT 200;
SET enable_indexscan = off;
CREATE TEMP TABLE walk_exact AS SELECT q.qid, x.id FROM walk_queries q CROSS JOIN LATERAL (
  SELECT f.id FROM fragments f JOIN :"table" v ON v.fragment_id = f.id
  WHERE f.pipeline_id = :'pipeline' AND f.expired_at IS NULL AND f.id <> q.qid
    AND JSON_VALUE(f.metadata, '$."tenant"' RETURNING numeric NULL ON ERROR) = ANY(:'tenants'::bigint[])
  ORDER BY v.embedding <=> q.e LIMIT 5) x;
RESET enable_indexscan;
SET hnsw.ef_search = :ef;
SET hnsw.iterative_scan = :ord;
SET enable_sort = off;
SET max_parallel_workers_per_gather = 0;
\timing on
CREATE TEMP TABLE walk_found AS SELECT q.qid, x.id FROM walk_queries q CROSS JOIN LATERAL (
  SELECT f.id FROM fragments f JOIN :"table" v ON v.fragment_id = f.id
  WHERE f.pipeline_id = :'pipeline' AND f.expired_at IS NULL AND f.id <> q.qid
    AND JSON_VALUE(f.metadata, '$."tenant"' RETURNING numeric NULL ON ERROR) = ANY(:'tenants'::bigint[])
  ORDER BY v.embedding <=> q.e LIMIT 5) x;
\timing off
SELECT :ef AS ef_search, :'ord' AS iterative_scan,
       round(avg(found)::numeric / 5, 4) AS recall_at_5
  FROM (SELECT e.qid, count(f.id) AS found
          FROM walk_exact e LEFT JOIN walk_found f ON f.qid = e.qid AND f.id = e.id
         GROUP BY e.qid) per_query;
