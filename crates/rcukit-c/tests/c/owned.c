/*
 * Owned sections: begun on one thread, ended on another; every grace period waits for them,
 * also after the domain's handle is freed.
 *
 *   owned cross-thread | outlive-domain
 */
#include "check.h"
#include <rcukit/rcukit.h>
#include <stdatomic.h>
#include <string.h>

static rcukit_domain *domain;
static rcukit_owned_guard handed_over;
static atomic_int phase;

static void *opener(void *arg) {
    (void)arg;
    handed_over = rcukit_read_owned_begin(domain);
    atomic_store(&phase, 1);
    return NULL; /* this thread exits; the section stays open */
}

static void *closer(void *arg) {
    (void)arg;
    rcukit_read_owned_end(&handed_over);
    return NULL;
}

static void cross_thread(void) {
    pthread_join(spawn(opener, NULL), NULL);
    CHECK_EQ(atomic_load(&phase), 1);
    rcukit_stats stats;
    rcukit_domain_stats(domain, &stats);
    CHECK_EQ(stats.owned_sections, 1);

    /* A grace period requested now cannot end while the section is open. */
    rcukit_cookie cookie = rcukit_start_poll_expedited(domain);
    rcukit_start_poll(domain);
    sleep_ms(100);
    CHECK(!rcukit_poll(domain, cookie));

    pthread_join(spawn(closer, NULL), NULL);
    rcukit_cond_synchronize(domain, cookie);
    CHECK(rcukit_poll(domain, cookie));
    rcukit_domain_stats(domain, &stats);
    CHECK_EQ(stats.owned_sections, 0);
}

static void outlive_domain(void) {
    rcukit_owned_guard section = rcukit_read_owned_begin(domain);
    rcukit_domain_free(domain); /* its state waits for the section */
    domain = NULL;
    handed_over = section;
    pthread_join(spawn(closer, NULL), NULL);
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    domain = rcukit_domain_new(NULL);
    CHECK(domain != NULL);
    if (strcmp(argv[1], "cross-thread") == 0) cross_thread();
    else if (strcmp(argv[1], "outlive-domain") == 0) outlive_domain();
    else return 2;
    rcukit_domain_free(domain);
    printf("ok: %s\n", argv[1]);
    return 0;
}
