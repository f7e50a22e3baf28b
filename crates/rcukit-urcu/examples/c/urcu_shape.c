/*
 * A benchmark shaped like liburcu's test_urcu: N reader threads and M writer threads for a
 * fixed duration. A reader enters a read-side critical section, dereferences the shared
 * pointer and checks the value behind it, and leaves (QSBR readers announce a quiescent state
 * every 1024 reads, or every QS_EVERY, a power of two); a writer publishes a new value, waits
 * for a grace period with synchronize_rcu() and frees the old one (built with -DDEFER, memb
 * only: hands the old one to defer_rcu(free) instead, a flood of deferred calls). Written
 * against liburcu's headers without _LGPL_SOURCE, so that one binary runs on liburcu or,
 * through LD_LIBRARY_PATH, on rcukit.
 *
 *   urcu_shape READERS WRITERS MILLISECONDS [QS_EVERY]
 * prints: reads=R grace_periods=G seconds=S max_rss_kib=K (G counts the deferred calls with
 * -DDEFER; K is the process's peak resident memory)
 */
#ifdef QSBR
#include <urcu-qsbr.h>
#else
#include <urcu.h>
#endif
#ifdef DEFER
#include <urcu-defer.h>
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static int *shared;
static atomic_int go;
static atomic_int stop;
static unsigned long long qs_mask = 1023;

struct counts {
    unsigned long long n;
    char pad[56];
};

static struct counts reads[64], writes[64];

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
#ifdef QSBR
        if ((n & qs_mask) == 0) rcu_quiescent_state();
#endif
    }
    mine->n = n;
    rcu_unregister_thread();
    return NULL;
}

static void *writer(void *arg) {
    struct counts *mine = arg;
    unsigned long long n = 0;
    while (!atomic_load_explicit(&go, memory_order_acquire)) {
    }
#ifdef DEFER
    rcu_register_thread();
    if (rcu_defer_register_thread() != 0) abort();
#endif
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        int *fresh = malloc(sizeof *fresh);
        if (fresh == NULL) abort();
        *fresh = 8;
        int *old = rcu_xchg_pointer(&shared, fresh);
#ifdef DEFER
        if (old != NULL) defer_rcu(free, old);
#else
        synchronize_rcu();
        if (old != NULL) *old = 0;
        free(old);
#endif
        n++;
    }
    mine->n = n;
#ifdef DEFER
    rcu_defer_unregister_thread();
    rcu_unregister_thread();
#endif
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s READERS WRITERS MILLISECONDS [QS_EVERY]\n", argv[0]);
        return 2;
    }
    if (argc == 5) {
        long every = atol(argv[4]);
        if (every <= 0 || (every & (every - 1)) != 0) {
            fprintf(stderr, "urcu_shape: QS_EVERY must be a power of two\n");
            return 2;
        }
        qs_mask = (unsigned long long)every - 1;
    }
    int nr_readers = atoi(argv[1]), nr_writers = atoi(argv[2]);
    long ms = atol(argv[3]);
    if (nr_readers < 0 || nr_writers < 0 || nr_readers > 64 || nr_writers > 64 || ms <= 0) {
        fprintf(stderr, "urcu_shape: 0-64 readers and writers, a positive duration\n");
        return 2;
    }
    pthread_t threads[128];
    int t = 0;
    for (int i = 0; i < nr_readers; i++) pthread_create(&threads[t++], NULL, reader, &reads[i]);
    for (int i = 0; i < nr_writers; i++) pthread_create(&threads[t++], NULL, writer, &writes[i]);
    struct timespec pause = {0, 100 * 1000 * 1000}; /* let the threads start and register */
    nanosleep(&pause, NULL);
    double start = now();
    atomic_store_explicit(&go, 1, memory_order_release);
    struct timespec run = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&run, NULL);
    atomic_store(&stop, 1);
    double seconds = now() - start;
    for (int i = 0; i < t; i++) pthread_join(threads[i], NULL);
    unsigned long long total_reads = 0, total_writes = 0;
    for (int i = 0; i < nr_readers; i++) total_reads += reads[i].n;
    for (int i = 0; i < nr_writers; i++) total_writes += writes[i].n;
    free(shared);
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    printf("reads=%llu grace_periods=%llu seconds=%.6f max_rss_kib=%ld\n", total_reads,
           total_writes, seconds, usage.ru_maxrss);
    return 0;
}
