//! Measurement helpers shared by the experiments.
//!
//! Everything here is deliberately plain: wall-clock [`Instant`]s, busy work that the compiler
//! cannot remove, percentiles by sorting, and ratios that refuse to be infinite. The lab
//! compares schemes within one run, so what matters is that every scheme is measured the same
//! way, not that a number is comparable with another machine's.

use serde::Serialize;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Spin (no sleep, no yield) for `duration`: stands for CPU work of that length.
pub fn spin_for(duration: Duration) {
    let start = Instant::now();
    while start.elapsed() < duration {
        std::hint::spin_loop();
    }
}

/// Sleep until `deadline` (returns at once if it has passed).
pub fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}

/// `count` events over `elapsed`, per second (0 for an empty interval).
pub fn per_sec(count: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        count as f64 / secs
    } else {
        0.0
    }
}

/// `num / den` when both are finite and the quotient is finite and positive, else `None`
/// (so a JSON ratio is either a real number or `null`, never `inf` or `NaN`).
pub fn ratio(num: f64, den: f64) -> Option<f64> {
    let r = num / den;
    (num.is_finite() && den.is_finite() && r.is_finite() && r > 0.0).then_some(r)
}

/// Milliseconds as a float.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Microseconds as a float.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A summary of samples: count, mean and the usual percentiles.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest sample.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl Summary {
    /// Summarise `samples` (any order). An empty slice gives all zeros.
    pub fn of(samples: &[f64]) -> Summary {
        if samples.is_empty() {
            return Summary::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let pick = |q: f64| {
            let index = ((sorted.len() - 1) as f64 * q).round() as usize;
            sorted[index.min(sorted.len() - 1)]
        };
        Summary {
            count: sorted.len(),
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            min: sorted[0],
            p50: pick(0.50),
            p90: pick(0.90),
            p99: pick(0.99),
            max: sorted[sorted.len() - 1],
        }
    }
}

/// One figure measured in several interleaved rounds: every round's value, the median and the
/// spread. On a shared machine a single measurement decides nothing; the median of rounds
/// interleaved with the other schemes' does, and the spread says how far to trust it.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Rounds {
    /// Median of the rounds (the mean of the two middle ones for an even count).
    pub median: f64,
    /// Smallest round.
    pub min: f64,
    /// Largest round.
    pub max: f64,
    /// Every round's value, in the order measured.
    pub values: Vec<f64>,
}

impl Rounds {
    /// The rounds `values` (non-finite values are kept in `values` but ignored by the median
    /// and the spread; no finite value gives NaN).
    pub fn of(values: Vec<f64>) -> Rounds {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => sorted[n / 2],
            _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        Rounds {
            median,
            min: sorted.first().copied().unwrap_or(f64::NAN),
            max: sorted.last().copied().unwrap_or(f64::NAN),
            values,
        }
    }

    /// The round-by-round ratio `self / base` (each round against the baseline measured in
    /// the same round), as rounds; `None` values where a ratio is undefined.
    pub fn ratio_to(&self, base: &Rounds) -> Rounds {
        Rounds::of(
            self.values
                .iter()
                .zip(&base.values)
                .map(|(&a, &b)| ratio(a, b).unwrap_or(f64::NAN))
                .collect(),
        )
    }

    /// The median as a ratio (`None` when no round gave a finite one).
    pub fn median_ratio(&self) -> Option<f64> {
        ratio(self.median, 1.0)
    }
}

/// The empirical cumulative distribution of `samples` as at most `points` (x, fraction ≤ x)
/// pairs, for plots.
pub fn cdf(samples: &[f64], points: usize) -> Vec<(f64, f64)> {
    if samples.is_empty() || points == 0 {
        return Vec::new();
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let step = (n / points).max(1);
    let mut out: Vec<(f64, f64)> = (0..n)
        .step_by(step)
        .map(|i| (sorted[i], (i + 1) as f64 / n as f64))
        .collect();
    if out.last().map(|p| p.1) != Some(1.0) {
        out.push((sorted[n - 1], 1.0));
    }
    out
}

/// A stop flag shared by an experiment's threads.
#[derive(Default, Debug)]
pub struct StopFlag(AtomicBool);

impl StopFlag {
    /// A flag that is not raised.
    pub fn new() -> StopFlag {
        StopFlag(AtomicBool::new(false))
    }

    /// Raise the flag.
    pub fn stop(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Has the flag been raised?
    #[inline]
    pub fn stopped(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// A counter that one thread increments and others sample, on its own cache line.
#[derive(Default, Debug)]
pub struct Counter(crossbeam_utils::CachePadded<AtomicU64>);

impl Counter {
    /// Publish a new running total (one writer only).
    #[inline]
    pub fn publish(&self, total: u64) {
        self.0.store(total, Ordering::Relaxed);
    }

    /// Add `n` (any number of writers).
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Read the current total.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Sum of a set of counters.
pub fn sum(counters: &[Counter]) -> u64 {
    counters.iter().map(Counter::get).sum()
}

/// Deterministic integer work the optimiser cannot remove: `units` rounds of a xorshift.
/// One unit costs roughly a nanosecond; the experiments use it for "work inside a critical
/// section" where the seed's kernel path did real work.
#[inline(never)]
pub fn busy_work(units: u32) -> u64 {
    let mut x = black_box(0x9E37_79B9_7F4A_7C15u64);
    for _ in 0..units {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    black_box(x)
}

/// Time `f` over `iterations` calls, returning nanoseconds per call.
pub fn ns_per_op(iterations: u64, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    start.elapsed().as_nanos() as f64 / iterations.max(1) as f64
}

#[cfg(test)]
mod tests {
    #[test]
    fn rounds_take_the_median_and_the_spread() {
        let r = super::Rounds::of(vec![5.0, 1.0, f64::NAN, 3.0]);
        assert_eq!((r.median, r.min, r.max), (3.0, 1.0, 5.0));
        assert_eq!(super::Rounds::of(vec![4.0, 2.0]).median, 3.0);
        assert!(super::Rounds::of(vec![]).median.is_nan());
        let base = super::Rounds::of(vec![2.0, 1.0, 1.0]);
        let ratios = super::Rounds::of(vec![4.0, 3.0, 1.0]).ratio_to(&base);
        assert_eq!(ratios.values, vec![2.0, 3.0, 1.0]);
        assert_eq!(ratios.median_ratio(), Some(2.0));
    }

    use super::*;

    #[test]
    fn summary_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&samples);
        assert_eq!(s.count, 100);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 100.0);
        assert!((s.mean - 50.5).abs() < 1e-9);
        assert!((s.p50 - 50.0).abs() <= 1.0);
        assert!((s.p99 - 99.0).abs() <= 1.0);
        assert_eq!(Summary::of(&[]), Summary::default());
    }

    #[test]
    fn ratio_rejects_non_finite() {
        assert_eq!(ratio(4.0, 2.0), Some(2.0));
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(0.0, 0.0), None);
        assert_eq!(ratio(0.0, 1.0), None);
    }

    #[test]
    fn cdf_ends_at_one() {
        let c = cdf(&[3.0, 1.0, 2.0], 10);
        assert_eq!(c.first(), Some(&(1.0, 1.0 / 3.0)));
        assert_eq!(c.last(), Some(&(3.0, 1.0)));
    }
}
