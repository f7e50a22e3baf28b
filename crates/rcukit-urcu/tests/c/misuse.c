/*
 * Misuse of liburcu's ABI: each case does one wrong thing; the test suite runs it in a child
 * process and checks that it aborts with the expected message.
 */
#include "check.h"
#include "urcu_abi.h"
#include <string.h>

static void barrier_from_callback(struct rcu_head *head) {
    (void)head;
    urcu_memb_barrier();
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    const char *what = argv[1];
    if (strcmp(what, "memb-unlock-without-lock") == 0) {
        urcu_memb_read_unlock();
    } else if (strcmp(what, "memb-synchronize-in-read") == 0) {
        urcu_memb_read_lock();
        urcu_memb_synchronize_rcu();
    } else if (strcmp(what, "memb-register-twice") == 0) {
        urcu_memb_register_thread();
        urcu_memb_register_thread();
    } else if (strcmp(what, "memb-unregister-unregistered") == 0) {
        urcu_memb_unregister_thread();
    } else if (strcmp(what, "memb-barrier-from-callback") == 0) {
        static struct rcu_head head;
        urcu_memb_call_rcu(&head, barrier_from_callback);
        urcu_memb_barrier();
    } else if (strcmp(what, "qsbr-register-twice") == 0) {
        urcu_qsbr_register_thread();
        urcu_qsbr_register_thread();
    } else if (strcmp(what, "qsbr-unregister-unregistered") == 0) {
        urcu_qsbr_unregister_thread();
    } else {
        fprintf(stderr, "unknown case '%s'\n", what);
        return 2;
    }
    printf("no abort\n");
    return 0;
}
