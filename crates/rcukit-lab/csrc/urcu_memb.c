/* liburcu, memb flavor (membarrier-based readers): see lab_c_peers.h. */
#define _LGPL_SOURCE
#include <urcu/urcu-memb.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "lab_c_peers.h"

uint64_t lab_urcu_memb_read_loop(uint64_t *const *pp, uint64_t iters)
{
	uint64_t sum = 0;

	urcu_memb_register_thread();
	for (uint64_t i = 0; i < iters; i++) {
		urcu_memb_read_lock();
		sum += *rcu_dereference(*(uint64_t **)pp);
		urcu_memb_read_unlock();
	}
	urcu_memb_unregister_thread();
	return sum;
}

void lab_urcu_memb_busy_reader(const volatile int *stop)
{
	urcu_memb_register_thread();
	while (!*stop) {
		urcu_memb_read_lock();
		urcu_memb_read_unlock();
	}
	urcu_memb_unregister_thread();
}

void lab_urcu_memb_synchronize(void)
{
	urcu_memb_synchronize_rcu();
}

struct lab_obj {
	struct rcu_head head;
	uint64_t payload[5]; /* 56 bytes with the head, as every peer's object */
};

static _Atomic uint64_t memb_freed;

static void lab_memb_free(struct rcu_head *head)
{
	free(caa_container_of(head, struct lab_obj, head));
	atomic_fetch_add_explicit(&memb_freed, 1, memory_order_relaxed);
}

uint64_t lab_urcu_memb_retire(uint64_t n)
{
	uint64_t before = atomic_load(&memb_freed);

	urcu_memb_register_thread();
	for (uint64_t i = 0; i < n; i++) {
		struct lab_obj *o = malloc(sizeof(*o));
		if (!o)
			break;
		o->payload[0] = i;
		urcu_memb_call_rcu(&o->head, lab_memb_free);
	}
	urcu_memb_unregister_thread();
	urcu_memb_barrier();
	return atomic_load(&memb_freed) - before;
}

/* The shape of liburcu's own test_urcu benchmark: readers dereference a shared pointer in
 * back-to-back read-side sections and check the value; the writer publishes a new value,
 * waits for a grace period, poisons and frees the old one. */
static uint64_t *memb_shape_ptr;

uint64_t lab_urcu_memb_shape_reader(const volatile int *stop)
{
	uint64_t reads = 0;

	urcu_memb_register_thread();
	while (!*stop) {
		urcu_memb_read_lock();
		uint64_t *p = rcu_dereference(memb_shape_ptr);
		if (p && *p != 8)
			abort(); /* read after free: the grace period was too short */
		urcu_memb_read_unlock();
		reads++;
	}
	urcu_memb_unregister_thread();
	return reads;
}

uint64_t lab_urcu_memb_shape_writer(const volatile int *stop)
{
	uint64_t gps = 0;

	while (!*stop) {
		uint64_t *new = malloc(sizeof(*new));
		if (!new)
			abort();
		*new = 8;
		uint64_t *old = rcu_xchg_pointer(&memb_shape_ptr, new);
		urcu_memb_synchronize_rcu();
		if (old) {
			*old = 0;
			free(old);
		}
		gps++;
	}
	return gps;
}
