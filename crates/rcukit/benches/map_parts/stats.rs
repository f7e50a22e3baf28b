//! Medians, ranges and ratios of interleaved rounds.

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub(crate) fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// The ratio of the medians of `a` and `b`, and the range of the per-round ratios.
pub(crate) fn ratio(a: &[f64], b: &[f64]) -> (f64, f64, f64) {
    let per_round: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    let (lo, hi) = min_max(&per_round);
    (median(a) / median(b), lo, hi)
}

/// `median (min-max)` in millions.
pub(crate) fn mops(v: &[f64]) -> String {
    let (lo, hi) = min_max(v);
    format!("{:.2} ({:.2}-{:.2})", median(v) / 1e6, lo / 1e6, hi / 1e6)
}

/// `ratio x (min-max)`.
pub(crate) fn show_ratio((r, lo, hi): (f64, f64, f64)) -> String {
    format!("{r:.2}x ({lo:.2}-{hi:.2})")
}
