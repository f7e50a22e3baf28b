//! The callbacks benchmark over mimalloc instead of the system allocator: with glibc malloc,
//! freeing on the worker what the producer allocated dominates the end-to-end cost; here the
//! allocator is out of the way and the figures show the callback machinery itself.
//!
//! Run with `cargo bench -p rcukit --bench callbacks_mimalloc` (`-- --quick` for a short run).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[allow(dead_code)]
#[path = "callbacks.rs"]
mod callbacks;

fn main() {
    callbacks::run("mimalloc");
}
