//! The calling thread's identity, one register read: what a guard token and a reader handle
//! record of their thread, to check that they are used on it.

/// The calling thread's identity, as a guard's or reader handle's marker (never 0): its thread pointer, one
/// register read where the ELF TLS ABI defines it (on x86-64 the word at `%fs:0` is the thread
/// pointer itself; on AArch64 it is `TPIDR_EL0`), else `pthread_self()`. A call to
/// `pthread_self` on each lock and unlock was a measurable part of a read-side critical
/// section's cost through C.
#[inline(always)]
pub(crate) fn thread_marker() -> usize {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let pointer: usize;
        // SAFETY: the x86-64 ELF TLS ABI keeps the thread pointer at %fs:0 in every thread;
        // reading it has no side effect.
        unsafe {
            std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) pointer,
                options(nostack, readonly, preserves_flags));
        }
        pointer
    }
    #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
    {
        let pointer: usize;
        // SAFETY: TPIDR_EL0 holds the thread pointer, readable from user space; reading it has
        // no side effect.
        unsafe {
            std::arch::asm!("mrs {}, tpidr_el0", out(reg) pointer,
                options(nostack, nomem, preserves_flags));
        }
        pointer
    }
    #[cfg(not(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_os = "linux"
    )))]
    {
        // SAFETY: `pthread_self` has no preconditions.
        (unsafe { libc::pthread_self() }) as usize
    }
}
