// An element reference from `RcuList::iter` cannot outlive an owned guard.
use rcukit::RcuList;

fn main() {
    let list = RcuList::new();
    list.push_back(String::from("rule"));
    let first = {
        let guard = list.domain().read_owned();
        list.iter(&guard).next()
    };
    list.clear();
    println!("{first:?}");
}
