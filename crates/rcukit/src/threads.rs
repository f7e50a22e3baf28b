#![doc = include_str!("threads.md")]

use std::io;

/// The stack of each rcukit thread: the size `std::thread` uses by default.
#[cfg(all(unix, not(miri)))]
const STACK_SIZE: usize = 2 << 20;

/// One of rcukit's own threads. Dropping it without [`join`](Thread::join) detaches it.
pub(crate) struct Thread {
    #[cfg(all(unix, not(miri)))]
    id: Option<libc::pthread_t>,
    #[cfg(not(all(unix, not(miri))))]
    handle: Option<std::thread::JoinHandle<()>>,
}

/// What a new thread starts with.
#[cfg(all(unix, not(miri)))]
struct Start {
    name: std::ffi::CString,
    body: Box<dyn FnOnce() + Send>,
}

/// Start a thread named `name` (the kernel keeps the first 15 bytes) that runs `body`.
pub(crate) fn spawn(name: String, body: impl FnOnce() + Send + 'static) -> io::Result<Thread> {
    #[cfg(all(unix, not(miri)))]
    {
        spawn_pthread(name, Box::new(body))
    }
    #[cfg(not(all(unix, not(miri))))]
    {
        let handle = std::thread::Builder::new().name(name).spawn(body)?;
        Ok(Thread {
            handle: Some(handle),
        })
    }
}

#[cfg(all(unix, not(miri)))]
fn spawn_pthread(name: String, body: Box<dyn FnOnce() + Send>) -> io::Result<Thread> {
    // A name with an interior NUL keeps what comes before it.
    let name = std::ffi::CString::new(name).unwrap_or_else(|e| {
        let end = e.nul_position();
        std::ffi::CString::new(&e.into_vec()[..end]).expect("no NUL before the first one")
    });
    let start = Box::into_raw(Box::new(Start { name, body }));
    // SAFETY: `attr` is initialised before use and destroyed after; `pthread_create` gets a
    // function that takes back the box it is given, exactly once (and only if the thread was
    // created: on failure the box is ours again).
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        let r = libc::pthread_attr_init(&mut attr);
        if r != 0 {
            drop(Box::from_raw(start));
            return Err(io::Error::from_raw_os_error(r));
        }
        let stack = STACK_SIZE.max(libc::PTHREAD_STACK_MIN);
        let _ = libc::pthread_attr_setstacksize(&mut attr, stack);
        let mut id: libc::pthread_t = std::mem::zeroed();
        let r = libc::pthread_create(&mut id, &attr, thread_start, start.cast());
        libc::pthread_attr_destroy(&mut attr);
        if r != 0 {
            drop(Box::from_raw(start));
            return Err(io::Error::from_raw_os_error(r));
        }
        Ok(Thread { id: Some(id) })
    }
}

#[cfg(all(unix, not(miri)))]
extern "C" fn thread_start(data: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `data` is the box `spawn_pthread` leaked for this thread alone.
    let start = unsafe { Box::from_raw(data.cast::<Start>()) };
    let Start { name, body } = *start;
    set_name(&name);
    drop(name);
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        // Reported by the panic hook already. Its drop could panic again and unwind into the
        // C library: keep it.
        std::mem::forget(payload);
    }
    std::ptr::null_mut()
}

/// Name the calling thread (as `std` does for its threads).
#[cfg(all(unix, not(miri)))]
fn set_name(name: &std::ffi::CStr) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // Linux takes at most 15 bytes and a NUL, and refuses longer names.
        let bytes = name.to_bytes();
        let mut short = [0u8; 16];
        let n = bytes.len().min(15);
        short[..n].copy_from_slice(&bytes[..n]);
        // SAFETY: `short` is NUL-terminated; naming the calling thread has no other effect.
        unsafe { libc::pthread_setname_np(libc::pthread_self(), short.as_ptr().cast()) };
    }
    #[cfg(any(target_os = "macos", target_os = "ios"))]
    {
        // SAFETY: a NUL-terminated name for the calling thread.
        unsafe { libc::pthread_setname_np(name.as_ptr()) };
    }
    #[cfg(not(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios"
    )))]
    let _ = name;
}

/// The calling thread's name: the standard library's, or else the kernel's (rcukit's own
/// threads, and threads started outside Rust, have only that one).
pub(crate) fn current_name() -> String {
    if let Some(name) = std::thread::current().name() {
        return name.to_string();
    }
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
    {
        let mut buf = [0u8; 16];
        // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL-terminated, into `buf`.
        if unsafe { libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr()) } == 0 {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            return String::from_utf8_lossy(&buf[..end]).into_owned();
        }
    }
    "<unnamed>".to_string()
}

impl Thread {
    /// Wait for the thread to exit.
    pub(crate) fn join(mut self) {
        #[cfg(all(unix, not(miri)))]
        if let Some(id) = self.id.take() {
            // SAFETY: a thread we created and neither joined nor detached yet.
            let r = unsafe { libc::pthread_join(id, std::ptr::null_mut()) };
            debug_assert_eq!(r, 0, "pthread_join");
        }
        #[cfg(not(all(unix, not(miri))))]
        if let Some(handle) = self.handle.take() {
            let _ = handle.join(); // a panic was reported by the panic hook
        }
    }

    /// Is this the calling thread?
    pub(crate) fn is_calling_thread(&self) -> bool {
        #[cfg(all(unix, not(miri)))]
        {
            // SAFETY: comparing thread ids has no preconditions.
            self.id
                .is_some_and(|id| unsafe { libc::pthread_equal(id, libc::pthread_self()) } != 0)
        }
        #[cfg(not(all(unix, not(miri))))]
        {
            self.handle
                .as_ref()
                .is_some_and(|h| h.thread().id() == std::thread::current().id())
        }
    }

    /// In a child after `fork()`: the thread does not exist here, so it is neither joined nor
    /// detached (either would act on thread state copied from the parent).
    pub(crate) fn forget(mut self) {
        #[cfg(all(unix, not(miri)))]
        {
            self.id = None;
        }
        #[cfg(not(all(unix, not(miri))))]
        std::mem::forget(self.handle.take());
    }
}

impl Drop for Thread {
    fn drop(&mut self) {
        #[cfg(all(unix, not(miri)))]
        if let Some(id) = self.id.take() {
            // SAFETY: a thread we created and neither joined nor detached yet.
            unsafe { libc::pthread_detach(id) };
        }
        // A std JoinHandle detaches when dropped.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::Arc;

    #[test]
    fn a_thread_runs_its_body_and_is_joined() {
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let t = spawn("rcukit-test".into(), move || r.store(true, SeqCst)).unwrap();
        assert!(!t.is_calling_thread());
        t.join();
        assert!(ran.load(SeqCst));
    }

    #[test]
    fn a_panicking_body_is_contained() {
        let t = spawn("rcukit-panics".into(), || panic!("a body that panics")).unwrap();
        t.join(); // the process goes on
    }

    #[test]
    fn a_thread_knows_itself_and_may_be_detached() {
        let (tx, rx) = std::sync::mpsc::channel::<Thread>();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let t = spawn("rcukit-self".into(), move || {
            let me = rx.recv().unwrap();
            done_tx.send(me.is_calling_thread()).unwrap();
            drop(me); // detaches itself
        })
        .unwrap();
        tx.send(t).unwrap();
        assert!(done_rx.recv().unwrap());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_kernel_knows_the_thread_by_its_name() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = spawn("rcukit-a-very-long-name".into(), move || {
            let comm = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
            tx.send(comm).unwrap();
        })
        .unwrap();
        t.join();
        assert_eq!(rx.recv().unwrap().trim_end(), "rcukit-a-very-l");
        let (tx, rx) = std::sync::mpsc::channel();
        spawn("rcukit-named".into(), move || {
            tx.send(current_name()).unwrap()
        })
        .unwrap()
        .join();
        assert_eq!(rx.recv().unwrap(), "rcukit-named");
    }
}
