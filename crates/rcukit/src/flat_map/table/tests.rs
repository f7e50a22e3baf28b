//! Unit tests: how a table's arrays are mapped, and a replacement left between its two
//! control-word stores finished.

use super::*;

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

/// A replacement across two control words whose writer stopped between its stores (as a
/// forked child finds one made by a thread it does not have), set up by hand: finished when
/// the new slot was published, left alone when it was not, and a no-op once finished.
#[test]
fn a_replacement_left_between_its_two_stores_is_finished_only_if_published() {
    let byte = |t: &Table<u64, u64>, i: usize| t.ctrl_mine(word_of(i)).to_ne_bytes()[i % WORD];
    let hash = 0x8000_0000_0000_0000;
    for published in [true, false] {
        let table = Table::<u64, u64>::new(1);
        // The key's old entry in slot 1 (word 0); its new one in slot 9 (word 1).
        let (at, free) = (1, 9);
        // SAFETY: both slots are `EMPTY`, and this test is the only writer.
        unsafe {
            table.write(at, (7, 70));
            table.write(free, (7, 71));
        }
        table.set_byte(at, tag(hash));
        // What `place` records before its two stores, then its first store (or not).
        table.replacing[0].store(at + 1, Relaxed);
        table.replacing[1].store(free, Relaxed);
        if published {
            table.set_byte(free, tag(hash));
        }
        table.finish_replace();
        let (old, new) = if published {
            (TOMBSTONE, tag(hash))
        } else {
            (tag(hash), EMPTY)
        };
        assert_eq!((byte(&table, at), byte(&table, free)), (old, new));
        assert_eq!(table.count_slots(), (1, if published { 2 } else { 1 }));
        // Finished once: a second call changes nothing.
        table.finish_replace();
        assert_eq!((byte(&table, at), byte(&table, free)), (old, new));
    }
}

/// A replacement that `place` completes leaves no record behind to finish.
#[test]
fn a_completed_replacement_leaves_nothing_to_finish() {
    let table = Table::<u64, u64>::new(1);
    let hash = 0x8000_0000_0000_0000;
    // SAFETY: the slot is `EMPTY`, and this test is the only writer.
    unsafe { table.write(1, (7, 70)) };
    table.set_byte(1, tag(hash));
    let found = Found {
        at: Some(1),
        free: Some(9),
    };
    // SAFETY: the only writer; `found` describes the table as it is.
    unsafe { table.place(&found, hash, (7, 71)) };
    // The old entry stays in its slot (now a tombstone) for readers that found it.
    // SAFETY: written above, and never written again.
    assert_eq!(unsafe { table.entry(1) }, &(7, 70));
    assert_eq!(table.replacing[0].load(Relaxed), 0);
    table.finish_replace();
    assert_eq!(table.count_slots(), (1, 2));
}
