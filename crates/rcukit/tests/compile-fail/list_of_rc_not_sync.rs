// A list of a type that is not `Send + Sync` cannot be shared with reader threads.
use rcukit::RcuList;
use std::rc::Rc;

fn main() {
    let list = RcuList::new();
    list.push_back(Rc::new(1));
    std::thread::scope(|s| {
        s.spawn(|| {
            let guard = list.domain().read();
            list.iter(&guard).count()
        });
    });
}
