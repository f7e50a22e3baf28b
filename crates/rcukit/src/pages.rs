#![doc = include_str!("pages.md")]

use std::ptr::NonNull;

/// Arrays of at least this many bytes are mappings of their own (Linux).
#[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
pub(crate) const HUGE_BYTES: usize = 4 << 20;

/// The size (and alignment) of a transparent huge page on x86-64 and most Arm kernels.
#[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
const HUGE_PAGE: usize = 2 << 20;

/// Whether a large array's mapping is advised to use transparent huge pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pages {
    /// Advised: fewer TLB misses for random probes, but each first touch of a 2 MiB page may
    /// wait for the kernel to compact memory (with the common `defrag=madvise` setting).
    Huge,
    /// Not advised: the kernel's default for the mapping.
    Default,
}

/// `len` values of `T`, one allocation: a `Box<[T]>`, or a mapping of its own (module docs).
pub(crate) struct PageArray<T> {
    ptr: NonNull<T>,
    len: usize,
    /// Bytes mapped for the values (0: a `Box<[T]>`).
    mapped: usize,
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
        if len.saturating_mul(std::mem::size_of::<T>()) >= HUGE_BYTES {
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
        }
    }

    /// Bytes mapped for the values (0 for an array from the allocator).
    #[cfg(all(test, not(rcukit_loom)))]
    pub(crate) fn mapped(&self) -> usize {
        self.mapped
    }

    /// `len` zero values in a fresh mapping aligned to huge pages, and advised to use them if
    /// `pages` says so; `None` if the system refuses the mapping (the caller then takes the
    /// allocator's memory).
    ///
    /// # Safety
    ///
    /// As for [`zeroed`](Self::zeroed).
    #[cfg(all(target_os = "linux", not(rcukit_loom), not(miri)))]
    unsafe fn mapped_zeroed(len: usize, pages: Pages) -> Option<PageArray<T>> {
        if std::mem::align_of::<T>() > HUGE_PAGE {
            return None;
        }
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())?
            .checked_next_multiple_of(HUGE_PAGE)?;
        let reserve = bytes.checked_add(HUGE_PAGE)?;
        // SAFETY: a private anonymous mapping at an address of the kernel's choice; it overlaps
        // nothing of ours.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let start = (raw as usize).next_multiple_of(HUGE_PAGE);
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
            // pages are `len` valid values (the caller's promise), aligned (huge-page aligned,
            // and `T`'s alignment is at most that).
            ptr: unsafe { NonNull::new_unchecked(start as *mut T) },
            len,
            mapped: bytes,
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
            // alone, `mapped` bytes from `ptr`) is unmapped and nothing refers to it any more.
            unsafe {
                std::ptr::drop_in_place(slice);
                libc::munmap(self.ptr.as_ptr().cast(), self.mapped);
            }
        }
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
