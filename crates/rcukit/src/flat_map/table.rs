//! One table of an [`RcuFlatMap`](super::RcuFlatMap): control bytes in groups of eight, one
//! word per group, beside an array of inline entries; and the probe sequence over the groups.
//!
//! A control byte is [`EMPTY`] (zero, so that a table's arrays start as zero pages: see
//! [`PageArray`]), [`TOMBSTONE`] or, for a full slot, its tag: the high bit and the top seven
//! bits of the entry's hash. In one table a byte only ever goes `EMPTY` → full → `TOMBSTONE`,
//! and a slot is written once, before its byte becomes full: see the map's module docs for
//! why that makes lock-free lookups correct.

use crate::pages::{PageArray, Pages};
use crate::sync::{AtomicU64, AtomicUsize, UnsafeCell};
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Slots per group (one control word).
pub(crate) const GROUP: usize = 8;

/// The control byte of a slot never written in this table.
pub(crate) const EMPTY: u8 = 0;

/// The control byte of a slot whose entry was removed (its data stays as it was). Not 1: the
/// zero-byte trick of [`empties`] reports a byte of 1 just above a zero one.
pub(crate) const TOMBSTONE: u8 = 0x7F;

/// Eight bytes of `b`.
const fn repeat(b: u8) -> u64 {
    u64::from_ne_bytes([b; GROUP])
}

const HIGH: u64 = repeat(0x80);
const LOW: u64 = repeat(0x01);

/// The tag of a hash, a full slot's control byte: the high bit and the hash's top seven bits.
#[inline(always)]
pub(crate) fn tag(hash: u64) -> u8 {
    0x80 | (hash >> 57) as u8
}

/// A set of slots of one group, as the high bit of each slot's byte in a control word.
#[derive(Clone, Copy)]
pub(crate) struct Mask(u64);

impl Mask {
    #[inline(always)]
    pub(crate) fn any(self) -> bool {
        self.0 != 0
    }

    /// The lowest slot in the set.
    #[inline(always)]
    pub(crate) fn lowest(self) -> Option<usize> {
        self.any().then(|| self.slot_of(self.0.trailing_zeros()))
    }

    #[inline(always)]
    fn slot_of(self, bit: u32) -> usize {
        if cfg!(target_endian = "little") {
            (bit / 8) as usize
        } else {
            GROUP - 1 - (bit / 8) as usize
        }
    }
}

impl Iterator for Mask {
    type Item = usize;

    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        let slot = self.lowest()?;
        if cfg!(target_endian = "little") {
            self.0 &= self.0 - 1;
        } else {
            self.0 &= !(0x80u64 << ((GROUP - 1 - slot) * 8));
        }
        Some(slot)
    }
}

/// The slots of `word` whose byte may be `tag`: every such slot, and now and then a full slot
/// with another tag. The zero-byte trick on `word ^ tag` reports the bytes equal to `tag`, and
/// above the lowest of them, bytes equal to `tag ^ 1`: full ones (high bit set). `EMPTY` and
/// `TOMBSTONE` differ from a tag in the high bit, which the trick never reports.
#[inline(always)]
pub(crate) fn matches(word: u64, tag: u8) -> Mask {
    let x = word ^ repeat(tag);
    Mask(x.wrapping_sub(LOW) & !x & HIGH)
}

/// The `EMPTY` slots of `word`. Exact: the zero-byte trick's false positives are bytes of 1
/// above a zero one, and no control byte is 1 (`TOMBSTONE` is `0x7F`, tags are `0x80` and up).
#[inline(always)]
pub(crate) fn empties(word: u64) -> Mask {
    Mask(word.wrapping_sub(LOW) & !word & HIGH)
}

/// The full slots of `word` (exact: the bytes whose high bit is set).
#[inline(always)]
pub(crate) fn fulls(word: u64) -> Mask {
    Mask(word & HIGH)
}

/// `word` with the byte of `slot` set to `byte`.
#[inline(always)]
pub(crate) fn with_byte(word: u64, slot: usize, byte: u8) -> u64 {
    let mut bytes = word.to_ne_bytes();
    bytes[slot] = byte;
    u64::from_ne_bytes(bytes)
}

/// The groups a hash visits, in order: triangular steps from its home group, which visit
/// every group of a power-of-two table once in its first `groups` steps.
pub(crate) struct Probe {
    group: usize,
    step: usize,
    mask: usize,
}

impl Iterator for Probe {
    type Item = usize;

    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        if self.step > self.mask {
            return None;
        }
        let group = self.group;
        self.step += 1;
        self.group = (self.group + self.step) & self.mask;
        Some(group)
    }
}

/// One slot: an entry, written once (or never).
type Slot<K, V> = UnsafeCell<MaybeUninit<(K, V)>>;

/// A table: `groups` (a power of two) control words and `groups * GROUP` slots, each array a
/// [`PageArray`] (a mapping of its own when large, given back to the system when freed; not
/// advised to use huge pages, which made filling a large table much slower).
pub(crate) struct Table<K, V> {
    ctrl: PageArray<AtomicU64>,
    slots: PageArray<Slot<K, V>>,
    /// Iterations walking this table (counted up under the map's writer lock): while there
    /// are any, no entry moves to another group of this table (see the map's "Iteration").
    pub(crate) iterators: AtomicUsize,
}

impl<K, V> Table<K, V> {
    /// An empty table of `groups` groups (a power of two, at least 1).
    pub(crate) fn new(groups: usize) -> Table<K, V> {
        debug_assert!(groups.is_power_of_two());
        // SAFETY: all-zero bits are an all-`EMPTY` control word, and a valid unwritten slot
        // (`MaybeUninit` takes any bits).
        unsafe {
            Table {
                ctrl: PageArray::zeroed(groups, Pages::Default, || AtomicU64::new(repeat(EMPTY))),
                slots: PageArray::zeroed(groups * GROUP, Pages::Default, || {
                    UnsafeCell::new(MaybeUninit::uninit())
                }),
                iterators: AtomicUsize::new(0),
            }
        }
    }

    pub(crate) fn groups(&self) -> usize {
        self.ctrl.len()
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
        let mask = self.ctrl.len() - 1;
        Probe {
            group: hash as usize & mask,
            step: 0,
            mask,
        }
    }

    /// The control word of `group`, for a reader: what it shows full was written before.
    #[inline(always)]
    pub(crate) fn ctrl(&self, group: usize) -> u64 {
        self.ctrl[group].load(Acquire)
    }

    /// The control word of `group`, for the writer (the only thread that stores to it).
    #[inline(always)]
    pub(crate) fn ctrl_mine(&self, group: usize) -> u64 {
        self.ctrl[group].load(Relaxed)
    }

    /// Store a group's control word (the writer only); publishes every slot written before.
    #[inline(always)]
    pub(crate) fn set_ctrl(&self, group: usize, word: u64) {
        self.ctrl[group].store(word, Release);
    }

    /// The entry of a slot.
    ///
    /// # Safety
    ///
    /// The slot's byte was seen full (with [`ctrl`](Self::ctrl), or by the writer), and the
    /// reference does not outlive the table.
    #[inline(always)]
    pub(crate) unsafe fn entry(&self, group: usize, slot: usize) -> &(K, V) {
        let cell = &self.slots[group * GROUP + slot];
        // SAFETY: forwarded: a slot whose byte was full was written before that byte was
        // stored (with release; seen with acquire), and is never written again.
        cell.with(|p| unsafe { (*p).assume_init_ref() })
    }

    /// Write a slot's entry (the writer only, before the slot's byte becomes full).
    ///
    /// # Safety
    ///
    /// The slot's byte is `EMPTY`: nobody reads it, nobody else writes it.
    #[inline(always)]
    pub(crate) unsafe fn write(&self, group: usize, slot: usize, entry: (K, V)) {
        let cell = &self.slots[group * GROUP + slot];
        // SAFETY: forwarded: an `EMPTY` slot is read by no one.
        cell.with_mut(|p| unsafe { (*p).write(entry) });
    }

    /// A reader's lookup: the entry whose key `eq` accepts among the slots tagged like
    /// `hash`, stopping at the first group with an `EMPTY` slot (claims 1 and 2).
    #[inline(always)]
    pub(crate) fn find(&self, hash: u64, mut eq: impl FnMut(&K) -> bool) -> Option<&(K, V)> {
        let tag = tag(hash);
        for group in self.probe(hash) {
            let word = self.ctrl(group);
            for slot in matches(word, tag) {
                // SAFETY: the byte was seen full with acquire (claim 1); the caller's borrow
                // of the table is what keeps it alive.
                let entry = unsafe { self.entry(group, slot) };
                if eq(&entry.0) {
                    return Some(entry);
                }
            }
            if empties(word).any() {
                return None;
            }
        }
        None
    }

    /// The writer's probe: the slot of the key `eq` accepts, and the first `EMPTY` slot of the
    /// probe (in the key's group or a later one: the groups before the key's had none when it
    /// was written, and never have one again).
    pub(crate) fn probe_for_write(&self, hash: u64, mut eq: impl FnMut(&K) -> bool) -> Found {
        let tag = tag(hash);
        let mut at = None;
        for group in self.probe(hash) {
            let word = self.ctrl_mine(group);
            if at.is_none() {
                for slot in matches(word, tag) {
                    // SAFETY: full (or a false positive on a full byte): written.
                    if eq(&unsafe { self.entry(group, slot) }.0) {
                        at = Some((group, slot));
                        break;
                    }
                }
            }
            if let Some(slot) = empties(word).lowest() {
                return Found {
                    at,
                    free: Some((group, slot)),
                };
            }
        }
        Found { at, free: None }
    }

    /// Write `entry` (whose hash is `hash`) into the free slot `found` gave, and, if `found`
    /// has the key's old slot, make that a tombstone: the new slot full first, or both in one
    /// store when they share a group (claim 3). Returns the old entry.
    ///
    /// # Safety
    ///
    /// Only the caller writes to the table, `found` came from
    /// [`probe_for_write`](Self::probe_for_write) since the last change, with a free slot.
    pub(crate) unsafe fn place(&self, found: &Found, hash: u64, entry: (K, V)) -> Option<(K, V)>
    where
        K: Copy,
        V: Copy,
    {
        let (fg, fs) = found.free.expect("a free slot");
        // SAFETY: `EMPTY`: nobody reads the slot, and only the caller writes.
        unsafe { self.write(fg, fs, entry) };
        let word = with_byte(self.ctrl_mine(fg), fs, tag(hash));
        let Some((g, s)) = found.at else {
            self.set_ctrl(fg, word);
            return None;
        };
        // SAFETY: the key's slot is full.
        let old = *unsafe { self.entry(g, s) };
        if g == fg {
            self.set_ctrl(fg, with_byte(word, s, TOMBSTONE));
        } else {
            self.set_ctrl(fg, word);
            self.set_ctrl(g, with_byte(self.ctrl_mine(g), s, TOMBSTONE));
        }
        Some(old)
    }

    /// Make the full slot `(group, slot)` a tombstone (the writer only).
    pub(crate) fn bury(&self, group: usize, slot: usize) {
        self.set_ctrl(group, with_byte(self.ctrl_mine(group), slot, TOMBSTONE));
    }

    /// Copy every full slot into `new` (empty, not yet seen by anyone), placing each entry by
    /// `hash_of` its key; returns how many. A panic in `hash_of` leaves `self` as it was.
    pub(crate) fn copy_live_into(
        &self,
        new: &Table<K, V>,
        mut hash_of: impl FnMut(&K) -> u64,
    ) -> usize
    where
        K: Copy,
        V: Copy,
    {
        let mut copied = 0;
        for g in 0..self.groups() {
            for s in fulls(self.ctrl_mine(g)) {
                // SAFETY: full: written.
                let entry = *unsafe { self.entry(g, s) };
                let hash = hash_of(&entry.0);
                let (fg, fs) = new
                    .probe(hash)
                    .find_map(|g| empties(new.ctrl_mine(g)).lowest().map(|s| (g, s)))
                    .expect("a new table has room for every live entry");
                // SAFETY: `new` is the caller's alone.
                unsafe { new.write(fg, fs, entry) };
                new.set_ctrl(fg, with_byte(new.ctrl_mine(fg), fs, tag(hash)));
                copied += 1;
            }
        }
        copied
    }
}

/// Where a writer's probe ended: see [`Table::probe_for_write`].
pub(crate) struct Found {
    /// The key's slot (group, slot), if the key is there.
    pub(crate) at: Option<(usize, usize)>,
    /// The first `EMPTY` slot of the probe.
    pub(crate) free: Option<(usize, usize)>,
}
