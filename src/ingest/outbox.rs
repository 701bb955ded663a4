//! Outbox entries of queued jobs, removed in the background.
//!
//! A submission commits its versions with an outbox entry per job, publishes the jobs, and
//! once JetStream has stored them the entries may go. Removing them is not part of the
//! answer: a background task takes the entries of the submissions answered meanwhile and
//! removes them in one statement (with one statement per submission, each request waited a
//! round trip for it). An entry left behind, by a process that stops first or a failed
//! statement, only makes the workers' sweep publish its job once more, and the second
//! delivery is skipped.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;
use uuid::Uuid;

use crate::store::Pool;
use crate::store::ingestion::forget_queued_jobs;

/// The most entries one statement removes.
const MAX_PER_STATEMENT: usize = 1000;

/// How long the task waits after the first entry for more to remove with it.
const GATHER: Duration = Duration::from_millis(20);

/// Records jobs JetStream has stored; their outbox entries are removed in the background.
#[derive(Clone)]
pub struct QueuedJobs {
    pool: Pool,
    /// The background task's inbox, started on first use (within the runtime).
    sender: Arc<OnceLock<mpsc::UnboundedSender<(Uuid, i64)>>>,
}

impl QueuedJobs {
    pub fn new(pool: Pool) -> Self {
        Self {
            pool,
            sender: Arc::default(),
        }
    }

    /// Hands the jobs (document id, version) over for their entries' removal.
    pub fn record(&self, jobs: &[(Uuid, i64)]) {
        let sender = self.sender.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            tokio::spawn(remove_entries(self.pool.clone(), receiver));
            sender
        });
        for &job in jobs {
            // The task ends only when every sender is gone.
            let _ = sender.send(job);
        }
    }
}

/// Removes the entries of the jobs received, as many as have arrived in one statement.
async fn remove_entries(pool: Pool, mut receiver: mpsc::UnboundedReceiver<(Uuid, i64)>) {
    let mut jobs = Vec::with_capacity(MAX_PER_STATEMENT);
    while receiver.recv_many(&mut jobs, MAX_PER_STATEMENT).await > 0 {
        // Submissions come in bursts: a moment's wait gathers the entries of those answered
        // meanwhile (without it, a statement removed one or two entries at 1,000 per second).
        tokio::time::sleep(GATHER).await;
        while jobs.len() < MAX_PER_STATEMENT
            && let Ok(job) = receiver.try_recv()
        {
            jobs.push(job);
        }
        let (ids, versions): (Vec<Uuid>, Vec<i64>) = jobs.drain(..).unzip();
        if let Err(error) = forget_queued_jobs(&pool, &ids, &versions).await {
            tracing::warn!(%error, jobs = ids.len(), "queued jobs not recorded; they will be published again");
        }
    }
}
