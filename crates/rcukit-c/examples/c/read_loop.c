/*
 * The cost of a read-side critical section through the C API: one call to lock, one to
 * unlock, on the global domain, in a loop, timed in the thread's CPU time (time spent
 * descheduled on a busy machine is not counted).
 *
 *   read_loop ITERATIONS
 * prints: ns_per_section=X
 */
#include <rcukit/rcukit.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s ITERATIONS\n", argv[0]);
        return 2;
    }
    long iterations = atol(argv[1]);
    rcukit_domain *domain = rcukit_global();
    for (int i = 0; i < 1000; i++) { /* the thread's record, the caches */
        rcukit_guard guard = rcukit_read_lock(domain);
        rcukit_read_unlock(&guard);
    }
    struct timespec start, end;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    for (long i = 0; i < iterations; i++) {
        rcukit_guard guard = rcukit_read_lock(domain);
        __asm__ volatile("" ::: "memory");
        rcukit_read_unlock(&guard);
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &end);
    double ns = (double)(end.tv_sec - start.tv_sec) * 1e9 + (double)(end.tv_nsec - start.tv_nsec);
    printf("ns_per_section=%.4f\n", ns / (double)iterations);
    return 0;
}
