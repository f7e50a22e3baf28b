/*
 * Callbacks: chains (a callback that queues itself again), barrier, several producers at
 * once, per-thread order, callbacks that call back into the API, and a domain freed by one
 * of its own callbacks.
 *
 *   callbacks chain | producers | order | reentry | free-from-callback
 */
#include "check.h"
#include <rcukit/rcukit.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#define CONTAINER(ptr, type, field) ((type *)((char *)(ptr) - offsetof(type, field)))

static rcukit_domain *domain;

/* --- chain: one head queued again and again by its own callback. */
struct chain {
    rcukit_head head;
    int remaining;
    atomic_int done;
};

static void chain_step(rcukit_head *head) {
    struct chain *chain = CONTAINER(head, struct chain, head);
    if (--chain->remaining > 0) rcukit_call(domain, head, chain_step);
    else atomic_store(&chain->done, 1);
}

static void chain(void) {
    struct chain chain = {.remaining = 50};
    rcukit_call(domain, &chain.head, chain_step);
    /* A barrier waits for the callbacks queued before it; the chain needs several rounds. */
    int rounds = 0;
    while (!atomic_load(&chain.done)) {
        rcukit_barrier(domain);
        CHECK(++rounds <= 1000);
    }
    CHECK_EQ(chain.remaining, 0);
}

/* --- producers: several threads queue at once; one barrier waits for all. */
enum { PRODUCERS = 4, PER_PRODUCER = 5000 };
static atomic_long counted;

struct counted {
    rcukit_head head;
};

static void count_and_free(rcukit_head *head) {
    atomic_fetch_add(&counted, 1);
    free(CONTAINER(head, struct counted, head));
}

static void *producer(void *arg) {
    (void)arg;
    for (int i = 0; i < PER_PRODUCER; i++) {
        struct counted *c = malloc(sizeof *c);
        CHECK(c != NULL);
        rcukit_call(domain, &c->head, count_and_free);
    }
    return NULL;
}

static void producers(void) {
    pthread_t threads[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) threads[i] = spawn(producer, NULL);
    for (int i = 0; i < PRODUCERS; i++) pthread_join(threads[i], NULL);
    rcukit_barrier(domain);
    CHECK_EQ(atomic_load(&counted), PRODUCERS * PER_PRODUCER);
    rcukit_stats stats;
    rcukit_domain_stats(domain, &stats);
    CHECK(stats.callbacks_invoked >= PRODUCERS * PER_PRODUCER);
    CHECK_EQ(stats.callbacks_pending, 0);
}

/* --- order: callbacks queued by one thread run in the order queued. */
enum { ORDERED = 10000 };
static long next_expected;

struct ordered {
    rcukit_head head;
    long seq;
};

static void check_order(rcukit_head *head) {
    struct ordered *o = CONTAINER(head, struct ordered, head);
    CHECK_EQ(o->seq, next_expected);
    next_expected++;
}

static void order(void) {
    struct ordered *items = calloc(ORDERED, sizeof *items);
    CHECK(items != NULL);
    for (long i = 0; i < ORDERED; i++) {
        items[i].seq = i;
        rcukit_call_sized(domain, &items[i].head, check_order, sizeof items[i]);
    }
    rcukit_barrier(domain);
    CHECK_EQ(next_expected, ORDERED);
    free(items);
}

/* --- reentry: a callback reads, queues, and waits for grace periods of its own domain. */
static atomic_int reentered;

static void inner_done(rcukit_head *head) {
    (void)head;
    atomic_fetch_add(&reentered, 10);
}

static rcukit_head inner_head;

static void reenter(rcukit_head *head) {
    (void)head;
    rcukit_guard guard = rcukit_read_lock(domain);
    CHECK(rcukit_is_reading(domain));
    rcukit_read_unlock(&guard);
    rcukit_synchronize_expedited(domain);
    rcukit_synchronize(domain);
    rcukit_cookie cookie = rcukit_get_state(domain);
    rcukit_cond_synchronize(domain, cookie);
    rcukit_call(domain, &inner_head, inner_done);
    rcukit_barrier(rcukit_global()); /* another domain's barrier is fine */
    atomic_fetch_add(&reentered, 1);
}

static void reentry(void) {
    rcukit_head head;
    rcukit_call(domain, &head, reenter);
    int rounds = 0;
    while (atomic_load(&reentered) != 11) {
        rcukit_barrier(domain);
        CHECK(++rounds <= 1000);
    }
}

/* --- free-from-callback: the last callback of a domain frees it. */
static atomic_int ran;
static rcukit_domain *doomed;

static void tick(rcukit_head *head) {
    (void)head;
    atomic_fetch_add(&ran, 1);
}

static void free_domain(rcukit_head *head) {
    (void)head;
    rcukit_domain_free(doomed);
    atomic_fetch_add(&ran, 1000);
}

static void free_from_callback(void) {
    doomed = rcukit_domain_new(NULL);
    CHECK(doomed != NULL);
    static rcukit_head heads[101];
    for (int i = 0; i < 100; i++) rcukit_call(doomed, &heads[i], tick);
    rcukit_call(doomed, &heads[100], free_domain);
    uint64_t start = now_ns();
    while (atomic_load(&ran) != 1100) {
        CHECK(now_ns() - start < 20ull * 1000000000ull);
        sleep_ms(1);
    }
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    domain = rcukit_domain_new(NULL);
    CHECK(domain != NULL);
    const char *which = argv[1];
    if (strcmp(which, "chain") == 0) chain();
    else if (strcmp(which, "producers") == 0) producers();
    else if (strcmp(which, "order") == 0) order();
    else if (strcmp(which, "reentry") == 0) reentry();
    else if (strcmp(which, "free-from-callback") == 0) free_from_callback();
    else {
        fprintf(stderr, "unknown test '%s'\n", which);
        return 2;
    }
    rcukit_domain_free(domain);
    printf("ok: %s\n", which);
    return 0;
}
