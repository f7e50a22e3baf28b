#![doc = include_str!("pages.md")]

use std::ptr::NonNull;

/// Arrays advised to use huge pages are mappings of their own from this many bytes (Linux).
#[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
pub(crate) const HUGE_BYTES: usize = 4 << 20;

/// Other arrays are mappings of their own from this many bytes (Linux): glibc's default mmap
/// threshold, the size from which it too maps a block, until it raises the threshold. (Defined
/// everywhere: owners size their arrays by it.)
pub(crate) const MAPPED_BYTES: usize = 128 << 10;

/// The size (and alignment) of a transparent huge page on x86-64 and most Arm kernels.
#[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
const HUGE_PAGE: usize = 2 << 20;

/// Whether a large array's mapping is advised to use transparent huge pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pages {
    /// Advised, from [`HUGE_BYTES`], in a mapping aligned to huge pages: fewer TLB misses for
    /// random probes, but each first touch of a 2 MiB page may wait for the kernel to compact
    /// memory (with the common `defrag=madvise` setting).
    Huge,
    /// Not advised (the kernel's default for the mapping), from [`MAPPED_BYTES`].
    Default,
    /// As `Default`, with every page made present when the array is mapped
    /// (`MAP_POPULATE`), in one call instead of a fault per page: for an array whose owner
    /// writes to nearly every page of it right away (see "Populated" in the module docs).
    Populated,
}

impl Pages {
    /// The size from which an array is a mapping of its own.
    #[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
    fn mapped_from(self) -> usize {
        match self {
            Pages::Huge => HUGE_BYTES,
            Pages::Default | Pages::Populated => MAPPED_BYTES,
        }
    }

    /// The alignment (and the multiple of its size) of an array's mapping.
    #[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
    fn alignment(self) -> usize {
        match self {
            Pages::Huge => HUGE_PAGE,
            Pages::Default | Pages::Populated => SMALL_PAGE,
        }
    }
}

/// The smallest page size of the architectures rcukit maps arrays on; a mapping's length is
/// a multiple of it (the kernel rounds it up to the system's page size, and unmaps as much).
#[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
const SMALL_PAGE: usize = 4 << 10;

/// `len` values of `T`, one allocation: a `Box<[T]>`, or a mapping of its own (module docs).
pub(crate) struct PageArray<T> {
    ptr: NonNull<T>,
    len: usize,
    /// Bytes mapped for the values (0: a `Box<[T]>`).
    mapped: usize,
    /// A mapping that is kept a while for reuse when the array is dropped (not `Pages::Huge`).
    reuse: bool,
}

// SAFETY: a `PageArray` owns its values as a `Box<[T]>` would; it is `Send` and `Sync` exactly
// when they are.
unsafe impl<T: Send> Send for PageArray<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for PageArray<T> {}

impl<T> PageArray<T> {
    /// `len` values, each `make()` or, in a mapping (advised as `pages` says), all-zero bits.
    ///
    /// # Safety
    ///
    /// A value of all-zero bits is a valid `T`, the same as what `make()` returns.
    pub(crate) unsafe fn zeroed(len: usize, pages: Pages, make: impl FnMut() -> T) -> PageArray<T> {
        #[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
        if len.saturating_mul(std::mem::size_of::<T>()) >= pages.mapped_from() {
            // SAFETY: forwarded: zero values are valid ones.
            if let Some(array) = unsafe { Self::reused_zeroed(len, pages) } {
                return array;
            }
            // SAFETY: forwarded: zero pages are valid values.
            if let Some(array) = unsafe { Self::mapped_zeroed(len, pages) } {
                return array;
            }
        }
        #[cfg(not(all(target_os = "linux", not(rcukit_loom), not(miri))))]
        let _ = pages;
        let mut make = make;
        let boxed: Box<[T]> = (0..len).map(|_| make()).collect();
        PageArray {
            // SAFETY: `Box::into_raw` never returns null.
            ptr: unsafe { NonNull::new_unchecked(Box::into_raw(boxed).cast::<T>()) },
            len,
            mapped: 0,
            reuse: false,
        }
    }

    /// Unmap the array's mapping when it is dropped, instead of keeping it for reuse: for an
    /// array whose owner knows that none of its size will be made soon.
    pub(crate) fn give_back_when_dropped(&mut self) {
        self.reuse = false;
    }

    /// Bytes mapped for the values (0 for an array from the allocator).
    #[cfg(all(test, not(rcukit_loom)))]
    pub(crate) fn mapped(&self) -> usize {
        self.mapped
    }

    /// The alignment and the length of a mapping for `len` values (`None` if `T` needs a
    /// larger alignment, or the length overflows).
    #[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
    fn mapping_size(len: usize, pages: Pages) -> Option<(usize, usize)> {
        let align = pages.alignment();
        if std::mem::align_of::<T>() > align {
            return None;
        }
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())?
            .checked_next_multiple_of(align)?;
        Some((align, bytes))
    }

    /// `len` zero values in a kept mapping of the size they need, zeroed (see "Reuse" in the
    /// module docs; zeroing it makes every page present); `None` if none is kept (or `pages`
    /// is `Pages::Huge`).
    ///
    /// # Safety
    ///
    /// As for [`zeroed`](Self::zeroed).
    #[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
    unsafe fn reused_zeroed(len: usize, pages: Pages) -> Option<PageArray<T>> {
        if pages == Pages::Huge {
            return None;
        }
        let (_, bytes) = Self::mapping_size(len, pages)?;
        let start = spares::take(bytes)?;
        // SAFETY: a kept mapping of `bytes` bytes, ours alone since `take`; zeroing it makes
        // its values `len` valid ones (the caller's promise).
        unsafe { std::ptr::write_bytes(start as *mut u8, 0, bytes) };
        Some(PageArray {
            // SAFETY: a mapping's start is not null; it is aligned to a small page, at least
            // `T`'s alignment (`mapping_size` checked).
            ptr: unsafe { NonNull::new_unchecked(start as *mut T) },
            len,
            mapped: bytes,
            reuse: true,
        })
    }

    /// `len` zero values in a fresh mapping aligned as `pages` says (to huge pages, and advised
    /// to use them, for [`Pages::Huge`]; its pages made present, for [`Pages::Populated`]);
    /// `None` if the system refuses the mapping (the caller then takes the allocator's memory).
    ///
    /// # Safety
    ///
    /// As for [`zeroed`](Self::zeroed).
    #[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
    unsafe fn mapped_zeroed(len: usize, pages: Pages) -> Option<PageArray<T>> {
        let (align, bytes) = Self::mapping_size(len, pages)?;
        // Room to align the start (none needed for small pages: mappings start on one).
        let reserve = bytes.checked_add(if align > SMALL_PAGE { align } else { 0 })?;
        // `MAP_POPULATE` makes every page present in the call (a populated array is aligned to
        // small pages, so none of the mapping is unmapped again below).
        let populate = if pages == Pages::Populated {
            libc::MAP_POPULATE
        } else {
            0
        };
        // SAFETY: a private anonymous mapping at an address of the kernel's choice; it overlaps
        // nothing of ours.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | populate,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let start = (raw as usize).next_multiple_of(align);
        let (head, tail) = (
            start - raw as usize,
            reserve - bytes - (start - raw as usize),
        );
        // Results ignored: a failed unmap leaves a hole we never use, a failed advice costs
        // only the huge pages.
        // SAFETY: `[raw, start)` and `[start + bytes, raw + reserve)` are whole pages of the
        // fresh mapping outside the part kept; the advice changes no contents.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((start + bytes) as *mut libc::c_void, tail);
            }
            if pages == Pages::Huge {
                libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE);
            }
        }
        Some(PageArray {
            // SAFETY: `start` lies inside a successful mapping, so it is not null; its zero
            // pages are `len` valid values (the caller's promise), aligned (to `align`, and
            // `T`'s alignment is at most that).
            ptr: unsafe { NonNull::new_unchecked(start as *mut T) },
            len,
            mapped: bytes,
            reuse: pages != Pages::Huge,
        })
    }
}

impl<T> std::ops::Deref for PageArray<T> {
    type Target = [T];

    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points to `len` initialized values that live as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for PageArray<T> {
    fn drop(&mut self) {
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        if self.mapped == 0 {
            // SAFETY: the values came from `Box::into_raw` of a `Box<[T]>` of this length.
            drop(unsafe { Box::from_raw(slice) });
        } else {
            #[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
            // SAFETY: the values are initialized and dropped once, here; then the mapping (ours
            // alone, `mapped` bytes from `ptr`) is kept for reuse or unmapped, and nothing
            // refers to it any more.
            unsafe {
                std::ptr::drop_in_place(slice);
                let start = self.ptr.as_ptr() as usize;
                if !(self.reuse && spares::keep(start, self.mapped)) {
                    libc::munmap(start as *mut libc::c_void, self.mapped);
                }
            }
        }
    }
}

/// Mappings of dropped arrays not advised to use huge pages, kept a while for the next array
/// of the same size (module docs: "Reuse").
#[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
mod spares {
    use std::sync::{Mutex, MutexGuard};
    use std::time::{Duration, Instant};

    /// How long a dropped array's mapping is kept before it goes back to the system.
    const KEEP: Duration = Duration::from_secs(1);

    /// At most this many mappings are kept, of at most [`MOST_BYTES`] in all.
    const MOST: usize = 8;
    const MOST_BYTES: usize = 64 << 20;

    /// One kept mapping.
    struct Spare {
        start: usize,
        bytes: usize,
        dropped: Instant,
    }

    struct Spares {
        kept: Vec<Spare>,
        /// The process whose thread gives kept mappings back (its fork generation plus one; 0:
        /// none), so that a child forked while its parent's thread waits starts its own.
        waiter: u64,
    }

    static SPARES: Mutex<Spares> = Mutex::new(Spares {
        kept: Vec::new(),
        waiter: 0,
    });

    /// The kept mappings, if nobody else holds them now. Callers on a table's path never wait:
    /// a child forked while another thread held the lock sees it held for ever, and only
    /// maps and unmaps for itself.
    fn try_lock() -> Option<MutexGuard<'static, Spares>> {
        SPARES.try_lock().ok()
    }

    /// A kept mapping of exactly `bytes` bytes, now the caller's (its pages hold old values).
    pub(super) fn take(bytes: usize) -> Option<usize> {
        let mut spares = try_lock()?;
        let i = spares.kept.iter().position(|s| s.bytes == bytes)?;
        Some(spares.kept.swap_remove(i).start)
    }

    /// Keep the mapping `[start, start + bytes)` for reuse, and make sure a thread gives it
    /// back once it has been kept for [`KEEP`]; false if it is not kept (the caller then
    /// unmaps it).
    pub(super) fn keep(start: usize, bytes: usize) -> bool {
        let Some(mut spares) = try_lock() else {
            return false;
        };
        let kept_bytes: usize = spares.kept.iter().map(|s| s.bytes).sum();
        if spares.kept.len() >= MOST || kept_bytes + bytes > MOST_BYTES {
            return false;
        }
        spares.kept.push(Spare {
            start,
            bytes,
            dropped: Instant::now(),
        });
        let me = crate::sync::fork::generation() + 1;
        if spares.waiter == me {
            return true;
        }
        spares.waiter = me;
        drop(spares);
        if crate::threads::spawn("rcukit-pages".to_string(), move || give_back(me)).is_err() {
            // No thread to give them back later: give them back now.
            let mut spares = SPARES.lock().unwrap_or_else(|e| e.into_inner());
            if spares.waiter == me {
                spares.waiter = 0;
            }
            drop(spares);
            unmap(take_expired(None));
        }
        true
    }

    /// The thread that gives kept mappings back (`me`: its value of `waiter`): sleep until the
    /// oldest has been kept for [`KEEP`], unmap those that have, and go on while any are kept.
    fn give_back(me: u64) {
        while let Some(oldest) = oldest_kept(me) {
            std::thread::sleep((oldest + KEEP).saturating_duration_since(Instant::now()));
            unmap(take_expired(Some(Instant::now())));
        }
    }

    /// When the oldest kept mapping was dropped, for the thread `me`; `None` if it should
    /// stop: another process's thread took over, or nothing is kept (then no thread waits,
    /// and the next `keep` starts one).
    fn oldest_kept(me: u64) -> Option<Instant> {
        let mut spares = SPARES.lock().unwrap_or_else(|e| e.into_inner());
        if spares.waiter != me {
            return None;
        }
        let oldest = spares.kept.iter().map(|s| s.dropped).min();
        if oldest.is_none() {
            spares.waiter = 0;
        }
        oldest
    }

    /// Take the kept mappings dropped [`KEEP`] or more before `now` (all of them for `None`).
    fn take_expired(now: Option<Instant>) -> Vec<Spare> {
        let mut spares = SPARES.lock().unwrap_or_else(|e| e.into_inner());
        let expired_at = |s: &Spare| match now {
            Some(now) => now.duration_since(s.dropped) >= KEEP,
            None => true,
        };
        let (expired, kept): (Vec<Spare>, Vec<Spare>) = std::mem::take(&mut spares.kept)
            .into_iter()
            .partition(expired_at);
        spares.kept = kept;
        expired
    }

    fn unmap(spares: Vec<Spare>) {
        for spare in spares {
            // SAFETY: a kept mapping is nobody's: taken out of the list under the lock, it is
            // unmapped once, here.
            unsafe { libc::munmap(spare.start as *mut libc::c_void, spare.bytes) };
        }
    }

    /// Whether the mapping at `start` is kept now (for the tests; `None` if another thread
    /// holds the list).
    #[cfg(test)]
    pub(super) fn is_kept(start: usize) -> Option<bool> {
        Some(try_lock()?.kept.iter().any(|s| s.start == start))
    }
}

#[cfg(all(test, not(rcukit_loom)))]
mod tests {
    use super::*;

    /// A large array is a mapping of its own, aligned to huge pages, with no page resident
    /// before its first use (so the advice applies to every page), advised to use huge pages,
    /// and of zero values.
    #[test]
    #[cfg(all(target_os = "linux", not(miri)))]
    fn a_large_array_is_a_fresh_mapping_advised_to_use_huge_pages() {
        let n = 2 * HUGE_BYTES / std::mem::size_of::<[u64; 8]>();
        // SAFETY: zero is a valid `[u64; 8]`, as `[0; 8]`.
        let array = unsafe { PageArray::zeroed(n, Pages::Huge, || [0u64; 8]) };
        assert_eq!(array.len(), n);
        assert_eq!(array.mapped(), 2 * HUGE_BYTES);
        let start = array.as_ptr() as usize;
        assert_eq!(start % HUGE_PAGE, 0);
        let pages = array.mapped() / 4096;
        let mut resident = vec![0u8; pages];
        // SAFETY: the range is our mapping, page-aligned; `resident` has a byte per page.
        let r = unsafe { libc::mincore(start as *mut _, array.mapped(), resident.as_mut_ptr()) };
        assert_eq!(r, 0);
        assert!(
            resident.iter().all(|&p| p & 1 == 0),
            "pages resident before use"
        );
        if std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let head = format!("{start:x}-");
            let vma = smaps
                .split_inclusive('\n')
                .skip_while(|line| !line.starts_with(&head))
                .take_while(|line| line.starts_with(&head) || !line.contains('-'))
                .collect::<String>();
            // `hg`: the mapping carries MADV_HUGEPAGE.
            let flags = vma
                .lines()
                .find(|l| l.starts_with("VmFlags:"))
                .unwrap_or("");
            assert!(flags.split_whitespace().any(|f| f == "hg"), "{vma}");
        }
        assert!(array.iter().all(|v| *v == [0; 8]));
    }

    /// An array not advised to use huge pages is a mapping of its own from glibc's mmap
    /// threshold on, page-aligned and rounded to pages only; below it, the allocator's.
    #[test]
    #[cfg(all(target_os = "linux", not(miri)))]
    fn a_mid_sized_array_is_a_mapping_of_its_own() {
        let n = MAPPED_BYTES / std::mem::size_of::<u64>() + 3;
        // SAFETY: zero is a valid `u64`.
        let array = unsafe { PageArray::zeroed(n, Pages::Default, || 0u64) };
        assert_eq!(array.mapped(), MAPPED_BYTES + SMALL_PAGE);
        assert_eq!(array.as_ptr() as usize % SMALL_PAGE, 0);
        assert!(array.iter().all(|v| *v == 0));
        // SAFETY: as above.
        let small = unsafe { PageArray::zeroed(n - 4 * 512, Pages::Default, || 0u64) };
        assert_eq!(small.mapped(), 0);
    }

    /// A populated array is a mapping of its own, as a default one is, with every page present
    /// before its first use.
    #[test]
    #[cfg(all(target_os = "linux", not(miri)))]
    fn a_populated_array_has_its_pages_present_at_once() {
        // A size no other test maps (so that no kept mapping is reused).
        let n = (MAPPED_BYTES + 13 * SMALL_PAGE) / std::mem::size_of::<u64>();
        // SAFETY: zero is a valid `u64`.
        let array = unsafe { PageArray::zeroed(n, Pages::Populated, || 0u64) };
        assert_eq!(array.mapped(), MAPPED_BYTES + 13 * SMALL_PAGE);
        let start = array.as_ptr() as usize;
        assert_eq!(start % SMALL_PAGE, 0);
        let mut resident = vec![0u8; array.mapped() / SMALL_PAGE];
        // SAFETY: the range is our mapping, page-aligned; `resident` has a byte per page.
        let r = unsafe { libc::mincore(start as *mut _, array.mapped(), resident.as_mut_ptr()) };
        assert_eq!(r, 0);
        assert!(resident.iter().all(|&p| p & 1 == 1), "pages not present");
        assert!(array.iter().all(|v| *v == 0));
    }

    /// A dropped mid-sized array's mapping is kept: the next array of its size reuses it,
    /// zeroed, and once kept for a second it goes back to the system, also in a forked child.
    #[test]
    #[cfg(all(target_os = "linux", not(miri)))]
    fn a_dropped_mapping_is_reused_zeroed_then_given_back() {
        // A size no other test maps.
        let n = (MAPPED_BYTES + 7 * SMALL_PAGE) / std::mem::size_of::<u64>();
        // SAFETY (each array below): zero is a valid `u64`.
        let make = || unsafe { PageArray::zeroed(n, Pages::Default, || 0u64) };
        // Keeping and taking are skipped, never waited for, when another thread holds the
        // list: retry until both happened.
        let start = (0..100)
            .find_map(|_| {
                let array = make();
                let start = array.as_ptr() as usize;
                // SAFETY: the array's own values, written through its only handle.
                unsafe { std::ptr::write_bytes(array.ptr.as_ptr(), 0xA5, n) };
                drop(array);
                if spares::is_kept(start) != Some(true) {
                    return None;
                }
                let again = make();
                if again.as_ptr() as usize != start {
                    return None;
                }
                assert!(
                    again.iter().all(|v| *v == 0),
                    "a reused mapping was not zeroed"
                );
                Some(start)
            })
            .expect("a dropped mapping was never kept and reused");
        assert!(given_back(start, 30), "a kept mapping was not given back");

        // A child forked while this process's thread waits to give mappings back starts a
        // thread of its own, and what it keeps goes back too. (The fork handlers of a domain
        // count forks: the flat map's tables belong to one.)
        let _ = crate::Rcu::global();
        drop(make());
        // SAFETY: the child drops an array, sleeps and reads atomics and the list, then
        // leaves with `_exit`, running none of the parent's destructors.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let array = make();
            let start = array.as_ptr() as usize;
            drop(array);
            // A list held by another thread at the fork stays held in the child, which then
            // unmaps what it drops at once.
            let ok = spares::is_kept(start).is_none() || given_back(start, 10);
            // SAFETY: leaving the child at once.
            unsafe { libc::_exit(if ok { 0 } else { 3 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child (it gives up within 10 s).
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "a mapping kept in a forked child was not given back ({status:#x})"
        );
    }

    /// Whether the mapping at `start` is seen not kept within `seconds` (the list may be held
    /// by another thread now and then: then it looks again).
    #[cfg(all(target_os = "linux", not(miri)))]
    fn given_back(start: usize, seconds: u64) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
        while spares::is_kept(start) != Some(false) {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        true
    }

    #[test]
    fn a_small_array_holds_what_make_made_and_drops_it() {
        let made = std::rc::Rc::new(());
        // SAFETY: the test never builds a mapping (the array is small); `Rc` is not zero-valid,
        // which only a mapping would need.
        let array = unsafe { PageArray::zeroed(10, Pages::Huge, || made.clone()) };
        assert_eq!(array.mapped(), 0);
        assert_eq!(std::rc::Rc::strong_count(&made), 11);
        drop(array);
        assert_eq!(std::rc::Rc::strong_count(&made), 1);
    }
}
