//! The planner's estimate of how many fragments a search scope admits, kept for a minute.
//!
//! A vector search under a filter, or over some of a pipeline's classifications, asks the
//! planner how many fragments pass before it chooses between the HNSW walk and an exact scan
//! (`search::path_for`): one more round trip before the statement. The estimate depends only
//! on the scope (the statement text and its bound values) and on the table's statistics, which
//! change when the table is analysed, so it is reused for [`TTL`]: repeated scopes, such as a
//! tenant's searches that always carry its filter, skip the round trip. A stale estimate can
//! only choose the slower of two paths that return the same fragments.

use std::time::Duration;

/// How long an estimate is reused.
pub const TTL: Duration = Duration::from_secs(60);

/// Scopes remembered at most (moka evicts the least useful beyond it).
pub const CAPACITY: u64 = 1024;

/// Estimates by scope (statement text and bound values).
#[derive(Debug, Clone)]
pub struct ScopeEstimates {
    entries: moka::sync::Cache<String, f64>,
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
    pub fn get(&self, key: &str) -> Option<f64> {
        self.entries.get(key)
    }

    /// Keeps `rows` for `key`.
    pub fn insert(&self, key: String, rows: f64) {
        self.entries.insert(key, rows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_estimate_is_kept_and_replaced() {
        let cache = ScopeEstimates::new();
        assert_eq!(cache.get("a"), None);
        cache.insert("a".to_owned(), 12.0);
        assert_eq!(cache.get("a"), Some(12.0));
        assert_eq!(cache.get("b"), None);
        cache.insert("a".to_owned(), 30.0);
        assert_eq!(cache.get("a"), Some(30.0));
    }

    #[test]
    fn the_cache_stays_within_its_capacity() {
        let cache = ScopeEstimates::new();
        for i in 0..CAPACITY * 3 {
            cache.insert(format!("scope {i}"), 1.0);
        }
        cache.entries.run_pending_tasks();
        assert!(cache.entries.entry_count() <= CAPACITY);
    }
}
