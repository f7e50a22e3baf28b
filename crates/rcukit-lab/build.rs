//! Build script: records the rcukit version for the lab's environment facts and, with the
//! `c-peers` feature, compiles the C shims around liburcu (its RCU flavors and its rculfhash
//! hash table) and Concurrency Kit.

use std::fs;

fn main() {
    println!("cargo:rerun-if-changed=../rcukit/Cargo.toml");
    println!("cargo:rerun-if-changed=build.rs");
    let version = fs::read_to_string("../rcukit/Cargo.toml")
        .ok()
        .and_then(|text| package_version(&text))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=RCUKIT_VERSION={version}");

    #[cfg(feature = "c-peers")]
    c_peers::build();
}

/// The `version` of the `[package]` table of a Cargo.toml, without a TOML parser.
fn package_version(text: &str) -> Option<String> {
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if in_package {
            if let Some(rest) = line.strip_prefix("version") {
                let value = rest.trim_start().strip_prefix('=')?.trim();
                return Some(value.trim_matches('"').to_string());
            }
        }
    }
    None
}

#[cfg(feature = "c-peers")]
mod c_peers {
    use std::path::Path;

    const HEADERS: &[(&str, &str)] = &[
        ("urcu/urcu-memb.h", "liburcu-dev"),
        ("urcu/urcu-qsbr.h", "liburcu-dev"),
        ("urcu/rculfhash.h", "liburcu-dev"),
        ("ck_epoch.h", "libck-dev"),
    ];

    const INCLUDE_DIRS: &[&str] = &[
        "/usr/include",
        "/usr/include/x86_64-linux-gnu",
        "/usr/local/include",
    ];

    pub(crate) fn build() {
        for (header, package) in HEADERS {
            let found = INCLUDE_DIRS
                .iter()
                .any(|dir| Path::new(dir).join(header).exists());
            if !found {
                panic!(
                    "the c-peers feature needs <{header}> from Debian's {package}; install the C \
                     peers with `sudo scripts/install-c-peers.sh` (apt-get install liburcu-dev \
                     libck-dev) or build without --features c-peers"
                );
            }
        }
        for file in [
            "csrc/urcu_memb.c",
            "csrc/urcu_qsbr.c",
            "csrc/ck.c",
            "csrc/lfht.c",
            "csrc/lab_c_peers.h",
        ] {
            println!("cargo:rerun-if-changed={file}");
        }
        cc::Build::new()
            .file("csrc/urcu_memb.c")
            .file("csrc/urcu_qsbr.c")
            .file("csrc/ck.c")
            .file("csrc/lfht.c")
            .opt_level(2)
            .warnings(true)
            .compile("rcukit_lab_c_peers");
        for lib in [
            "urcu-cds",
            "urcu-memb",
            "urcu-qsbr",
            "urcu-common",
            "ck",
            "pthread",
        ] {
            println!("cargo:rustc-link-lib={lib}");
        }
    }
}
