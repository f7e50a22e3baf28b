//! One thread that reads many domains in turn: the cost of a read-side
//! section when every section is of another domain than the last, against one domain.
//!
//! `RecSeq`s are read round-robin at k = 1, 10, 100 and 1,000 (a `RecSeq` has no threads, so a
//! thousand are cheap), `Rcu` domains at k = 1, 10, 50, 100 and 200 (each has three threads).
//! Every figure is the median of 7 interleaved rounds (min-max in brackets), ns per section;
//! the ratio is taken in each round against k = 1 of the same kind and round.
//!
//! Run with `cargo bench -p rcukit --bench domains` (about 20 s).

use rcukit::{Rcu, RecSeq};
use std::hint::black_box;
use std::time::Instant;

const ROUNDS: usize = 7;
const SECTIONS: u64 = 5_000_000;

#[inline(never)]
fn recseq_round_robin(cells: &[RecSeq<u64>], sections: u64) -> u64 {
    let (mut sum, mut i) = (0u64, 0usize);
    for _ in 0..sections {
        sum = sum.wrapping_add(*cells[i].read());
        i += 1;
        if i == cells.len() {
            i = 0;
        }
    }
    sum
}

#[inline(never)]
fn rcu_round_robin(domains: &[Rcu], value: &u64, sections: u64) -> u64 {
    let (mut sum, mut i) = (0u64, 0usize);
    for _ in 0..sections {
        let _guard = domains[i].read();
        sum = sum.wrapping_add(*black_box(value));
        i += 1;
        if i == domains.len() {
            i = 0;
        }
    }
    sum
}

/// ns per section of `run(sections)`, after a warm-up.
fn time(mut run: impl FnMut(u64) -> u64) -> f64 {
    black_box(run(SECTIONS / 10));
    let start = Instant::now();
    black_box(run(SECTIONS));
    start.elapsed().as_nanos() as f64 / SECTIONS as f64
}

fn median_min_max(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn report(kind: &str, ks: &[usize], figures: &[Vec<f64>]) {
    println!("| {kind} domains read in turn | ns per section | vs k = 1 |");
    println!("|---|---|---|");
    for (k, rounds) in ks.iter().zip(figures) {
        let (m, lo, hi) = median_min_max(rounds.clone());
        let ratios = rounds.iter().zip(&figures[0]).map(|(a, b)| a / b).collect();
        let (r, rlo, rhi) = median_min_max(ratios);
        println!("| k = {k} | {m:.2} ({lo:.2}-{hi:.2}) | {r:.2}x ({rlo:.2}-{rhi:.2}) |");
    }
    println!();
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is ignored.
    let value = 7u64;
    let recseq_ks = [1usize, 10, 100, 1000];
    let rcu_ks = [1usize, 10, 50, 100, 200];
    let cells: Vec<Vec<RecSeq<u64>>> = recseq_ks
        .iter()
        .map(|&k| (0..k as u64).map(RecSeq::new).collect())
        .collect();
    let domains: Vec<Vec<Rcu>> = rcu_ks
        .iter()
        .map(|&k| {
            (0..k)
                .map(|_| Rcu::builder().callback_workers(1).build().expect("domain"))
                .collect()
        })
        .collect();
    let mut recseq = vec![Vec::new(); recseq_ks.len()];
    let mut rcu = vec![Vec::new(); rcu_ks.len()];
    for round in 0..ROUNDS {
        eprintln!("round {}/{ROUNDS}", round + 1);
        for (figures, cells) in recseq.iter_mut().zip(&cells) {
            figures.push(time(|n| recseq_round_robin(cells, n)));
        }
        for (figures, domains) in rcu.iter_mut().zip(&domains) {
            figures.push(time(|n| rcu_round_robin(domains, &value, n)));
        }
    }
    report("RecSeq", &recseq_ks, &recseq);
    report("Rcu", &rcu_ks, &rcu);
}
