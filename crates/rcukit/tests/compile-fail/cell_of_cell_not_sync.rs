// `T: Send` is not enough to share a cell: readers on many threads would share `&Cell<_>`.
use rcukit::RcuCell;
use std::cell::Cell;

fn assert_sync<T: Sync>(_: &T) {}

fn main() {
    let cell = RcuCell::new(Cell::new(1));
    assert_sync(&cell);
}
