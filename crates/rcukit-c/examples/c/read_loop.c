/*
 * The cost of a read-side critical section through the C API: one call to lock, one to
 * unlock, on the global domain, in a loop, timed in the thread's CPU time (time spent
 * descheduled on a busy machine is not counted).
 *
 *   read_loop guard ITERATIONS    rcukit_read_lock() / rcukit_read_unlock(&guard)
 *   read_loop reader ITERATIONS   rcukit_reader_lock(reader) / rcukit_reader_unlock(reader)
 *   read_loop inline ITERATIONS   the same, inlined from the header (rcukit_reader_lock_inline)
 *   read_loop calls ITERATIONS    two calls to rcukit_version() and no section: what the two
 *                                 calls alone cost, with this way of linking
 * prints: ns_per_section=X
 */
#include <rcukit/rcukit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double thread_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double guard_loop(rcukit_domain *domain, long iterations) {
    for (int i = 0; i < 1000; i++) { /* the thread's record, the caches */
        rcukit_guard guard = rcukit_read_lock(domain);
        rcukit_read_unlock(&guard);
    }
    double start = thread_ns();
    for (long i = 0; i < iterations; i++) {
        rcukit_guard guard = rcukit_read_lock(domain);
        __asm__ volatile("" ::: "memory");
        rcukit_read_unlock(&guard);
    }
    return thread_ns() - start;
}

/* The loop over a reader handle's sections, with the library's functions or the header's
 * inline forms. */
#define HANDLE_LOOP(NAME, NEW, LOCK, UNLOCK)                       \
    static double NAME(rcukit_domain *domain, long iterations) {   \
        rcukit_reader *reader = NEW(domain);                       \
        for (int i = 0; i < 1000; i++) {                           \
            LOCK(reader);                                          \
            UNLOCK(reader);                                        \
        }                                                          \
        double start = thread_ns();                                \
        for (long i = 0; i < iterations; i++) {                    \
            LOCK(reader);                                          \
            __asm__ volatile("" ::: "memory");                     \
            UNLOCK(reader);                                        \
        }                                                          \
        double ns = thread_ns() - start;                           \
        rcukit_reader_free(reader);                                \
        return ns;                                                 \
    }

HANDLE_LOOP(reader_loop, rcukit_reader_new, rcukit_reader_lock, rcukit_reader_unlock)
HANDLE_LOOP(inline_loop, rcukit_reader_new_inline, rcukit_reader_lock_inline,
            rcukit_reader_unlock_inline)

static double calls_loop(long iterations) {
    double start = thread_ns();
    for (long i = 0; i < iterations; i++) {
        const char *a = rcukit_version();
        __asm__ volatile("" : : "r"(a) : "memory");
        const char *b = rcukit_version();
        __asm__ volatile("" : : "r"(b) : "memory");
    }
    return thread_ns() - start;
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "guard") != 0 && strcmp(argv[1], "reader") != 0 &&
                      strcmp(argv[1], "inline") != 0 && strcmp(argv[1], "calls") != 0)) {
        fprintf(stderr, "usage: %s guard|reader|inline|calls ITERATIONS\n", argv[0]);
        return 2;
    }
    long iterations = atol(argv[2]);
    rcukit_domain *domain = rcukit_global();
    double ns = strcmp(argv[1], "guard") == 0    ? guard_loop(domain, iterations)
                : strcmp(argv[1], "reader") == 0 ? reader_loop(domain, iterations)
                : strcmp(argv[1], "inline") == 0 ? inline_loop(domain, iterations)
                                                 : calls_loop(iterations);
    printf("ns_per_section=%.4f\n", ns / (double)iterations);
    return 0;
}
