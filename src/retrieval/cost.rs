//! The path of a vector search, chosen by cost.
//!
//! A search over a restricted scope (a metadata filter, or some of the pipeline's
//! classifications) can walk the association's HNSW index, testing each candidate against the
//! scope, or compute the distance of every fragment the scope admits (exact). The planner
//! says how many fragments the scope admits and how it reaches them; from that and the
//! association's vector count both costs are estimated in microseconds, and the cheaper path
//! is taken among those that keep recall@k near exact.
//!
//! - **Exact**: when an index (on a declared field, a metadata index, the classification)
//!   yields just the admitted fragments, [`INDEXED_DISTANCE_US`] per admitted vector, read
//!   with the scope's columns from the vector table through its index; when the scope's
//!   conditions are tested on each of the pipeline's fragments (no index serves them),
//!   [`READ_SCANNED_US`] per fragment of `fragments` and [`DISTANCE_US`] per admitted one,
//!   its vector read by key.
//! - **Walk**: [`VISIT_US`] per candidate the walk visits, `max(ef_search, fetch / s)` at
//!   selectivity `s`. The candidate list is sized so that it is expected to hold
//!   [`FIRST_LIST_MARGIN`] times the rows fetched (on a graph of up to 100,000 vectors; more
//!   on larger ones, as an unrestricted list grows), so the admitted rows wanted lie in the
//!   first tenth of the list. Recall@5 follows how many admitted rows the list holds, whatever
//!   the share: with 20, 25, 30, 40 and 50 (a 5 % scope at lists of 400 and 800, a 10 % one
//!   at 250, 20 % at 150, 5 % at 1,000) it was 0.887, 0.904, 0.954, 0.947 and 0.949–0.973
//!   (60,000 fragments, 200 queries, strict or relaxed order alike). When the list would
//!   exceed [`MAX_EF_SEARCH`], or the scope admits less than [`MIN_WALK_SHARE`] of the
//!   association, the walk cannot promise that recall and the search is exact whatever it
//!   costs.
//!
//! The constants were measured on a 2-core machine (pgbench, one client, 58,841 fragments of
//! ~2 KB rows, 384-d vectors, `m` 10): a scan testing a JSON condition on every fragment
//! 0.45 µs per fragment; fetching an admitted fragment's vector by key and its distance about
//! 1 µs (the scope's vectors in key order: 4.1 ms for the 3,269 of a 5 % scope with their
//! fragments; reading each vector by its own lookup took about 2 µs, 2.56 ms for 1,000
//! fragments at 100,000 and 22 ms for 10,000 at 1,000,000 on the search benchmark); the exact
//! statement reading a 5 % scope from the vector table through its index 1.5–2.4 ms for about
//! 3,000 vectors, all of it counted per vector (service benchmark, 59,833 fragments); the HNSW walk
//! under a 5 % filter 4.8 ms for 20 rows (400 candidates) and 1.5 ms for 5 (100), against
//! 1.1 ms unfiltered at `ef_search` 100–150.

use super::search::NearestPath;
use crate::store::SESSION_EF_SEARCH;

/// Microseconds to read a fragment and test the scope's conditions on it in a scan.
pub const READ_SCANNED_US: f64 = 0.45;
/// Microseconds to read an admitted vector through the vector table's index on the scope and
/// compute its distance.
pub const INDEXED_DISTANCE_US: f64 = 0.65;
/// Microseconds to fetch an admitted fragment's vector by key and compute its distance.
pub const DISTANCE_US: f64 = 1.0;
/// Microseconds per candidate of an HNSW walk, with its fragment read and tested.
pub const VISIT_US: f64 = 10.0;
/// How many times the rows fetched the candidate list is expected to hold under a restricted
/// scope (on a graph whose unrestricted list is [`SESSION_EF_SEARCH`]).
pub const FIRST_LIST_MARGIN: f64 = 10.0;
/// The fewest times the rows fetched a walk's list, capped at [`MAX_EF_SEARCH`], is expected
/// to hold: a 5 % scope that the planner's sampled statistics put at 4.8 % (2,874 of 59,833
/// fragments for 3,050) or lower still walks with 1,000, which holds about 50 of its rows.
pub const MIN_LIST_MARGIN: f64 = 8.0;

/// The smallest share of the association a walk serves (for k 5, [`MIN_LIST_MARGIN`] asks
/// for the same 4 %). Rarer scopes were not measured to keep recall (under a 1 % filter a list
/// of 1,000 gave 0.91–0.92), so they are searched exactly.
pub const MIN_WALK_SHARE: f64 = 0.04;

/// The rows an unrestricted walk fetches for `k` up to 20: the first of these at least `k`
/// (larger `k` are fetched as asked). Its first candidate list holds them in the order of the
/// index's distance; the statement writes the count as its LIMIT, a constant of the code, and
/// the rows are sorted by the exact distance and cut to `k`. Re-ranking a longer prefix by the
/// exact distance changed no result (recall@5 the same at 5, 10 and 20 rows on 59,833
/// fragments) while each extra row cost a join and its transfer (LIMIT 20 against 5: 8
/// clients 939–970 against 1,023–1,087 statements/s).
pub const CONSTANT_FETCHES: [u64; 3] = [5, 10, 20];

/// Vector count at which an unrestricted walk's list is [`UNRESTRICTED_EF_SEARCH`] and a
/// restricted walk's base list [`SESSION_EF_SEARCH`].
const EF_SEARCH_BASE_ROWS: f64 = 100_000.0;

/// Candidate list of an unrestricted walk of 100,000 vectors: on the search benchmark with
/// all-MiniLM-L6-v2 vectors and the default graph (`m` 16, `ef_construction` 128) 150 gave
/// recall@5 0.946 and 200 0.962 (statement alone, 5.3 and 6.9 ms); through HTTP at 200,
/// recall@5 0.965 and recall@10 0.956 (medians of three builds).
pub const UNRESTRICTED_EF_SEARCH: u64 = 200;

/// Shortest candidate list of an unrestricted walk: on 5,883 fragments (the service benchmark
/// at 2,000 documents) recall@5 was 0.919 at 40, 0.953 at 60, 0.972 at 80 and 0.989 at 100.
pub const MIN_EF_SEARCH: u64 = 100;

/// Largest `hnsw.ef_search` a search sets.
pub const MAX_EF_SEARCH: u64 = 1000;

/// Candidates an unrestricted walk keeps at least per row it fetches, up to
/// [`SESSION_EF_SEARCH`]: a walk fetching 20 rows (MMR's candidates) keeps the list it was
/// measured with on smaller graphs too (recall@5 of MMR among the exact 20 nearest 0.92 at 150,
/// 0.87 at 110 on 59,833 fragments).
const LIST_PER_FETCHED_ROW: f64 = 7.5;

/// How a scope reaches the fragments it admits, by its plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// An index yields the admitted fragments (a metadata index, or the classification index
    /// when the scope has no other condition).
    Indexed,
    /// The scope's conditions are tested on each of the pipeline's fragments.
    Scanned,
}

/// The planner's view of a scope: fragments admitted and how they are reached.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScopeEstimate {
    pub admitted: f64,
    pub reach: Reach,
}

/// How an HNSW walk runs: its candidate list and the rows its statement fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walk {
    pub ef_search: u64,
    pub fetch: u64,
}

/// `list` (the list at 100,000 vectors) scaled to a graph of `vectors` vectors as
/// `vectors^0.6` on either side; an unknown count (0 or negative) gets the list of 100,000.
/// The exponent was measured on hash vectors and the graph of `m` 10 (on the search
/// benchmark, 0.95 at 400 and 0.93 at 300 on 1,000,000; on the service benchmark 0.972 at 110
/// on 59,833); on all-MiniLM-L6-v2 vectors and the default graph the unrestricted lists give
/// recall@5 and recall@10 of 0.95 or more at 15,000 (where [`MIN_EF_SEARCH`] applies) and
/// 100,000 fragments (docs/benchmarks.md).
fn scaled_ef_search(list: u64, vectors: f64) -> f64 {
    let vectors = if vectors > 0.0 {
        vectors
    } else {
        EF_SEARCH_BASE_ROWS
    };
    list as f64 * (vectors / EF_SEARCH_BASE_ROWS).powf(0.6)
}

/// Clamps a candidate list to `min`..[`MAX_EF_SEARCH`].
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "the value is clamped to the target range first"
)]
fn clamp_ef(ef: f64, min: u64) -> u64 {
    ef.round().clamp(min as f64, MAX_EF_SEARCH as f64) as u64
}

/// The walk of a statement returning `limit` rows from an association of `vectors` vectors,
/// over a scope admitting the share `selectivity` of them (`None`: the whole association).
/// `None` when the scope is too rare for a walk to find its nearest fragments.
pub fn walk(vectors: f64, selectivity: Option<f64>, limit: u64) -> Option<Walk> {
    match selectivity {
        None => {
            let fetch = CONSTANT_FETCHES
                .into_iter()
                .find(|&rows| rows >= limit)
                .unwrap_or(limit);
            let per_row = (fetch as f64 * LIST_PER_FETCHED_ROW).min(SESSION_EF_SEARCH as f64);
            let list = scaled_ef_search(UNRESTRICTED_EF_SEARCH, vectors)
                .max(fetch as f64)
                .max(per_row);
            Some(Walk {
                ef_search: clamp_ef(list, MIN_EF_SEARCH),
                fetch,
            })
        }
        Some(share) => {
            // The margins were measured on graphs whose unrestricted list was the session's:
            // a larger graph scales them, as it needs a longer list for the same recall; a
            // smaller one keeps them.
            let base = scaled_ef_search(SESSION_EF_SEARCH, vectors).max(SESSION_EF_SEARCH as f64);
            let per_margin = base / SESSION_EF_SEARCH as f64 * limit as f64 / share.clamp(0.0, 1.0);
            (share >= MIN_WALK_SHARE && per_margin * MIN_LIST_MARGIN <= MAX_EF_SEARCH as f64).then(
                || Walk {
                    ef_search: clamp_ef(
                        base.max(per_margin * FIRST_LIST_MARGIN),
                        SESSION_EF_SEARCH,
                    ),
                    fetch: limit,
                },
            )
        }
    }
}

/// Microseconds an exact search of the scope costs, for an association of `vectors`.
pub fn exact_cost(vectors: f64, scope: ScopeEstimate) -> f64 {
    let admitted = scope.admitted.max(0.0);
    match scope.reach {
        Reach::Indexed => admitted * INDEXED_DISTANCE_US,
        Reach::Scanned => vectors.max(admitted) * READ_SCANNED_US + admitted * DISTANCE_US,
    }
}

/// Microseconds a walk costs at `selectivity`.
pub fn walk_cost(walk: Walk, selectivity: f64) -> f64 {
    let visits =
        (walk.ef_search as f64).max(walk.fetch as f64 / selectivity.max(f64::MIN_POSITIVE));
    visits * VISIT_US
}

/// The share of an association of `vectors` vectors (the planner's count; 0 or negative when
/// unknown, then taken as the scope's own size) a scope admits (at most 1).
pub fn selectivity(vectors: f64, scope: ScopeEstimate) -> f64 {
    let vectors = vectors.max(scope.admitted);
    if vectors <= 0.0 {
        return 1.0;
    }
    (scope.admitted.max(0.0) / vectors).min(1.0)
}

/// The path of a statement returning `limit` rows over `scope` (`None`: the whole
/// association) in an association of `vectors` vectors (the planner's count; 0 or negative when
/// unknown, then taken as the scope's own size).
pub fn choose(vectors: f64, scope: Option<ScopeEstimate>, limit: u64) -> NearestPath {
    let Some(scope) = scope else {
        return NearestPath::Index;
    };
    let vectors = vectors.max(scope.admitted);
    let share = selectivity(vectors, scope);
    match walk(vectors, Some(share), limit) {
        Some(walk) if walk_cost(walk, share) < exact_cost(vectors, scope) => NearestPath::Index,
        _ => match scope.reach {
            Reach::Indexed => NearestPath::Exact,
            Reach::Scanned => NearestPath::ExactScan,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scanned(admitted: f64) -> Option<ScopeEstimate> {
        Some(ScopeEstimate {
            admitted,
            reach: Reach::Scanned,
        })
    }

    fn indexed(admitted: f64) -> Option<ScopeEstimate> {
        Some(ScopeEstimate {
            admitted,
            reach: Reach::Indexed,
        })
    }

    #[test]
    fn an_unrestricted_search_walks_the_index() {
        assert_eq!(choose(1_000_000.0, None, 5), NearestPath::Index);
        assert_eq!(choose(0.0, None, 5), NearestPath::Index);
    }

    #[test]
    fn a_broad_scope_walks() {
        // The 5 % filter of the service benchmark without a metadata index: a list of 1,000
        // (10 ms) against a scan of every fragment (~32 ms).
        assert_eq!(choose(58_841.0, scanned(2_942.0), 5), NearestPath::Index);
        // A fifth of 58,841 fragments without an index: 250 candidates against a scan.
        assert_eq!(choose(58_841.0, scanned(12_000.0), 5), NearestPath::Index);
        // A third of the classifications, through their index.
        assert_eq!(choose(60_000.0, indexed(20_000.0), 5), NearestPath::Index);
        // MMR's 20 candidates under a fifth: a list of 1,000.
        assert_eq!(choose(100_000.0, scanned(20_000.0), 20), NearestPath::Index);
    }

    #[test]
    fn a_selective_filter_served_by_a_metadata_index_reads_its_fragments_exactly() {
        assert_eq!(choose(100_000.0, indexed(1_000.0), 5), NearestPath::Exact);
        assert_eq!(
            choose(1_000_000.0, indexed(10_000.0), 5),
            NearestPath::Exact
        );
        assert_eq!(choose(58_841.0, indexed(2_942.0), 5), NearestPath::Exact);
    }

    #[test]
    fn scopes_too_rare_for_the_walk_are_exact_whatever_they_cost() {
        // Under 4 % without an index: a list of 1,000 would hold fewer than 8 times the rows.
        assert_eq!(
            choose(58_841.0, scanned(2_300.0), 5),
            NearestPath::ExactScan
        );
        // 1 % of 100,000 and of 1,000,000 without an index.
        assert_eq!(
            choose(100_000.0, scanned(1_000.0), 5),
            NearestPath::ExactScan
        );
        assert_eq!(
            choose(1_000_000.0, scanned(10_000.0), 5),
            NearestPath::ExactScan
        );
        // 10 % with k 50 (or MMR's fetch_k 50).
        assert_eq!(
            choose(100_000.0, scanned(10_000.0), 50),
            NearestPath::ExactScan
        );
        assert_eq!(choose(100_000.0, scanned(0.0), 5), NearestPath::ExactScan);
    }

    #[test]
    fn small_pipelines_are_searched_exactly() {
        assert_eq!(choose(6.0, scanned(2.0), 3), NearestPath::ExactScan);
        assert_eq!(choose(2_000.0, scanned(100.0), 5), NearestPath::ExactScan);
        // Unknown vector count (never analysed): the scope's own size stands for it.
        assert_eq!(choose(-1.0, scanned(500.0), 5), NearestPath::ExactScan);
    }

    #[test]
    fn the_walk_sizes_its_list_to_the_scope() {
        // Unrestricted: k rows or the next of CONSTANT_FETCHES, the list of the association's
        // size.
        let unrestricted = |vectors: f64, limit: u64| walk(vectors, None, limit);
        assert_eq!(
            unrestricted(100_000.0, 5),
            Some(Walk {
                ef_search: UNRESTRICTED_EF_SEARCH,
                fetch: 5
            })
        );
        assert_eq!(unrestricted(1_000_000.0, 5).map(|w| w.ef_search), Some(796));
        // Smaller graphs walk shorter lists, down to MIN_EF_SEARCH.
        assert_eq!(unrestricted(59_833.0, 5).map(|w| w.ef_search), Some(147));
        assert_eq!(unrestricted(59_833.0, 10).map(|w| w.ef_search), Some(147));
        assert_eq!(
            unrestricted(30_000.0, 5).map(|w| w.ef_search),
            Some(MIN_EF_SEARCH)
        );
        // 20 rows (MMR's candidates) keep at least the session's list.
        assert_eq!(
            unrestricted(40_000.0, 20).map(|w| w.ef_search),
            Some(SESSION_EF_SEARCH)
        );
        assert_eq!(
            unrestricted(5_883.0, 5).map(|w| w.ef_search),
            Some(MIN_EF_SEARCH)
        );
        // The lists of the real-vector sweep (all-MiniLM-L6-v2, the default graph): 100 at
        // 15,000 fragments and 200 at 100,000, for k 5 and 10 alike, each giving recall@5 and
        // recall@10 of 0.95 or more there.
        for k in [5, 10] {
            assert_eq!(unrestricted(15_000.0, k).map(|w| w.ef_search), Some(100));
            assert_eq!(unrestricted(100_000.0, k).map(|w| w.ef_search), Some(200));
        }
        // An unknown count: the list of 100,000.
        assert_eq!(
            unrestricted(0.0, 5).map(|w| w.ef_search),
            Some(UNRESTRICTED_EF_SEARCH)
        );
        assert_eq!(
            unrestricted(1e9, 5).map(|w| w.ef_search),
            Some(MAX_EF_SEARCH)
        );
        assert_eq!(
            unrestricted(0.0, 300),
            Some(Walk {
                ef_search: 300,
                fetch: 300
            })
        );
        assert_eq!(
            unrestricted(0.0, 65_535).map(|w| w.ef_search),
            Some(MAX_EF_SEARCH)
        );
        // Restricted: k rows, a list expected to hold ten times as many admitted ones.
        let restricted = |vectors: f64, share: f64, limit: u64| walk(vectors, Some(share), limit);
        assert_eq!(
            restricted(58_841.0, 0.25, 5),
            Some(Walk {
                ef_search: 200,
                fetch: 5
            })
        );
        assert_eq!(
            restricted(58_841.0, 0.5, 5).map(|w| w.ef_search),
            Some(SESSION_EF_SEARCH)
        );
        assert_eq!(
            restricted(58_841.0, 0.5, 50).map(|w| w.ef_search),
            Some(1000)
        );
        assert_eq!(
            restricted(58_841.0, 0.047, 5).map(|w| w.ef_search),
            Some(1000)
        );
        assert_eq!(
            restricted(1_000_000.0, 0.5, 5).map(|w| w.ef_search),
            Some(597)
        );
        assert_eq!(restricted(100_000.0, 0.2, 51), None);
        assert_eq!(restricted(100_000.0, 0.039, 5), None);
        assert_eq!(restricted(1_000_000.0, 0.05, 5), None);
        assert_eq!(restricted(100_000.0, 0.0, 5), None);
    }

    #[test]
    fn costs_follow_the_measurements() {
        // The 5 % filter at 58,841 fragments: ~26 ms scanned; a list of 400 would be ~4 ms.
        let scope = ScopeEstimate {
            admitted: 2_942.0,
            reach: Reach::Scanned,
        };
        let exact = exact_cost(58_841.0, scope);
        assert!((25_000.0..35_000.0).contains(&exact), "{exact}");
        let share = selectivity(58_841.0, scope);
        let walked = walk_cost(
            Walk {
                ef_search: 400,
                fetch: 5,
            },
            share,
        );
        assert!((3_000.0..5_000.0).contains(&walked), "{walked}");
        // Through an index: ~2 ms.
        let indexed = exact_cost(
            58_841.0,
            ScopeEstimate {
                admitted: 2_942.0,
                reach: Reach::Indexed,
            },
        );
        assert!((1_500.0..2_500.0).contains(&indexed), "{indexed}");
    }

    #[test]
    fn a_tenth_served_by_an_index_is_cheaper_exact_than_walked() {
        // 6,000 vectors through the field's index (~4 ms) against a list of 500 (~5 ms).
        assert_eq!(choose(60_000.0, indexed(6_000.0), 5), NearestPath::Exact);
        // A fifth: 12,000 vectors (~8 ms) against a list of 250.
        assert_eq!(choose(60_000.0, indexed(12_000.0), 5), NearestPath::Index);
    }
}
