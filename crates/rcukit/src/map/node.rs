//! The map's entries: [`Node`], how one is made, and the two forms in which an unlinked node
//! is retired ([`Retired`], and [`Shell`] for the busted testing knob).
//!
//! A retired node drops its key and its value *apart*, each contained: if the key's `Drop`
//! panics, the value is still dropped (outside any unwinding, so a second panic there cannot
//! abort the process), and then the key's panic goes on to the domain, which reports it. The
//! plain drop glue of `Node` would drop the value while unwinding from the key's panic, and a
//! value whose `Drop` panics as well would abort.

use crate::sync::AtomicPtr;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::ptr;

/// One entry. Immutable once published except for `next`, which only the holder of the lock
/// of the bucket whose chain contains the node changes (claim 1 of the essay).
#[repr(C)]
pub(crate) struct Node<K, V> {
    pub(crate) hash: u64,
    pub(crate) next: AtomicPtr<Node<K, V>>,
    pub(crate) key: K,
    pub(crate) value: V,
}

impl<K, V> Node<K, V> {
    pub(crate) fn new(hash: u64, key: K, value: V) -> *mut Node<K, V> {
        Box::into_raw(Box::new(Node {
            hash,
            next: AtomicPtr::new(ptr::null_mut()),
            key,
            value,
        }))
    }

    /// Take an unpublished (or exclusively owned) node apart.
    ///
    /// # Safety
    ///
    /// `node` came from [`Node::new`] and nobody else can reach it.
    pub(crate) unsafe fn into_parts(node: *mut Node<K, V>) -> (K, V) {
        // SAFETY: forwarded to the caller: an owned box.
        let node = unsafe { Box::from_raw(node) };
        (node.key, node.value)
    }
}

/// [`Node`] as it is retired: same layout (`repr(C)`; `ManuallyDrop` is `repr(transparent)`),
/// with a `Drop` that drops the key and the value apart (module docs).
#[repr(C)]
pub(crate) struct Retired<K, V> {
    hash: u64,
    next: AtomicPtr<Node<K, V>>,
    key: ManuallyDrop<K>,
    value: ManuallyDrop<V>,
}

impl<K, V> Retired<K, V> {
    /// The retired form of `node`.
    pub(crate) fn of(node: *mut Node<K, V>) -> *mut Retired<K, V> {
        node.cast()
    }
}

impl<K, V> Drop for Retired<K, V> {
    fn drop(&mut self) {
        let key = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: each field is dropped exactly once, here; the struct is being dropped.
            unsafe { ManuallyDrop::drop(&mut self.key) }
        }));
        // SAFETY: as above. Not unwinding here, whatever the key's drop did.
        unsafe { ManuallyDrop::drop(&mut self.value) };
        if let Err(payload) = key {
            resume_unwind(payload);
        }
    }
}

/// [`Node`] with its value already dropped: what the busted testing knob retires. Same
/// layout.
#[repr(C)]
pub(crate) struct Shell<K, V> {
    hash: u64,
    next: AtomicPtr<Node<K, V>>,
    key: K,
    value: ManuallyDrop<V>,
}

/// Drop `node`'s value now and return the shell (same allocation) for a later free: the
/// busted testing knob.
///
/// # Safety
///
/// `node` is unlinked and owned; nobody reads its value afterwards in a correct program (the
/// knob exists to show that the torture notices when somebody does).
pub(crate) unsafe fn drop_value_now<K, V>(node: *mut Node<K, V>) -> *mut Shell<K, V> {
    // SAFETY: owned node; its value is dropped exactly once here, and the shell's
    // `ManuallyDrop` keeps the later free from dropping it again.
    unsafe { ptr::drop_in_place(&mut (*node).value) };
    node.cast()
}
