#![doc = include_str!("read_side.md")]

use crate::barrier::FenceKind;
use crate::per_thread::DomainKey;
use crate::sync::AtomicU64;
use crossbeam_utils::CachePadded;
use std::ptr::NonNull;

/// What readers touch: the domain's key (to find their record), the epoch and the fence kind.
pub(crate) struct ReadSide {
    pub(crate) epoch: AtomicU64,
    /// In a QSBR domain, the target epoch of a sleeping grace period that asks readers at or
    /// past it to give way (0: none; see [`give_way`](crate::docs::internal::gp::give_way)).
    /// A hint, beside `epoch` so that a quiescent state's look at it costs no miss; std's
    /// atomic even under loom.
    pub(crate) give_way: std::sync::atomic::AtomicU64,
    pub(crate) fence: FenceKind,
    /// The domain's id, unique for the life of the process (0 for cores of no domain), with
    /// its hash for the thread's table (see [`per_thread`](crate::docs::internal::per_thread)).
    pub(crate) domain: DomainKey,
}

type Line = CachePadded<ReadSide>;

/// One domain's read side, owned: a line of the shared pages, given back when dropped.
pub(crate) struct ReadSideLine(NonNull<Line>);

// SAFETY: the line is owned by this value alone (see the module docs) and `ReadSide` is made of
// atomics and plain data, so it may move to and be shared with any thread.
unsafe impl Send for ReadSideLine {}
// SAFETY: as above: `&ReadSideLine` only hands out `&ReadSide`, which is `Sync`.
unsafe impl Sync for ReadSideLine {}

impl ReadSideLine {
    pub(crate) fn new(read_side: ReadSide) -> ReadSideLine {
        ReadSideLine(pages::take(CachePadded::new(read_side)))
    }

    /// A copy of the pointer, for the domain handle (see [`ReadSidePtr`]).
    pub(crate) fn share(&self) -> ReadSidePtr {
        ReadSidePtr(NonNull::from(&**self))
    }
}

impl std::ops::Deref for ReadSideLine {
    type Target = ReadSide;

    #[inline]
    fn deref(&self) -> &ReadSide {
        // SAFETY: the line is initialized and owned by `self` until `self` drops.
        unsafe { self.0.as_ref() }
    }
}

impl std::ops::DerefMut for ReadSideLine {
    fn deref_mut(&mut self) -> &mut ReadSide {
        // SAFETY: as in `deref`; `&mut self` is the only access to the line.
        unsafe { self.0.as_mut() }
    }
}

impl Drop for ReadSideLine {
    fn drop(&mut self) {
        // SAFETY: the line is initialized, owned by `self` and given back exactly once.
        unsafe { pages::give_back(self.0) };
    }
}

/// A copy of a [`ReadSideLine`]'s pointer, kept by the [`Rcu`](crate::Rcu) handle so that a
/// read goes from the handle straight to the line.
#[derive(Clone, Copy)]
pub(crate) struct ReadSidePtr(NonNull<ReadSide>);

// SAFETY: a pointer to a `Sync` value; reading through it is `get`'s contract.
unsafe impl Send for ReadSidePtr {}
// SAFETY: as above.
unsafe impl Sync for ReadSidePtr {}

impl ReadSidePtr {
    /// The read side.
    ///
    /// # Safety
    ///
    /// The [`ReadSideLine`] this was shared from is alive for `'a`.
    #[inline]
    pub(crate) unsafe fn get<'a>(self) -> &'a ReadSide {
        // SAFETY: the caller guarantees the line is alive (and so initialized) for `'a`.
        unsafe { self.0.as_ref() }
    }
}

#[cfg(not(rcukit_loom))]
mod pages {
    use super::Line;
    use std::alloc::Layout;
    use std::ptr::NonNull;
    use std::sync::Mutex;

    /// Lines per page.
    const PER_PAGE: usize = 4096 / std::mem::size_of::<Line>();

    /// The pages (kept, so that they stay reachable) and the lines free in them.
    pub(super) struct Pages {
        pub(super) pages: Vec<NonNull<u8>>,
        free: Vec<NonNull<Line>>,
    }

    // SAFETY: the pointers are to memory this module owns, handed out under the lock only.
    unsafe impl Send for Pages {}

    pub(super) static PAGES: Mutex<Pages> = Mutex::new(Pages {
        pages: Vec::new(),
        free: Vec::new(),
    });

    /// A free line, initialized with `value`.
    pub(super) fn take(value: Line) -> NonNull<Line> {
        let mut pages = crate::sync::lock(&PAGES);
        if pages.free.is_empty() {
            let layout = Layout::from_size_align(PER_PAGE * std::mem::size_of::<Line>(), 4096)
                .expect("a page's layout");
            // SAFETY: the layout has a non-zero size.
            let page = NonNull::new(unsafe { std::alloc::alloc(layout) })
                .unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
            pages.pages.push(page);
            // Lowest address last, so that lines are handed out in address order.
            for i in (0..PER_PAGE).rev() {
                // SAFETY: `i` lines in is within the page, which is aligned for `Line`.
                pages.free.push(unsafe { page.cast::<Line>().add(i) });
            }
        }
        let line = pages.free.pop().expect("a page was just added");
        // SAFETY: a free line is valid for writes and aligned, and nobody else holds it.
        unsafe { line.as_ptr().write(value) };
        line
    }

    /// Drop the value in `line` and make the line free again.
    ///
    /// # Safety
    ///
    /// `line` came from [`take`], is initialized, and nobody uses it any more.
    pub(super) unsafe fn give_back(line: NonNull<Line>) {
        // SAFETY: the caller guarantees the line is initialized and unused.
        unsafe { std::ptr::drop_in_place(line.as_ptr()) };
        crate::sync::lock(&PAGES).free.push(line);
    }
}

#[cfg(rcukit_loom)]
mod pages {
    use super::Line;
    use std::ptr::NonNull;

    pub(super) fn take(value: Line) -> NonNull<Line> {
        NonNull::from(Box::leak(Box::new(value)))
    }

    /// # Safety
    ///
    /// `line` came from [`take`] and nobody uses it any more.
    pub(super) unsafe fn give_back(line: NonNull<Line>) {
        // SAFETY: the caller guarantees `line` is the box leaked by `take`, used no more.
        drop(unsafe { Box::from_raw(line.as_ptr()) });
    }
}

/// Hold the free list's lock across `fork()` (see [`fork`](crate::docs::internal::domain::fork)).
#[cfg(unix)]
pub(crate) fn hold_for_fork(held: &mut crate::sync::fork::Held) {
    #[cfg(not(rcukit_loom))]
    held.hold(&pages::PAGES);
    #[cfg(rcukit_loom)]
    let _ = held;
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;

    fn line(id: u64) -> ReadSideLine {
        ReadSideLine::new(ReadSide {
            epoch: AtomicU64::new(id),
            give_way: std::sync::atomic::AtomicU64::new(0),
            fence: FenceKind::SeqCst,
            domain: DomainKey::new(id),
        })
    }

    #[test]
    fn lines_are_distinct_aligned_and_reused_once_given_back() {
        let lines: Vec<_> = (1..=100).map(line).collect();
        let mut addresses: Vec<usize> = lines.iter().map(|l| l.0.as_ptr() as usize).collect();
        for (l, id) in lines.iter().zip(1..) {
            assert_eq!(l.domain.id(), id);
            assert_eq!(l.epoch.load(std::sync::atomic::Ordering::Relaxed), id);
        }
        assert!(addresses.iter().all(|a| a % 128 == 0));
        addresses.sort_unstable();
        addresses.dedup();
        assert_eq!(addresses.len(), 100, "every line is its own");
        drop(lines);
        let again = line(500);
        // SAFETY: `again` is alive.
        assert_eq!(unsafe { again.share().get() }.domain.id(), 500);
        drop(again);
        // Lines given back are reused: 10,000 domains built and dropped one after another
        // take no more pages than a handful (other tests build domains at the same time).
        let pages_before = crate::sync::lock(&pages::PAGES).pages.len();
        for id in 0..if cfg!(miri) { 100 } else { 10_000 } {
            drop(line(id));
        }
        let pages_after = crate::sync::lock(&pages::PAGES).pages.len();
        assert!(
            pages_after - pages_before < 10,
            "{pages_before} -> {pages_after} pages"
        );
    }
}
