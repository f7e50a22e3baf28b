//! The report as text: rcutorture-style lines, then the verdict.

use super::*;
use crate::map::MapKind;

fn buckets(f: &mut fmt::Formatter<'_>, values: &Buckets) -> fmt::Result {
    for v in values {
        write!(f, " {v}")?;
    }
    Ok(())
}

fn by_kind(f: &mut fmt::Formatter<'_>, values: &[u64; UpdateKind::ALL.len()]) -> fmt::Result {
    for kind in UpdateKind::ALL {
        write!(f, " {} {}", kind.name(), values[kind.index()])?;
    }
    write!(f, " (total {})", values.iter().sum::<u64>())
}

fn names(kinds: &[UpdateKind]) -> String {
    if kinds.is_empty() {
        return "none".into();
    }
    kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(" ")
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

impl Report {
    /// The header: settings, threads, the pipeline's counts, grace periods.
    fn write_header(&self, f: &mut fmt::Formatter<'_>, p: &str) -> fmt::Result {
        writeln!(f, "{p} flavor={} {}", self.flavor, self.settings)?;
        write!(
            f,
            "{p} readers={} updaters={} faults={} seed={} duration={:.2?}",
            self.readers,
            self.updaters,
            on_off(self.faults.enabled),
            self.seed,
            self.duration
        )?;
        if self.stopped_early {
            write!(
                f,
                " (stopped at the first error; {:?} asked)",
                self.requested
            )?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "{p} ver: {} rta: {} rtaf: {} rtf: {} rtmbe: {} rtbe: {} rtb: {} nt: {} loads: {} \
             read-exits: {} pauses: {}",
            self.versions,
            self.versions,
            self.alloc_failures,
            self.freed,
            self.mbtest_errors,
            self.barrier_errors,
            self.barrier_checks,
            self.reads,
            self.loads,
            self.faults.reader_exits,
            self.pauses
        )?;
        write!(
            f,
            "{p} grace periods: normal {} expedited {} ({:.1}/s)",
            self.stats.normal_gps,
            self.stats.expedited_gps,
            (self.stats.normal_gps + self.stats.expedited_gps) as f64
                / self.duration.as_secs_f64().max(1e-9)
        )?;
        if self.stats.readers_gave_way > 0 {
            write!(f, "; readers gave way {}", self.stats.readers_gave_way)?;
        }
        writeln!(f)?;
        Ok(())
    }

    /// The update paths, by writer and updaters, and the cookie checks.
    fn write_paths(&self, f: &mut fmt::Formatter<'_>, p: &str) -> fmt::Result {
        let supported_unused: Vec<UpdateKind> = self
            .supported
            .iter()
            .copied()
            .filter(|&k| self.uses_of(k) == 0)
            .collect();
        write!(
            f,
            "{p} update paths: ran {}; skipped (not supported) {}",
            names(&self.paths_run()),
            names(&self.paths_skipped())
        )?;
        if !supported_unused.is_empty() {
            write!(
                f,
                "; supported but never picked {}",
                names(&supported_unused)
            )?;
        }
        writeln!(f)?;
        write!(f, "{p} writer updates:")?;
        by_kind(f, &self.writer_updates)?;
        writeln!(f)?;
        write!(f, "{p} updater ops:")?;
        by_kind(f, &self.updater_ops)?;
        writeln!(f)?;
        if self.has_cookies {
            writeln!(
                f,
                "{p} cookies: reader checks {} errors {}, updater checks {} errors {}, \
                 poll_state fallbacks {}",
                self.reader_cookie_checks,
                self.reader_cookie_errors,
                self.updater_cookie_checks,
                self.updater_cookie_errors,
                self.poll_fallbacks
            )?;
        } else {
            writeln!(
                f,
                "{p} cookies: n/a (no cookies: no cookie checks, no Reader Batch)"
            )?;
        }
        Ok(())
    }

    /// The callback counts.
    fn write_callbacks(&self, f: &mut fmt::Formatter<'_>, p: &str) -> fmt::Result {
        let has_callbacks = self.supported.contains(&UpdateKind::Call);
        if has_callbacks {
            writeln!(
                f,
                "{p} callbacks: invoked {} (run by retiring threads {}) pending {} panics {} \
                 released by normal {} by expedited {}; calls from readers {}",
                self.stats.callbacks_invoked,
                self.stats.callbacks_run_by_producers,
                self.stats.callbacks_pending,
                self.stats.callback_panics,
                self.stats.released_by_normal,
                self.stats.released_by_expedited,
                self.reader_calls
            )?;
        } else {
            writeln!(f, "{p} callbacks: n/a (no callbacks)")?;
        }
        Ok(())
    }

    /// What the fault injection did.
    fn write_faults(&self, f: &mut fmt::Formatter<'_>, p: &str) -> fmt::Result {
        let has_callbacks = self.supported.contains(&UpdateKind::Call);
        let fr = &self.faults;
        if fr.enabled {
            write!(
                f,
                "{p} faults: read-exits {} (sections read during thread exit {})",
                fr.reader_exits, fr.reads_during_exit
            )?;
            if has_callbacks {
                write!(
                    f,
                    ", callback panics {} injected {} counted",
                    fr.panics_injected, self.stats.callback_panics
                )?;
            } else {
                write!(f, ", callback panics n/a")?;
            }
            match fr.stall_timeout {
                Some(t) => write!(
                    f,
                    ", stalls {} injected {} reported (timeout {t:?}, longest held {:.1?}, \
                     domain total {})",
                    fr.stalls_injected, fr.stalls_reported, fr.longest_stall, self.stats.stalls
                )?,
                None => write!(f, ", stalls n/a")?,
            }
            match fr.backlog_callbacks.filter(|_| has_callbacks) {
                Some(t) => write!(
                    f,
                    ", backlog {} bursts of {} calls or retires (threshold {t}, peak pending {}): \
                     expedited GPs during bursts {}, callbacks released by expedited {}",
                    fr.bursts,
                    t * BURST_FACTOR,
                    fr.burst_peak_pending,
                    fr.burst_expedited_gps,
                    fr.burst_released_by_expedited
                )?,
                None => write!(f, ", backlog n/a")?,
            }
            if fr.reentrant_rounds > 0 {
                write!(
                    f,
                    ", re-entrant drops {} in {} rounds",
                    fr.reentrant_drops, fr.reentrant_rounds
                )?;
            }
            writeln!(f)?;
        }
        Ok(())
    }

    /// Reader Pipe, Reader Batch, Free-Block Circulation.
    fn write_histograms(&self, f: &mut fmt::Formatter<'_>, p: &str) -> fmt::Result {
        write!(f, "{p} Reader Pipe: ")?;
        if self.pipe_errors() > 0 {
            write!(f, "!!! ")?;
        }
        buckets(f, &self.pipe)?;
        writeln!(f)?;
        write!(f, "{p} Reader Batch: ")?;
        if self.batch_errors > 0 {
            write!(f, "!!! ")?;
        }
        if self.has_cookies {
            buckets(f, &self.batch)?;
        } else {
            write!(f, "n/a (no cookies)")?;
        }
        writeln!(f)?;
        write!(f, "{p} Free-Block Circulation: ")?;
        if self.circulation_errors() > 0 {
            write!(f, "!!! ")?;
        }
        buckets(f, &self.circulation)?;
        writeln!(f)?;
        Ok(())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = format!("{}-torture:", self.flavor);
        self.write_header(f, &p)?;
        self.write_paths(f, &p)?;
        write_owned(f, &p, &self.owned)?;
        self.write_callbacks(f, &p)?;
        self.write_faults(f, &p)?;
        self.write_histograms(f, &p)?;
        if let Some(m) = &self.map {
            write_map(f, &p, m)?;
        }
        writeln!(
            f,
            "{p} errors: {} (pipe {}, mbtest {}, cookie {}, batch {}, barrier {}, circulation \
             {}, map {}, problems {})",
            self.errors(),
            self.pipe_errors(),
            self.mbtest_errors,
            self.cookie_errors(),
            self.batch_errors,
            self.barrier_errors,
            self.circulation_errors(),
            self.map.as_ref().map_or(0, MapReport::errors),
            self.problems.len()
        )?;
        for problem in &self.problems {
            writeln!(f, "{p} problem: {problem}")?;
        }
        write!(f, "{}", self.verdict())
    }
}

/// The map lines of a map run's report.
fn write_map(f: &mut fmt::Formatter<'_>, p: &str, m: &MapReport) -> fmt::Result {
    write_map_counts(f, p, m)?;
    writeln!(
        f,
        "{p} map capacity: first {} min {} max {}; seen growing {} shrinking {}; cycles {} \
         (>= {} then <= {}); len max {}",
        m.capacity_first,
        m.capacity_min,
        m.capacity_max,
        m.grows,
        m.shrinks,
        m.cycles,
        crate::map::CYCLE_HIGH,
        crate::map::CYCLE_LOW,
        m.len_max
    )?;
    writeln!(
        f,
        "{p} map values: created {} dropped {} (while in the map {}, twice {}), discarded \
         unpublished by update {}; clones {} (of dropped values {})",
        m.values, m.drops, m.live_drops, m.double_drops, m.discarded, m.clones, m.dead_clones
    )?;
    write_map_histograms(f, p, m)
}

/// The setup and lookup lines of a map run's report, then the write line.
fn write_map_counts(f: &mut fmt::Formatter<'_>, p: &str, m: &MapReport) -> fmt::Result {
    writeln!(
        f,
        "{p} map: {} on the domain under test, {}; keys: {} stable, {} churned, bursts of \
         {}-{}",
        m.kind.map_or("a map", MapKind::type_name),
        match (m.kind, m.busted) {
            (Some(kind), true) if kind.is_flat() => {
                "BUSTED: a replaced table's entries dropped at once"
            }
            (_, true) => "BUSTED: removed values dropped at once",
            (Some(kind), false) if kind.is_flat() => {
                "removed values dropped with their table, a grace period after a rebuild"
            }
            (_, false) => "removed values dropped after a grace period",
        },
        crate::map::STABLE_KEYS,
        crate::map::CHURN_KEYS,
        crate::map::BURST_KEYS.start(),
        crate::map::BURST_KEYS.end()
    )?;
    writeln!(
        f,
        "{p} map lookups: {} (stable keys {}) hits {}; iterations {} (entries {}, held {}, \
         across a resize {}; missing a stable key {}, yielding one twice {}; checking retains \
         {}); stable-key misses {} value mismatches {} free values found {}",
        m.lookups,
        m.stable_lookups,
        m.hits,
        m.iterations,
        m.iter_entries,
        m.held_iterations,
        m.iter_across_resizes,
        m.iter_stable_missing,
        m.iter_stable_duplicates,
        m.checking_retains,
        m.stable_misses,
        m.value_mismatches,
        m.mbtest_errors
    )?;
    write_map_writes(f, p, m)
}

/// The write line of a map run's report.
fn write_map_writes(f: &mut fmt::Formatter<'_>, p: &str, m: &MapReport) -> fmt::Result {
    writeln!(
        f,
        "{p} map writes: insert {} replace {} update {} (by compute {}, closure reruns {}) \
         remove {} retain {}; bursts {} ({} keys; reserve and shrink_to_fit {} / {}); waits {}; \
         pool empty {}; wrong results {}",
        m.inserts,
        m.replaces,
        m.updates,
        m.computes,
        m.update_retries,
        m.removes,
        m.retains,
        m.bursts,
        m.burst_keys,
        m.reserves,
        m.shrinks_to_fit,
        m.waits,
        m.alloc_failures,
        m.result_errors
    )?;
    if let Some(race) = m.clear_race {
        writeln!(
            f,
            "{p} map clear race: clear {} beside a growing and shrinking writer; values {} \
             (dropped {}), found by lookups and checked alive {}; errors {}",
            race.clears, race.values, race.drops, race.found, race.errors
        )?;
    }
    Ok(())
}

/// The error notes and the two histograms of a map run's report.
fn write_map_histograms(f: &mut fmt::Formatter<'_>, p: &str, m: &MapReport) -> fmt::Result {
    for note in &m.notes {
        writeln!(f, "{p} map error: {note}")?;
    }
    write!(f, "{p} Map Pipe: ")?;
    if m.pipe_errors() > 0 {
        write!(f, "!!! ")?;
    }
    buckets(f, &m.pipe)?;
    writeln!(f)?;
    write!(f, "{p} Map Circulation: ")?;
    if m.circulation[BUCKETS - 1] > 0 {
        write!(f, "!!! ")?;
    }
    buckets(f, &m.circulation)?;
    writeln!(f)
}
