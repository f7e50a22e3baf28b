// The value a `MapRef` removed is retired when the handle drops: it cannot outlive it.
use rcukit::RcuHashMap;

fn main() {
    let map: RcuHashMap<u32, String> = RcuHashMap::new();
    map.pin().insert(1, String::from("v1"));
    let pinned = map.pin();
    let old = pinned.remove(&1).unwrap();
    drop(pinned);
    println!("{old}");
}
