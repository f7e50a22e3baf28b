//! Unit tests: the group byte tests against a byte loop, a control byte set in place, and
//! how a table's arrays are mapped.

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

#[test]
fn a_table_about_to_be_filled_is_populated_from_four_entries_a_page_of_slots() {
    type T = Table<u64, u64>;
    // 8192 groups of sixteen 16-byte slots: 512 pages of slots.
    let groups = 8192;
    let pages = groups * GROUP * 16 / 4096;
    assert_eq!(
        T::pages_to_fill(groups, usable(groups) / 2),
        Pages::Populated
    );
    assert_eq!(T::pages_to_fill(groups, 4 * pages), Pages::Populated);
    assert_eq!(T::pages_to_fill(groups, 4 * pages - 1), Pages::Default);
    // A rebuild at the same size that keeps a handful of live entries among tombstones.
    assert_eq!(T::pages_to_fill(groups, 3), Pages::Default);
    assert_eq!(T::pages_to_fill(groups, 0), Pages::Default);
    // Larger entries: more pages of slots for the same groups.
    assert_eq!(
        Table::<[u64; 8], u64>::pages_to_fill(groups, 4 * pages),
        Pages::Default
    );
}
