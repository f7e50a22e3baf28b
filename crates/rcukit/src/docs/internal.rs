//! How rcukit works inside: the essay of every internal module, layer by layer.
//!
//! rcukit's modules are private: what users need is at the crate root (with [`map`](crate::map)
//! and [`flat_map`](crate::flat_map) for the hash maps' guides, [`report`](crate::report) for stall and panic reports, and the
//! other pages of [`docs`](crate::docs)). Each module still opens with an essay on why its
//! algorithm is correct, and this page gathers them, in the order of the layers below: a reader
//! who goes top to bottom meets every module after the ones it builds on.
//!
//! # Where the essays live
//!
//! Each essay is a Markdown file beside its module's code (`src/seq.md` beside `src/seq.rs`,
//! `src/reader/README.md` beside `src/reader/mod.rs`, `src/callbacks/port.md` beside
//! `src/callbacks/port.rs`). The module includes it as its own documentation
//! (`#![doc = include_str!("seq.md")]`), and the pages below include the same file, so an essay
//! has one source, next to the code it argues about, changed in the same commit as that code,
//! and still renders here although its module is private. (The other ways were worse: modules
//! left `pub` only so that their essays render make every internal path part of the API;
//! essays moved into this module would sit far from the code whose steps they number, and
//! drift.) Links between essays therefore point at these pages.
//!
//! # The layers
//!
//! Lowest first. A module names only modules of lower layers: nothing below the domain names
//! `Rcu`, the domain's inner state or the domain's fork handlers, and `scripts/check-layers.sh`
//! fails the build on an upward import. Where a lower layer needs something of a higher one,
//! it defines a small port and the higher layer implements it: the callbacks see their domain
//! only through [`GpPort`](self::callbacks::port), and the fork handlers of
//! [`sync::fork`](self::sync::fork) run the steps the barrier and the domain register with
//! them.
//!
//! 1. **Foundations**: [`sync`](self::sync) (the one switch between `std` and loom, and the
//!    bottom half of fork support), [`threads`](self::threads) (rcukit's own threads), and the
//!    public [`report`](crate::report) and `Error`.
//! 2. **Primitives**: [`barrier`](self::barrier) (the light/heavy barrier pair),
//!    [`seq`](self::seq) (sequence numbers and cookies), [`per_thread`](self::per_thread) (a
//!    thread's state per domain, found in O(1)), [`pages`](self::pages) (large zeroed arrays in
//!    mappings of their own, kept a second for reuse by one of rcukit's threads).
//! 3. **The read side**: [`reader`](self::reader): reader records and the registry grace
//!    periods scan, with the counts of owned sections and the records of QSBR threads.
//! 4. **Grace periods**: [`gp`](self::gp): the scan both kinds share, the normal and
//!    expedited engines, the completion event.
//! 5. **Deferred work and the lock alternatives**: [`callbacks`](self::callbacks) (which see
//!    their domain only through their port) and [`locks`](self::locks) (`RecSeq` and
//!    `PerCpuRwLock`, built on reader records).
//! 6. **The domain**: [`domain`](self::domain): `Rcu`, the release rule, guards and owned
//!    guards, futures, the global domain, fork repair and shutdown.
//! 7. **What a domain offers its users**: [`section`](self::section) (the read sections
//!    containers accept) and [`qsbr`](self::qsbr) (a domain whose records quiescent states
//!    write).
//! 8. **What containers share**: [`domain_ref`](self::domain_ref) (how a container names its
//!    domain) and the words of the maps' `compute` ([`Operation`](crate::map::Operation) and
//!    [`Compute`](crate::map::Compute)), in a module of their own so that both maps use them.
//! 9. **Containers**: [`cell`](self::cell), [`list`](self::list) and the public
//!    [`map`](crate::map) and [`flat_map`](crate::flat_map).
//!
//! The crate root re-exports the public types of every layer. To follow one object through the
//! layers, read [how a retired object travels](self::callbacks#how-a-retired-object-travels).

pub mod sync {
    #![doc = include_str!("../sync/README.md")]

    pub mod fork {
        #![doc = include_str!("../sync/fork.md")]
    }

    pub mod fork_lock {
        #![doc = include_str!("../sync/fork_lock.md")]
    }
}

pub mod threads {
    #![doc = include_str!("../threads.md")]
}

pub mod pages {
    #![doc = include_str!("../pages.md")]
}

pub mod barrier {
    #![doc = include_str!("../barrier.md")]
}

pub mod seq {
    #![doc = include_str!("../seq.md")]
}

pub mod per_thread {
    #![doc = include_str!("../per_thread.md")]
}

pub mod reader {
    #![doc = include_str!("../reader/README.md")]

    pub mod local {
        #![doc = include_str!("../reader/local.md")]
    }

    pub mod owned {
        #![doc = include_str!("../reader/owned.md")]
    }

    pub mod qsbr {
        #![doc = include_str!("../reader/qsbr.md")]
    }

    pub mod wake {
        #![doc = include_str!("../reader/wake.md")]
    }
}

pub mod gp {
    #![doc = include_str!("../gp/README.md")]

    pub mod read_side {
        #![doc = include_str!("../gp/read_side.md")]
    }

    pub mod normal {
        #![doc = include_str!("../gp/normal.md")]
    }

    pub mod expedited {
        #![doc = include_str!("../gp/expedited.md")]
    }

    pub mod event {
        #![doc = include_str!("../gp/event.md")]
    }

    pub mod give_way {
        #![doc = include_str!("../gp/give_way.md")]
    }

    pub mod spin {
        #![doc = include_str!("../gp/spin.md")]
    }
}

pub mod callbacks {
    #![doc = include_str!("../callbacks/README.md")]

    pub mod port {
        #![doc = include_str!("../callbacks/port.md")]
    }

    pub mod callback {
        #![doc = include_str!("../callbacks/callback.md")]
    }

    pub mod producer {
        #![doc = include_str!("../callbacks/producer.md")]
    }

    pub mod local {
        #![doc = include_str!("../callbacks/local.md")]
    }

    pub mod shard {
        #![doc = include_str!("../callbacks/shard.md")]
    }

    pub mod intake {
        #![doc = include_str!("../callbacks/intake.md")]
    }

    pub mod worker {
        #![doc = include_str!("../callbacks/worker.md")]
    }

    pub mod segcblist {
        #![doc = include_str!("../callbacks/segcblist.md")]
    }

    pub mod hand_back {
        #![doc = include_str!("../callbacks/hand_back.md")]
    }

    pub mod invoke {
        #![doc = include_str!("../callbacks/invoke.md")]
    }
}

pub mod locks {
    #![doc = include_str!("../locks/README.md")]

    pub mod recseq {
        #![doc = include_str!("../locks/recseq.md")]
    }

    pub mod percpu_rwlock {
        #![doc = include_str!("../locks/percpu_rwlock/README.md")]
    }
}

pub mod domain {
    #![doc = include_str!("../domain/README.md")]

    pub mod port {
        #![doc = include_str!("../domain/port.md")]
    }

    pub mod guard {
        #![doc = include_str!("../domain/guard.md")]
    }

    pub mod owned {
        #![doc = include_str!("../domain/owned.md")]
    }

    pub mod thread_reader {
        #![doc = include_str!("../domain/thread_reader.md")]
    }

    pub mod futures {
        #![doc = include_str!("../domain/futures.md")]
    }

    pub mod global {
        #![doc = include_str!("../domain/global.md")]
    }

    pub mod fork {
        #![doc = include_str!("../domain/fork.md")]
    }

    pub mod shutdown {
        #![doc = include_str!("../domain/shutdown.md")]
    }
}

pub mod section {
    #![doc = include_str!("../section.md")]
}

pub mod qsbr {
    #![doc = include_str!("../qsbr.md")]
}

pub mod domain_ref {
    #![doc = include_str!("../domain_ref.md")]
}

pub mod cell {
    #![doc = include_str!("../cell/README.md")]
}

pub mod list {
    #![doc = include_str!("../list.md")]
}
