//! Build script: gives the shared library the SONAME it is installed under (`librcukit.so.0`),
//! so that programs linked against it record that name, as with any C library.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librcukit.so.0");
    }
}
