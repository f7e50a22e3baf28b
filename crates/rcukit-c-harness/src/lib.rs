//! Builds and runs C programs against rcukit's C libraries, for the test suites of
//! `rcukit-c` and `rcukit-urcu` and for the lab's C benchmarks.
//!
//! # Where the libraries come from
//!
//! A test or a lab binary runs from cargo's output directory (`target/debug/deps/...` or
//! `target/release/...`). Whenever cargo builds `rcukit-c` or `rcukit-urcu` (as a dependency
//! of the test or binary), it builds every crate type of the library, so the fresh
//! `librcukit_c.so`, `librcukit_c.a` and `liburcu_rcukit.so` are in the output directory's
//! `deps/` (cargo copies them up one level only for `cargo build`). [`staged`] installs
//! them with the project's own installer, `scripts/install-c.sh --from DIR/deps`, into a fresh
//! prefix under that directory, once per process: so every C program of the tests is compiled against
//! the installed header and linked against the installed libraries, under their SONAMEs,
//! exactly as a C user's would be, and the installer is tested along the way.
//!
//! # Compiling and running
//!
//! [`compile`] runs the system C compiler (`$CC`, else `cc`) and panics with the compiler's
//! output when it fails. [`run`] runs a program with a time limit (a hung program is killed
//! and reported as such, never left behind) and captures its output; [`Ran::assert_aborted`]
//! checks a misuse case's abort and message.
//!
//! # The test programs' helpers
//!
//! `include/check.h` in this crate ([`include_dir`]) holds what every C test program of both
//! libraries uses: `CHECK`, `CHECK_EQ` (print what failed and exit 1), `now_ns`, `sleep_ms` and
//! `spawn`. [`compile`] puts that directory on the include path, so a program says
//! `#include "check.h"`.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A prefix where rcukit's C libraries are installed.
#[derive(Debug)]
pub struct Staged {
    prefix: PathBuf,
}

impl Staged {
    /// The installation prefix.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// `PREFIX/include`, where `rcukit/rcukit.h` is.
    pub fn include_dir(&self) -> PathBuf {
        self.prefix.join("include")
    }

    /// `PREFIX/lib`: `librcukit.so` (SONAME `librcukit.so.0`) and `librcukit.a`.
    pub fn lib_dir(&self) -> PathBuf {
        self.prefix.join("lib")
    }

    /// `PREFIX/lib/rcukit-urcu`: liburcu's ABI under liburcu's file names.
    pub fn urcu_dir(&self) -> PathBuf {
        self.prefix.join("lib/rcukit-urcu")
    }

    /// Compiler arguments that link a program against the shared `librcukit` (found at run
    /// time through an rpath).
    pub fn rcukit_shared_args(&self) -> Vec<String> {
        let lib = self.lib_dir().display().to_string();
        vec![
            format!("-I{}", self.include_dir().display()),
            format!("-L{lib}"),
            format!("-Wl,-rpath,{lib}"),
            "-lrcukit".to_string(),
            "-lpthread".to_string(),
        ]
    }

    /// Compiler arguments that link a program statically against `librcukit.a` (with the
    /// system libraries the pkg-config file lists as private).
    pub fn rcukit_static_args(&self) -> Vec<String> {
        vec![
            format!("-I{}", self.include_dir().display()),
            self.lib_dir().join("librcukit.a").display().to_string(),
            "-lgcc_s".to_string(),
            "-lutil".to_string(),
            "-lrt".to_string(),
            "-lpthread".to_string(),
            "-lm".to_string(),
            "-ldl".to_string(),
        ]
    }
}

/// The cargo output directory the running executable was built into (`target/<profile>`; tests
/// run from its `deps/`, examples from its `examples/`).
pub fn output_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the path of the running executable");
    let dir = exe.parent().expect("the executable's directory");
    if dir
        .file_name()
        .is_some_and(|name| name == "deps" || name == "examples")
    {
        dir.parent().expect("deps/ has a parent").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// The repository's root (where `scripts/install-c.sh` is).
pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

/// A directory of this process's own under the output directory, for compiled programs and
/// the staged prefix (emptied on first use; named after the executable).
pub fn scratch_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("the path of the running executable");
        let name = exe
            .file_stem()
            .expect("the executable has a name")
            .to_string_lossy()
            .into_owned();
        let dir = output_dir().join("c-harness").join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the scratch directory");
        dir
    })
}

/// rcukit's C libraries from the output directory, installed into a prefix by
/// `scripts/install-c.sh --from`, once per process.
pub fn staged() -> &'static Staged {
    static STAGED: OnceLock<Staged> = OnceLock::new();
    STAGED.get_or_init(|| {
        let prefix = scratch_dir().join("prefix");
        let script = repository_root().join("scripts/install-c.sh");
        let output = Command::new("sh")
            .arg(&script)
            .arg("--from")
            .arg(output_dir().join("deps"))
            .arg("--prefix")
            .arg(&prefix)
            .output()
            .expect("run scripts/install-c.sh");
        assert!(
            output.status.success(),
            "scripts/install-c.sh failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Staged { prefix }
    })
}

/// This crate's `include/` directory, where the C test programs' `check.h` is.
pub fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

/// The C compiler: `$CC`, else `cc`.
pub fn cc() -> String {
    std::env::var("CC")
        .ok()
        .filter(|cc| !cc.is_empty())
        .unwrap_or_else(|| "cc".to_string())
}

/// Compile `sources` into the program `name` (in the scratch directory) with `args` after the
/// usual flags (`-O2 -g -Wall -Wextra -Werror -pthread`, and [`include_dir`] on the include
/// path); panics with the compiler's output if it fails. Returns the program's path.
pub fn compile(name: &str, sources: &[PathBuf], args: &[String]) -> PathBuf {
    let program = scratch_dir().join(name);
    let output = Command::new(cc())
        .args([
            "-std=gnu11",
            "-O2",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pthread",
        ])
        .arg(format!("-I{}", include_dir().display()))
        .args(sources)
        .arg("-o")
        .arg(&program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{}`: {e}", cc()));
    assert!(
        output.status.success(),
        "compiling {name} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    program
}

/// Can the C compiler find `header` (for example `urcu/urcu-memb.h`)?
pub fn has_header(header: &str) -> bool {
    let probe = scratch_dir().join(format!("probe-{}.c", header.replace(['/', '.'], "_")));
    std::fs::write(
        &probe,
        format!("#include <{header}>\nint main(void) {{ return 0; }}\n"),
    )
    .expect("write the probe");
    Command::new(cc())
        .args(["-E", "-o", "/dev/null"])
        .arg(&probe)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// What a program did.
#[derive(Debug)]
pub struct Ran {
    /// Its exit status (`None` if it was killed for running past its time limit).
    pub status: Option<ExitStatus>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Ran {
    /// Did it exit with status 0?
    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// The signal that ended it, if one did.
    pub fn signal(&self) -> Option<i32> {
        self.status.and_then(|s| s.signal())
    }

    /// Panic with its output unless it was killed by `SIGABRT` with every one of `messages` on
    /// standard error (a misuse case, named `what` in the panic).
    #[track_caller]
    pub fn assert_aborted(&self, what: &str, messages: &[&str]) {
        const SIGABRT: i32 = 6;
        assert_eq!(
            self.signal(),
            Some(SIGABRT),
            "{what}: expected an abort, got {:?}\n--- stdout\n{}--- stderr\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        for message in messages {
            assert!(
                self.stderr.contains(message),
                "{what}: standard error lacks {message:?}:\n{}",
                self.stderr
            );
        }
    }

    /// Panic with its output unless it exited with status 0.
    #[track_caller]
    pub fn assert_success(&self, what: &str) {
        assert!(
            self.succeeded(),
            "{what}: {}\n--- stdout\n{}--- stderr\n{}",
            match self.status {
                Some(status) => format!("exited with {status}"),
                None => "killed after its time limit".to_string(),
            },
            self.stdout,
            self.stderr
        );
    }
}

/// Run `program` with `args` and the extra environment `env`, for at most `limit` (then it is
/// killed and its status is `None`).
pub fn run(program: &Path, args: &[&str], env: &[(&str, String)], limit: Duration) -> Ran {
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait().expect("wait for the program") {
            Some(status) => break Some(status),
            None if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    Ran {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}
