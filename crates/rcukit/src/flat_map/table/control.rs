//! A table's control bytes: what a byte says, the tag of a hash, and the tests on a group's
//! sixteen bytes at once (with SSE2 on x86-64, with a bit trick on each word elsewhere); and
//! the byte updates of a word, done in registers.

/// Slots per control word.
pub(crate) const WORD: usize = 8;

/// Control words per group.
pub(super) const WORDS: usize = 2;

/// Slots per group (the unit of a probe).
pub(crate) const GROUP: usize = WORD * WORDS;

/// The control byte of a slot never written in this table.
pub(crate) const EMPTY: u8 = 0;

/// The control byte of a slot whose entry was removed (its data stays as it was). Not 1: the
/// zero-byte trick of [`empties`] reports a byte of 1 just above a zero one.
pub(crate) const TOMBSTONE: u8 = 0x7F;

/// Eight bytes of `b`.
pub(super) const fn repeat(b: u8) -> u64 {
    u64::from_ne_bytes([b; WORD])
}

/// The tag of a hash, a full slot's control byte: the high bit and the hash's top seven bits.
#[inline(always)]
pub(crate) fn tag(hash: u64) -> u8 {
    0x80 | (hash >> 57) as u8
}

/// The control word holding slot `i`'s byte.
#[inline(always)]
pub(crate) fn word_of(slot: usize) -> usize {
    slot / WORD
}

/// A set of slots of one group (bit `j` for its slot `j`) or of one word (bit `j` for its
/// byte `j`).
#[derive(Clone, Copy)]
pub(crate) struct Mask(u32);

impl Mask {
    #[inline(always)]
    pub(crate) fn any(self) -> bool {
        self.0 != 0
    }

    /// Is slot `slot` in the set?
    #[inline(always)]
    pub(crate) fn contains(self, slot: usize) -> bool {
        self.0 & (1 << slot) != 0
    }

    /// The lowest slot in the set.
    #[inline(always)]
    pub(crate) fn lowest(self) -> Option<usize> {
        self.any().then(|| self.0.trailing_zeros() as usize)
    }
}

impl Iterator for Mask {
    type Item = usize;

    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        let slot = self.lowest()?;
        self.0 &= self.0 - 1;
        Some(slot)
    }
}

/// The control words of one group, as a reader or the writer loaded them.
#[derive(Clone, Copy)]
pub(crate) struct Group(pub(super) [u64; WORDS]);

/// The byte tests on a group, with SSE2 (part of every x86-64 CPU): exact.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use super::{Group, Mask};
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set1_epi64x, _mm_set_epi64x,
        _mm_setzero_si128,
    };

    #[inline(always)]
    #[allow(unused_unsafe)] // the intrinsics are safe to call since Rust 1.87, unsafe before
    fn vector(group: Group) -> __m128i {
        // SAFETY: SSE2 is enabled on every x86-64 target; lane `j` is byte `j` of the words
        // in order (little-endian).
        unsafe { _mm_set_epi64x(group.0[1] as i64, group.0[0] as i64) }
    }

    #[inline(always)]
    #[allow(unused_unsafe)]
    fn equal(group: Group, byte: __m128i) -> Mask {
        // SAFETY: as in `vector`.
        Mask(unsafe { _mm_movemask_epi8(_mm_cmpeq_epi8(vector(group), byte)) } as u32)
    }

    /// The slots whose byte is `tag`.
    #[inline(always)]
    #[allow(unused_unsafe)]
    pub(crate) fn matches(group: Group, tag: u8) -> Mask {
        // Sixteen copies of `tag`: a multiply and a move (SSE2's byte broadcast takes four).
        let eight = u64::from(tag).wrapping_mul(0x0101_0101_0101_0101);
        // SAFETY: as in `vector`.
        equal(group, unsafe { _mm_set1_epi64x(eight as i64) })
    }

    /// The `EMPTY` slots.
    #[inline(always)]
    #[allow(unused_unsafe)]
    pub(crate) fn empties(group: Group) -> Mask {
        // SAFETY: as in `vector`.
        equal(group, unsafe { _mm_setzero_si128() })
    }
}

/// The byte tests on a group, with the zero-byte bit trick on each word: for every other
/// target (compiled and tested on x86-64 too).
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
mod swar {
    use super::{repeat, Group, Mask, WORD};

    const HIGH: u64 = repeat(0x80);
    const LOW: u64 = repeat(0x01);

    /// The bytes of `word` whose high bit `high` sets, as bits `0..8` in byte order (`high`
    /// is the word read as little-endian, each byte's other bits clear). A multiply gathers
    /// them: byte `j`'s bit, at `8j + 7`, lands at `56 + j` from the multiplier's bit
    /// `7 * (8 - j)`, and no two partial products share a bit, so nothing carries.
    #[inline(always)]
    fn gather(high: u64) -> u32 {
        ((high >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u32
    }

    /// Both words' bytes for which `test(word)` sets the high bit.
    #[inline(always)]
    fn each(group: Group, test: impl Fn(u64) -> u64) -> Mask {
        let lo = gather(test(group.0[0].to_le()));
        let hi = gather(test(group.0[1].to_le()));
        Mask(lo | hi << WORD)
    }

    /// The slots whose byte may be `tag`: every such slot, and now and then a full slot with
    /// another tag. The trick on `word ^ tag` reports the bytes equal to `tag`, and above the
    /// lowest of them, bytes equal to `tag ^ 1`: full ones (high bit set). `EMPTY` and
    /// `TOMBSTONE` differ from a tag in the high bit, which the trick never reports.
    #[inline(always)]
    pub(crate) fn matches(group: Group, tag: u8) -> Mask {
        each(group, |w| {
            let x = w ^ repeat(tag);
            x.wrapping_sub(LOW) & !x & HIGH
        })
    }

    /// The `EMPTY` slots. Exact: the trick's false positives are bytes of 1 above a zero one,
    /// and no control byte is 1 (`TOMBSTONE` is `0x7F`, tags are `0x80` and up).
    #[inline(always)]
    pub(crate) fn empties(group: Group) -> Mask {
        each(group, |w| w.wrapping_sub(LOW) & !w & HIGH)
    }
}

#[cfg(target_arch = "x86_64")]
use sse2 as bytes;
#[cfg(not(target_arch = "x86_64"))]
use swar as bytes;

impl Group {
    /// The slots whose byte is `tag` (with the bit trick, now and then another full slot too).
    #[inline(always)]
    pub(crate) fn matches(self, tag: u8) -> Mask {
        bytes::matches(self, tag)
    }

    /// The `EMPTY` slots.
    #[inline(always)]
    pub(crate) fn empties(self) -> Mask {
        bytes::empties(self)
    }
}

/// The full bytes of one control word (exact: those whose high bit is set), bit `j` for byte
/// `j`.
#[inline(always)]
pub(crate) fn fulls(word: u64) -> Mask {
    let bytes = word.to_ne_bytes();
    let mut mask = 0;
    for (j, b) in bytes.iter().enumerate() {
        mask |= u32::from(*b >> 7) << j;
    }
    Mask(mask)
}

/// `word` with byte `byte` (in memory order) set to `value`.
///
/// With shifts and masks, in registers. Written as a byte array, the compiler stored the word
/// to the stack, stored the byte into it and loaded the word back: a wide load of a narrow
/// store still in flight, which the store buffer cannot forward, so it waited for the byte to
/// reach the cache, and every write behind it waited too (a fifth of a removal's time in a
/// table of 100,000 entries).
#[inline(always)]
pub(crate) fn with_byte(word: u64, byte: usize, value: u8) -> u64 {
    debug_assert!(byte < WORD);
    let shift = if cfg!(target_endian = "little") {
        byte * 8
    } else {
        (WORD - 1 - byte) * 8
    };
    (word & !(0xFF << shift)) | (u64::from(value) << shift)
}

/// Unit tests: the group byte tests against a byte loop, and a control byte set in place.
#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;

    /// A group of random control bytes: `EMPTY`, `TOMBSTONE` or a tag from a small set (so
    /// that equal tags and tags one apart are common).
    fn random_group(seed: &mut u64) -> ([u8; GROUP], Group) {
        let mut bytes = [0; GROUP];
        for b in &mut bytes {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (*seed >> 59) as u8;
            *b = match r % 4 {
                0 => EMPTY,
                1 => TOMBSTONE,
                _ => 0x80 | (r % 4),
            };
        }
        let word = |w: usize| u64::from_ne_bytes(bytes[w * WORD..][..WORD].try_into().unwrap());
        (bytes, Group([word(0), word(1)]))
    }

    fn exact(bytes: &[u8], test: impl Fn(u8) -> bool) -> u32 {
        bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| test(**b))
            .fold(0, |m, (j, _)| m | 1 << j)
    }

    #[test]
    fn with_byte_sets_one_byte_in_memory_order() {
        let mut seed = 0x1234_5678_9abc_def0_u64;
        for _ in 0..1000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let word = seed;
            for byte in 0..WORD {
                for value in [0, 1, TOMBSTONE, 0x80, 0xFF, (seed >> 56) as u8] {
                    let mut bytes = word.to_ne_bytes();
                    bytes[byte] = value;
                    assert_eq!(with_byte(word, byte, value), u64::from_ne_bytes(bytes));
                }
            }
        }
    }

    #[test]
    fn byte_tests_agree_with_a_byte_loop() {
        let mut seed = 1;
        for _ in 0..20_000 {
            let (bytes, group) = random_group(&mut seed);
            for tag in [0x80, 0x81, 0x82, 0x83] {
                let want = exact(&bytes, |b| b == tag);
                let full = exact(&bytes, |b| b >= 0x80);
                let got = swar::matches(group, tag).0;
                assert_eq!(got & want, want, "swar missed a match: {bytes:x?} {tag:x}");
                assert_eq!(
                    got & !full,
                    0,
                    "swar matched a slot not full: {bytes:x?} {tag:x}"
                );
                #[cfg(target_arch = "x86_64")]
                assert_eq!(sse2::matches(group, tag).0, want, "{bytes:x?} {tag:x}");
            }
            let empty = exact(&bytes, |b| b == EMPTY);
            assert_eq!(swar::empties(group).0, empty, "{bytes:x?}");
            assert_eq!(group.empties().0, empty, "{bytes:x?}");
            for w in 0..WORDS {
                let full = exact(&bytes[w * WORD..][..WORD], |b| b >= 0x80);
                assert_eq!(fulls(group.0[w]).0, full, "{bytes:x?}");
            }
        }
    }
}
