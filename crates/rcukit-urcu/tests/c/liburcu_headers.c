/*
 * A program written for liburcu, with liburcu's own headers and without _LGPL_SOURCE: the
 * memb flavor, or the qsbr flavor with -DQSBR. It reads, publishes, waits for grace periods,
 * queues callbacks and deferred work, and uses liburcu-cds's rculfhash (which calls the flavor
 * through its rcu_flavor_struct). Its first argument says which library must be running it:
 * "rcukit" (checked in /proc/self/maps) or "liburcu".
 */
#ifdef QSBR
#include <urcu-qsbr.h>
#else
#include <urcu.h> /* the memb flavor, with liburcu's unprefixed names */
#endif
#include <urcu/rculfhash.h>

#include "check.h"
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

enum { LIVE = 0x600d, POISON = 0xdead, READERS = 2, KEYS = 2000 };

struct obj {
    int value;
    struct rcu_head head;
};

struct entry {
    unsigned long key;
    struct cds_lfht_node node;
    struct rcu_head head;
};

static struct obj *current;
static atomic_bool stop;
static atomic_long reads;
static atomic_int freed;
static struct cds_lfht *table;

static struct obj *fresh(void) {
    struct obj *obj = malloc(sizeof *obj);
    CHECK(obj != NULL);
    obj->value = LIVE;
    return obj;
}

static void poison_and_free(struct rcu_head *head) {
    struct obj *obj = caa_container_of(head, struct obj, head);
    CHECK_EQ(obj->value, LIVE);
    obj->value = POISON;
    free(obj);
    atomic_fetch_add(&freed, 1);
}

static void deferred_free(void *p) {
    poison_and_free(&((struct obj *)p)->head);
}

static int match(struct cds_lfht_node *node, const void *key) {
    return caa_container_of(node, struct entry, node)->key == *(const unsigned long *)key;
}

static void free_entry(struct rcu_head *head) {
    free(caa_container_of(head, struct entry, head));
}

static void *reader(void *arg) {
    (void)arg;
    rcu_register_thread();
    long n = 0;
    /* At least one pass, however late the scheduler runs this thread. */
    do {
        rcu_read_lock();
        struct obj *obj = rcu_dereference(current);
        CHECK_EQ(obj->value, LIVE);
        unsigned long key = (unsigned long)(n % KEYS);
        struct cds_lfht_iter iter;
        cds_lfht_lookup(table, key, match, &key, &iter);
        struct cds_lfht_node *node = cds_lfht_iter_get_node(&iter);
        if (node != NULL) CHECK_EQ(caa_container_of(node, struct entry, node)->key, key);
        rcu_read_unlock();
        n++;
#ifdef QSBR
        if (n % 64 == 0) rcu_quiescent_state();
#endif
    } while (!atomic_load_explicit(&stop, memory_order_relaxed));
    atomic_fetch_add(&reads, n);
    rcu_unregister_thread();
    return NULL;
}

static int mapped(const char *name) {
    FILE *maps = fopen("/proc/self/maps", "r");
    CHECK(maps != NULL);
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof line, maps) != NULL) found |= strstr(line, name) != NULL;
    fclose(maps);
    return found;
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    if (strcmp(argv[1], "rcukit") == 0) CHECK(mapped("liburcu-rcukit.so.8"));
    else CHECK(strcmp(argv[1], "liburcu") == 0 && !mapped("liburcu-rcukit.so.8"));

    rcu_register_thread();
    CHECK_EQ(rcu_defer_register_thread(), 0); /* liburcu needs it before defer_rcu() */
    table = cds_lfht_new(1, 1, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING, NULL);
    CHECK(table != NULL);
    rcu_assign_pointer(current, fresh());
    pthread_t threads[READERS];
    for (int i = 0; i < READERS; i++) threads[i] = spawn(reader, NULL);

    /* Updates: grace periods, callbacks, deferred work. */
    for (int i = 0; i < 600; i++) {
        struct obj *old = rcu_xchg_pointer(&current, fresh());
        if (i % 3 == 0) {
            synchronize_rcu();
            poison_and_free(&old->head);
        } else if (i % 3 == 1) {
            call_rcu(&old->head, poison_and_free);
        } else {
            defer_rcu(deferred_free, old);
        }
    }
    /* The hash table grows and shrinks under the readers. */
    for (unsigned long key = 0; key < KEYS; key++) {
        struct entry *entry = malloc(sizeof *entry);
        CHECK(entry != NULL);
        entry->key = key;
        cds_lfht_node_init(&entry->node);
        rcu_read_lock();
        cds_lfht_add(table, key, &entry->node);
        rcu_read_unlock();
    }
    for (unsigned long key = 0; key < KEYS; key++) {
        struct cds_lfht_iter iter;
        rcu_read_lock();
        cds_lfht_lookup(table, key, match, &key, &iter);
        struct cds_lfht_node *node = cds_lfht_iter_get_node(&iter);
        CHECK(node != NULL);
        CHECK_EQ(cds_lfht_del(table, node), 0);
        rcu_read_unlock();
        call_rcu(&caa_container_of(node, struct entry, node)->head, free_entry);
    }
    rcu_barrier();
    rcu_defer_barrier();
    CHECK_EQ(atomic_load(&freed), 600);

    atomic_store(&stop, 1);
    for (int i = 0; i < READERS; i++) pthread_join(threads[i], NULL);
    CHECK(atomic_load(&reads) > 0);
#ifdef QSBR
    rcu_thread_offline();
#endif
    CHECK_EQ(cds_lfht_destroy(table, NULL), 0);
    rcu_defer_unregister_thread();
    rcu_unregister_thread();
    printf("ok: %ld reads on %s\n", atomic_load(&reads), argv[1]);
    return 0;
}
