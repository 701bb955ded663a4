//! The planner's estimate of how many fragments a search scope admits, kept for a minute.
//!
//! A vector search under a filter, or over some of a pipeline's classifications, asks the
//! planner how many fragments pass before it chooses between the HNSW walk and an exact scan
//! (`search::path_for`): one more round trip before the statement. The estimate depends only
//! on the scope (the statement text and its bound values) and on the table's statistics, which
//! change when the table is analysed, so it is reused for [`TTL`]: repeated scopes, such as a
//! tenant's searches that always carry its filter, skip the round trip. A stale estimate can
//! only choose the slower of two paths that return the same fragments.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an estimate is reused.
pub const TTL: Duration = Duration::from_secs(60);

/// Scopes remembered at most; when full, expired entries go first, then all of them.
pub const CAPACITY: usize = 1024;

/// Estimates by scope (statement text and bound values).
#[derive(Debug, Default)]
pub struct ScopeEstimates {
    entries: Mutex<HashMap<String, (f64, Instant)>>,
}

impl ScopeEstimates {
    pub fn new() -> Self {
        Self::default()
    }

    /// The estimate for `key` if one younger than [`TTL`] is kept.
    pub fn get(&self, key: &str, now: Instant) -> Option<f64> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(_, at)| now.saturating_duration_since(*at) < TTL)
            .map(|(rows, _)| *rows)
    }

    /// Keeps `rows` for `key` as of `now`.
    pub fn insert(&self, key: String, rows: f64, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CAPACITY && !entries.contains_key(&key) {
            entries.retain(|_, (_, at)| now.saturating_duration_since(*at) < TTL);
            if entries.len() >= CAPACITY {
                entries.clear();
            }
        }
        entries.insert(key, (rows, now));
    }

    /// Scopes kept (expired ones included until they are swept).
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_estimate_is_reused_until_it_expires() {
        let cache = ScopeEstimates::new();
        let start = Instant::now();
        assert_eq!(cache.get("a", start), None);
        cache.insert("a".to_owned(), 12.0, start);
        assert_eq!(cache.get("a", start + TTL / 2), Some(12.0));
        assert_eq!(cache.get("a", start + TTL), None);
        assert_eq!(cache.get("b", start), None);
        // A newer estimate replaces the older one.
        cache.insert("a".to_owned(), 30.0, start + TTL);
        assert_eq!(cache.get("a", start + TTL), Some(30.0));
    }

    #[test]
    fn a_full_cache_drops_expired_entries_first_then_everything() {
        let cache = ScopeEstimates::new();
        let start = Instant::now();
        for i in 0..CAPACITY - 1 {
            cache.insert(format!("old {i}"), 1.0, start);
        }
        cache.insert("fresh".to_owned(), 2.0, start + TTL);
        assert_eq!(cache.len(), CAPACITY);
        // Full: the expired entries go, the fresh one stays.
        cache.insert("new".to_owned(), 3.0, start + TTL);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get("fresh", start + TTL), Some(2.0));
        // Full of live entries: all go, the new one is kept.
        let cache = ScopeEstimates::new();
        for i in 0..CAPACITY {
            cache.insert(format!("live {i}"), 1.0, start);
        }
        assert_eq!(cache.len(), CAPACITY);
        cache.insert("one more".to_owned(), 4.0, start);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get("one more", start), Some(4.0));
        // Replacing a kept scope's estimate in a full cache keeps the others.
        for i in 0..CAPACITY - 1 {
            cache.insert(format!("live {i}"), 1.0, start);
        }
        cache.insert("one more".to_owned(), 5.0, start);
        assert_eq!(cache.len(), CAPACITY);
    }
}
