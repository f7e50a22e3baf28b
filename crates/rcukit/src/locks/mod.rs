#![doc = include_str!("README.md")]

pub(crate) mod percpu_rwlock;
pub(crate) mod recseq;

#[cfg(all(test, rcukit_loom))]
mod loom;
