// A cell that borrows a domain cannot outlive it (it would retire into a dead domain).
use rcukit::{Rcu, RcuCell};

fn main() {
    let cell = {
        let rcu = Rcu::new();
        RcuCell::with_domain(1, &rcu)
    };
    cell.store(2);
}
