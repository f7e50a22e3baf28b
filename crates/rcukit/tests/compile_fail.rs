//! What the borrow checker and the `Send`/`Sync` bounds must refuse, checked with trybuild.
//!
//! The expected compiler messages live next to each case (`compile-fail/*.stderr`). After a
//! toolchain update changes their wording, regenerate them with
//! `TRYBUILD=overwrite cargo test -p rcukit --test compile_fail` and review the diff.

#[test]
#[cfg_attr(miri, ignore = "trybuild runs the compiler")]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile-fail/*.rs");
}
