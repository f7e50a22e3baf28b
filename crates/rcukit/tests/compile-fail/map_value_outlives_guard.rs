// A value from `RcuHashMap::get` cannot outlive the guard that protects it.
use rcukit::{Rcu, RcuHashMap};

fn main() {
    let map: RcuHashMap<u32, String> = RcuHashMap::new();
    map.pin().insert(1, String::from("v1"));
    let guard = Rcu::global().read();
    let value = map.get(&1, &guard).unwrap();
    drop(guard);
    println!("{value}");
}
