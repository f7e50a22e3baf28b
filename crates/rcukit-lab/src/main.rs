//! `rcukit-lab`: see the library crate's documentation and `crates/rcukit-lab/README.md`.

use std::process::ExitCode;

fn main() -> ExitCode {
    match rcukit_lab::cli::main() {
        Ok(code) => code,
        Err(error) => {
            rcukit_lab::cli::warn_line(&format!("rcukit-lab: error: {error:#}"));
            ExitCode::FAILURE
        }
    }
}
