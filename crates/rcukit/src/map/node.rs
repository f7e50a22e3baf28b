//! The map's entries: [`Node`], how one is made, and the two forms in which an unlinked node
//! is retired ([`Retired`], and [`Shell`] for the busted testing knob).
//!
//! A retired node drops its key and its value *apart*, each contained: if the key's `Drop`
//! panics, the value is still dropped (outside any unwinding, so a second panic there cannot
//! abort the process), and then the key's panic goes on to the domain, which reports it. The
//! plain drop glue of `Node` would drop the value while unwinding from the key's panic, and a
//! value whose `Drop` panics as well would abort. A node dropped while another panic unwinds
//! (a write's own node, freed as the key's `Eq` panics) stops the key's panic there instead,
//! for the same reason: a panic out of a drop during unwinding aborts.

use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

/// One entry, immutable once published: the buckets point at it, it points at nothing. Its
/// hash is kept so that moving it to another table, or placing it in an iteration, never runs
/// the user's `Hash` (for `u64` keys and values the node is 24 bytes, which the common
/// allocators serve from a 32-byte block, as they would a node without the hash).
#[repr(C)]
pub(crate) struct Node<K, V> {
    pub(crate) hash: u64,
    pub(crate) key: K,
    pub(crate) value: V,
}

impl<K, V> Node<K, V> {
    pub(crate) fn new(hash: u64, key: K, value: V) -> *mut Node<K, V> {
        Box::into_raw(Box::new(Node { hash, key, value }))
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
            crate::report::resume_unless_unwinding(payload);
        }
    }
}

/// Nodes retired together, as one object of the domain: what a write that unlinked several
/// nodes (a [`MapRef`](super::MapRef) used for many writes, `retain`, `clear`) retires, so
/// that they cost one callback, not one each. Each node is dropped in its [`Retired`] form; a
/// panic in one still drops the others, and the first panic goes on to the domain (or stops
/// there, when the batch is dropped while another panic unwinds).
pub(crate) struct Batch<K, V> {
    nodes: Vec<*mut Node<K, V>>,
}

// SAFETY: the batch owns its nodes (unlinked, nobody else frees them), which are dropped on
// whatever thread drops the batch: as for `Box<Node<K, V>>`, that needs `K` and `V` to be
// `Send`.
unsafe impl<K: Send, V: Send> Send for Batch<K, V> {}

impl<K, V> Batch<K, V> {
    /// # Safety
    ///
    /// Each node came from [`Node::new`], is unlinked and owned by the caller, and is given up
    /// here (freed when the batch drops).
    pub(crate) unsafe fn new(nodes: Vec<*mut Node<K, V>>) -> Self {
        Batch { nodes }
    }
}

impl<K, V> Drop for Batch<K, V> {
    fn drop(&mut self) {
        crate::report::drop_each(self.nodes.drain(..).map(|node| {
            // SAFETY: owned and given up to the batch (constructor's contract); dropped
            // exactly once, in the drop-apart form (same box).
            unsafe { Box::from_raw(Retired::of(node)) }
        }));
    }
}

/// [`Node`] with its value already dropped: what the busted testing knob retires. Same
/// layout.
#[repr(C)]
pub(crate) struct Shell<K, V> {
    hash: u64,
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
