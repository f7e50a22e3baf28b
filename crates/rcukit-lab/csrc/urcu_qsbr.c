/* liburcu, qsbr flavor (quiescent-state-based readers): see lab_c_peers.h. */
#define _LGPL_SOURCE
#include <urcu/urcu-qsbr.h>
#include <stdlib.h>
#include "lab_c_peers.h"

uint64_t lab_urcu_qsbr_read_loop(uint64_t *const *pp, uint64_t iters, uint64_t qs_every)
{
	uint64_t sum = 0, left;

	if (qs_every == 0)
		qs_every = 1;
	left = qs_every;
	urcu_qsbr_register_thread();
	for (uint64_t i = 0; i < iters; i++) {
		urcu_qsbr_read_lock();
		sum += *rcu_dereference(*(uint64_t **)pp);
		urcu_qsbr_read_unlock();
		/* A countdown, not a modulo: a division per section would cost more than the
		 * section itself. */
		if (--left == 0) {
			urcu_qsbr_quiescent_state();
			left = qs_every;
		}
	}
	urcu_qsbr_unregister_thread();
	return sum;
}

void lab_urcu_qsbr_busy_reader(const volatile int *stop)
{
	urcu_qsbr_register_thread();
	while (!*stop) {
		urcu_qsbr_read_lock();
		urcu_qsbr_read_unlock();
		urcu_qsbr_quiescent_state();
	}
	urcu_qsbr_unregister_thread();
}

void lab_urcu_qsbr_synchronize(void)
{
	urcu_qsbr_synchronize_rcu();
}

/* test_urcu's shape for the qsbr flavor: readers announce a quiescent state every
 * `qs_every` sections; the writer is not registered. See lab_c_peers.h. */
static uint64_t *qsbr_shape_ptr;

uint64_t lab_urcu_qsbr_shape_reader(const volatile int *stop, uint64_t qs_every)
{
	uint64_t reads = 0, left;

	if (qs_every == 0)
		qs_every = 1;
	left = qs_every;
	urcu_qsbr_register_thread();
	while (!*stop) {
		urcu_qsbr_read_lock();
		uint64_t *p = rcu_dereference(qsbr_shape_ptr);
		if (p && *p != 8)
			abort(); /* read after free */
		urcu_qsbr_read_unlock();
		reads++;
		if (--left == 0) {
			urcu_qsbr_quiescent_state();
			left = qs_every;
		}
	}
	urcu_qsbr_unregister_thread();
	return reads;
}

uint64_t lab_urcu_qsbr_shape_writer(const volatile int *stop)
{
	uint64_t gps = 0;

	while (!*stop) {
		uint64_t *new = malloc(sizeof(*new));
		if (!new)
			abort();
		*new = 8;
		uint64_t *old = rcu_xchg_pointer(&qsbr_shape_ptr, new);
		urcu_qsbr_synchronize_rcu();
		if (old) {
			*old = 0;
			free(old);
		}
		gps++;
	}
	return gps;
}
