/*
 * Misuse: each case does one wrong thing; the test suite runs it in a child process and
 * checks that it aborts with the expected message.
 */
#include "check.h"
#include <rcukit/rcukit.h>
#include <string.h>

static rcukit_domain *domain;
static rcukit_guard shared_guard;
static rcukit_head head;

static void *lock_elsewhere(void *arg) {
    (void)arg;
    shared_guard = rcukit_read_lock(domain);
    return NULL;
}

static rcukit_reader *shared_reader;

static void *lock_reader_elsewhere(void *arg) {
    (void)arg;
    rcukit_reader_lock(shared_reader);
    return NULL;
}

static void *unlock_reader_elsewhere(void *arg) {
    (void)arg;
    rcukit_reader_unlock(shared_reader);
    return NULL;
}

static void *free_reader_elsewhere(void *arg) {
    (void)arg;
    rcukit_reader_free(shared_reader);
    return NULL;
}

static void barrier_from_callback(rcukit_head *h) {
    (void)h;
    rcukit_barrier(domain);
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    const char *what = argv[1];
    domain = rcukit_domain_new(NULL);
    CHECK(domain != NULL);
    if (strcmp(what, "synchronize-in-read") == 0) {
        rcukit_guard guard = rcukit_read_lock(domain);
        rcukit_synchronize(domain);
        rcukit_read_unlock(&guard);
    } else if (strcmp(what, "expedited-in-read") == 0) {
        rcukit_guard guard = rcukit_read_lock(domain);
        rcukit_synchronize_expedited(domain);
        rcukit_read_unlock(&guard);
    } else if (strcmp(what, "barrier-in-read") == 0) {
        rcukit_guard guard = rcukit_read_lock(domain);
        rcukit_barrier(domain);
        rcukit_read_unlock(&guard);
    } else if (strcmp(what, "cond-in-read") == 0) {
        rcukit_cookie cookie = rcukit_get_state(domain);
        rcukit_guard guard = rcukit_read_lock(domain);
        rcukit_cond_synchronize(domain, cookie);
        rcukit_read_unlock(&guard);
    } else if (strcmp(what, "unlock-twice") == 0) {
        rcukit_guard guard = rcukit_read_lock(domain);
        rcukit_read_unlock(&guard);
        rcukit_read_unlock(&guard);
    } else if (strcmp(what, "unlock-zeroed") == 0) {
        rcukit_guard guard;
        memset(&guard, 0, sizeof guard);
        rcukit_read_unlock(&guard);
    } else if (strcmp(what, "unlock-other-thread") == 0) {
        pthread_t thread = spawn(lock_elsewhere, NULL);
        pthread_join(thread, NULL);
        rcukit_read_unlock(&shared_guard);
    } else if (strcmp(what, "reader-unlock-unlocked") == 0) {
        rcukit_reader *reader = rcukit_reader_new(domain);
        rcukit_reader_lock(reader);
        rcukit_reader_unlock(reader);
        rcukit_reader_unlock(reader);
    } else if (strcmp(what, "reader-lock-other-thread") == 0) {
        shared_reader = rcukit_reader_new(domain);
        pthread_join(spawn(lock_reader_elsewhere, NULL), NULL);
    } else if (strcmp(what, "reader-unlock-other-thread") == 0) {
        shared_reader = rcukit_reader_new(domain);
        rcukit_reader_lock(shared_reader);
        pthread_join(spawn(unlock_reader_elsewhere, NULL), NULL);
    } else if (strcmp(what, "reader-free-other-thread") == 0) {
        shared_reader = rcukit_reader_new(domain);
        pthread_join(spawn(free_reader_elsewhere, NULL), NULL);
    } else if (strcmp(what, "reader-free-locked") == 0) {
        rcukit_reader *reader = rcukit_reader_new(domain);
        rcukit_reader_lock(reader);
        rcukit_reader_free(reader);
    } else if (strcmp(what, "reader-null") == 0) {
        rcukit_reader_lock(NULL);
    } else if (strcmp(what, "synchronize-in-reader") == 0) {
        rcukit_reader *reader = rcukit_reader_new(domain);
        rcukit_reader_lock(reader);
        rcukit_synchronize(domain);
    } else if (strcmp(what, "free-domain-with-readers") == 0) {
        rcukit_reader *reader = rcukit_reader_new(domain);
        (void)reader;
        rcukit_domain_free(domain);
    } else if (strcmp(what, "owned-end-twice") == 0) {
        rcukit_owned_guard section = rcukit_read_owned_begin(domain);
        rcukit_read_owned_end(&section);
        rcukit_read_owned_end(&section);
    } else if (strcmp(what, "foreign-cookie") == 0) {
        rcukit_cookie cookie = rcukit_get_state(rcukit_global());
        rcukit_poll(domain, cookie);
    } else if (strcmp(what, "barrier-from-callback") == 0) {
        rcukit_call(domain, &head, barrier_from_callback);
        rcukit_barrier(domain);
    } else if (strcmp(what, "free-global") == 0) {
        rcukit_domain_free(rcukit_global());
    } else if (strcmp(what, "null-domain") == 0) {
        rcukit_synchronize(NULL);
    } else if (strcmp(what, "qsbr-synchronize-online") == 0) {
        rcukit_qsbr *qsbr = rcukit_qsbr_new(NULL);
        rcukit_qsbr_register(qsbr);
        rcukit_qsbr_synchronize(qsbr);
    } else if (strcmp(what, "qsbr-register-twice") == 0) {
        rcukit_qsbr *qsbr = rcukit_qsbr_new(NULL);
        rcukit_qsbr_register(qsbr);
        rcukit_qsbr_register(qsbr);
    } else if (strcmp(what, "qsbr-free-registered") == 0) {
        rcukit_qsbr *qsbr = rcukit_qsbr_new(NULL);
        rcukit_qsbr_register(qsbr);
        rcukit_qsbr_free(qsbr);
    } else {
        fprintf(stderr, "unknown case '%s'\n", what);
        return 2;
    }
    printf("no abort\n");
    return 0;
}
