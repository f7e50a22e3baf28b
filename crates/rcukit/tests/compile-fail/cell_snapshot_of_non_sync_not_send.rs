// A snapshot shares `&T`: of a value that is not `Sync` it cannot go to another thread.
use rcukit::RcuCell;
use std::cell::Cell;

fn main() {
    let cell = RcuCell::new(Cell::new(1));
    let snapshot = cell.snapshot();
    std::thread::scope(|s| {
        s.spawn(move || snapshot.get());
    });
}
