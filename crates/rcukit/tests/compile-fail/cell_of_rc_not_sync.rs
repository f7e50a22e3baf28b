// Readers on many threads share `&T`, and old values are dropped on other threads: a cell of a
// type that is not `Send + Sync` cannot be shared.
use rcukit::RcuCell;
use std::rc::Rc;

fn main() {
    let cell = RcuCell::new(Rc::new(1));
    std::thread::scope(|s| {
        s.spawn(|| **cell.read() + 1);
    });
}
