/*
 * fork(): while other threads read, queue callbacks and wait for grace periods, the process
 * forks again and again; every child's domains work at once (reads, both kinds of grace
 * period, callbacks and barrier, QSBR), and the parent runs each of its callbacks exactly
 * once.
 */
#include "check.h"
#include <rcukit/rcukit.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static rcukit_domain *domain;
static rcukit_qsbr *qsbr;
static atomic_bool stop;
static atomic_long queued;
static atomic_long ran;

struct job {
    rcukit_head head;
};

static void run_job(rcukit_head *head) {
    atomic_fetch_add(&ran, 1);
    free((struct job *)((char *)head - offsetof(struct job, head)));
}

static void *busy(void *arg) {
    long n = 0;
    while (!atomic_load(&stop)) {
        rcukit_guard guard = rcukit_read_lock(domain);
        rcukit_read_unlock(&guard);
        struct job *job = malloc(sizeof *job);
        CHECK(job != NULL);
        atomic_fetch_add(&queued, 1);
        rcukit_call(domain, &job->head, run_job);
        if (arg != NULL && ++n % 64 == 0) rcukit_synchronize_expedited(domain);
    }
    return NULL;
}

static atomic_int child_ran;

static void child_job(rcukit_head *head) {
    (void)head;
    atomic_fetch_add(&child_ran, 1);
}

static void child(void) {
    alarm(30); /* a hang becomes a failure */
    rcukit_guard guard = rcukit_read_lock(domain);
    rcukit_read_unlock(&guard);
    rcukit_synchronize_expedited(domain);
    rcukit_synchronize(domain);
    static rcukit_head heads[10];
    for (int i = 0; i < 10; i++) rcukit_call(domain, &heads[i], child_job);
    rcukit_barrier(domain);
    CHECK_EQ(atomic_load(&child_ran), 10);

    rcukit_qsbr_thread *me = rcukit_qsbr_register(qsbr);
    rcukit_qsbr_quiescent_state(me);
    rcukit_qsbr_offline(me);
    rcukit_qsbr_synchronize(qsbr);
    rcukit_qsbr_online(me);
    rcukit_qsbr_unregister(me);

    rcukit_stats stats;
    rcukit_domain_stats(domain, &stats);
    CHECK(stats.readers >= 1);
    /* Callbacks the parent had queued are not run here (they run in the parent). */
    CHECK(stats.callbacks_pending == 0);
    rcukit_synchronize(rcukit_global());
    _exit(0);
}

int main(void) {
    domain = rcukit_domain_new(NULL);
    qsbr = rcukit_qsbr_new(NULL);
    CHECK(domain != NULL && qsbr != NULL);
    pthread_t threads[2] = {spawn(busy, NULL), spawn(busy, (void *)1)};
    for (int round = 0; round < 12; round++) {
        sleep_ms(5);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) child();
        int status;
        CHECK(waitpid(pid, &status, 0) == pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "round %d: the child failed (status %#x)\n", round, status);
            return 1;
        }
    }
    atomic_store(&stop, 1);
    pthread_join(threads[0], NULL);
    pthread_join(threads[1], NULL);
    rcukit_barrier(domain);
    CHECK_EQ(atomic_load(&ran), atomic_load(&queued));
    rcukit_domain_free(domain);
    rcukit_qsbr_free(qsbr);
    printf("ok: %ld callbacks\n", atomic_load(&ran));
    return 0;
}
