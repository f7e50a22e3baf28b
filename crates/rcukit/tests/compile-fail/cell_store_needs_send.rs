// `store` retires the old value to a callback worker thread: the value must be `Send`.
use rcukit::RcuCell;
use std::rc::Rc;

fn main() {
    let cell = RcuCell::new(Rc::new(1));
    cell.store(Rc::new(2));
}
