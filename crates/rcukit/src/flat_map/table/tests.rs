//! Unit tests: how a table's arrays are mapped.

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
