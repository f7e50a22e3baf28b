/*
 * liburcu's ABI, one flavor at a time: compiled with -DQSBR for urcu_qsbr_*, without for
 * urcu_memb_*. Declarations come from urcu_abi.h (no liburcu header needed).
 *
 *   flavor gp | call | defer | defer-flood | poll | crdp | pointer | table | fork | fork-first-use |
 *          key-destructor | get-thread | thread-exit | barrier-while-reading |
 *          signal, get-thread-reading (memb) | qs-online (qsbr)
 */
#include "check.h"
#include "urcu_abi.h"
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef QSBR
#define F(name) urcu_qsbr_##name
#else
#define F(name) urcu_memb_##name
#endif

#define CONTAINER(ptr, type, field) ((type *)((char *)(ptr) - offsetof(type, field)))

enum { LIVE = 0x600d, POISON = 0xdead, READERS = 2 };

struct obj {
    int value;
    struct rcu_head head;
};

static struct obj *current;
static atomic_bool stop;
static atomic_long reads;
static atomic_long freed;

static struct obj *fresh(void) {
    struct obj *obj = malloc(sizeof *obj);
    CHECK(obj != NULL);
    obj->value = LIVE;
    return obj;
}

static void poison_and_free(struct rcu_head *head) {
    struct obj *obj = CONTAINER(head, struct obj, head);
    CHECK_EQ(obj->value, LIVE);
    obj->value = POISON;
    free(obj);
    atomic_fetch_add(&freed, 1);
}

static void read_once(void) {
    struct obj *obj = rcu_dereference_sym(__atomic_load_n(&current, __ATOMIC_RELAXED));
    CHECK_EQ(obj->value, LIVE);
    atomic_fetch_add_explicit(&reads, 1, memory_order_relaxed);
}

/* Readers as liburcu programs write them: registered, read_lock/unlock (nested for memb),
 * quiescent states every 64 reads and an offline pause now and then for qsbr. */
static void *reader(void *arg) {
    (void)arg;
    F(register_thread)();
    long n = 0;
    /* At least one pass, however late the scheduler runs this thread. */
    do {
        F(read_lock)();
#ifndef QSBR
        CHECK(F(read_ongoing)());
        F(read_lock)();
        read_once();
        F(read_unlock)();
#endif
        read_once();
        F(read_unlock)();
#ifdef QSBR
        CHECK(F(read_ongoing)());
        if (++n % 64 == 0) urcu_qsbr_quiescent_state();
        if (n % 4096 == 0) {
            urcu_qsbr_thread_offline();
            CHECK(!F(read_ongoing)());
            urcu_qsbr_thread_online();
        }
#else
        (void)n;
        CHECK(!F(read_ongoing)());
#endif
    } while (!atomic_load_explicit(&stop, memory_order_relaxed));
    F(unregister_thread)();
    return NULL;
}

static pthread_t threads[READERS];

static void start_readers(void) {
    rcu_set_pointer_sym((void **)&current, fresh());
    for (int i = 0; i < READERS; i++) threads[i] = spawn(reader, NULL);
}

static void stop_readers(void) {
    atomic_store(&stop, 1);
    for (int i = 0; i < READERS; i++) pthread_join(threads[i], NULL);
    CHECK(atomic_load(&reads) > 0);
}

/* --- gp: the writer waits with synchronize_rcu (registered and online itself for qsbr,
 * which liburcu allows: it goes offline around the wait). */
static void gp(void) {
    start_readers();
    F(register_thread)();
    for (int i = 0; i < 300; i++) {
        struct obj *old = rcu_xchg_pointer_sym((void **)&current, fresh());
        F(synchronize_rcu)();
#ifdef QSBR
        CHECK(F(read_ongoing)()); /* back online */
#endif
        poison_and_free(&old->head);
    }
    F(unregister_thread)();
    stop_readers();
}

/* --- call: call_rcu frees; barrier waits; callbacks may read (and, in qsbr, run online). */
static atomic_int callback_saw_reader_context;

static void check_context_and_free(struct rcu_head *head) {
    F(read_lock)();
    if (F(read_ongoing)()) atomic_store(&callback_saw_reader_context, 1);
    read_once();
    F(read_unlock)();
    poison_and_free(head);
}

static void call(void) {
    start_readers();
    for (int i = 0; i < 20000; i++) {
        struct obj *old = rcu_xchg_pointer_sym((void **)&current, fresh());
        F(call_rcu)(&old->head, i % 100 == 0 ? check_context_and_free : poison_and_free);
    }
    F(barrier)();
    CHECK_EQ(atomic_load(&freed), 20000);
    CHECK(atomic_load(&callback_saw_reader_context));
    stop_readers();
}

/* --- defer: defer_rcu runs after a grace period; the barriers wait for it. */
static atomic_int deferred;

static void deferred_free(void *p) {
    poison_and_free(&((struct obj *)p)->head);
    atomic_fetch_add(&deferred, 1);
}

static void defer(void) {
    start_readers();
    CHECK_EQ(F(defer_register_thread)(), 0);
    for (int i = 0; i < 5000; i++) {
        struct obj *old = rcu_xchg_pointer_sym((void **)&current, fresh());
        F(defer_rcu)(deferred_free, old);
    }
    F(defer_barrier_thread)();
    CHECK_EQ(atomic_load(&deferred), 5000);
    struct obj *old = rcu_xchg_pointer_sym((void **)&current, fresh());
    F(defer_rcu)(deferred_free, old);
    F(defer_unregister_thread)(); /* flushes, as liburcu's does */
    CHECK_EQ(atomic_load(&deferred), 5001);
    F(defer_barrier)();
    F(defer_exit)();
    stop_readers();
}

/* --- defer-flood: a thread that defers many calls waits for the backlog now and then, but
 * never where it may not wait or for what it holds. Inside a read-side critical section
 * (memb: its deferred calls cannot run until it leaves; qsbr: online), from a callback, and
 * while it holds a lock that a queued callback waits for, a flood of defer_rcu returns. */
enum { FLOOD = 6 * 4096 };
static atomic_int flood_ran;
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;

static void count_flood(void *p) {
    (void)p;
    atomic_fetch_add(&flood_ran, 1);
}

static void flood(void) {
    for (int i = 0; i < FLOOD; i++) F(defer_rcu)(count_flood, NULL);
}

static void flood_from_a_callback(struct rcu_head *head) {
    flood();
    free(head);
}

static void wait_for_the_lock(struct rcu_head *head) {
    pthread_mutex_lock(&held);
    pthread_mutex_unlock(&held);
    free(head);
}

static struct rcu_head *head_for_a_callback(void) {
    struct rcu_head *head = malloc(sizeof *head);
    CHECK(head != NULL);
    return head;
}

static void defer_flood(void) {
    F(register_thread)();
    CHECK_EQ(F(defer_register_thread)(), 0);
    F(read_lock)();
    flood();
    F(read_unlock)();
    F(defer_barrier)();
    CHECK_EQ(atomic_load(&flood_ran), FLOOD);

    F(call_rcu)(head_for_a_callback(), flood_from_a_callback);
    F(barrier)();
    F(defer_barrier)();
    CHECK_EQ(atomic_load(&flood_ran), 2 * FLOOD);

    pthread_mutex_lock(&held);
    F(call_rcu)(head_for_a_callback(), wait_for_the_lock);
    flood();
    pthread_mutex_unlock(&held);
    F(defer_barrier)();
    F(barrier)();
    CHECK_EQ(atomic_load(&flood_ran), 3 * FLOOD);
    F(defer_unregister_thread)();
    F(unregister_thread)();
}

/* --- poll: one-word cookies. */
static void poll_cookies(void) {
    start_readers();
    struct urcu_gp_poll_state zero = {0};
    CHECK(F(poll_state_synchronize_rcu)(zero));
    struct urcu_gp_poll_state never = {~0ul};
    CHECK(!F(poll_state_synchronize_rcu)(never));
    for (int i = 0; i < 200; i++) {
        struct obj *old = rcu_xchg_pointer_sym((void **)&current, fresh());
        struct urcu_gp_poll_state cookie = F(start_poll_synchronize_rcu)();
        CHECK(cookie.grace_period_id != 0);
        uint64_t start = now_ns();
        while (!F(poll_state_synchronize_rcu)(cookie)) {
            CHECK(now_ns() - start < 20ull * 1000000000ull);
            sleep_ms(0);
        }
        CHECK(F(poll_state_synchronize_rcu)(cookie)); /* stays expired */
        poison_and_free(&old->head);
    }
    /* A cookie not yet covered by a grace period is not expired. */
    struct urcu_gp_poll_state early = F(start_poll_synchronize_rcu)();
    struct urcu_gp_poll_state same = F(start_poll_synchronize_rcu)();
    CHECK(same.grace_period_id >= early.grace_period_id);
    F(synchronize_rcu)();
    CHECK(F(poll_state_synchronize_rcu)(early));
    CHECK(F(poll_state_synchronize_rcu)(same));
    stop_readers();
}

/* --- crdp: the call_rcu_data functions keep liburcu's contract. */
static atomic_int crdp_ran;

static void count(struct rcu_head *head) {
    (void)head;
    atomic_fetch_add(&crdp_ran, 1);
}

static void crdp(void) {
    struct call_rcu_data *def = F(get_default_call_rcu_data)();
    CHECK(def != NULL);
    CHECK(F(get_default_call_rcu_data)() == def);
    CHECK(F(get_thread_call_rcu_data)() == NULL);
    CHECK(F(get_call_rcu_data)() == def);

    struct call_rcu_data *mine = F(create_call_rcu_data)(0, -1);
    CHECK(mine != NULL && mine != def);
    F(set_thread_call_rcu_data)(mine);
    CHECK(F(get_thread_call_rcu_data)() == mine);
    CHECK(F(get_call_rcu_data)() == mine);
    static struct rcu_head heads[3];
    for (int i = 0; i < 3; i++) F(call_rcu)(&heads[i], count);
    F(barrier)();
    CHECK_EQ(atomic_load(&crdp_ran), 3);
    CHECK(F(get_call_rcu_thread)(mine) != 0);
    CHECK(F(get_call_rcu_thread)(def) != 0);
    F(set_thread_call_rcu_data)(NULL);
    F(call_rcu_data_free)(mine);
    F(call_rcu_data_free)(def); /* ignored, as in liburcu */
    F(call_rcu_data_free)(NULL);
    CHECK(F(get_default_call_rcu_data)() == def);

    long cpus = sysconf(_SC_NPROCESSORS_CONF);
    CHECK(F(get_cpu_call_rcu_data)(0) == NULL);
    errno = 0;
    CHECK_EQ(F(set_cpu_call_rcu_data)((int)cpus, NULL), -EINVAL);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(F(set_cpu_call_rcu_data)(-1, NULL), -EINVAL);
    CHECK_EQ(F(create_all_cpu_call_rcu_data)(0), 0);
    for (int cpu = 0; cpu < cpus; cpu++) CHECK(F(get_cpu_call_rcu_data)(cpu) != NULL);
    struct call_rcu_data *extra = F(create_call_rcu_data)(0, 0);
    errno = 0;
    CHECK_EQ(F(set_cpu_call_rcu_data)(0, extra), -EEXIST);
    CHECK_EQ(errno, EEXIST);
    CHECK(F(get_call_rcu_data)() != def); /* the current CPU's */
    for (int i = 0; i < 3; i++) F(call_rcu)(&heads[i], count);
    F(barrier)();
    CHECK_EQ(atomic_load(&crdp_ran), 6);
    F(free_all_cpu_call_rcu_data)();
    for (int cpu = 0; cpu < cpus; cpu++) CHECK(F(get_cpu_call_rcu_data)(cpu) == NULL);
    CHECK_EQ(F(set_cpu_call_rcu_data)(0, extra), 0);
    CHECK(F(get_cpu_call_rcu_data)(0) == extra);
    CHECK_EQ(F(set_cpu_call_rcu_data)(0, NULL), 0);
    F(call_rcu_data_free)(extra);
}

/* --- pointer: the _sym helpers. */
static void pointer(void) {
    int a = 1, b = 2, c = 3;
    void *slot = NULL;
    CHECK(rcu_set_pointer_sym(&slot, &a) == &a);
    CHECK(rcu_dereference_sym(slot) == &a);
    CHECK(rcu_xchg_pointer_sym(&slot, &b) == &a);
    CHECK(rcu_cmpxchg_pointer_sym(&slot, &a, &c) == &b); /* no match: unchanged */
    CHECK(slot == &b);
    CHECK(rcu_cmpxchg_pointer_sym(&slot, &b, &c) == &b);
    CHECK(slot == &c);
}

/* --- table: the flavor table, as rculfhash calls it. */
static atomic_int table_ran;

static void table_callback(struct rcu_head *head) {
    (void)head;
    atomic_fetch_add(&table_ran, 1);
}

static void table_deferred(void *p) {
    CHECK(p == &table_ran);
    atomic_fetch_add(&table_ran, 10);
}

static void table(void) {
    const struct rcu_flavor_struct *flavor = &F(flavor);
    flavor->register_thread();
    flavor->read_lock();
    flavor->read_unlock();
    flavor->read_quiescent_state();
    flavor->thread_offline();
    flavor->thread_online();
    flavor->update_synchronize_rcu();
    static struct rcu_head head;
    flavor->update_call_rcu(&head, table_callback);
    flavor->update_defer_rcu(table_deferred, &table_ran);
    flavor->barrier();
    CHECK_EQ(atomic_load(&table_ran), 11);
    CHECK(flavor->read_ongoing() == F(read_ongoing)());
    flavor->unregister_thread();
}

/* --- fork: children work, with and without liburcu's fork hooks, and the rculfhash hooks
 * registered with the flavor run from them. */
static atomic_int hooks[3];

static void before(void *p) { CHECK(p == hooks); atomic_fetch_add(&hooks[0], 1); }
static void parent(void *p) { CHECK(p == hooks); atomic_fetch_add(&hooks[1], 1); }
static void child_hook(void *p) { CHECK(p == hooks); atomic_fetch_add(&hooks[2], 1); }

static atomic_int child_ran;

static void child_callback(struct rcu_head *head) {
    (void)head;
    atomic_fetch_add(&child_ran, 1);
}

static void child_work(void) {
    alarm(30);
    F(register_thread)();
    F(read_lock)();
    read_once();
    F(read_unlock)();
    F(synchronize_rcu)();
    static struct rcu_head heads[10];
    for (int i = 0; i < 10; i++) F(call_rcu)(&heads[i], child_callback);
    F(barrier)();
    CHECK_EQ(atomic_load(&child_ran), 10);
    struct urcu_gp_poll_state cookie = F(start_poll_synchronize_rcu)();
    F(synchronize_rcu)();
    CHECK(F(poll_state_synchronize_rcu)(cookie));
    F(unregister_thread)();
}

static void fork_test(void) {
    struct urcu_atfork atfork = {before, parent, child_hook, hooks};
    F(register_rculfhash_atfork)(&atfork);
    start_readers();
    for (int round = 0; round < 8; round++) {
        struct obj *old = rcu_xchg_pointer_sym((void **)&current, fresh());
        F(call_rcu)(&old->head, poison_and_free);
        int hooked = round % 2;
        if (hooked) F(call_rcu_before_fork)();
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            if (hooked) {
                F(call_rcu_after_fork_child)();
                CHECK_EQ(atomic_load(&hooks[2]), 1); /* the parent never ran it */
            }
            child_work();
            _exit(0);
        }
        if (hooked) F(call_rcu_after_fork_parent)();
        int status;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    F(barrier)();
    CHECK_EQ(atomic_load(&freed), 8);
    CHECK_EQ(atomic_load(&hooks[0]), 4);
    CHECK_EQ(atomic_load(&hooks[1]), 4);
    CHECK_EQ(atomic_load(&hooks[2]), 0); /* only the children ran theirs */
    F(unregister_rculfhash_atfork)(&atfork);
    F(call_rcu_before_fork)(); /* no hook any more */
    F(call_rcu_after_fork_parent)();
    CHECK_EQ(atomic_load(&hooks[0]), 4);
    stop_readers();
}

/* --- fork-first-use: fork while another thread makes the flavor's first call, so that its
 * domain is being built: the child must build it again, not wait for a builder it does not
 * have. Each round in a fresh process (an arena) whose first call is the one under way, the
 * fork a little later each round. */
static void *first_call(void *arg) {
    (void)arg;
    F(register_thread)();
    F(synchronize_rcu)();
    F(unregister_thread)();
    return NULL;
}

static int arena(int delay_us) {
    pthread_t first;
    CHECK(pthread_create(&first, NULL, first_call, NULL) == 0);
    uint64_t end = now_ns() + (uint64_t)delay_us * 1000;
    while (now_ns() < end) {
    }
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(20); /* a hang is killed: the arena sees the signal */
        F(register_thread)();
        F(read_lock)();
        F(read_unlock)();
#ifdef QSBR
        F(thread_offline)();
#endif
        F(synchronize_rcu)();
        F(barrier)();
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(pthread_join(first, NULL) == 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

static void fork_first_use(void) {
    int failed = 0;
    for (int round = 0; round < 40; round++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(arena(round * 40));
        int status;
        CHECK(waitpid(pid, &status, 0) == pid);
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            fprintf(stderr, "round %d: the child failed or hung\n", round);
            failed++;
        }
    }
    CHECK_EQ(failed, 0);
}

/* --- key-destructor: a thread's pthread_key destructors run registered, as with liburcu
 * (glibc runs them after Rust's thread-local destructors): they read protected, unregister,
 * and may register again, and unregister or leave that registration for the thread's exit. */
static pthread_key_t key;
static atomic_int destructors_done;

static void key_destructor_body(void *value) {
    (void)value;
    F(read_lock)();
    CHECK_EQ(F(read_ongoing)(), 1);
    read_once();
    F(read_unlock)();
    F(unregister_thread)();
    F(register_thread)();
    F(unregister_thread)();
    F(register_thread)(); /* left registered: unregistered at exit all the same */
    atomic_fetch_add(&destructors_done, 1);
}

static void *keyed_thread(void *arg) {
    (void)arg;
    F(register_thread)();
    CHECK(pthread_setspecific(key, (void *)1) == 0);
    return NULL;
}

static void key_destructors(void) {
    current = fresh();
    CHECK(pthread_key_create(&key, key_destructor_body) == 0);
    for (int i = 0; i < 4; i++) {
        pthread_t thread;
        CHECK(pthread_create(&thread, NULL, keyed_thread, NULL) == 0);
        CHECK(pthread_join(thread, NULL) == 0);
    }
    CHECK_EQ(atomic_load(&destructors_done), 4);
    F(synchronize_rcu)(); /* no thread was left registered */
}

/* --- get-thread: get_call_rcu_thread() from the first callback that ever runs, a deferred
 * one, returns a callback thread (that one) instead of waiting for callbacks from inside one;
 * in memb, from within a read-side critical section before any callback ran, it returns 0
 * (finding one would wait for a grace period) instead of waiting for ever. */
static atomic_int got_thread;

static void ask_thread(void *p) {
    (void)p;
    pthread_t t = F(get_call_rcu_thread)(F(get_default_call_rcu_data)());
    CHECK(pthread_equal(t, pthread_self()));
    atomic_store(&got_thread, 1);
}

static void get_thread(void) {
    F(register_thread)();
    F(defer_rcu)(ask_thread, NULL);
    F(defer_barrier)();
    CHECK_EQ(atomic_load(&got_thread), 1);
    F(unregister_thread)();
}

#ifndef QSBR
static void get_thread_reading(void) {
    F(register_thread)();
    F(read_lock)();
    CHECK(F(get_call_rcu_thread)(F(get_default_call_rcu_data)()) == 0);
    F(read_unlock)();
    CHECK(F(get_call_rcu_thread)(F(get_default_call_rcu_data)()) != 0);
    F(unregister_thread)();
}
#endif

/* --- thread-exit: threads that read and exit, registered or not, leave grace periods free. */
static void *short_reader(void *arg) {
    int unregister = arg != NULL;
    F(register_thread)();
    for (int i = 0; i < 10; i++) {
        F(read_lock)();
        read_once();
        F(read_unlock)();
#ifdef QSBR
        urcu_qsbr_quiescent_state();
#endif
    }
    if (unregister) F(unregister_thread)();
    return NULL; /* registered threads that exit are unregistered at exit */
}

static void thread_exit(void) {
    rcu_set_pointer_sym((void **)&current, fresh());
    for (int round = 0; round < 20; round++) {
        pthread_t t[8];
        for (int i = 0; i < 8; i++) t[i] = spawn(short_reader, i % 2 ? (void *)1 : NULL);
        for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
        struct obj *old = rcu_xchg_pointer_sym((void **)&current, fresh());
        F(synchronize_rcu)(); /* would hang if an exited thread were still waited for */
        poison_and_free(&old->head);
    }
}

/* --- barrier-while-reading: memb refuses (an error line, no wait), as liburcu; qsbr goes
 * offline around it. */
static void barrier_while_reading(void) {
    static struct rcu_head head;
    F(register_thread)();
    F(call_rcu)(&head, count);
    F(read_lock)();
    F(barrier)();
    F(read_unlock)();
    F(barrier)();
    CHECK_EQ(atomic_load(&crdp_ran), 1);
    F(unregister_thread)();
}

/* --- signal (memb): a signal handler's read section, whatever point of the thread's own
 * read_lock/read_unlock the signal lands on, is protected: a grace period waits for it. Objects
 * are poisoned after the grace period, not freed, so that a section the grace period missed
 * reads the poison instead of freed memory. */
#ifndef QSBR
#include <signal.h>
#include <time.h>
static pthread_t signalled;
static atomic_long handled, unprotected;

static void read_in_handler(int sig) {
    (void)sig;
    int saved = errno;
    F(read_lock)();
    struct obj *obj = rcu_dereference_sym(__atomic_load_n(&current, __ATOMIC_RELAXED));
    uint64_t start = now_ns();
    while (now_ns() - start < 20000) {
        if (__atomic_load_n(&obj->value, __ATOMIC_RELAXED) != LIVE) {
            atomic_fetch_add(&unprotected, 1);
            break;
        }
    }
    F(read_unlock)();
    atomic_fetch_add(&handled, 1);
    errno = saved;
}

static void *poisoning_writer(void *arg) {
    (void)arg;
    F(register_thread)();
    while (!atomic_load(&stop)) {
        struct obj *old = rcu_xchg_pointer_sym((void **)&current, fresh());
        F(synchronize_rcu)();
        __atomic_store_n(&old->value, POISON, __ATOMIC_RELAXED); /* leaked, never freed */
    }
    F(unregister_thread)();
    return NULL;
}

static void *kicker(void *arg) {
    (void)arg;
    while (!atomic_load(&stop)) {
        pthread_kill(signalled, SIGUSR1);
        struct timespec pause = {0, 20000};
        nanosleep(&pause, NULL);
    }
    return NULL;
}

static void signal_sections(void) {
    current = fresh();
    signalled = pthread_self();
    F(register_thread)();
    F(read_lock)(); /* the thread's record exists before any signal */
    F(read_unlock)();
    struct sigaction action = {0};
    action.sa_handler = read_in_handler;
    action.sa_flags = SA_RESTART;
    CHECK(sigaction(SIGUSR1, &action, NULL) == 0);
    pthread_t writer = spawn(poisoning_writer, NULL), kick = spawn(kicker, NULL);
    uint64_t end = now_ns() + 2000000000ull;
    while (now_ns() < end || atomic_load(&handled) < 1000) {
        for (int i = 0; i < 1000; i++) {
            F(read_lock)();
            F(read_unlock)();
        }
    }
    atomic_store(&stop, true);
    CHECK(pthread_join(kick, NULL) == 0);
    CHECK(pthread_join(writer, NULL) == 0);
    signal(SIGUSR1, SIG_IGN);
    CHECK_EQ(atomic_load(&unprotected), 0);
    F(unregister_thread)();
}
#endif

#ifdef QSBR
/* --- qs-online: as in liburcu, a quiescent state of an offline thread brings it online (its
 * reads after it are protected). */
static void quiescent_state_comes_online(void) {
    F(register_thread)();
    F(thread_offline)();
    CHECK_EQ(F(read_ongoing)(), 0);
    F(quiescent_state)();
    CHECK_EQ(F(read_ongoing)(), 1);
    F(thread_offline)();
    F(unregister_thread)();
}
#endif

int main(int argc, char **argv) {
    CHECK(argc == 2);
    const char *which = argv[1];
    if (strcmp(which, "gp") == 0) gp();
    else if (strcmp(which, "call") == 0) call();
    else if (strcmp(which, "defer") == 0) defer();
    else if (strcmp(which, "defer-flood") == 0) defer_flood();
    else if (strcmp(which, "poll") == 0) poll_cookies();
    else if (strcmp(which, "crdp") == 0) crdp();
    else if (strcmp(which, "pointer") == 0) pointer();
    else if (strcmp(which, "table") == 0) table();
    else if (strcmp(which, "fork") == 0) fork_test();
    else if (strcmp(which, "fork-first-use") == 0) fork_first_use();
    else if (strcmp(which, "key-destructor") == 0) key_destructors();
    else if (strcmp(which, "get-thread") == 0) get_thread();
    else if (strcmp(which, "thread-exit") == 0) thread_exit();
    else if (strcmp(which, "barrier-while-reading") == 0) barrier_while_reading();
#ifndef QSBR
    else if (strcmp(which, "signal") == 0) signal_sections();
    else if (strcmp(which, "get-thread-reading") == 0) get_thread_reading();
#else
    else if (strcmp(which, "qs-online") == 0) quiescent_state_comes_online();
#endif
    else {
        fprintf(stderr, "unknown test '%s'\n", which);
        return 2;
    }
    printf("ok: %s\n", which);
    return 0;
}
