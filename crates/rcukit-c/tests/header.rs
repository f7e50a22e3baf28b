//! The checked-in C header is exactly what cbindgen generates from the crate today.
//!
//! `include/rcukit/rcukit.h` is what C programs include; it is checked in so that a C user
//! needs no Rust tool to read it, and this test keeps it honest. After changing the exported
//! API, regenerate it with `RCUKIT_BLESS=1 cargo test -p rcukit-c --test header`.

use std::path::Path;

#[test]
fn the_checked_in_header_matches_the_crate() {
    let crate_dir = env!("CARGO_MANIFEST_DIR");
    let bindings = cbindgen::generate(crate_dir).expect("cbindgen reads the crate");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    let path = Path::new(crate_dir).join("include/rcukit/rcukit.h");
    if std::env::var_os("RCUKIT_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write the header");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        let first = checked_in
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| checked_in.lines().count().min(generated.lines().count()));
        panic!(
            "{} is out of date (first difference at line {}); regenerate it with \
             `RCUKIT_BLESS=1 cargo test -p rcukit-c --test header` and commit it",
            path.display(),
            first + 1
        );
    }
}
