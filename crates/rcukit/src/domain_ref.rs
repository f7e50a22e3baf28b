#![doc = include_str!("domain_ref.md")]

use crate::{Guard, Qsbr, QsbrThread, Rcu, ReadSection};
use std::sync::Arc;

mod sealed {
    pub trait Sealed {}
    impl Sealed for &crate::Rcu {}
    impl Sealed for std::sync::Arc<crate::Rcu> {}

    pub trait AnySealed {}
    impl<D: super::DomainRef> AnySealed for D {}
    impl AnySealed for &crate::Qsbr {}
    impl AnySealed for std::sync::Arc<crate::Qsbr> {}

    /// Only this crate can call [`AnyDomainRef`](super::AnyDomainRef)'s hidden methods: they
    /// hand out a QSBR domain's inner `Rcu`, whose own read sections and waits are not for
    /// its users.
    pub struct Token(pub(crate) ());
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

/// A handle on the domain that protects a container that also takes QSBR domains
/// ([`RcuFlatMap`](crate::RcuFlatMap)): any [`DomainRef`] (an [`Rcu`] domain, read under
/// guards), or `&'d Qsbr` or `Arc<Qsbr>` (a [`Qsbr`] domain, read by its online
/// [`QsbrThread`]s with no per-lookup code at all). Sealed, as [`DomainRef`] is and for the
/// same reason.
pub trait AnyDomainRef: sealed::AnySealed {
    /// The domain: [`Rcu`] or [`Qsbr`].
    type Domain;

    /// The domain. Always the same one for a given handle.
    fn domain(&self) -> &Self::Domain;

    /// The `Rcu` whose sections a reader must hold and into which the container retires: the
    /// domain itself, or a QSBR domain's inner one (whose sections are its online threads).
    #[doc(hidden)]
    fn protector(&self, _: sealed::Token) -> &Rcu;

    /// A read section the container can take by itself, without its caller: a guard of an
    /// `Rcu` domain; none for a QSBR domain (only a thread's own `QsbrThread` puts it online).
    #[doc(hidden)]
    fn read_by_itself(&self, _: sealed::Token) -> Option<Guard<'_>>;
}

impl<D: DomainRef> AnyDomainRef for D {
    type Domain = Rcu;

    #[inline(always)]
    fn domain(&self) -> &Rcu {
        self.rcu()
    }

    #[inline(always)]
    fn protector(&self, _: sealed::Token) -> &Rcu {
        self.rcu()
    }

    #[inline(always)]
    fn read_by_itself(&self, _: sealed::Token) -> Option<Guard<'_>> {
        Some(self.rcu().read())
    }
}

/// The two QSBR handles' impls: the same but for the handle's type.
macro_rules! qsbr_handle {
    ($($handle:ty),*) => {$(
        impl AnyDomainRef for $handle {
            type Domain = Qsbr;

            #[inline(always)]
            fn domain(&self) -> &Qsbr {
                self
            }

            #[inline(always)]
            fn protector(&self, _: sealed::Token) -> &Rcu {
                self.rcu()
            }

            #[inline(always)]
            fn read_by_itself(&self, _: sealed::Token) -> Option<Guard<'_>> {
                None
            }
        }
    )*};
}
qsbr_handle!(&Qsbr, Arc<Qsbr>);

/// The `Rcu` that protects what `domain` protects (see [`AnyDomainRef::protector`]).
#[inline(always)]
pub(crate) fn protector<D: AnyDomainRef>(domain: &D) -> &Rcu {
    domain.protector(sealed::Token(()))
}

/// A read section of `domain` taken by the container itself, if its kind of domain has one
/// (see [`AnyDomainRef::read_by_itself`]).
#[inline(always)]
pub(crate) fn read_by_itself<D: AnyDomainRef>(domain: &D) -> Option<Guard<'_>> {
    domain.read_by_itself(sealed::Token(()))
}

/// An online [`QsbrThread`] is a read section of its domain: until the thread announces a
/// quiescent state or goes offline, which takes `&mut` of the handle and so ends every borrow
/// a container handed out for it, every grace period of the domain waits for it.
impl crate::section::sealed::Sealed for QsbrThread<'_> {}

impl ReadSection for QsbrThread<'_> {
    #[inline(always)]
    fn is_of(&self, rcu: &Rcu) -> bool {
        self.is_online() && std::ptr::eq(self.domain().rcu(), rcu)
    }

    fn domain_id(&self) -> u64 {
        self.domain().id()
    }

    fn domain_name(&self) -> &str {
        self.domain().name()
    }
}

/// Panic for a guard of the wrong domain: it protects nothing in this container.
#[cold]
#[inline(never)]
#[track_caller]
pub(crate) fn wrong_domain(container: &str, guard: &dyn ReadSection, mine: &Rcu) -> ! {
    if guard.domain_id() == mine.id() {
        panic!(
            "rcukit: {container} of QSBR domain '{}' (#{}) read with a QsbrThread that is \
             offline; an offline thread protects nothing. Read while online (QsbrThread::online)",
            mine.name(),
            mine.id()
        )
    }
    panic!(
        "rcukit: {container} of domain '{}' (#{}) read with a Guard of domain '{}' (#{}); a \
         guard only protects data of its own domain. Take the guard with the container's \
         domain().read() or domain().read_owned() (a QSBR domain's: a QsbrThread from its \
         register())",
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
