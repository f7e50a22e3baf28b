//! [`DomainRef`]: how an RCU-protected container refers to the domain that protects it.
//!
//! A container such as [`RcuCell`](crate::RcuCell) or [`RcuList`](crate::RcuList) retires old
//! values into its domain and checks that readers hold a guard of that same domain. Both are
//! only sound if the domain outlives the container and if the container names *the same*
//! domain every time it asks. Three handles satisfy this, and the trait is sealed so that no
//! other can be added:
//!
//! * `&'static Rcu`: the default type parameter, used by `RcuCell::new` and `RcuList::new` with
//!   [`Rcu::global`]. A global-domain container is written `RcuCell<T>`, with nothing else to
//!   spell out.
//! * `&'d Rcu`: a container that borrows a domain for `'d`; the borrow checker keeps the domain
//!   alive (and in place) for as long as the container exists.
//! * `Arc<Rcu>`: a container that co-owns a domain, for containers that must be `'static`
//!   (moved into spawned threads) without using the global domain. The domain is dropped, and
//!   runs its pending callbacks, when the last handle goes.
//!
//! # Why not a lifetime parameter, and why sealed
//!
//! `RcuCell<'d, T>` would force every global-domain user to write `RcuCell<'static, T>` in
//! each struct field; a defaulted type parameter costs them nothing. The handle is a trait
//! rather than an `Arc` everywhere so that borrowing a stack domain stays free.
//!
//! The trait is sealed because soundness depends on [`DomainRef::rcu`] returning the same
//! domain on every call: a container checks a reader's guard against one call and retires
//! through another. A user-written `Deref` could return different domains on different calls,
//! and a value retired into domain B would then be freed without waiting for the readers of
//! domain A that the guard check admitted. References and `Arc`s always return the same
//! pointer, and the domain they point to cannot move while they exist, so comparing domain
//! *addresses* is an exact identity test.

use crate::{Rcu, ReadSection};
use std::sync::Arc;

mod sealed {
    pub trait Sealed {}
    impl Sealed for &crate::Rcu {}
    impl Sealed for std::sync::Arc<crate::Rcu> {}
}

/// A handle on the domain that protects an RCU container: `&'static Rcu` (the global domain,
/// the default), `&'d Rcu` or `Arc<Rcu>`. Sealed; see the [module docs](self) for why.
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
