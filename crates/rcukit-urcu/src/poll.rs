//! liburcu's polling API with a one-word cookie: `start_poll_synchronize_rcu()` and
//! `poll_state_synchronize_rcu()`.
//!
//! liburcu's cookie is `struct urcu_gp_poll_state { unsigned long grace_period_id; }`, one
//! word; rcukit's `GpCookie` is three (both grace-period counters and the domain). So the word
//! handed to C is a *ticket*: a number that this module maps to the `GpCookie` it stands for.
//!
//! * `start_poll` takes `Flavor::start_poll()` (a snapshot for which a normal grace period is
//!   requested) and returns the ticket of an equal cookie still pending, or a new ticket (1,
//!   2, 3, ...) recorded with it. Equal cookies expire at the same moment, so sharing a
//!   ticket changes no answer.
//! * `poll(ticket)` answers with `Flavor::poll` of the ticket's cookie. A cookie that has
//!   expired is dropped from the table, so a ticket below the next one to be issued that is
//!   no longer in the table has expired: `true`. Ticket 0 (a zeroed cookie) is `true`; a
//!   ticket never issued is `false`.
//!
//! The table holds only cookies that have not been seen expired: a handful, since a cookie
//! expires within a grace period or two of being taken and equal ones share an entry. Its lock
//! is never held while rcukit is called (cookies are copied out first), so it is short and
//! cannot take part in a deadlock; it is held across `fork()` (see
//! [`fork_lock`](crate::fork_lock)).
//!
//! The difference from liburcu: liburcu counts grace periods with a chain of `call_rcu`
//! callbacks and compares counters under a mutex; here a cookie expires on the first normal
//! *or* expedited grace period that covers it (so usually sooner), and the ticket numbers are
//! not grace-period counts.

use crate::flavor::Flavor;
use crate::fork_lock::ForkLock;
use rcukit::GpCookie;
use std::ffi::c_ulong;

/// liburcu's `struct urcu_gp_poll_state`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct urcu_gp_poll_state {
    /// The ticket.
    pub grace_period_id: c_ulong,
}

/// One flavor's tickets.
struct Tickets {
    /// The next ticket to issue (tickets start at 1).
    next: c_ulong,
    /// Tickets whose cookie has not been seen expired, oldest first.
    pending: Vec<(c_ulong, GpCookie)>,
}

static TICKETS: [ForkLock<Tickets>; 2] =
    [ForkLock::new(Tickets::new()), ForkLock::new(Tickets::new())];

impl Tickets {
    const fn new() -> Tickets {
        Tickets {
            next: 1,
            pending: Vec::new(),
        }
    }
}

/// Forget the tickets whose cookie has expired (polled without the lock held).
fn forget_expired<F: Flavor>() {
    let table = &TICKETS[F::INDEX];
    let pending = table.lock().pending.clone();
    let expired: Vec<c_ulong> = pending
        .iter()
        .filter(|(_, cookie)| F::poll(cookie))
        .map(|(ticket, _)| *ticket)
        .collect();
    if !expired.is_empty() {
        table
            .lock()
            .pending
            .retain(|(ticket, _)| !expired.contains(ticket));
    }
}

/// `start_poll_synchronize_rcu()`.
pub(crate) fn start<F: Flavor>() -> urcu_gp_poll_state {
    forget_expired::<F>();
    let cookie = F::start_poll();
    let mut table = TICKETS[F::INDEX].lock();
    let ticket = match table.pending.iter().find(|(_, pending)| *pending == cookie) {
        Some((ticket, _)) => *ticket,
        None => {
            let ticket = table.next;
            table.next += 1;
            table.pending.push((ticket, cookie));
            ticket
        }
    };
    urcu_gp_poll_state {
        grace_period_id: ticket,
    }
}

/// `poll_state_synchronize_rcu(state)`.
pub(crate) fn poll<F: Flavor>(state: urcu_gp_poll_state) -> bool {
    let ticket = state.grace_period_id;
    if ticket == 0 {
        return true;
    }
    let table = &TICKETS[F::INDEX];
    let (issued, cookie) = {
        let table = table.lock();
        let cookie = table
            .pending
            .iter()
            .find(|(pending, _)| *pending == ticket)
            .map(|(_, cookie)| *cookie);
        (ticket < table.next, cookie)
    };
    match cookie {
        Some(cookie) => {
            let expired = F::poll(&cookie);
            if expired {
                table
                    .lock()
                    .pending
                    .retain(|(pending, _)| *pending != ticket);
            }
            expired
        }
        // Issued and no longer pending: seen expired. Never issued: not expired.
        None => issued,
    }
}
