//! One table of an [`RcuFlatMap`](super::RcuFlatMap): control bytes, eight to a 64-bit word
//! and two words to a group of sixteen slots, beside an array of inline entries; and the probe
//! sequence over the groups.
//!
//! A control byte is [`EMPTY`] (zero, so that a table's arrays start as zero pages: see
//! [`PageArray`]), [`TOMBSTONE`] or, for a full slot, its tag: the high bit and the top seven
//! bits of the entry's hash. In one table a byte only ever goes `EMPTY` → full → `TOMBSTONE`,
//! and a slot is written once, before its byte becomes full: see the map's module docs for
//! why that makes lock-free lookups correct.
//!
//! Slots are numbered across the table: slot `i` is byte `i % 8` of control word `i / 8`, in
//! group `i / 16`. A reader loads a group's two words one after the other (each with acquire)
//! and compares all sixteen bytes at once: with SSE2 on x86-64, with a bit trick on each word
//! elsewhere (the byte tests are in `table/control.rs`). Sixteen slots a group, not eight:
//! with eight, one thread's lookups of random keys in a table of a million entries took about
//! 1.3 times as long (a scratch loop beside hashbrown, which uses sixteen, on this project's
//! 2-core machine).

use crate::pages::{PageArray, Pages};
use crate::report;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, UnsafeCell};
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

mod control;

pub(crate) use control::{
    fulls, tag, with_byte, word_of, Group, Mask, EMPTY, GROUP, TOMBSTONE, WORD,
};
use control::{repeat, WORDS};

/// Slots a table of `groups` groups may fill (full or tombstones) before it is rebuilt.
pub(crate) fn usable(groups: usize) -> usize {
    groups * GROUP / 8 * 7
}

/// The fewest groups (a power of two) whose usable slots hold `entries`.
pub(crate) fn groups_for(entries: usize) -> usize {
    let slots = entries.saturating_mul(8).div_ceil(7).max(1);
    slots.div_ceil(GROUP).next_power_of_two()
}

/// The groups a hash visits, in order: triangular steps from its home group, which visit
/// every group of a power-of-two table once in its first `groups` steps.
pub(crate) struct Probe {
    group: usize,
    step: usize,
    mask: usize,
}

impl Probe {
    /// The next group, with no bound: for a probe that stops at an `EMPTY` slot, which every
    /// table keeps (see "Why lookups are correct", claim 4, in the map's essay).
    #[inline(always)]
    fn next_group(&mut self) -> usize {
        debug_assert!(self.step <= self.mask, "a probe went past every group");
        let group = self.group;
        self.step += 1;
        self.group = (self.group + self.step) & self.mask;
        group
    }
}

impl Iterator for Probe {
    type Item = usize;

    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        if self.step > self.mask {
            return None;
        }
        Some(self.next_group())
    }
}

/// Entries per 4 KiB page of slots from which a table about to receive them is mapped with its
/// pages present ([`Table::to_fill`]). Entries land in groups chosen by their hashes; at `n` a
/// page on average, a page stays untouched with a chance of about `e^-n`, under 2% for four,
/// so populating costs next to no memory that the copy would not have touched anyway (and each
/// page of control words serves sixteen pages of slots).
pub(crate) const POPULATE_PER_PAGE: usize = 4;

/// One slot: an entry, written once (or never).
type Slot<K, V> = UnsafeCell<MaybeUninit<(K, V)>>;

/// The entry of slot `i` of `slots` (a table's slots, borrowed once for a whole probe: a slice
/// in registers, where the table's field would be loaded again after every acquire load).
///
/// # Safety
///
/// As for [`Table::entry`].
#[inline(always)]
unsafe fn entry_in<K, V>(slots: &[Slot<K, V>], i: usize) -> &(K, V) {
    debug_assert!(i < slots.len());
    // SAFETY: a slot whose byte exists is in bounds (`GROUP` slots a group, `WORD` a word).
    let cell = unsafe { slots.get_unchecked(i) };
    // SAFETY: forwarded: a slot whose byte was full was written before that byte was stored
    // (with release; seen with acquire), and is never written again.
    cell.with(|p| unsafe { (*p).assume_init_ref() })
}

/// Ask the processor to start loading the first two cache lines of `group`'s entries in
/// `slots` (a table's slot array; a hint: it reads nothing and never faults), in the same
/// breath as the group's control words. A write fills a group's lowest `EMPTY` slot first, so
/// the entries of a group sit mostly in its first slots, and the entry a probe then reads (or
/// the slot an insert writes) is usually on its way already: its cache miss overlaps the
/// control words' instead of following it. On other architectures this does nothing.
#[inline(always)]
fn prefetch_group<K, V>(slots: &[Slot<K, V>], group: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let first = slots.as_ptr().wrapping_add(group * GROUP).cast::<i8>();
        // SAFETY: a prefetch is a hint; it reads nothing and faults on no address.
        unsafe {
            _mm_prefetch(first, _MM_HINT_T0);
            _mm_prefetch(first.wrapping_add(64), _MM_HINT_T0);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (slots, group);
}

/// A table: `groups` (a power of two) groups, that is `groups * 2` control words and
/// `groups * 16` slots, each array a [`PageArray`] (a mapping of its own from 128 KiB, given
/// back to the system when freed or a second later, its pages made present at once for a
/// table built to be filled; not advised to use huge pages, which made filling a large table
/// much slower).
pub(crate) struct Table<K, V> {
    /// `groups - 1`.
    mask: usize,
    ctrl: PageArray<AtomicU64>,
    slots: PageArray<Slot<K, V>>,
    /// Iterations walking this table (counted up under the map's writer lock): while there
    /// are any, no entry moves to another control word of this table (see the map's
    /// "Iteration").
    pub(crate) iterators: AtomicUsize,
    /// The slots of a replacement across two control words between its two stores: the old
    /// slot plus one, then the new (0 outside that moment). A child forked while another
    /// thread was there finishes the replacement ([`finish_replace`](Self::finish_replace)).
    replacing: [AtomicUsize; 2],
    /// Whether the arrays' mappings are kept for reuse when the table is freed (see
    /// [`pages`](crate::docs::internal::pages), "Reuse"); cleared for a table that a larger one
    /// replaced.
    reuse: AtomicBool,
    /// Whether the entries were dropped already (only by the torture's self-test knob,
    /// `busted_drop_entries_now`), so that freeing the table skips them.
    entries_dropped: AtomicBool,
}

impl<K, V> Drop for Table<K, V> {
    fn drop(&mut self) {
        if !self.reuse.load(Relaxed) {
            self.ctrl.give_back_when_dropped();
            self.slots.give_back_when_dropped();
        }
        if std::mem::needs_drop::<(K, V)>() && !self.entries_dropped.load(Relaxed) {
            // SAFETY: `&mut self`: the table is being freed, nobody reads it any more, and its
            // entries were not dropped before (the flag).
            unsafe { self.drop_entries() };
        }
    }
}

impl<K, V> Table<K, V> {
    /// An empty table of `groups` groups (a power of two, at least 1), its pages faulted in as
    /// writes first touch them.
    pub(crate) fn new(groups: usize) -> Table<K, V> {
        Table::with_pages(groups, Pages::Default)
    }

    /// An empty table of `groups` groups about to receive `entries` entries, placed by their
    /// hashes: with at least [`POPULATE_PER_PAGE`] of them for each page of slots, nearly every
    /// page will be written, and the arrays' pages are made present at once
    /// ([`Pages::Populated`]) instead of by a fault each.
    pub(crate) fn to_fill(groups: usize, entries: usize) -> Table<K, V> {
        Table::with_pages(groups, Table::<K, V>::pages_to_fill(groups, entries))
    }

    /// How [`to_fill`](Self::to_fill) maps the arrays of a table of `groups` groups for
    /// `entries` entries.
    pub(crate) fn pages_to_fill(groups: usize, entries: usize) -> Pages {
        let slot_bytes = groups.saturating_mul(GROUP * std::mem::size_of::<Slot<K, V>>());
        let slot_pages = slot_bytes.div_ceil(4096);
        if entries >= slot_pages.saturating_mul(POPULATE_PER_PAGE) {
            Pages::Populated
        } else {
            Pages::Default
        }
    }

    /// # Panics
    ///
    /// With "capacity overflow" if the table would take more than `isize::MAX` bytes, the most
    /// an allocation may take: as in std's collections, a size no memory could have is a panic
    /// the caller can catch, before anything is allocated, and only an allocation the system
    /// refuses aborts.
    fn with_pages(groups: usize, pages: Pages) -> Table<K, V> {
        debug_assert!(groups.is_power_of_two());
        assert!(
            Table::<K, V>::bytes_of(groups).is_some(),
            "rcukit: RcuFlatMap capacity overflow: a table of {groups} groups would take more \
             than isize::MAX bytes"
        );
        // SAFETY: all-zero bits are an all-`EMPTY` control word, and a valid unwritten slot
        // (`MaybeUninit` takes any bits).
        unsafe {
            Table {
                mask: groups - 1,
                ctrl: PageArray::zeroed(groups * WORDS, pages, || AtomicU64::new(repeat(EMPTY))),
                slots: PageArray::zeroed(groups * GROUP, pages, || {
                    UnsafeCell::new(MaybeUninit::uninit())
                }),
                iterators: AtomicUsize::new(0),
                replacing: [AtomicUsize::new(0), AtomicUsize::new(0)],
                reuse: AtomicBool::new(true),
                entries_dropped: AtomicBool::new(false),
            }
        }
    }

    /// Give the arrays' memory back to the system when the table is freed, not keeping it
    /// for a table of the same size: a growing map, which replaced this table by a larger
    /// one, will not build one of this size soon.
    pub(crate) fn give_back_when_freed(&self) {
        self.reuse.store(false, Relaxed);
    }

    pub(crate) fn groups(&self) -> usize {
        self.mask + 1
    }

    /// The number of control words.
    pub(crate) fn words(&self) -> usize {
        self.ctrl.len()
    }

    /// The bytes of the arrays of a table of `groups` groups, if no more than `isize::MAX`.
    fn bytes_of(groups: usize) -> Option<usize> {
        let per_group =
            WORDS * std::mem::size_of::<AtomicU64>() + GROUP * std::mem::size_of::<Slot<K, V>>();
        groups
            .checked_mul(per_group)
            .filter(|&bytes| bytes <= isize::MAX as usize)
    }

    /// The bytes the table takes.
    pub(crate) fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.ctrl.len() * std::mem::size_of::<AtomicU64>()
            + self.slots.len() * std::mem::size_of::<(K, V)>()
    }

    /// The groups `hash` visits.
    #[inline(always)]
    pub(crate) fn probe(&self, hash: u64) -> Probe {
        Probe {
            group: hash as usize & self.mask,
            step: 0,
            mask: self.mask,
        }
    }

    /// Control word `w`, without a bounds check in release builds: every word the map asks
    /// for is a word of a group from [`probe`](Self::probe) (masked by `groups - 1`) or below
    /// [`words`](Self::words).
    #[inline(always)]
    fn word(&self, w: usize) -> &AtomicU64 {
        debug_assert!(w < self.ctrl.len());
        // SAFETY: `w` is in bounds (see above).
        unsafe { self.ctrl.get_unchecked(w) }
    }

    /// The control words of `group`, for a reader, loaded in order, each with acquire: what
    /// they show full was written before.
    #[inline(always)]
    pub(crate) fn group(&self, group: usize) -> Group {
        let words = self.words_of(group);
        let first = words[0].load(Acquire);
        let second = words[1].load(Acquire);
        Group([first, second])
    }

    /// The control words of `group` (one address computed, for both loads).
    #[inline(always)]
    fn words_of(&self, group: usize) -> &[AtomicU64; WORDS] {
        debug_assert!(group < self.groups());
        // SAFETY: `group` is in bounds (see `word`), and its words are consecutive.
        unsafe {
            &*self
                .ctrl
                .as_ptr()
                .add(group * WORDS)
                .cast::<[AtomicU64; WORDS]>()
        }
    }

    /// The control words of `group`, for the writer (the only thread that stores to them).
    #[inline(always)]
    pub(crate) fn group_mine(&self, group: usize) -> Group {
        Group([
            self.word(group * WORDS).load(Relaxed),
            self.word(group * WORDS + 1).load(Relaxed),
        ])
    }

    /// Control word `w`, for a reader walking the table: what it shows full was written
    /// before.
    #[inline(always)]
    pub(crate) fn ctrl(&self, w: usize) -> u64 {
        self.word(w).load(Acquire)
    }

    /// Control word `w`, for the writer.
    #[inline(always)]
    pub(crate) fn ctrl_mine(&self, w: usize) -> u64 {
        self.word(w).load(Relaxed)
    }

    /// Store control word `w` (the writer only); publishes every slot written before.
    #[inline(always)]
    pub(crate) fn set_ctrl(&self, w: usize, word: u64) {
        self.word(w).store(word, Release);
    }

    /// Set the control byte of slot `i` (the writer only), with one store of its word.
    fn set_byte(&self, i: usize, value: u8) {
        let w = word_of(i);
        self.set_ctrl(w, with_byte(self.ctrl_mine(w), i % WORD, value));
    }

    /// The entry of slot `i`.
    ///
    /// # Safety
    ///
    /// The slot's byte was seen full (with [`group`](Self::group) or [`ctrl`](Self::ctrl), or
    /// by the writer), and the reference does not outlive the table.
    #[inline(always)]
    pub(crate) unsafe fn entry(&self, i: usize) -> &(K, V) {
        // SAFETY: forwarded.
        unsafe { entry_in(&self.slots, i) }
    }

    /// Write slot `i`'s entry (the writer only, before the slot's byte becomes full).
    ///
    /// # Safety
    ///
    /// The slot's byte is `EMPTY`: nobody reads it, nobody else writes it.
    #[inline(always)]
    pub(crate) unsafe fn write(&self, i: usize, entry: (K, V)) {
        let cell = &self.slots[i];
        // SAFETY: forwarded: an `EMPTY` slot is read by no one.
        cell.with_mut(|p| unsafe { (*p).write(entry) });
    }

    /// A reader's lookup: the entry whose key `eq` accepts among the slots tagged like
    /// `hash`, stopping at the first group with an `EMPTY` slot (claims 1 and 2). The probe
    /// has no bound of its own: an `EMPTY` slot stops it within one visit of every group
    /// (claim 4); a bound checked at every group cost about a tenth of a bare probe's time in
    /// a table of a million entries.
    #[inline(always)]
    pub(crate) fn find(&self, hash: u64, eq: impl FnMut(&K) -> bool) -> Option<&(K, V)> {
        self.find_with(hash, eq, |_, entry| entry)
    }

    /// [`find`](Self::find), giving the slot: also the writer's probe for a removal, which
    /// needs no free slot and so stops where a lookup stops (a probe that also looked for the
    /// first `EMPTY` slot took about a fifth longer to remove from a table of 100,000 entries).
    #[inline(always)]
    pub(crate) fn find_slot(&self, hash: u64, eq: impl FnMut(&K) -> bool) -> Option<usize> {
        self.find_with(hash, eq, |slot, _| slot)
    }

    /// The probe of [`find`](Self::find) and [`find_slot`](Self::find_slot): `found(slot,
    /// entry)` for the entry whose key `eq` accepts.
    #[inline(always)]
    fn find_with<'t, R>(
        &'t self,
        hash: u64,
        mut eq: impl FnMut(&K) -> bool,
        found: impl FnOnce(usize, &'t (K, V)) -> R,
    ) -> Option<R> {
        let tag = tag(hash);
        let slots: &'t [Slot<K, V>] = &self.slots;
        let mut probe = self.probe(hash);
        loop {
            let group = probe.next_group();
            prefetch_group(slots, group);
            let ctrl = self.group(group);
            for slot in ctrl.matches(tag) {
                let i = group * GROUP + slot;
                // SAFETY: the byte was seen full with acquire (claim 1); the caller's borrow
                // of the table is what keeps it alive.
                let entry = unsafe { entry_in(slots, i) };
                if eq(&entry.0) {
                    return Some(found(i, entry));
                }
            }
            if ctrl.empties().any() {
                return None;
            }
        }
    }

    /// The writer's probe: the slot of the key `eq` accepts, and the first `EMPTY` slot of the
    /// probe (after the key's slot: the slots before it on the probe had no `EMPTY` byte when
    /// it was written, and never have one again).
    pub(crate) fn probe_for_write(&self, hash: u64, mut eq: impl FnMut(&K) -> bool) -> Found {
        let tag = tag(hash);
        let mut at = None;
        for group in self.probe(hash) {
            prefetch_group(&self.slots, group);
            let ctrl = self.group_mine(group);
            if at.is_none() {
                for slot in ctrl.matches(tag) {
                    let i = group * GROUP + slot;
                    // SAFETY: full (or a false positive on a full byte): written.
                    if eq(&unsafe { self.entry(i) }.0) {
                        at = Some(i);
                        break;
                    }
                }
            }
            if let Some(slot) = ctrl.empties().lowest() {
                return Found {
                    at,
                    free: Some(group * GROUP + slot),
                };
            }
        }
        Found { at, free: None }
    }

    /// Write `entry` (whose hash is `hash`) into the free slot `found` gave, and, if `found`
    /// has the key's old slot, make that a tombstone: the new slot full first, or both in one
    /// store when they share a control word (claim 3). The old entry stays in its slot, owned
    /// by the table, for the readers that found it (see "Entries and their drops").
    ///
    /// # Safety
    ///
    /// Only the caller writes to the table, `found` came from
    /// [`probe_for_write`](Self::probe_for_write) since the last change, with a free slot.
    pub(crate) unsafe fn place(&self, found: &Found, hash: u64, entry: (K, V)) {
        let free = found.free.expect("a free slot");
        // SAFETY: `EMPTY`: nobody reads the slot, and only the caller writes.
        unsafe { self.write(free, entry) };
        let Some(at) = found.at else {
            self.set_byte(free, tag(hash));
            return;
        };
        let w = word_of(free);
        if word_of(at) == w {
            let word = with_byte(self.ctrl_mine(w), free % WORD, tag(hash));
            self.set_ctrl(w, with_byte(word, at % WORD, TOMBSTONE));
        } else {
            // Two stores: recorded first, so that a replacement whose writer vanished between
            // them (in a forked child) can be finished (`finish_replace`). The release store
            // of the new slot's word carries the record; the record is cleared after the
            // tombstone's, with release too.
            self.replacing[0].store(at + 1, Relaxed);
            self.replacing[1].store(free, Relaxed);
            self.set_byte(free, tag(hash));
            self.set_byte(at, TOMBSTONE);
            self.replacing[0].store(0, Release);
        }
    }

    /// Finish a replacement across two control words that its writer left between its two
    /// stores (the writer only: a forked child that took the writer lock over from a thread
    /// it does not have). If the new slot is full, the new entry was published and the old
    /// slot becomes a tombstone, as the writer would have made it; if not, the old entry
    /// stays. Either way the key has one entry again.
    pub(crate) fn finish_replace(&self) {
        let at = self.replacing[0].load(Acquire);
        if at == 0 {
            return;
        }
        let (at, free) = (at - 1, self.replacing[1].load(Relaxed));
        let full = |i: usize| fulls(self.ctrl_mine(word_of(i))).contains(i % WORD);
        if full(free) && full(at) {
            self.bury(at);
        }
        self.replacing[0].store(0, Relaxed);
    }

    /// How many slots are full, and how many are not `EMPTY` (full or tombstones): the
    /// writer's counts, taken from the control words (by a writer that cannot trust the ones
    /// it kept: a forked child that took the writer lock over).
    pub(crate) fn count_slots(&self) -> (usize, usize) {
        let (mut full, mut used) = (0, 0);
        for w in 0..self.words() {
            let word = self.ctrl_mine(w);
            full += fulls(word).count();
            used += word.to_ne_bytes().iter().filter(|&&b| b != EMPTY).count();
        }
        (full, used)
    }

    /// Make the full slot `i` a tombstone (the writer only).
    pub(crate) fn bury(&self, i: usize) {
        self.set_byte(i, TOMBSTONE);
    }

    /// Clone every full slot's entry but slot `except`'s into `new` (empty, not yet seen by
    /// anyone), placing each by `hash_of` its key; returns how many. A panic in `hash_of` or in
    /// the entries' `Clone` leaves `self` as it was, and `new` owns the clones it holds (its
    /// drop drops them).
    pub(crate) fn copy_live_into(
        &self,
        new: &Table<K, V>,
        mut hash_of: impl FnMut(&K) -> u64,
        except: Option<usize>,
    ) -> usize
    where
        K: Clone,
        V: Clone,
    {
        let mut copied = 0;
        for w in 0..self.words() {
            for b in fulls(self.ctrl_mine(w)).filter(|&b| Some(w * WORD + b) != except) {
                // SAFETY: full: written.
                let (key, value) = unsafe { self.entry(w * WORD + b) };
                let hash = hash_of(key);
                let entry = (key.clone(), value.clone());
                let free = new
                    .probe(hash)
                    .find_map(|g| new.group_mine(g).empties().lowest().map(|s| g * GROUP + s))
                    .expect("a new table has room for every live entry");
                // SAFETY: `new` is the caller's alone.
                unsafe { new.write(free, entry) };
                new.set_byte(free, tag(hash));
                copied += 1;
            }
        }
        copied
    }

    /// The torture's self-test knob (`RcuFlatMap::__busted_drop_entries_at_once`): drop the
    /// entries now, before the table is freed, and mark them dropped.
    ///
    /// # Safety
    ///
    /// Unsound by design for readers that still hold entries of this table (the knob's
    /// contract); no writer may use the table any more, and this is called once.
    pub(crate) unsafe fn busted_drop_entries_now(&self) {
        if std::mem::needs_drop::<(K, V)>() && !self.entries_dropped.swap(true, Relaxed) {
            // SAFETY: forwarded: no writer uses the table, and its entries are dropped once
            // (the flag); the readers are the knob's affair.
            unsafe { self.drop_entries() };
        }
    }

    /// Drop every entry the table owns: each slot that is not `EMPTY` (full, or a tombstone
    /// whose entry was removed or replaced in this table). Each key and each value is dropped
    /// apart, each contained: a panic in one drop still drops the rest, and the first panic
    /// goes on once all are dropped (unless another panic is unwinding: see
    /// `report::resume_unless_unwinding`).
    ///
    /// # Safety
    ///
    /// Nobody uses the table's entries from this call on, and they were not dropped before.
    unsafe fn drop_entries(&self) {
        let mut first_panic = None;
        for w in 0..self.words() {
            let word = self.ctrl_mine(w);
            for (b, &byte) in word.to_ne_bytes().iter().enumerate() {
                if byte == EMPTY {
                    continue;
                }
                let cell = &self.slots[w * WORD + b];
                // SAFETY: a byte that is not `EMPTY` was stored after its slot was written;
                // by the caller's contract nobody uses the entries any more, and each slot is
                // dropped once, here.
                let entry = cell.with_mut(|p| unsafe { (*p).as_mut_ptr() });
                for dropped in [
                    // SAFETY: as above; the key and the value are dropped apart, once each.
                    catch_unwind(AssertUnwindSafe(|| unsafe {
                        ptr::drop_in_place(ptr::addr_of_mut!((*entry).0))
                    })),
                    // SAFETY: as above.
                    catch_unwind(AssertUnwindSafe(|| unsafe {
                        ptr::drop_in_place(ptr::addr_of_mut!((*entry).1))
                    })),
                ] {
                    if let Err(payload) = dropped {
                        match first_panic {
                            None => first_panic = Some(payload),
                            Some(_) => report::drop_payload(payload),
                        }
                    }
                }
            }
        }
        // A drop while unwinding (a rebuild's new table, dropped because a `Clone` panicked;
        // a map dropped with the frame that panicked) must not panic again, which would
        // abort: the first panic is already on its way.
        if let Some(payload) = first_panic {
            report::resume_unless_unwinding(payload);
        }
    }
}

/// Where a writer's probe ended: see [`Table::probe_for_write`].
pub(crate) struct Found {
    /// The key's slot, if the key is there.
    pub(crate) at: Option<usize>,
    /// The first `EMPTY` slot of the probe.
    pub(crate) free: Option<usize>,
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests;
