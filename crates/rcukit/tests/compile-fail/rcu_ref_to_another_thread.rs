// `RcuCell::read` returns a value with its guard inside: it cannot leave the thread.
use rcukit::RcuCell;

fn main() {
    let cell = RcuCell::new(5);
    let value = cell.read();
    std::thread::scope(|s| {
        s.spawn(move || *value + 1);
    });
}
