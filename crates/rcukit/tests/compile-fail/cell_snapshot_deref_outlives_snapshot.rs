// A reference from a snapshot cannot outlive the snapshot, whose guard keeps the value alive.
use rcukit::RcuCell;

fn main() {
    let cell = RcuCell::new(String::from("v1"));
    let value: &String = {
        let snapshot = cell.snapshot();
        &snapshot
    };
    cell.store(String::from("v2"));
    println!("{value}");
}
