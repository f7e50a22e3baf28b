/*
 * Polling cookies as values: taken, copied, stored, polled; expired by grace periods of
 * either kind; the completed cookie.
 */
#include "check.h"
#include <rcukit/rcukit.h>

static void wait_until_polled(rcukit_domain *domain, rcukit_cookie cookie) {
    uint64_t start = now_ns();
    while (!rcukit_poll(domain, cookie)) {
        CHECK(now_ns() - start < 20ull * 1000000000ull);
        sleep_ms(1);
    }
}

int main(void) {
    rcukit_domain *domain = rcukit_domain_new(NULL);
    CHECK(domain != NULL);

    /* A snapshot needs a grace period that starts after it. */
    rcukit_cookie taken = rcukit_get_state(domain);
    struct { int tag; rcukit_cookie cookie; } stored = {7, taken}; /* a plain value */
    CHECK(!rcukit_poll(domain, stored.cookie));
    CHECK(!rcukit_cookie_is_completed(taken));
    rcukit_synchronize(domain);
    CHECK(rcukit_poll(domain, stored.cookie));
    CHECK(rcukit_poll(domain, taken));
    rcukit_cond_synchronize(domain, taken); /* expired: returns at once */
    rcukit_cond_synchronize_expedited(domain, taken);

    /* An expedited grace period expires a cookie too. */
    rcukit_cookie second = rcukit_get_state(domain);
    rcukit_synchronize_expedited(domain);
    CHECK(rcukit_poll(domain, second));

    /* start_poll and start_poll_expedited expire without anybody waiting. */
    wait_until_polled(domain, rcukit_start_poll(domain));
    wait_until_polled(domain, rcukit_start_poll_expedited(domain));

    /* The completed cookie is expired everywhere. */
    rcukit_cookie done = rcukit_cookie_completed();
    CHECK(rcukit_cookie_is_completed(done));
    CHECK(rcukit_poll(domain, done));
    CHECK(rcukit_poll(rcukit_global(), done));
    rcukit_cond_synchronize(rcukit_global(), done);

    /* QSBR domains have cookies of their own. */
    rcukit_qsbr *qsbr = rcukit_qsbr_new(NULL);
    CHECK(qsbr != NULL);
    rcukit_cookie q = rcukit_qsbr_get_state(qsbr);
    rcukit_qsbr_synchronize_expedited(qsbr);
    CHECK(rcukit_qsbr_poll(qsbr, q));
    rcukit_qsbr_cond_synchronize_expedited(qsbr, q);
    rcukit_qsbr_free(qsbr);

    rcukit_stats stats;
    rcukit_domain_stats(domain, &stats);
    CHECK(stats.normal_gps >= 1);
    CHECK(stats.expedited_gps >= 1);
    rcukit_domain_free(domain);
    printf("ok\n");
    return 0;
}
