#![doc = include_str!("section.md")]

use crate::{Guard, OwnedGuard, Rcu};

pub(crate) mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::Guard<'_> {}
    impl Sealed for crate::OwnedGuard {}
}

/// A read-side critical section of one [`Rcu`] domain: [`Guard`] (`rcu.read()`) or [`OwnedGuard`]
/// (`rcu.read_owned()`); or, for a container on a [`Qsbr`](crate::Qsbr) domain
/// ([`RcuFlatMap`](crate::RcuFlatMap)), the reading thread's [`QsbrThread`](crate::QsbrThread)
/// while it is online. Sealed; see the [module docs](crate::docs::internal::section).
pub trait ReadSection: sealed::Sealed {
    /// Is this a critical section of `rcu`? (One pointer comparison.)
    fn is_of(&self, rcu: &Rcu) -> bool;

    /// The identifier of the section's domain ([`Rcu::id`]).
    fn domain_id(&self) -> u64;

    /// The name of the section's domain ([`Rcu::name`]).
    fn domain_name(&self) -> &str;
}

impl ReadSection for Guard<'_> {
    #[inline(always)]
    fn is_of(&self, rcu: &Rcu) -> bool {
        std::ptr::eq(self.domain(), rcu)
    }

    fn domain_id(&self) -> u64 {
        self.domain().id()
    }

    fn domain_name(&self) -> &str {
        self.domain().name()
    }
}

impl ReadSection for OwnedGuard {
    #[inline(always)]
    fn is_of(&self, rcu: &Rcu) -> bool {
        std::ptr::eq(self.inner(), rcu.inner())
    }

    fn domain_id(&self) -> u64 {
        OwnedGuard::domain_id(self)
    }

    fn domain_name(&self) -> &str {
        OwnedGuard::domain_name(self)
    }
}
