// A thread reader names its thread's own reader record: it cannot move to another thread.
use rcukit::Rcu;

fn main() {
    let reader = Rcu::global().thread_reader();
    std::thread::spawn(move || drop(reader.read()));
}
