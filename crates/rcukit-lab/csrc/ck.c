/* Concurrency Kit's ck_epoch: see lab_c_peers.h. One epoch object for the process; every
 * call takes a record (recycled when possible) and gives it back. */
#include <ck_epoch.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "lab_c_peers.h"

static ck_epoch_t lab_epoch;
static pthread_once_t lab_epoch_once = PTHREAD_ONCE_INIT;

static void lab_epoch_init(void)
{
	ck_epoch_init(&lab_epoch);
}

static ck_epoch_record_t *lab_record(void)
{
	ck_epoch_record_t *r;

	pthread_once(&lab_epoch_once, lab_epoch_init);
	r = ck_epoch_recycle(&lab_epoch, NULL);
	if (r)
		return r;
	r = malloc(sizeof(*r));
	if (!r)
		abort();
	ck_epoch_register(&lab_epoch, r, NULL);
	return r;
}

uint64_t lab_ck_epoch_read_loop(uint64_t *const *pp, uint64_t iters)
{
	ck_epoch_record_t *r = lab_record();
	uint64_t sum = 0;

	for (uint64_t i = 0; i < iters; i++) {
		ck_epoch_begin(r, NULL);
		sum += *ck_pr_load_ptr(pp);
		ck_epoch_end(r, NULL);
	}
	ck_epoch_unregister(r);
	return sum;
}

void lab_ck_epoch_busy_reader(const volatile int *stop)
{
	ck_epoch_record_t *r = lab_record();

	while (!*stop) {
		ck_epoch_begin(r, NULL);
		ck_epoch_end(r, NULL);
	}
	ck_epoch_unregister(r);
}

void lab_ck_epoch_synchronize(void)
{
	ck_epoch_record_t *r = lab_record();

	ck_epoch_synchronize(r);
	ck_epoch_unregister(r);
}

struct lab_obj {
	ck_epoch_entry_t entry;
	uint64_t payload[5];
};

static _Atomic uint64_t ck_freed;

static void lab_ck_free(ck_epoch_entry_t *e)
{
	free((struct lab_obj *)e);
	atomic_fetch_add_explicit(&ck_freed, 1, memory_order_relaxed);
}

uint64_t lab_ck_epoch_retire(uint64_t n)
{
	ck_epoch_record_t *r = lab_record();
	uint64_t before = atomic_load(&ck_freed);

	for (uint64_t i = 0; i < n; i++) {
		struct lab_obj *o = malloc(sizeof(*o));
		if (!o)
			break;
		o->payload[0] = i;
		ck_epoch_call(r, &o->entry, lab_ck_free);
		/* ck_epoch_call only queues: reclaim opportunistically, as ck's users do. */
		if ((i & 1023) == 1023)
			ck_epoch_poll(r);
	}
	ck_epoch_barrier(r);
	ck_epoch_unregister(r);
	return atomic_load(&ck_freed) - before;
}
