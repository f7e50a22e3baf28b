// A value from `RcuHashMap::get` cannot outlive the map (dropping it frees the entries).
use rcukit::{Rcu, RcuHashMap};

fn main() {
    let guard = Rcu::global().read();
    let map: RcuHashMap<u32, String> = RcuHashMap::new();
    let value = map.get(&1, &guard);
    drop(map);
    println!("{value:?}");
}
