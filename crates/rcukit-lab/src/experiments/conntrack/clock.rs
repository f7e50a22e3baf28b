//! The clock behind the latency samples (rdtsc where usable, else `Instant`).

use crate::measure::{self};
use serde::Serialize;
use std::time::{Duration, Instant};

/// How latency samples are taken.
#[derive(Clone, Debug, Serialize)]
pub struct TimerFacts {
    /// `rdtsc` or `instant`.
    pub kind: &'static str,
    /// Clock ticks per nanosecond (calibrated against `Instant` for the TSC).
    pub ticks_per_ns: f64,
    /// Median cost of an empty timed section, nanoseconds (included in every sample, not
    /// subtracted).
    pub overhead_ns: f64,
    /// The smallest step the clock was seen to take, nanoseconds (samples are multiples of
    /// it: AMD's TSC, for one, moves in steps of 10 ns).
    pub resolution_ns: f64,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Clock {
    tsc: bool,
    epoch: Instant,
}

impl Clock {
    pub(super) fn new() -> Clock {
        Clock {
            tsc: tsc_usable(),
            epoch: Instant::now(),
        }
    }

    #[inline(always)]
    pub(super) fn ticks(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.tsc {
            return rdtsc_fenced();
        }
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Calibrate (about 30 ms) and measure the empty section.
    pub(super) fn facts(&self) -> TimerFacts {
        let ticks_per_ns = if self.tsc {
            let (i0, k0) = (Instant::now(), self.ticks());
            measure::spin_for(Duration::from_millis(30));
            let (k1, i1) = (self.ticks(), Instant::now());
            (k1.wrapping_sub(k0)) as f64 / (i1 - i0).as_nanos().max(1) as f64
        } else {
            1.0
        };
        let mut empty: Vec<u64> = (0..10_001)
            .map(|_| {
                let a = self.ticks();
                let b = self.ticks();
                b.wrapping_sub(a)
            })
            .collect();
        empty.sort_unstable();
        // Every reading is a multiple of the clock's step: the gcd of the differences.
        let step = empty
            .iter()
            .copied()
            .filter(|&d| d > 0)
            .fold(0u64, gcd)
            .max(1);
        TimerFacts {
            kind: if self.tsc { "rdtsc" } else { "instant" },
            ticks_per_ns,
            overhead_ns: empty[empty.len() / 2] as f64 / ticks_per_ns,
            resolution_ns: step as f64 / ticks_per_ns,
        }
    }
}

pub(super) fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(unused_unsafe)]
pub(super) fn rdtsc_fenced() -> u64 {
    use std::arch::x86_64::{_mm_lfence, _rdtsc};
    // SAFETY: `lfence` (SSE2) and `rdtsc` exist on every x86-64 CPU and touch no memory.
    unsafe {
        _mm_lfence();
        let t = _rdtsc();
        _mm_lfence();
        t
    }
}

/// An invariant TSC (`constant_tsc` and `nonstop_tsc` in `/proc/cpuinfo`) on x86-64.
pub(super) fn tsc_usable() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    info.lines()
        .find(|l| l.starts_with("flags"))
        .map(|l| {
            let flags: Vec<&str> = l.split_whitespace().collect();
            flags.contains(&"constant_tsc") && flags.contains(&"nonstop_tsc")
        })
        .unwrap_or(false)
}
