// A map of `Rc`s cannot be shared between threads (readers would share the `Rc`).
use rcukit::RcuHashMap;
use std::rc::Rc;

fn main() {
    let map: RcuHashMap<u32, Rc<u32>> = RcuHashMap::new();
    std::thread::scope(|s| {
        s.spawn(|| drop(map.len()));
    });
}
