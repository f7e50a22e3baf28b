// The value `RcuHashMap::insert` replaced (retired, freed after the guard) cannot outlive the
// guard it was returned for.
use rcukit::{Rcu, RcuHashMap};

fn main() {
    let map: RcuHashMap<u32, String> = RcuHashMap::new();
    map.pin().insert(1, String::from("v1"));
    let guard = Rcu::global().read();
    let old = map.insert(1, String::from("v2"), &guard).unwrap();
    drop(guard);
    println!("{old}");
}
