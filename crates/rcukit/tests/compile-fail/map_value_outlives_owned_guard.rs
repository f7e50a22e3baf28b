// A value from `RcuHashMap::get` cannot outlive the owned guard that protects it, even when the
// guard is moved away (to another thread or task) while the value is borrowed.
use rcukit::{Rcu, RcuHashMap};

fn main() {
    let map: RcuHashMap<u32, String> = RcuHashMap::new();
    map.pin().insert(1, String::from("v1"));
    let guard = Rcu::global().read_owned();
    let value = map.get(&1, &guard).unwrap();
    std::thread::spawn(move || drop(guard));
    println!("{value}");
}
