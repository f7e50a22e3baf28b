//! A shard's intake queue: many producers, one consumer (the shard's worker), never blocking.
//!
//! Normally this is crossbeam's lock-free `SegQueue`, which is linearizable: an entry pushed
//! before another (in happens-before order) is popped before it. The barrier relies on that: a
//! marker pushed after a callback is popped after it. Under loom, a loom mutex around a
//! `VecDeque` stands in for it, with the same FIFO semantics, so that the model checks the
//! worker's protocol rather than crossbeam's internals (which loom cannot see).

#[cfg(not(loom))]
pub(crate) struct Intake<T>(crossbeam_queue::SegQueue<T>);

#[cfg(not(loom))]
impl<T> Intake<T> {
    pub(crate) fn new() -> Self {
        Intake(crossbeam_queue::SegQueue::new())
    }

    /// Append an entry. Contains a sequentially consistent read-modify-write.
    #[inline]
    pub(crate) fn push(&self, value: T) {
        self.0.push(value);
    }

    pub(crate) fn pop(&self) -> Option<T> {
        self.0.pop()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(loom)]
pub(crate) struct Intake<T>(crate::sync::Mutex<std::collections::VecDeque<T>>);

#[cfg(loom)]
impl<T> Intake<T> {
    pub(crate) fn new() -> Self {
        Intake(crate::sync::Mutex::new(std::collections::VecDeque::new()))
    }

    pub(crate) fn push(&self, value: T) {
        self.0.lock().push_back(value);
    }

    pub(crate) fn pop(&self) -> Option<T> {
        self.0.lock().pop_front()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }
}
