//! The count of live reader handles per domain: the reader handles add to it, and freeing a
//! domain checks it. Below both (`reader` uses `domain`, and `domain`'s free needs the count).

use crate::boundary::FFI;
use rcukit::Rcu;
use rcukit_ffi::fork_lock::ForkLock;
use std::collections::HashMap;

/// Live handles per domain id, so that freeing a domain with live handles aborts instead of
/// leaving them dangling (ids are never reused). Held across `fork()` by the forking thread
/// (see [`ForkLock`]): a child forked while another thread makes or frees a handle finds it
/// unlocked.
static LIVE: ForkLock<Option<HashMap<u64, usize>>> = ForkLock::new(None);

pub(crate) fn count_live(domain: u64, up: bool) {
    let mut live = LIVE.lock();
    let counts = live.get_or_insert_with(HashMap::new);
    let count = counts.entry(domain).or_insert(0);
    if up {
        *count += 1;
    } else {
        *count -= 1;
        if *count == 0 {
            counts.remove(&domain);
        }
    }
}

/// Abort from `rcukit_domain_free` if `domain` still has live handles.
pub(crate) fn check_no_readers(domain: &Rcu) {
    let live = LIVE.lock();
    let count = live
        .as_ref()
        .and_then(|counts| counts.get(&domain.id()).copied())
        .unwrap_or(0);
    if count > 0 {
        FFI.misuse(
            "rcukit_domain_free",
            &format!(
                "{count} reader(s) of this domain are still alive; free them with \
                 rcukit_reader_free() on their threads first"
            ),
        );
    }
}
