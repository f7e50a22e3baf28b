/*
 * A flood of defer_rcu: W writer threads publish a new object and hand the old one to
 * defer_rcu(free) as fast as they can, beside R readers that dereference the shared pointer
 * and check the value. Written against liburcu's headers without _LGPL_SOURCE (memb flavor),
 * so that one binary runs on liburcu or, through LD_LIBRARY_PATH, on rcukit.
 *
 *   defer_flood READERS WRITERS MILLISECONDS
 * prints: reads=R defers=D seconds=S max_rss_kib=K
 */
#include <urcu.h>
#include <urcu-defer.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static int *shared;
static atomic_int go;
static atomic_int stop;

struct counts {
    unsigned long long n;
    char pad[56];
};

static struct counts reads[64], defers[64];

static void *reader(void *arg) {
    struct counts *mine = arg;
    unsigned long long n = 0;
    rcu_register_thread();
    while (!atomic_load_explicit(&go, memory_order_acquire)) {
    }
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        rcu_read_lock();
        int *p = rcu_dereference(shared);
        if (p != NULL && *p != 8) abort();
        rcu_read_unlock();
        n++;
    }
    mine->n = n;
    rcu_unregister_thread();
    return NULL;
}

static void *writer(void *arg) {
    struct counts *mine = arg;
    unsigned long long n = 0;
    rcu_register_thread();
    if (rcu_defer_register_thread() != 0) abort();
    while (!atomic_load_explicit(&go, memory_order_acquire)) {
    }
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        int *fresh = malloc(64);
        if (fresh == NULL) abort();
        *fresh = 8;
        int *old = rcu_xchg_pointer(&shared, fresh);
        if (old != NULL) defer_rcu(free, old);
        n++;
    }
    mine->n = n;
    rcu_defer_unregister_thread();
    rcu_unregister_thread();
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s READERS WRITERS MILLISECONDS\n", argv[0]);
        return 2;
    }
    int nr_readers = atoi(argv[1]), nr_writers = atoi(argv[2]);
    long ms = atol(argv[3]);
    if (nr_readers < 0 || nr_writers < 1 || nr_readers > 64 || nr_writers > 64 || ms <= 0) {
        fprintf(stderr, "defer_flood: 0-64 readers, 1-64 writers, a positive duration\n");
        return 2;
    }
    pthread_t threads[128];
    int t = 0;
    for (int i = 0; i < nr_readers; i++) pthread_create(&threads[t++], NULL, reader, &reads[i]);
    for (int i = 0; i < nr_writers; i++) pthread_create(&threads[t++], NULL, writer, &defers[i]);
    struct timespec pause = {0, 100 * 1000 * 1000}; /* let the threads start and register */
    nanosleep(&pause, NULL);
    double start = now();
    atomic_store_explicit(&go, 1, memory_order_release);
    struct timespec run = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&run, NULL);
    atomic_store(&stop, 1);
    double seconds = now() - start;
    for (int i = 0; i < t; i++) pthread_join(threads[i], NULL);
    unsigned long long total_reads = 0, total_defers = 0;
    for (int i = 0; i < nr_readers; i++) total_reads += reads[i].n;
    for (int i = 0; i < nr_writers; i++) total_defers += defers[i].n;
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    printf("reads=%llu defers=%llu seconds=%.6f max_rss_kib=%ld\n", total_reads, total_defers,
           seconds, usage.ru_maxrss);
    return 0;
}
