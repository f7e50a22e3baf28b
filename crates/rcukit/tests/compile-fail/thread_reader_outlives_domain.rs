// A thread reader borrows its domain: the domain cannot be dropped while the handle lives.
use rcukit::Rcu;

fn main() {
    let domain = Rcu::new();
    let reader = domain.thread_reader();
    drop(domain);
    drop(reader.read());
}
