// A guard is tied to the thread whose reader record it holds.
use rcukit::Rcu;

fn main() {
    let guard = Rcu::global().read();
    std::thread::spawn(move || drop(guard));
}
