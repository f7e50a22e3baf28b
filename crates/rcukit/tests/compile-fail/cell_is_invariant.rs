// A cell is written through `&self`: a cell of `'static` references must not pass for a cell of
// shorter-lived ones, or a short-lived reference could be stored for `'static` readers.
use rcukit::RcuCell;

fn shorten<'a>(cell: &'a RcuCell<&'static str>) -> &'a RcuCell<&'a str> {
    cell
}

fn main() {
    let cell = RcuCell::new("static");
    let _ = shorten(&cell);
}
