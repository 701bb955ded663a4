//! The planner's view of a search scope, kept for a minute.
//!
//! A vector search under a filter, or over some of a pipeline's classifications, asks the
//! planner how many fragments pass and how it reaches them before it chooses between the HNSW
//! walk and an exact scan (`cost::choose`): one more round trip before the statement. The
//! estimate depends only on the scope (the statement text and its bound values) and on the
//! tables' statistics, so it is reused for [`TTL`] under a key that also holds the
//! association's vector count from the statistics (`search::estimate_scope_cached`): repeated
//! scopes, such as a tenant's searches that always carry its filter, skip the round trip, and
//! an `ANALYZE` that changes the statistics changes the key.

use std::time::Duration;

use super::cost::ScopeEstimate;

/// How long an estimate is reused.
pub const TTL: Duration = Duration::from_secs(60);

/// Scopes remembered at most (moka evicts the least useful beyond it).
pub const CAPACITY: u64 = 1024;

/// Estimates by scope (statement text and bound values).
#[derive(Debug, Clone)]
pub struct ScopeEstimates {
    entries: moka::sync::Cache<String, ScopeEstimate>,
}

impl Default for ScopeEstimates {
    fn default() -> Self {
        Self {
            entries: moka::sync::Cache::builder()
                .max_capacity(CAPACITY)
                .time_to_live(TTL)
                .build(),
        }
    }
}

impl ScopeEstimates {
    pub fn new() -> Self {
        Self::default()
    }

    /// The estimate for `key` if one younger than [`TTL`] is kept.
    pub fn get(&self, key: &str) -> Option<ScopeEstimate> {
        self.entries.get(key)
    }

    /// Keeps `estimate` for `key`.
    pub fn insert(&self, key: String, estimate: ScopeEstimate) {
        self.entries.insert(key, estimate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::cost::Reach;

    fn rows(admitted: f64) -> ScopeEstimate {
        ScopeEstimate {
            admitted,
            reach: Reach::Scanned,
        }
    }

    #[test]
    fn an_estimate_is_kept_and_replaced() {
        let cache = ScopeEstimates::new();
        assert_eq!(cache.get("a"), None);
        cache.insert("a".to_owned(), rows(12.0));
        assert_eq!(cache.get("a"), Some(rows(12.0)));
        assert_eq!(cache.get("b"), None);
        cache.insert("a".to_owned(), rows(30.0));
        assert_eq!(cache.get("a"), Some(rows(30.0)));
    }

    #[test]
    fn the_cache_stays_within_its_capacity() {
        let cache = ScopeEstimates::new();
        for i in 0..CAPACITY * 3 {
            cache.insert(format!("scope {i}"), rows(1.0));
        }
        cache.entries.run_pending_tasks();
        assert!(cache.entries.entry_count() <= CAPACITY);
    }
}
