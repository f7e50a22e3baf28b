/*
 * QSBR domains: registered readers that announce quiescent states (and go offline and back)
 * against a writer that waits for grace periods or queues callbacks; thread exit without
 * unregistering.
 *
 *   qsbr sync | expedited | call | poll | exit-offline
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

static rcukit_qsbr *qsbr;
static _Atomic(struct obj *) current;
static atomic_bool stop;
static atomic_long reads;
static atomic_int registered;

static void poison_and_free(rcukit_head *head) {
    struct obj *obj = (struct obj *)((char *)head - offsetof(struct obj, head));
    CHECK_EQ(obj->value, LIVE);
    obj->value = POISON;
    free(obj);
}

static void *reader(void *arg) {
    (void)arg;
    rcukit_qsbr_thread *me = rcukit_qsbr_register(qsbr);
    CHECK(rcukit_qsbr_is_online(qsbr));
    atomic_fetch_add(&registered, 1);
    long n = 0;
    /* At least one pass, however late the scheduler runs this thread. */
    do {
        struct obj *obj = atomic_load_explicit(&current, memory_order_acquire);
        CHECK_EQ(obj->value, LIVE);
        if (++n % 64 == 0) rcukit_qsbr_quiescent_state(me);
        if (n % 4096 == 0) {
            rcukit_qsbr_offline(me);
            CHECK(!rcukit_qsbr_is_online(qsbr));
            rcukit_qsbr_online(me);
        }
    } while (!atomic_load_explicit(&stop, memory_order_relaxed));
    atomic_fetch_add(&reads, n);
    rcukit_qsbr_unregister(me);
    CHECK(!rcukit_qsbr_is_online(qsbr));
    return NULL;
}

static struct obj *fresh(void) {
    struct obj *obj = malloc(sizeof *obj);
    CHECK(obj != NULL);
    obj->value = LIVE;
    return obj;
}

static void *exit_offline(void *arg) {
    (void)arg;
    rcukit_qsbr_thread *me = rcukit_qsbr_register(qsbr);
    rcukit_qsbr_offline(me);
    return NULL; /* exits registered (offline): a leaked registration */
}

int main(int argc, char **argv) {
    CHECK(argc == 2 || (argc == 3 && strcmp(argv[2], "fenced") == 0));
    const char *wait = argv[1];
    rcukit_config *config = rcukit_config_new();
    CHECK(rcukit_config_set_name(config, "qsbr-test") == RCUKIT_OK);
    if (argc == 3) CHECK(rcukit_config_set_fenced_quiescent_states(config, true) == RCUKIT_OK);
    CHECK(rcukit_config_set_callback_workers(config, 2) == RCUKIT_OK);
    qsbr = rcukit_qsbr_new(config);
    rcukit_config_free(config);
    CHECK(qsbr != NULL);

    if (strcmp(wait, "exit-offline") == 0) {
        pthread_join(spawn(exit_offline, NULL), NULL);
        rcukit_stats stats;
        rcukit_qsbr_stats(qsbr, &stats);
        CHECK_EQ(stats.orphaned_readers, 1);
        CHECK_EQ(stats.readers, 0);
        rcukit_qsbr_synchronize(qsbr); /* an offline orphan holds nothing */
        rcukit_qsbr_synchronize_expedited(qsbr);
        printf("ok: %s\n", wait);
        return 0;
    }

    atomic_store(&current, fresh());
    pthread_t threads[READERS];
    for (int i = 0; i < READERS; i++) threads[i] = spawn(reader, NULL);
    while (atomic_load(&registered) < READERS) sleep_ms(1);
    rcukit_stats stats;
    rcukit_qsbr_stats(qsbr, &stats);
    CHECK_EQ(stats.readers, READERS);

    long updates = strcmp(wait, "call") == 0 ? 2000 : 200;
    for (long i = 0; i < updates; i++) {
        struct obj *old = atomic_exchange(&current, fresh());
        if (strcmp(wait, "call") == 0) {
            rcukit_qsbr_call(qsbr, &old->head, poison_and_free);
            continue;
        }
        if (strcmp(wait, "sync") == 0) rcukit_qsbr_synchronize(qsbr);
        else if (strcmp(wait, "expedited") == 0) rcukit_qsbr_synchronize_expedited(qsbr);
        else if (strcmp(wait, "poll") == 0) {
            rcukit_cookie cookie =
                i % 2 ? rcukit_qsbr_start_poll_expedited(qsbr) : rcukit_qsbr_start_poll(qsbr);
            while (!rcukit_qsbr_poll(qsbr, cookie)) sleep_ms(0);
            rcukit_qsbr_cond_synchronize(qsbr, cookie);
        } else return 2;
        poison_and_free(&old->head);
    }
    if (strcmp(wait, "call") == 0) rcukit_qsbr_barrier(qsbr);
    atomic_store(&stop, 1);
    for (int i = 0; i < READERS; i++) pthread_join(threads[i], NULL);
    CHECK(atomic_load(&reads) > 0);
    rcukit_qsbr_stats(qsbr, &stats);
    CHECK_EQ(stats.readers, 0);
    rcukit_qsbr_free(qsbr);
    printf("ok: %s, %ld updates, %ld reads\n", wait, updates, atomic_load(&reads));
    return 0;
}
