/*
 * Assertions and small helpers for the C test programs of librcukit and liburcu-rcukit (they
 * print what failed and exit 1). rcukit-c-harness puts this directory on the include path.
 */
#ifndef RCUKIT_TEST_CHECK_H
#define RCUKIT_TEST_CHECK_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

#define CHECK_EQ(a, b)                                                                 \
    do {                                                                               \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                \
        if (check_a_ != check_b_) {                                                    \
            fprintf(stderr, "%s:%d: check failed: %s == %s (%lld != %lld)\n", __FILE__, \
                    __LINE__, #a, #b, check_a_, check_b_);                              \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void sleep_ms(unsigned ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static inline pthread_t spawn(void *(*body)(void *), void *arg) {
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, body, arg) == 0);
    return thread;
}

#endif
