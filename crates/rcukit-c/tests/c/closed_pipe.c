/*
 * A stall report written to a standard error that is a pipe with no reader: a C program keeps
 * SIGPIPE's default action, and the report must not end the process.
 */
#include "check.h"
#include <rcukit/rcukit.h>
#include <stdatomic.h>
#include <unistd.h>

static rcukit_domain *domain;
static atomic_int inside;

static void *holder(void *arg) {
    (void)arg;
    rcukit_guard guard = rcukit_read_lock(domain);
    atomic_store(&inside, 1);
    sleep_ms(300); /* past the stall timeout: the grace period below reports it */
    rcukit_read_unlock(&guard);
    return NULL;
}

int main(void) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    close(fds[0]); /* no reader */
    rcukit_config *config = rcukit_config_new();
    CHECK(rcukit_config_set_stall_timeout_ms(config, 20) == RCUKIT_OK);
    domain = rcukit_domain_new(config);
    rcukit_config_free(config);
    CHECK(domain != NULL);
    int saved = dup(2);
    CHECK(saved >= 0 && dup2(fds[1], 2) == 2);
    pthread_t thread = spawn(holder, NULL);
    while (!atomic_load(&inside)) sleep_ms(1);
    rcukit_synchronize(domain);
    rcukit_synchronize_expedited(domain);
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(dup2(saved, 2) == 2); /* CHECK's messages readable again */
    rcukit_stats stats;
    rcukit_domain_stats(domain, &stats);
    CHECK(stats.stalls >= 1);
    rcukit_domain_free(domain);
    return 0;
}
