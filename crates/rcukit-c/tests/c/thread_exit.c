/*
 * Thread exit, as documented for Rust: short-lived readers leave nothing behind (with guard
 * tokens and with reader handles); a thread that exits inside a read-side critical section (or
 * online in a QSBR domain without unregistering) leaves it open forever, and the stall report
 * says that its thread exited. A reader handle used and freed in a pthread key destructor (which
 * runs after rcukit's own thread-local destructors) still holds grace periods back while it is
 * locked there; a handle leaked by an exited thread holds none.
 *
 *   thread_exit churn | exit-reading | exit-online | reader-key-destructor | reader-leaked
 */
#include "check.h"
#include <unistd.h>
#include <rcukit/rcukit.h>
#include <stdatomic.h>
#include <string.h>

static rcukit_domain *domain;
static rcukit_qsbr *qsbr;

static void *short_reader(void *arg) {
    (void)arg;
    rcukit_reader *handle = rcukit_reader_new(domain);
    for (int i = 0; i < 10; i++) {
        rcukit_guard a = rcukit_read_lock(domain);
        rcukit_guard b = rcukit_read_lock(rcukit_global());
        rcukit_reader_lock(handle);
        rcukit_read_unlock(&b);
        rcukit_read_unlock(&a);
        rcukit_reader_unlock(handle);
    }
    rcukit_reader_free(handle);
    return NULL;
}

static void churn(void) {
    rcukit_stats before, after;
    rcukit_domain_stats(domain, &before);
    for (int round = 0; round < 20; round++) {
        pthread_t threads[10];
        for (int i = 0; i < 10; i++) threads[i] = spawn(short_reader, NULL);
        for (int i = 0; i < 10; i++) pthread_join(threads[i], NULL);
    }
    rcukit_domain_stats(domain, &after);
    CHECK_EQ(after.readers, before.readers);
    CHECK_EQ(after.orphaned_readers, 0);
    rcukit_synchronize_expedited(domain);
    rcukit_synchronize(domain);
}

static atomic_int exited_reports;

static void on_report(const rcukit_report *report, void *context) {
    CHECK(context == &exited_reports);
    CHECK(report->kind == RCUKIT_REPORT_STALL);
    CHECK(report->domain != NULL && report->message != NULL);
    if (strstr(report->message, "EXITED") != NULL) {
        /* The advice speaks to C programs too, not only of Rust's mem::forget. */
        CHECK(strstr(report->message, "C thread") != NULL);
        atomic_fetch_add(&exited_reports, 1);
    }
}

static void *exit_reading(void *arg) {
    (void)arg;
    rcukit_guard guard = rcukit_read_lock(domain);
    (void)guard; /* never unlocked: the thread exits inside the section */
    return NULL;
}

static void *exit_online(void *arg) {
    (void)arg;
    rcukit_qsbr_register(qsbr); /* online, never unregistered */
    return NULL;
}

static pthread_key_t key;
static atomic_int key_destructor_entered;
static atomic_int key_destructor_releasing;

/* Runs after rcukit's thread-local destructors (glibc runs pthread key destructors last). */
static void reader_key_destructor(void *value) {
    rcukit_reader *handle = value;
    rcukit_reader_lock(handle);
    CHECK(rcukit_is_reading(domain));
    atomic_store(&key_destructor_entered, 1);
    sleep_ms(100);
    atomic_store(&key_destructor_releasing, 1);
    rcukit_reader_unlock(handle);
    rcukit_reader_free(handle);
}

static void *reader_in_key(void *arg) {
    (void)arg;
    rcukit_reader *handle = rcukit_reader_new(domain);
    rcukit_reader_lock(handle);
    rcukit_reader_unlock(handle);
    CHECK(pthread_setspecific(key, handle) == 0);
    return NULL;
}

static void reader_key_destructor_case(void) {
    rcukit_stats before, after;
    rcukit_domain_stats(domain, &before);
    CHECK(pthread_key_create(&key, reader_key_destructor) == 0);
    pthread_t thread = spawn(reader_in_key, NULL);
    uint64_t start = now_ns();
    while (!atomic_load(&key_destructor_entered)) {
        CHECK(now_ns() - start < 20ull * 1000000000ull);
        sleep_ms(1);
    }
    rcukit_synchronize(domain); /* must wait for the section in the destructor */
    CHECK(atomic_load(&key_destructor_releasing));
    pthread_join(thread, NULL);
    rcukit_domain_stats(domain, &after);
    CHECK_EQ(after.readers, before.readers);
    CHECK_EQ(after.orphaned_readers, 0); /* released when the handle was freed */
}

static void *leak_a_reader(void *arg) {
    (void)arg;
    rcukit_reader *handle = rcukit_reader_new(domain);
    rcukit_reader_lock(handle);
    rcukit_reader_unlock(handle);
    return NULL; /* never freed */
}

static void wait_for_the_report(void) {
    uint64_t start = now_ns();
    while (atomic_load(&exited_reports) == 0) {
        CHECK(now_ns() - start < 20ull * 1000000000ull);
        sleep_ms(5);
    }
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    rcukit_config *config = rcukit_config_new();
    CHECK(rcukit_config_set_stall_timeout_ms(config, 50) == RCUKIT_OK);
    CHECK(rcukit_config_set_report_hook(config, on_report, &exited_reports) == RCUKIT_OK);
    domain = rcukit_domain_new(config);
    qsbr = rcukit_qsbr_new(config);
    rcukit_config_free(config);
    CHECK(domain != NULL && qsbr != NULL);

    if (strcmp(argv[1], "churn") == 0) {
        churn();
    } else if (strcmp(argv[1], "exit-reading") == 0) {
        pthread_join(spawn(exit_reading, NULL), NULL);
        rcukit_stats stats;
        rcukit_domain_stats(domain, &stats);
        CHECK_EQ(stats.orphaned_readers, 1);
        rcukit_cookie cookie = rcukit_start_poll(domain);
        wait_for_the_report();
        CHECK(!rcukit_poll(domain, cookie)); /* held forever */
        printf("ok: %s\n", argv[1]);
        _exit(0); /* the domain cannot be freed: its grace period never ends */
    } else if (strcmp(argv[1], "reader-key-destructor") == 0) {
        reader_key_destructor_case();
    } else if (strcmp(argv[1], "reader-leaked") == 0) {
        pthread_join(spawn(leak_a_reader, NULL), NULL);
        rcukit_stats stats;
        rcukit_domain_stats(domain, &stats);
        CHECK_EQ(stats.orphaned_readers, 1);
        rcukit_synchronize(domain); /* no section is open: nothing waits */
        rcukit_synchronize_expedited(domain);
        printf("ok: %s\n", argv[1]);
        _exit(0); /* the leaked reader keeps the domain from being freed */
    } else if (strcmp(argv[1], "exit-online") == 0) {
        pthread_join(spawn(exit_online, NULL), NULL);
        rcukit_stats stats;
        rcukit_qsbr_stats(qsbr, &stats);
        CHECK_EQ(stats.orphaned_readers, 1);
        rcukit_cookie cookie = rcukit_qsbr_start_poll(qsbr);
        wait_for_the_report();
        CHECK(!rcukit_qsbr_poll(qsbr, cookie));
        printf("ok: %s\n", argv[1]);
        _exit(0);
    } else {
        return 2;
    }
    rcukit_domain_free(domain);
    rcukit_qsbr_free(qsbr);
    printf("ok: %s\n", argv[1]);
    return 0;
}
