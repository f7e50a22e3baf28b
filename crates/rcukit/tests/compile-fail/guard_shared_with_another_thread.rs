// A `&Guard` proves that the current thread is reading: it cannot go to another thread either.
use rcukit::{Rcu, RcuCell};

fn main() {
    let cell = RcuCell::new(1);
    let guard = Rcu::global().read();
    std::thread::scope(|s| {
        s.spawn(|| *cell.load(&guard));
    });
}
