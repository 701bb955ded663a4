//! Percentiles, timed loops, concurrent clients and the machine's load.

use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile in milliseconds.
pub fn pct(samples: &[Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    ms(sorted[rank.min(sorted.len()) - 1])
}

/// Per-request latencies of `c` clients sharing `count` requests (client `w` takes requests
/// `w`, `w + c`, …), and the wall time.
pub async fn run_concurrent<F, Fut>(c: usize, count: usize, f: F) -> (Vec<Duration>, Duration)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Duration> + Send,
{
    run_concurrent_for(c, count, None, f).await
}

/// [`run_concurrent`], each client stopping early once `limit` has passed (its request under
/// way completes).
pub async fn run_concurrent_for<F, Fut>(
    c: usize,
    count: usize,
    limit: Option<Duration>,
    f: F,
) -> (Vec<Duration>, Duration)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Duration> + Send,
{
    let f = Arc::new(f);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..c {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut i = worker;
            while i < count && limit.is_none_or(|limit| started.elapsed() < limit) {
                samples.push(f(i).await);
                i += c;
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await.expect("client task"));
    }
    (samples, started.elapsed())
}

/// `count` sequential calls, each timed.
pub async fn time_n<F, Fut, T>(count: usize, mut f: F) -> Vec<Duration>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut samples = Vec::with_capacity(count);
    for i in 0..count {
        let started = Instant::now();
        std::hint::black_box(f(i).await);
        samples.push(started.elapsed());
    }
    samples
}

/// (busy, total) jiffies of all CPUs, from `/proc/stat`.
fn cpu_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let values: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = values.iter().take(8).sum();
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// Waits (at most `seconds`) until the machine is quiet: under 15 % CPU busy over two
/// consecutive 5-second windows (this process is idle meanwhile, so that is other work).
pub async fn wait_quiet(seconds: u64) {
    if seconds == 0 {
        return;
    }
    let started = Instant::now();
    let mut quiet_windows = 0;
    loop {
        let (busy0, total0) = cpu_jiffies();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (busy1, total1) = cpu_jiffies();
        let busy = (busy1 - busy0) as f64 / Ord::max(total1 - total0, 1) as f64;
        quiet_windows = if busy < 0.15 { quiet_windows + 1 } else { 0 };
        if quiet_windows >= 2 {
            return;
        }
        if started.elapsed().as_secs() >= seconds {
            println!(
                "(CPU still {:.0} % busy after waiting {seconds} s; measuring anyway)",
                busy * 100.0
            );
            return;
        }
    }
}

/// The 1-, 5- and 15-minute load averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
