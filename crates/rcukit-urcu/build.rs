//! Build script: gives the shared library the SONAME it is installed under
//! (`liburcu-rcukit.so.8`: major version 8, liburcu's own, since it keeps liburcu 0.13-0.15's
//! function ABI).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liburcu-rcukit.so.8");
    }
}
