//! [`ReadSection`]: what a container accepts as proof that its reader is inside a read-side
//! critical section, a [`Guard`] or an [`OwnedGuard`].
//!
//! Containers ([`RcuCell::load`](crate::RcuCell::load), [`RcuList::iter`](crate::RcuList::iter),
//! [`RcuHashMap::get`](crate::RcuHashMap::get) and the rest of their readers) take `&'g G`
//! for any `G: ReadSection` and hand out references that live for `'g`: the borrow of the
//! guard. Both guards hold back every grace period of their domain that starts after they were
//! taken, so a reference borrowed from either stays valid for as long as the borrow lasts, and
//! the borrow checker keeps it from outliving the guard.
//!
//! # Why sealed
//!
//! A container's safety rests on [`is_of`](ReadSection::is_of) being true only for a live
//! section of that very domain. A user type could claim anything, so the trait is sealed: the
//! two guards are the only implementations.

use crate::{Guard, OwnedGuard, Rcu};

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::Guard<'_> {}
    impl Sealed for crate::OwnedGuard {}
}

/// A read-side critical section of one [`Rcu`] domain: [`Guard`] (`rcu.read()`) or
/// [`OwnedGuard`] (`rcu.read_owned()`). Sealed; see the [module docs](self).
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
