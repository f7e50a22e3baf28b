/*
 * Thin shims around liburcu (memb and qsbr flavors) and Concurrency Kit's ck_epoch for
 * rcukit-lab's `peers` experiment (cargo feature `c-peers`).
 *
 * liburcu's read-side primitives are static inline functions (with _LGPL_SOURCE) or macros,
 * so they cannot be called through FFI one by one; and a per-operation FFI call would cost
 * more than the primitive itself. Each shim therefore runs a whole measurement loop in C and
 * returns, and Rust times the call.
 */
#ifndef RCUKIT_LAB_C_PEERS_H
#define RCUKIT_LAB_C_PEERS_H

#include <stdint.h>

/* Read-side loops: `iters` times enter a read-side section, load *pp and add the pointee,
 * leave. Returns the sum (so the loop cannot be optimised away). The calling thread is
 * registered for the duration of the call. */
uint64_t lab_urcu_memb_read_loop(uint64_t *const *pp, uint64_t iters);
uint64_t lab_urcu_qsbr_read_loop(uint64_t *const *pp, uint64_t iters, uint64_t qs_every);
uint64_t lab_ck_epoch_read_loop(uint64_t *const *pp, uint64_t iters);

/* Busy readers for grace-period latency: loop short read-side sections until *stop != 0. */
void lab_urcu_memb_busy_reader(const volatile int *stop);
void lab_urcu_qsbr_busy_reader(const volatile int *stop);
void lab_ck_epoch_busy_reader(const volatile int *stop);

/* One grace period (the caller is not a reader). */
void lab_urcu_memb_synchronize(void);
void lab_urcu_qsbr_synchronize(void);
void lab_ck_epoch_synchronize(void);

/* Retire `n` 64-byte objects through the flavor's callback API, then wait for all of them
 * (rcu_barrier / ck_epoch_barrier). Returns the number of objects freed by the callbacks. */
uint64_t lab_urcu_memb_retire(uint64_t n);
uint64_t lab_ck_epoch_retire(uint64_t n);

#endif
