/*
 * fork() while other threads make and free reader handles: the library's table of live
 * handles must not be copied locked into a child. Every child makes, locks, unlocks and frees
 * a handle of its own at once; a child that hangs (alarm) fails the test.
 */
#include "check.h"
#include <rcukit/rcukit.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

static rcukit_domain *domain;
static atomic_bool stop;

static void *churn(void *arg) {
    (void)arg;
    while (!atomic_load(&stop)) {
        rcukit_reader *reader = rcukit_reader_new(domain);
        rcukit_reader_lock(reader);
        rcukit_reader_unlock(reader);
        rcukit_reader_free(reader);
    }
    return NULL;
}

static void child(void) {
    alarm(10); /* a hang becomes a failure (SIGALRM) */
    rcukit_reader *reader = rcukit_reader_new(domain);
    rcukit_reader_lock(reader);
    rcukit_reader_unlock(reader);
    rcukit_reader_free(reader);
    rcukit_synchronize_expedited(domain);
    _exit(0);
}

int main(void) {
    domain = rcukit_domain_new(NULL);
    CHECK(domain != NULL);
    pthread_t threads[2] = {spawn(churn, NULL), spawn(churn, NULL)};
    sleep_ms(20);
    int forks = 100;
    for (int round = 0; round < forks; round++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) child();
        int status;
        CHECK(waitpid(pid, &status, 0) == pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "round %d: the child failed (status %#x%s)\n", round, status,
                    WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? ", hung" : "");
            return 1;
        }
    }
    atomic_store(&stop, 1);
    pthread_join(threads[0], NULL);
    pthread_join(threads[1], NULL);
    rcukit_domain_free(domain);
    printf("ok: %d children\n", forks);
    return 0;
}
