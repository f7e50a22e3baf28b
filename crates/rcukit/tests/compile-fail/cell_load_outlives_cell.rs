// A reference from `RcuCell::load` cannot outlive the cell (dropping it frees the value).
use rcukit::{Rcu, RcuCell};

fn main() {
    let guard = Rcu::global().read();
    let cell = RcuCell::new(String::from("v1"));
    let value = cell.load(&guard);
    drop(cell);
    println!("{value}");
}
