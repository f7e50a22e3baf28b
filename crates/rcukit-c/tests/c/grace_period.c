/*
 * The grace-period guarantee, as liburcu's test_urcu checks it: readers assert that the
 * object they read has not been poisoned; the writer replaces it, waits for a grace period
 * (or queues a callback), then poisons and frees the old one.
 *
 *   grace_period WAIT DOMAIN
 *   WAIT:   sync | expedited | cond | poll | call | owned | reader
 *   DOMAIN: global | own
 *
 * `owned` readers use owned sections; `reader` readers use a reader handle per thread
 * (rcukit_reader_lock, nested with itself and with guard tokens), and the writer alternates
 * normal and expedited grace periods; the others use guard tokens.
 */
#include "check.h"
#include <rcukit/rcukit.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

enum { LIVE = 0x600d, POISON = 0xdead, READERS = 2 };

struct obj {
    int value;
    rcukit_head head;
};

static rcukit_domain *domain;
static _Atomic(struct obj *) current;
static atomic_bool stop;
static atomic_long reads;
static atomic_long freed;
static int owned_readers;
static int handle_readers;

static void poison_and_free(rcukit_head *head) {
    struct obj *obj = (struct obj *)((char *)head - offsetof(struct obj, head));
    CHECK_EQ(obj->value, LIVE);
    obj->value = POISON;
    free(obj);
    atomic_fetch_add(&freed, 1);
}

static void read_once(void) {
    struct obj *obj = atomic_load_explicit(&current, memory_order_acquire);
    CHECK_EQ(obj->value, LIVE);
    atomic_fetch_add_explicit(&reads, 1, memory_order_relaxed);
}

/* One section through the thread's reader handle, nested with itself and with a token. */
static void read_through(rcukit_reader *handle) {
    rcukit_reader_lock(handle);
    CHECK(rcukit_is_reading(domain));
    read_once();
    rcukit_reader_lock(handle);
    rcukit_guard token = rcukit_read_lock(domain);
    read_once();
    rcukit_reader_unlock(handle);
    rcukit_reader_unlock(handle); /* the token still holds the section */
    CHECK(rcukit_is_reading(domain));
    read_once();
    rcukit_read_unlock(&token);
    CHECK(!rcukit_is_reading(domain));
    /* The handle locked inside a token's section, the token unlocked first: the handle's
     * unlock ends the section. */
    token = rcukit_read_lock(domain);
    rcukit_reader_lock(handle);
    rcukit_read_unlock(&token);
    CHECK(rcukit_is_reading(domain));
    read_once();
    rcukit_reader_unlock(handle);
    CHECK(!rcukit_is_reading(domain));
}

static void *reader(void *arg) {
    (void)arg;
    rcukit_reader *handle = handle_readers ? rcukit_reader_new(domain) : NULL;
    /* At least one pass, however late the scheduler runs this thread. */
    do {
        if (handle != NULL) {
            read_through(handle);
        } else if (owned_readers) {
            rcukit_owned_guard section = rcukit_read_owned_begin(domain);
            read_once();
            rcukit_read_owned_end(&section);
        } else {
            rcukit_guard outer = rcukit_read_lock(domain);
            CHECK(rcukit_is_reading(domain));
            read_once();
            rcukit_guard inner = rcukit_read_lock(domain); /* nesting */
            read_once();
            rcukit_read_unlock(&outer); /* out of order: the section ends with the last one */
            CHECK(rcukit_is_reading(domain));
            read_once();
            rcukit_read_unlock(&inner);
            CHECK(!rcukit_is_reading(domain));
        }
    } while (!atomic_load_explicit(&stop, memory_order_relaxed));
    rcukit_reader_free(handle);
    return NULL;
}

static struct obj *fresh(void) {
    struct obj *obj = malloc(sizeof *obj);
    CHECK(obj != NULL);
    obj->value = LIVE;
    return obj;
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    const char *wait = argv[1];
    if (strcmp(argv[2], "global") == 0) {
        domain = rcukit_global();
    } else {
        rcukit_config *config = rcukit_config_new();
        CHECK(rcukit_config_set_name(config, "grace-period-test") == RCUKIT_OK);
        domain = rcukit_domain_new(config);
        rcukit_config_free(config);
        CHECK(domain != NULL);
    }
    owned_readers = strcmp(wait, "owned") == 0;
    handle_readers = strcmp(wait, "reader") == 0;
    atomic_store(&current, fresh());

    pthread_t threads[READERS];
    for (int i = 0; i < READERS; i++) threads[i] = spawn(reader, NULL);

    long updates = 2000; /* expedited, owned */
    if (strcmp(wait, "sync") == 0) updates = 200;
    if (strcmp(wait, "cond") == 0 || strcmp(wait, "poll") == 0 || handle_readers) updates = 400;
    if (strcmp(wait, "call") == 0) updates = 20000;
    for (long i = 0; i < updates; i++) {
        struct obj *old = atomic_exchange(&current, fresh());
        if (strcmp(wait, "call") == 0) {
            rcukit_call(domain, &old->head, poison_and_free);
            continue;
        }
        if (strcmp(wait, "sync") == 0) {
            rcukit_synchronize(domain);
        } else if (strcmp(wait, "expedited") == 0 || strcmp(wait, "owned") == 0) {
            rcukit_synchronize_expedited(domain);
        } else if (handle_readers) {
            if (i % 2) rcukit_synchronize_expedited(domain);
            else rcukit_synchronize(domain);
        } else if (strcmp(wait, "cond") == 0) {
            rcukit_cookie cookie = rcukit_get_state(domain);
            if (i % 2) rcukit_cond_synchronize_expedited(domain, cookie);
            else rcukit_cond_synchronize(domain, cookie);
            CHECK(rcukit_poll(domain, cookie));
        } else if (strcmp(wait, "poll") == 0) {
            rcukit_cookie cookie =
                i % 2 ? rcukit_start_poll_expedited(domain) : rcukit_start_poll(domain);
            while (!rcukit_poll(domain, cookie)) sleep_ms(0);
        } else {
            fprintf(stderr, "unknown wait '%s'\n", wait);
            return 2;
        }
        poison_and_free(&old->head);
    }
    if (strcmp(wait, "call") == 0) {
        rcukit_barrier(domain);
        CHECK_EQ(atomic_load(&freed), updates);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < READERS; i++) pthread_join(threads[i], NULL);
    CHECK(atomic_load(&reads) > 0);

    rcukit_stats stats;
    rcukit_domain_stats(domain, &stats);
    CHECK(stats.normal_gps + stats.expedited_gps > 0);
    if (strcmp(wait, "call") == 0) CHECK(stats.callbacks_invoked >= (uint64_t)updates);
    if (domain != rcukit_global()) rcukit_domain_free(domain);
    printf("ok: %ld updates, %ld reads\n", updates, atomic_load(&reads));
    return 0;
}
