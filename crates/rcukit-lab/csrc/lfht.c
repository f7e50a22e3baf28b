/*
 * liburcu's lock-free resizable hash table (rculfhash, `cds_lfht`) on the memb flavor, for
 * rcukit-lab's `conntrack` experiment (cargo feature `c-peers`). See lab_c_peers.h.
 *
 * A flow is keyed by two 64-bit words (the Rust side's `FlowKey::words`) and hashed with the
 * same function as the Rust maps' `FlowHasher` (`lab_lfht_hash`): a folded 64x64->128-bit
 * multiply per word. Lookups run under `urcu_memb_read_lock()`; removed nodes are freed with
 * `urcu_memb_call_rcu()`. Every thread that calls in registers first
 * (`lab_lfht_register_thread`).
 */
#define _LGPL_SOURCE
#include <urcu/urcu-memb.h>
#include <urcu/rculfhash.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "lab_c_peers.h"

#define LAB_SEED 0x243F6A8885A308D3ULL
#define LAB_MUL 0x9E3779B97F4A7C15ULL

static inline uint64_t lab_fold(uint64_t a, uint64_t b)
{
	unsigned __int128 p = (unsigned __int128)a * b;

	return (uint64_t)p ^ (uint64_t)(p >> 64);
}

uint64_t lab_lfht_hash(uint64_t w0, uint64_t w1)
{
	return lab_fold(lab_fold(LAB_SEED ^ w0, LAB_MUL) ^ w1, LAB_MUL);
}

struct lab_flow {
	struct cds_lfht_node node;
	uint64_t w0, w1;
	/* The flow record: the same fields as the Rust side's `FlowRecord`. */
	uint64_t id, created, expires, packets, bytes;
	struct lab_lfht *table;
	struct rcu_head rcu;
};

struct lab_lfht {
	struct cds_lfht *ht;
	_Atomic uint64_t freed;
};

struct lab_key {
	uint64_t w0, w1;
};

static int lab_match(struct cds_lfht_node *node, const void *key)
{
	const struct lab_flow *f = caa_container_of(node, struct lab_flow, node);
	const struct lab_key *k = key;

	return f->w0 == k->w0 && f->w1 == k->w1;
}

static void lab_flow_free(struct rcu_head *head)
{
	struct lab_flow *f = caa_container_of(head, struct lab_flow, rcu);

	atomic_fetch_add_explicit(&f->table->freed, 1, memory_order_relaxed);
	free(f);
}

struct lab_lfht *lab_lfht_new(uint64_t capacity)
{
	struct lab_lfht *t = calloc(1, sizeof(*t));
	unsigned long size = 1;

	if (!t)
		return NULL;
	while (size < capacity && size < (1UL << 30))
		size <<= 1;
	t->ht = cds_lfht_new_flavor(size, 1, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
				    &urcu_memb_flavor, NULL);
	if (!t->ht) {
		free(t);
		return NULL;
	}
	return t;
}

void lab_lfht_register_thread(void)
{
	urcu_memb_register_thread();
}

void lab_lfht_unregister_thread(void)
{
	urcu_memb_unregister_thread();
}

uint64_t lab_lfht_lookup(struct lab_lfht *t, uint64_t w0, uint64_t w1, uint64_t *aux)
{
	struct lab_key key = { w0, w1 };
	struct cds_lfht_iter iter;
	struct cds_lfht_node *node;
	uint64_t id = UINT64_MAX;

	urcu_memb_read_lock();
	cds_lfht_lookup(t->ht, lab_lfht_hash(w0, w1), lab_match, &key, &iter);
	node = cds_lfht_iter_get_node(&iter);
	if (node) {
		const struct lab_flow *f = caa_container_of(node, struct lab_flow, node);

		id = f->id;
		*aux = f->expires;
	}
	urcu_memb_read_unlock();
	return id;
}

int lab_lfht_insert(struct lab_lfht *t, uint64_t w0, uint64_t w1, uint64_t id,
		    uint64_t created, uint64_t expires, uint64_t packets, uint64_t bytes)
{
	struct lab_flow *f = malloc(sizeof(*f));
	struct lab_key key = { w0, w1 };
	struct cds_lfht_node *old;

	if (!f)
		abort();
	cds_lfht_node_init(&f->node);
	f->w0 = w0;
	f->w1 = w1;
	f->id = id;
	f->created = created;
	f->expires = expires;
	f->packets = packets;
	f->bytes = bytes;
	f->table = t;
	urcu_memb_read_lock();
	old = cds_lfht_add_replace(t->ht, lab_lfht_hash(w0, w1), lab_match, &key, &f->node);
	urcu_memb_read_unlock();
	if (old) {
		urcu_memb_call_rcu(&caa_container_of(old, struct lab_flow, node)->rcu,
				   lab_flow_free);
		return 1;
	}
	return 0;
}

int lab_lfht_remove(struct lab_lfht *t, uint64_t w0, uint64_t w1)
{
	struct lab_key key = { w0, w1 };
	struct cds_lfht_iter iter;
	struct cds_lfht_node *node;
	int removed = 0;

	urcu_memb_read_lock();
	cds_lfht_lookup(t->ht, lab_lfht_hash(w0, w1), lab_match, &key, &iter);
	node = cds_lfht_iter_get_node(&iter);
	if (node && cds_lfht_del(t->ht, node) == 0)
		removed = 1;
	urcu_memb_read_unlock();
	if (removed)
		urcu_memb_call_rcu(&caa_container_of(node, struct lab_flow, node)->rcu,
				   lab_flow_free);
	return removed;
}

uint64_t lab_lfht_len(struct lab_lfht *t)
{
	long before, after;
	unsigned long count;

	urcu_memb_read_lock();
	cds_lfht_count_nodes(t->ht, &before, &count, &after);
	urcu_memb_read_unlock();
	return count;
}

uint64_t lab_lfht_destroy(struct lab_lfht *t)
{
	struct cds_lfht_iter iter;
	struct cds_lfht_node *node;
	uint64_t freed;

	urcu_memb_register_thread();
	urcu_memb_read_lock();
	cds_lfht_for_each(t->ht, &iter, node) {
		if (cds_lfht_del(t->ht, node) == 0)
			urcu_memb_call_rcu(&caa_container_of(node, struct lab_flow, node)->rcu,
					   lab_flow_free);
	}
	urcu_memb_read_unlock();
	urcu_memb_unregister_thread();
	urcu_memb_barrier();
	if (cds_lfht_destroy(t->ht, NULL) != 0)
		abort();
	freed = atomic_load(&t->freed);
	free(t);
	return freed;
}
