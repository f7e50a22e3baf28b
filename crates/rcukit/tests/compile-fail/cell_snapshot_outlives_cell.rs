// A snapshot borrows its cell, whose drop frees the current value at once: it cannot outlive
// the cell.
use rcukit::RcuCell;

fn main() {
    let snapshot = {
        let cell = RcuCell::new(String::from("v1"));
        cell.snapshot()
    };
    println!("{}", *snapshot);
}
