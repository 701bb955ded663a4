//! Deferred HNSW builds for bursts of ingestion.
//!
//! Inserting a vector into a live HNSW graph searches the graph for its neighbours; building
//! the graph once the vectors are loaded does the same work in bulk, in memory and with
//! parallel workers. On a 2-core machine, 59,833 vectors of 384 dimensions (`m` 10,
//! `ef_construction` 64) took 91.4 s inserted into the live index in statements of 1,000,
//! against 0.37 s loaded without it and 10.5 s to build it (24.7 s when the build's memory
//! holds half the graph). So when a burst of pending versions would grow an association by
//! more than half, and by at least `TROVE_INDEX_DEFER_ROWS` fragments, the worker drops its
//! index, stores the burst without it, and builds the index once the burst is over: no more
//! of the pipeline is left to store than the worker's other step loops may hold (at least one
//! batch; [`Deferral`]) and nothing was submitted to it for [`QUIET_SECONDS`]. The build then
//! runs in the transaction of the group that finds so little left, after its rows are stored
//! and before its versions become `success` (the groups after it go into the new graph). A
//! burst submitted at once (a batch import) is so built with one of its last groups, and the
//! index exists when the last version becomes `success`; a burst that goes on while the
//! worker keeps up (documents submitted one by one) stays without its index until it stops,
//! then the index is built one second after the last batch, or after
//! [`MAX_DEFERRAL_SECONDS`] if it never stops (a steady stream the worker keeps up with; if it
//! falls behind again, the index is dropped again only for a backlog of more than half the
//! rows, so the table at least grows by half between builds). Measured on the service
//! benchmark (20,000 documents one per request by 8 clients) without the quiet second: the
//! index was dropped and built five times, each time the worker caught up with the clients
//! (builds of 909, 4,786, 13,473 and 25,429 rows).
//!
//! Meanwhile searches are exact over every stored row (the planner has no HNSW index to walk,
//! and the service chooses the exact path for restricted scopes). Nothing is lost if the
//! process dies: the drop and the record of the index's parameters commit together, and so do
//! the build and the clearing of the record; the worker's sweep builds any recorded index whose
//! pipeline has nothing pending, after a crash or a burst whose end no batch saw.

use crate::store::vectors::{HnswParams, IndexState};

use super::worker::BATCH_SIZE;

/// Share of an association's rows a burst must add for the index to be dropped.
pub const DEFER_SHARE: f64 = 0.5;

/// How long a pipeline must have received no submission for a burst to be over.
pub const QUIET_SECONDS: f64 = 1.0;

/// How long an index stays deferred while the worker keeps up with a burst that does not stop.
pub const MAX_DEFERRAL_SECONDS: f64 = 60.0;

/// What to do with an association's index before storing a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexAction {
    /// Store the group as things are.
    Keep,
    /// Drop the index (recording these parameters) and store the burst without it.
    Defer(HnswParams),
    /// Build the deferred index with the group, in its transaction (outside a group: now):
    /// what is left of the burst fits in a batch, and nothing was submitted for
    /// [`QUIET_SECONDS`].
    Build,
    /// What is left fits in a batch but submissions are recent: look again after
    /// [`QUIET_SECONDS`] (outside the group; the burst may be over then).
    Wait,
}

/// The worker's settings of the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deferral {
    /// `TROVE_INDEX_DEFER_ROWS` (0: never defer).
    pub min_rows: u64,
    /// The most pending versions that may be left after a group for the burst to be over:
    /// what the worker's other step loops may hold (each up to a batch), and at least one
    /// batch. With three loops, a burst's last three groups each found two batches left, and
    /// the index waited for the sweep a minute later.
    pub left_at_most: u64,
}

impl Deferral {
    /// The rule for a worker running `concurrency` step loops.
    pub fn new(min_rows: u64, concurrency: usize) -> Self {
        let others = u64::try_from(concurrency.saturating_sub(1).max(1)).unwrap_or(u64::MAX);
        Self {
            min_rows,
            left_at_most: others.saturating_mul(BATCH_SIZE as u64),
        }
    }
}

/// The action for a group of `versions` versions holding `fragments` fragments, when the
/// association is in `state`.
///
/// The burst is every pending version of the pipeline (the group's included), counted in
/// fragments at the group's mean per version. A look outside a group passes 0 versions.
pub fn index_action(
    state: &IndexState,
    versions: u64,
    fragments: u64,
    rule: Deferral,
) -> IndexAction {
    if state.deferred.is_some() {
        let left = state.pending.saturating_sub(versions);
        let quiet = state.quiet.is_none_or(|seconds| seconds >= QUIET_SECONDS)
            || state
                .deferred_for
                .is_some_and(|seconds| seconds >= MAX_DEFERRAL_SECONDS);
        return match (left <= rule.left_at_most, quiet) {
            (true, true) => IndexAction::Build,
            (true, false) => IndexAction::Wait,
            (false, _) => IndexAction::Keep,
        };
    }
    let Some(live) = state.live else {
        return IndexAction::Keep;
    };
    if rule.min_rows == 0 || versions == 0 {
        return IndexAction::Keep;
    }
    let burst = state.pending.max(versions) as f64 * fragments as f64 / versions as f64;
    if burst >= rule.min_rows as f64 && burst > DEFER_SHARE * state.rows.max(0.0) {
        IndexAction::Defer(live)
    } else {
        IndexAction::Keep
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;

    /// A worker of two step loops deferring from 2,000 fragments.
    const RULE: Deferral = Deferral {
        min_rows: 2000,
        left_at_most: 100,
    };

    fn state(live: bool, deferred: bool, rows: f64, pending: u64) -> IndexState {
        let params = HnswParams::new(10, 64).unwrap();
        IndexState {
            live: live.then_some(params),
            deferred: deferred.then_some(params),
            rows,
            pending,
            quiet: (pending > 0).then_some(5.0),
            deferred_for: deferred.then_some(10.0),
        }
    }

    #[test]
    fn a_burst_into_an_empty_association_defers_its_index() {
        // 2,000 pending documents of 3 fragments each.
        let action = index_action(&state(true, false, 0.0, 2000), 100, 300, RULE);
        assert_eq!(action, IndexAction::Defer(HnswParams::new(10, 64).unwrap()));
    }

    #[test]
    fn a_burst_below_the_minimum_or_half_the_rows_keeps_the_index() {
        // 500 fragments: under the minimum.
        assert_eq!(
            index_action(&state(true, false, 0.0, 250), 100, 200, RULE),
            IndexAction::Keep
        );
        // 30,000 fragments into 100,000 rows: under half.
        assert_eq!(
            index_action(&state(true, false, 100_000.0, 10_000), 100, 300, RULE),
            IndexAction::Keep
        );
        // 60,000 into 100,000: more than half.
        assert!(matches!(
            index_action(&state(true, false, 100_000.0, 20_000), 100, 300, RULE),
            IndexAction::Defer(_)
        ));
        // Deferral turned off.
        assert_eq!(
            index_action(
                &state(true, false, 0.0, 20_000),
                100,
                300,
                Deferral {
                    min_rows: 0,
                    ..RULE
                }
            ),
            IndexAction::Keep
        );
    }

    #[test]
    fn a_deferred_index_is_built_when_one_batch_is_left() {
        assert_eq!(
            index_action(&state(false, true, 50_000.0, 5000), 100, 300, RULE),
            IndexAction::Keep
        );
        // The group and one more batch.
        assert_eq!(
            index_action(&state(false, true, 50_000.0, 200), 100, 300, RULE),
            IndexAction::Build
        );
        assert_eq!(
            index_action(&state(false, true, 50_000.0, 0), 100, 300, RULE),
            IndexAction::Build
        );
    }

    #[test]
    fn a_burst_still_being_submitted_keeps_its_index_deferred() {
        let mut recent = state(false, true, 50_000.0, 150);
        recent.quiet = Some(0.2);
        assert_eq!(index_action(&recent, 100, 300, RULE), IndexAction::Wait);
        // Looked at again later, outside a group: still arriving, then over.
        recent.pending = 40;
        assert_eq!(index_action(&recent, 0, 0, RULE), IndexAction::Wait);
        recent.quiet = Some(1.5);
        assert_eq!(index_action(&recent, 0, 0, RULE), IndexAction::Build);
        // Nothing pending at all.
        recent.pending = 0;
        recent.quiet = None;
        assert_eq!(index_action(&recent, 0, 0, RULE), IndexAction::Build);
    }

    #[test]
    fn a_burst_that_does_not_stop_gets_its_index_after_a_minute() {
        let mut stream = state(false, true, 50_000.0, 150);
        stream.quiet = Some(0.1);
        assert_eq!(index_action(&stream, 100, 300, RULE), IndexAction::Wait);
        stream.deferred_for = Some(61.0);
        assert_eq!(index_action(&stream, 100, 300, RULE), IndexAction::Build);
        // A backlog the worker has not caught up with keeps the index deferred.
        stream.pending = 5000;
        assert_eq!(index_action(&stream, 100, 300, RULE), IndexAction::Keep);
    }

    #[test]
    fn an_index_missing_without_a_record_is_left_alone() {
        assert_eq!(
            index_action(&state(false, false, 0.0, 20_000), 100, 300, RULE),
            IndexAction::Keep
        );
    }

    #[test]
    fn a_burst_is_over_when_what_is_left_fits_in_the_other_loops_groups() {
        assert_eq!(Deferral::new(2000, 1), RULE);
        assert_eq!(Deferral::new(2000, 2), RULE);
        let three = Deferral::new(2000, 3);
        assert_eq!(three.left_at_most, 200);
        // Three loops hold the last three groups: each finds the two others pending.
        let last = state(false, true, 50_000.0, 300);
        assert_eq!(index_action(&last, 100, 300, RULE), IndexAction::Keep);
        assert_eq!(index_action(&last, 100, 300, three), IndexAction::Build);
    }
}
