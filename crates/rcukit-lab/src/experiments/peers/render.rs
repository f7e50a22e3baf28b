//! Tables, plot and headlines.

use crate::measure::Rounds;
use crate::plot::{self, Axis, Panel};
use crate::report::{self, Table};
use anyhow::Result;

use super::{GpPeer, ReadPeer, Report};
use crate::experiments::{unavailable_note, Rendered};

/// Tables, plot and headlines.
pub(super) fn render(r: &Report) -> Result<Rendered> {
    let mut md = String::new();
    md.push_str(&format!(
        "All peers in one process, one after another, in {} interleaved rounds (each round \
         measures every peer once, in an order rotated from round to round). Every figure is \
         the median of the rounds with the smallest and largest round in brackets; every ratio \
         is taken round by round against rcukit's figure of the same round. C peers (liburcu \
         memb/qsbr, ck_epoch): {}.\n\n",
        r.config.rounds,
        if r.c_peers {
            "compiled in (feature `c-peers`)"
        } else {
            "not in this build (`--features c-peers`)"
        }
    ));
    md.push_str(&parts_markdown(r));
    md.push_str(&unavailable_note(&r.not_available));
    Ok(Rendered {
        markdown: md,
        // The plot shows the first three parts; a run of the shape alone has none.
        svg: if r.read.is_empty() && r.grace_period.is_empty() && r.retire.is_empty() {
            None
        } else {
            Some(svg(r)?)
        },
        headlines: headlines(r),
    })
}

/// The section of every part that ran: title, table, notes.
fn parts_markdown(r: &Report) -> String {
    let mut md = String::new();
    if !r.read.is_empty() {
        md.push_str("### Read-side cost (ns per section: enter, load, read, leave)\n\n");
        md.push_str(&read_table(r));
        md.push_str(
            "\n`rcukit-qsbr` is a plain load per section with `quiescent_state()` every 1024 \
             sections, the cadence of the `liburcu-qsbr` loop; `rcukit-rcucell` is \
             `RcuCell::load` in the global domain (so compare it with `rcukit-global`); \
             `rcukit-recseq` pays a full fence per section by design (netfilter's xt_recseq). \
             Reference (c-peers.md, this machine, single runs): liburcu memb 1.02 ns, qsbr \
             0.29 ns, ck_epoch 2.5 ns per section with one thread.\n",
        );
    }
    if !r.grace_period.is_empty() {
        md.push_str("\n### Grace-period latency (one busy reader thread)\n\n");
        md.push_str(&gp_table(r));
        md.push_str(
            "\nA QSBR reader is inside a read-side section whenever it is online, so a QSBR \
             grace period also waits while the scheduler has preempted the busy reader; an \
             `Rcu` grace period waits only for a reader preempted inside its short section. On \
             a busy machine the QSBR rows therefore include scheduler time slices.\n",
        );
    }
    if !r.retire.is_empty() {
        md.push_str(&format!(
            "\n### Retire throughput ({} objects of 56 bytes per round, queued by one thread, \
             until all are dropped)\n\n",
            r.config.retire_objects
        ));
        md.push_str(&retire_table(r));
    }
    if !r.shapes.is_empty() {
        md.push_str(&shapes_section(r));
    }
    md
}

/// liburcu's benchmark shape: title, table, notes.
fn shapes_section(r: &Report) -> String {
    let mut md = format!(
        "\n### liburcu's benchmark shape: N readers + 1 writer ({} ms per point and round)\n\n",
        report::num(r.config.shape_time.as_secs_f64() * 1e3)
    );
    md.push_str(&shapes_table(r));
    md.push_str(
        "\nReaders run back-to-back sections that dereference a shared pointer and check the \
         value (QSBR readers: a quiescent state every 1,024 sections); the writer loops publish \
         → wait → poison and free. `vs liburcu` divides by the liburcu flavor's figure of the \
         same round (memb for `Rcu` and `RcuCell`, qsbr for `Qsbr`); `worst` is the smallest of \
         those round ratios. Writer CPU is `getrusage(RUSAGE_THREAD)` per grace period: a writer \
         that spins while its reader waits for a core shows it.\n",
    );
    md
}

/// Read-side cost per peer and thread count.
fn read_table(r: &Report) -> String {
    let mut header = vec!["peer".to_string()];
    for t in &r.config.read_threads {
        header.push(format!("{t} thread(s)"));
        header.push("vs rcukit-global".into());
    }
    let mut t = Table::new(&header);
    for x in &r.read {
        let mut row = vec![format!("`{}`", x.peer.id())];
        for ((_, ns), (_, v)) in x.rounds.iter().zip(&x.vs_rcukit_rounds) {
            row.push(report::spread(ns, 2));
            row.push(report::ratio_spread(v));
        }
        t.row(row);
    }
    t.to_markdown()
}

/// Grace-period latency per peer.
fn gp_table(r: &Report) -> String {
    let mut t = Table::new(&[
        "peer",
        "what is timed",
        "round means (µs)",
        "p50 (µs)",
        "p99 (µs)",
        "samples",
        "vs rcukit-expedited",
    ]);
    for g in &r.grace_period {
        t.row(vec![
            format!("`{}`", g.peer.id()),
            g.description.into(),
            report::spread(&g.mean_us_rounds, 1),
            report::num(g.latency_us.p50),
            report::num(g.latency_us.p99),
            g.latency_us.count.to_string(),
            report::ratio_spread(&g.vs_rcukit_expedited_rounds),
        ]);
    }
    t.to_markdown()
}

/// The shape per peer and reader count.
fn shapes_table(r: &Report) -> String {
    let mut t = Table::new(&[
        "readers",
        "peer",
        "k grace periods/s",
        "vs liburcu (worst)",
        "M reads/s",
        "vs liburcu",
        "writer CPU µs/GP",
        "µs per loop",
    ]);
    let worst = |x: &Option<Rounds>| match x {
        Some(v) => format!("{} ({})", report::ratio_spread(v), report::num(v.min)),
        None => "n/a".into(),
    };
    for x in &r.shapes {
        t.row(vec![
            x.readers.to_string(),
            format!("`{}`", x.peer.id()),
            report::spread(&scaled(&x.gps_per_s, 1e-3), 1),
            worst(&x.gps_vs_liburcu),
            report::spread(&scaled(&x.reads_per_s, 1e-6), 1),
            x.reads_vs_liburcu
                .as_ref()
                .map_or("n/a".into(), report::ratio_spread),
            report::spread(&x.writer_cpu_us_per_gp, 1),
            report::spread(&x.loop_us, 1),
        ]);
    }
    t.to_markdown()
}

/// Retire throughput per peer.
fn retire_table(r: &Report) -> String {
    let mut t = Table::new(&[
        "peer",
        "M objects/s",
        "vs rcukit",
        "elapsed, median round (ms)",
        "freed / retired",
    ]);
    for x in &r.retire {
        t.row(vec![
            format!("`{}`", x.peer.id()),
            report::spread(&scaled(&x.objects_per_s_rounds, 1e-6), 2),
            report::ratio_spread(&x.vs_rcukit_rounds),
            format!("{:.1}", x.elapsed_ms),
            format!("{} / {}", x.freed, x.retired),
        ]);
    }
    t.to_markdown()
}

/// `r` with every value multiplied by `k`.
fn scaled(r: &Rounds, k: f64) -> Rounds {
    Rounds::of(r.values.iter().map(|v| v * k).collect())
}

/// The three parts as bars.
fn svg(r: &Report) -> Result<String> {
    let threads = r.config.read_threads.clone();
    let panels = [
        Panel::Bars {
            title: "read-side cost".into(),
            value: Axis::log("ns per section (log)"),
            categories: r.read.iter().map(|x| x.peer.id().into()).collect(),
            series: threads
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    (
                        format!("{t} thread(s)"),
                        r.read
                            .iter()
                            .map(|x| x.ns_per_op.get(i).map_or(f64::NAN, |p| p.1))
                            .collect(),
                    )
                })
                .collect(),
        },
        Panel::Bars {
            title: "grace-period latency, mean".into(),
            value: Axis::log("µs (log)"),
            categories: r.grace_period.iter().map(|g| g.peer.id().into()).collect(),
            series: vec![(
                "mean".into(),
                r.grace_period.iter().map(|g| g.latency_us.mean).collect(),
            )],
        },
        Panel::Bars {
            title: "retire throughput, end to end".into(),
            value: Axis::linear("objects/s"),
            categories: r.retire.iter().map(|x| x.peer.id().into()).collect(),
            series: vec![(
                "objects/s".into(),
                r.retire.iter().map(|x| x.objects_per_s).collect(),
            )],
        },
    ];
    let present = [
        !r.read.is_empty(),
        !r.grace_period.is_empty(),
        !r.retire.is_empty(),
    ];
    let panels: Vec<Panel> = panels
        .into_iter()
        .zip(present)
        .filter_map(|(panel, present)| present.then_some(panel))
        .collect();
    plot::render(&panels)
}

/// Read-side cost at one thread and grace-period latency, per peer.
fn headlines(r: &Report) -> Vec<String> {
    let ns1 = |id: ReadPeer| {
        r.read
            .iter()
            .find(|x| x.peer == id)
            .and_then(|x| x.ns_per_op.first())
            .map(|p| format!("{:.2}", p.1))
            .unwrap_or_else(|| "n/a".into())
    };
    let gp = |id: GpPeer| {
        r.grace_period
            .iter()
            .find(|g| g.peer == id)
            .map(|g| report::num(g.latency_us.mean))
            .unwrap_or_else(|| "n/a".into())
    };
    vec![
        format!(
            "read side, 1 thread: rcukit {} ns (qsbr {}, RcuCell {}, RecSeq {}, PerCpuRwLock {}), \
             crossbeam-epoch {} ns, arc-swap {} ns, seize {} ns, parking_lot RwLock {} ns, \
             plain load {} ns",
            ns1(ReadPeer::RcukitGlobal),
            ns1(ReadPeer::RcukitQsbr),
            ns1(ReadPeer::RcukitRcucell),
            ns1(ReadPeer::RcukitRecseq),
            ns1(ReadPeer::RcukitPercpuRwlock),
            ns1(ReadPeer::CrossbeamEpoch),
            ns1(ReadPeer::ArcSwap),
            ns1(ReadPeer::Seize),
            ns1(ReadPeer::ParkingLotRwlock),
            ns1(ReadPeer::PlainLoad)
        ),
        format!(
            "owned read sections, 1 thread: rcukit read_owned {} ns (read {} ns), arc-swap \
             load_full {} ns, seize enter_owned {} ns",
            ns1(ReadPeer::RcukitOwned),
            ns1(ReadPeer::RcukitRcucell),
            ns1(ReadPeer::ArcSwapFull),
            ns1(ReadPeer::SeizeOwned)
        ),
        format!(
            "grace period with a busy reader: rcukit expedited {} µs, normal {} µs, qsbr \
             expedited {} µs, qsbr normal {} µs, crossbeam-epoch {} µs",
            gp(GpPeer::RcukitExpedited),
            gp(GpPeer::RcukitSynchronize),
            gp(GpPeer::RcukitQsbrExpedited),
            gp(GpPeer::RcukitQsbrSynchronize),
            gp(GpPeer::CrossbeamEpoch)
        ),
    ]
}
