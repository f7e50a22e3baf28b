// A reference from `RcuCell::load` cannot outlive the owned guard it was read under either.
use rcukit::{Rcu, RcuCell};

fn main() {
    let cell = RcuCell::new(String::from("v1"));
    let value = {
        let guard = Rcu::global().read_owned();
        cell.load(&guard)
    };
    cell.store(String::from("v2"));
    println!("{value}");
}
