/* liburcu, qsbr flavor (quiescent-state-based readers): see lab_c_peers.h. */
#define _LGPL_SOURCE
#include <urcu/urcu-qsbr.h>
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
