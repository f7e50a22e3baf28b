//! Resizing: moving the buckets of a table into its successor, a run of buckets at a time
//! (claims 3, 5 and 6 of the [map's essay](super)).

use super::hint;
use super::line::{self, prefetch, LANES, MOVED};
use super::table::{self, Table};
use crate::sync::AtomicPtr;
use std::ptr;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

/// What a resize step hands back.
pub(crate) enum Moved<K, V> {
    /// Nothing to move: no resize under way, or every bucket already claimed.
    Nothing,
    /// Some buckets were moved; the resize goes on.
    Some,
    /// This call moved the last bucket and made the new table current: the old table is
    /// unreachable for new walkers and must be retired.
    Finished(*mut Table<K, V>),
}

/// The most buckets one claim takes.
const MAX_RUN: usize = 64;

/// How many buckets ahead a mover asks for the nodes.
const PREFETCH_AHEAD: usize = 4;

/// A mover broken on purpose, for the loom models' busted twins; the map itself passes
/// [`Busted::No`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(not(rcukit_loom), allow(dead_code))]
pub(crate) enum Busted {
    /// The mover as written.
    No,
    /// A bucket is marked `MOVED` *before* its entries are in the new table: a lookup then
    /// misses them.
    MarkFirst,
    /// An empty bucket is found empty before its state is read, so the compare-exchange that
    /// marks it can succeed over an insert made in between: the insert is lost.
    EmptyBeforeState,
}

/// Move up to `budget` buckets of `old` into `old.next` (`busted`: [`Busted::No`] but in the
/// loom models' busted twins).
///
/// # Safety
///
/// As for [`table::find`]; `root` is the map's current-table pointer and `old_ptr` was loaded
/// from it (the raw pointer is kept, not a reference, because a finished table is handed back
/// for `Box::from_raw`).
pub(crate) unsafe fn help_move<K, V>(
    root: &AtomicPtr<Table<K, V>>,
    old_ptr: *mut Table<K, V>,
    budget: usize,
    busted: Busted,
) -> Moved<K, V> {
    // SAFETY: alive by the caller's contract.
    let old = unsafe { &*old_ptr };
    let next = old.next.load(Acquire);
    if next.is_null() {
        return Moved::Nothing;
    }
    // SAFETY: installed and alive (caller's contract).
    let new = unsafe { &*next };
    let mut moved_any = false;
    let mut left = budget;
    while left > 0 {
        // Buckets are claimed and counted as finished a run at a time: two atomic
        // read-modify-writes per run instead of two per bucket.
        let run = left.min(MAX_RUN);
        left -= run;
        let first = old.counts.claimed.fetch_add(run, Relaxed);
        if first >= old.len() {
            break;
        }
        let end = old.len().min(first + run);
        // Index bits a node gains (none: the new table is no larger).
        let gained = new.bits().saturating_sub(old.bits());
        for index in first..end {
            // Moving a bucket into a larger table waits for cache misses on the nodes whose
            // hints do not tell their new bucket (they are read for their hashes); asking for
            // those nodes of the bucket ahead now lets the misses overlap. Into a table no
            // larger, a move reads no node (see `move_bucket`). The bucket ahead may lie past
            // this run: claims are consecutive, so it is most often this thread's next one
            // (with 8 buckets a write, stopping at the run's end left half of them unasked).
            if gained > 0 && index + PREFETCH_AHEAD < old.len() {
                prefetch_ahead(old, new, index + PREFETCH_AHEAD, gained);
            }
            // SAFETY: forwarded; `index` was claimed by this thread alone.
            unsafe { move_bucket(old, new, index, busted) };
        }
        moved_any = true;
        // AcqRel: the finisher's root store must carry every mover's copies (all the
        // increments form one release sequence that the last one acquires).
        if old.counts.finished.fetch_add(end - first, AcqRel) + (end - first) == old.len() {
            // Every bucket is `MOVED`: `new` holds every node. Walkers that start from `new`
            // need nothing from `old` (claim 6).
            old.note_moved_into(new);
            root.store(next, Release);
            return Moved::Finished(old_ptr);
        }
    }
    if moved_any {
        Moved::Some
    } else {
        Moved::Nothing
    }
}

/// Ask for what moving bucket `ahead` of `old` into the larger `new` will read: its unhinted
/// nodes, and the two buckets of `new` most of its entries go to (the only two when the table
/// doubles), which the mover fills.
#[inline(always)]
fn prefetch_ahead<K, V>(old: &Table<K, V>, new: &Table<K, V>, ahead: usize, gained: u32) {
    prefetch_unhinted(old.bucket(ahead), gained);
    prefetch(new.bucket(ahead));
    prefetch(new.bucket(ahead | 1 << old.bits()));
}

/// Ask for the nodes of `bucket`'s first line whose hints know fewer than `gained` bits (a
/// hint only: the bucket may change meanwhile, and its lock is not taken).
#[inline(always)]
fn prefetch_unhinted<N>(bucket: &line::Line<N>, gained: u32) {
    let lanes = &bucket.lanes;
    let state = bucket.seq();
    let tags = lanes.tags.load(Relaxed);
    // Its overflow line, whose lanes the move reads too (null: nothing asked).
    prefetch(lanes.overflow.load(Relaxed));
    for lane in 0..LANES {
        if line::lane_tag(tags, lane) != 0
            && hint::grown(line::hint_in(state, lane), gained).is_none()
        {
            prefetch(lanes.slots[lane].load(Relaxed));
        }
    }
}

/// Copy every entry of bucket `index` of `old` into its bucket of `new`, then mark the old
/// bucket `MOVED`, all in one change of the old bucket (claims 3 and 5). The old bucket's
/// lanes keep pointing at the nodes: no walker reads a `MOVED` bucket's lanes after it saw
/// the mark, and one that read them before may still use what they held (claim 3).
///
/// # Safety
///
/// As for [`table::find`]; `new` is `old.next`; this thread claimed `index`.
unsafe fn move_bucket<K, V>(old: &Table<K, V>, new: &Table<K, V>, index: usize, busted: Busted) {
    let bucket = old.bucket(index);
    let marked_empty = match busted {
        Busted::No => bucket.mark_moved_if_empty(),
        #[cfg(rcukit_loom)]
        Busted::EmptyBeforeState => bucket.busted_mark_moved_if_empty_checked_first(),
        _ => false,
    };
    if marked_empty {
        return;
    }
    let lock = bucket.lock();
    #[cfg(rcukit_loom)]
    if busted == Busted::MarkFirst {
        lock.mark_first(MOVED);
    }
    // One change of the old bucket for the whole move, ending with `MOVED` in the same store:
    // a writer never sees a half-moved bucket with a settled state (claims 4 and 5).
    let state = lock.seq();
    let grows = new.bits() > old.bits();
    lock.change_marking(MOVED, || {
        // SAFETY: under the old bucket's lock its lines are its own and alive.
        for (lanes, lane, p) in unsafe { table::occupied(bucket) } {
            // The lane's hint, if it is in the first line (overflow lanes have none).
            let hinted = ptr::eq(lanes, &bucket.lanes).then(|| line::hint_in(state, lane));
            // SAFETY: `p` is a node of the locked bucket, alive; `index` is its bucket.
            let (target, hint) = unsafe { destination(old, new, index, p, hinted.unwrap_or(0)) };
            // The tag (the hash's high bits) stays as the lane holds it. (Under the lock the
            // bucket's tags stay as they are.)
            let tag = line::lane_tag(lanes.tags.load(Relaxed), lane);
            debug_assert_eq!(
                // SAFETY: as above.
                (target, tag),
                unsafe { (new.index((*p).hash), line::tag_of((*p).hash)) }
            );
            let target = new.bucket(target);
            if grows {
                // SAFETY: `target` is `new`'s bucket for the node's hash; `new` is larger, so
                // bucket `index`, locked by us, is its only source.
                unsafe { new.fill(target, p, tag, hint) };
            } else {
                // Lock order: an old table's bucket before a newer table's (writers hold one
                // lock).
                let new_lock = target.lock();
                // SAFETY: `target` is `new`'s bucket for the node's hash, locked by us.
                unsafe { new.place(target, &new_lock, p, tag, hint) };
            }
        }
    });
}

/// The bucket of `new` for node `p` of bucket `index` of `old`, whose lane's index hint is
/// `hint`, and the node's hint in `new` (see `hint.rs`). Both sizes are powers of two and a
/// bucket is the hash's low bits, so in a smaller table the node's bucket is `index`'s low
/// bits; in a larger one, `index` under the bits the hint knows, or else the node's hash is
/// read (a cache miss).
///
/// # Safety
///
/// `p` is a node of bucket `index` of `old`, alive.
#[inline(always)]
unsafe fn destination<K, V>(
    old: &Table<K, V>,
    new: &Table<K, V>,
    index: usize,
    p: *const table::Node<K, V>,
    hint: u64,
) -> (usize, u64) {
    let (old_bits, new_bits) = (old.bits(), new.bits());
    if new_bits <= old_bits {
        let d = old_bits - new_bits;
        let dropped = (index >> new_bits) as u64;
        return (index & (new.len() - 1), hint::shrunk(hint, dropped, d));
    }
    let d = new_bits - old_bits;
    match hint::grown(hint, d) {
        Some((gained, hint)) => (index | (gained as usize) << old_bits, hint),
        None => {
            // SAFETY: alive (caller's contract).
            let hash = unsafe { (*p).hash };
            (new.index(hash), hint::of_hash(hash, new_bits))
        }
    }
}
