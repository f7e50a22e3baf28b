/*
 * Thin shims around liburcu (memb and qsbr flavors, and its rculfhash hash table) and
 * Concurrency Kit's ck_epoch for rcukit-lab's `peers` and `conntrack` experiments (cargo
 * feature `c-peers`).
 *
 * liburcu's read-side primitives are static inline functions (with _LGPL_SOURCE) or macros,
 * so they cannot be called through FFI one by one; and a per-operation FFI call would cost
 * more than the primitive itself. Each shim therefore runs a whole measurement loop in C and
 * returns, and Rust times the call. (The rculfhash shim is the exception: a hash-table lookup
 * costs far more than a function call, so Rust calls one lookup at a time, each under its own
 * read lock, from the same packet loop as the Rust maps.)
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

/* liburcu's test_urcu shape: readers loop read-side sections that dereference a shared
 * pointer and check its value (aborting on a value that was freed) until *stop != 0, and return
 * how many they made; qsbr readers announce a quiescent state every `qs_every` sections. The
 * writer loops publish, synchronize_rcu, poison and free the old value until *stop != 0, and
 * returns its grace periods. */
uint64_t lab_urcu_memb_shape_reader(const volatile int *stop);
uint64_t lab_urcu_memb_shape_writer(const volatile int *stop);
uint64_t lab_urcu_qsbr_shape_reader(const volatile int *stop, uint64_t qs_every);
uint64_t lab_urcu_qsbr_shape_writer(const volatile int *stop);

/* Retire `n` 56-byte objects through the flavor's callback API, then wait for all of them
 * (rcu_barrier / ck_epoch_barrier). Returns the number of objects freed by the callbacks. */
uint64_t lab_urcu_memb_retire(uint64_t n);
uint64_t lab_ck_epoch_retire(uint64_t n);

/* conntrack: liburcu's rculfhash (memb flavor) as a flow table (lfht.c). Keys are two 64-bit
 * words; the hash is lab_lfht_hash, the Rust FlowHasher's function. Every thread that calls
 * lookup, insert, remove or len is registered (lab_lfht_register_thread) while it does;
 * lab_lfht_destroy is called from an unregistered thread and returns the number of flows freed
 * over the table's life. */
struct lab_lfht;
uint64_t lab_lfht_hash(uint64_t w0, uint64_t w1);
struct lab_lfht *lab_lfht_new(uint64_t capacity);
void lab_lfht_register_thread(void);
void lab_lfht_unregister_thread(void);
/* The flow's id (and *aux = its expiry), or UINT64_MAX when absent; under one read lock. */
uint64_t lab_lfht_lookup(struct lab_lfht *t, uint64_t w0, uint64_t w1, uint64_t *aux);
/* Insert or replace (1 when a flow was replaced: the old node is freed after a grace period). */
int lab_lfht_insert(struct lab_lfht *t, uint64_t w0, uint64_t w1, uint64_t id,
		    uint64_t created, uint64_t expires, uint64_t packets, uint64_t bytes);
/* 1 when the flow was there and is now removed (freed after a grace period). */
int lab_lfht_remove(struct lab_lfht *t, uint64_t w0, uint64_t w1);
uint64_t lab_lfht_len(struct lab_lfht *t);
uint64_t lab_lfht_destroy(struct lab_lfht *t);

#endif
