-- Recall@5 and time of an unrestricted HNSW walk over the service's half-precision index and
-- over a full-precision index of the same graph parameters, on a database kept by the search
-- bench (`cargo bench --bench search -- 100000 --vectors=minilm --unfiltered --sweep=
-- --concurrency=0 --keep` prints its name). The queries are 300 of the association's own
-- vectors (each excluded from its own results); the exact ranking is a scan of the stored
-- vectors.
--
--   psql <kept database URL> -v table=vectors_<id> -v dim=384 -v m=16 -v efc=256 -v ef=150 \
--        -f benches/sql/precision_recall.sql
--
-- The full-precision index replaces the service's index: run it on a kept database only.
\set QUIET on
SET client_min_messages = warning;
SET max_parallel_workers_per_gather = 0;
DROP TABLE IF EXISTS pg_temp.walk_queries, pg_temp.walk_exact, pg_temp.walk_half,
    pg_temp.walk_full;
CREATE TEMP TABLE walk_queries AS
  SELECT v.fragment_id AS qid, v.embedding AS e FROM :"table" v WHERE v.live
  ORDER BY md5(v.fragment_id::text) LIMIT 300;
SET enable_indexscan = off;
CREATE TEMP TABLE walk_exact AS SELECT q.qid, x.fragment_id AS id FROM walk_queries q
  CROSS JOIN LATERAL (
    SELECT v.fragment_id FROM :"table" v WHERE v.live AND v.fragment_id <> q.qid
    ORDER BY v.embedding <=> q.e LIMIT 5) x;
RESET enable_indexscan;
SET hnsw.ef_search = :ef;
SET hnsw.iterative_scan = relaxed_order;
SET enable_sort = off;
\echo half precision, the index of the service:
\timing on
CREATE TEMP TABLE walk_half AS SELECT q.qid, x.fragment_id AS id FROM walk_queries q
  CROSS JOIN LATERAL (
    SELECT v.fragment_id FROM :"table" v WHERE v.live AND v.fragment_id <> q.qid
    ORDER BY (l2_normalize(v.embedding)::halfvec(:dim)) <=> (l2_normalize(q.e)::halfvec(:dim))
    LIMIT 5) x;
\timing off
RESET enable_sort;
SELECT format('DROP INDEX %I', indexname) FROM pg_indexes
 WHERE tablename = :'table' AND indexname LIKE '%\_hnsw' \gexec
SET maintenance_work_mem = '1GB';
\echo full precision (build, then the walk):
\timing on
CREATE INDEX ON :"table" USING hnsw (embedding vector_cosine_ops)
  WITH (m = :m, ef_construction = :efc) WHERE live;
SET enable_sort = off;
CREATE TEMP TABLE walk_full AS SELECT q.qid, x.fragment_id AS id FROM walk_queries q
  CROSS JOIN LATERAL (
    SELECT v.fragment_id FROM :"table" v WHERE v.live AND v.fragment_id <> q.qid
    ORDER BY v.embedding <=> q.e LIMIT 5) x;
\timing off
SELECT :ef AS ef_search,
       round((SELECT count(*) FROM walk_half h JOIN walk_exact e USING (qid, id))::numeric
             / (SELECT count(*) FROM walk_exact), 4) AS recall_half,
       round((SELECT count(*) FROM walk_full f JOIN walk_exact e USING (qid, id))::numeric
             / (SELECT count(*) FROM walk_exact), 4) AS recall_full,
       pg_size_pretty(pg_relation_size(
           (SELECT indexrelid FROM pg_index WHERE indrelid = :'table'::regclass
              AND pg_get_indexdef(indexrelid) LIKE '%vector_cosine_ops%'))) AS full_index_size;
