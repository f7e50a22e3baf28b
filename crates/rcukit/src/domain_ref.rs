#![doc = include_str!("domain_ref.md")]

use crate::{Rcu, ReadSection};
use std::sync::Arc;

mod sealed {
    pub trait Sealed {}
    impl Sealed for &crate::Rcu {}
    impl Sealed for std::sync::Arc<crate::Rcu> {}
}

/// A handle on the domain that protects an RCU container: `&'static Rcu` (the global domain, the
/// default), `&'d Rcu` or `Arc<Rcu>`. Sealed; see the [module
/// docs](crate::docs::internal::domain_ref) for why.
pub trait DomainRef: sealed::Sealed {
    /// The domain. Always the same one for a given handle.
    fn rcu(&self) -> &Rcu;
}

impl DomainRef for &Rcu {
    #[inline(always)]
    fn rcu(&self) -> &Rcu {
        self
    }
}

impl DomainRef for Arc<Rcu> {
    #[inline(always)]
    fn rcu(&self) -> &Rcu {
        self
    }
}

/// Panic for a guard of the wrong domain: it protects nothing in this container.
#[cold]
#[inline(never)]
#[track_caller]
pub(crate) fn wrong_domain(container: &str, guard: &dyn ReadSection, mine: &Rcu) -> ! {
    panic!(
        "rcukit: {container} of domain '{}' (#{}) read with a Guard of domain '{}' (#{}); a \
         guard only protects data of its own domain. Take the guard with the container's \
         domain().read() or domain().read_owned()",
        mine.name(),
        mine.id(),
        guard.domain_name(),
        guard.domain_id()
    )
}

/// Panic unless `guard` belongs to `mine`. One pointer compare on the fast path.
#[inline(always)]
#[track_caller]
pub(crate) fn check_guard<G: ReadSection>(container: &str, guard: &G, mine: &Rcu) {
    if !guard.is_of(mine) {
        wrong_domain(container, guard, mine)
    }
}
