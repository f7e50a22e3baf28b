// A reference from `RcuCell::load` cannot outlive the guard it was read under.
use rcukit::RcuCell;

fn main() {
    let cell = RcuCell::new(String::from("v1"));
    let value = {
        let guard = cell.domain().read();
        cell.load(&guard)
    };
    cell.store(String::from("v2"));
    println!("{value}");
}
