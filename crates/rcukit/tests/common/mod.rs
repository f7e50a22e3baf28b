//! The domain configurations that container tests run against (as papaya's test suite runs
//! each test against every map configuration): the global domain with its defaults, and user
//! domains across fence kind × `retire_on_producers` × `expedited_callbacks`.
//!
//! A test body takes `&Rcu`; containers accept a borrowed domain (`with_domain(rcu)`), and
//! threads that use it are scoped (`std::thread::scope`). A failure names the configuration.
#![allow(dead_code)] // each test binary uses its own part of this module

pub(crate) mod flat;
#[cfg(unix)]
pub(crate) mod fork;
pub(crate) mod support;

use rcukit::{FenceKind, Rcu};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// One domain configuration.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    /// `None`: the global domain, as built by default.
    pub(crate) fence: Option<FenceKind>,
    pub(crate) retire_on_producers: bool,
    pub(crate) expedited_callbacks: bool,
}

impl Config {
    /// The global domain's configuration.
    pub(crate) const GLOBAL: Config = Config {
        fence: None,
        retire_on_producers: true,
        expedited_callbacks: true,
    };

    /// Every configuration: the global domain first, then the eight user domains.
    pub(crate) fn all() -> Vec<Config> {
        let mut all = vec![Config::GLOBAL];
        for fence in [FenceKind::Membarrier, FenceKind::SeqCst] {
            for retire_on_producers in [true, false] {
                for expedited_callbacks in [true, false] {
                    all.push(Config {
                        fence: Some(fence),
                        retire_on_producers,
                        expedited_callbacks,
                    });
                }
            }
        }
        all
    }

    /// A short name for failure messages.
    pub(crate) fn name(&self) -> String {
        match self.fence {
            None => "global".into(),
            Some(fence) => format!(
                "{fence}, retire_on_producers({}), expedited_callbacks({})",
                self.retire_on_producers, self.expedited_callbacks
            ),
        }
    }

    /// Run `test` with a domain of this configuration (the global one, or a fresh user domain
    /// dropped afterwards, which also checks that dropping it runs what is pending).
    pub(crate) fn run(&self, test: impl FnOnce(&Rcu)) {
        match self.fence {
            None => test(Rcu::global()),
            Some(fence) => {
                let rcu = Rcu::builder()
                    .name(format!("test-{fence}"))
                    .fence(fence)
                    .retire_on_producers(self.retire_on_producers)
                    .expedited_callbacks(self.expedited_callbacks)
                    .build()
                    .expect("a test domain builds");
                test(&rcu);
                drop(rcu);
            }
        }
    }
}

/// Run `test` once per configuration ([`Config::all`]; under Miri, the global domain and one
/// `SeqCst` user domain only: Miri has no membarrier), naming the configuration if it fails.
pub(crate) fn each_config(test: impl Fn(&Rcu)) {
    let configs = if cfg!(miri) {
        let seqcst = Config::all()
            .into_iter()
            .find(|config| config.fence == Some(FenceKind::SeqCst))
            .expect("a SeqCst configuration");
        vec![Config::GLOBAL, seqcst]
    } else {
        Config::all()
    };
    for config in configs {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| config.run(&test))) {
            eprintln!("failed with the domain configuration: {}", config.name());
            resume_unwind(payload);
        }
    }
}
