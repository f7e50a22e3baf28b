/*
 * liburcu's function ABI (memb and qsbr flavors), declared from its documented signatures so
 * that these tests need no liburcu headers. The tests that use liburcu's own headers are in
 * liburcu_headers_*.c.
 */
#ifndef URCU_ABI_H
#define URCU_ABI_H

#include <pthread.h>
#include <stdbool.h>

struct cds_wfcq_node {
    struct cds_wfcq_node *next;
};

struct rcu_head {
    struct cds_wfcq_node next;
    void (*func)(struct rcu_head *head);
};

struct call_rcu_data;

struct urcu_atfork {
    void (*before_fork)(void *priv);
    void (*after_fork_parent)(void *priv);
    void (*after_fork_child)(void *priv);
    void *priv;
};

struct urcu_gp_poll_state {
    unsigned long grace_period_id;
};

struct rcu_flavor_struct {
    void (*read_lock)(void);
    void (*read_unlock)(void);
    int (*read_ongoing)(void);
    void (*read_quiescent_state)(void);
    void (*update_call_rcu)(struct rcu_head *head, void (*func)(struct rcu_head *head));
    void (*update_synchronize_rcu)(void);
    void (*update_defer_rcu)(void (*fct)(void *p), void *p);
    void (*thread_offline)(void);
    void (*thread_online)(void);
    void (*register_thread)(void);
    void (*unregister_thread)(void);
    void (*barrier)(void);
    void (*register_rculfhash_atfork)(struct urcu_atfork *atfork);
    void (*unregister_rculfhash_atfork)(struct urcu_atfork *atfork);
};

#define URCU_FLAVOR_FUNCTIONS(F)                                                              \
    void F##_read_lock(void);                                                                 \
    void F##_read_unlock(void);                                                               \
    int F##_read_ongoing(void);                                                               \
    void F##_synchronize_rcu(void);                                                           \
    void F##_register_thread(void);                                                           \
    void F##_unregister_thread(void);                                                         \
    void F##_call_rcu(struct rcu_head *head, void (*func)(struct rcu_head *head));            \
    void F##_barrier(void);                                                                   \
    struct call_rcu_data *F##_create_call_rcu_data(unsigned long flags, int cpu_affinity);    \
    void F##_call_rcu_data_free(struct call_rcu_data *crdp);                                  \
    struct call_rcu_data *F##_get_default_call_rcu_data(void);                                \
    struct call_rcu_data *F##_get_cpu_call_rcu_data(int cpu);                                 \
    struct call_rcu_data *F##_get_thread_call_rcu_data(void);                                 \
    struct call_rcu_data *F##_get_call_rcu_data(void);                                        \
    pthread_t F##_get_call_rcu_thread(struct call_rcu_data *crdp);                            \
    void F##_set_thread_call_rcu_data(struct call_rcu_data *crdp);                            \
    int F##_set_cpu_call_rcu_data(int cpu, struct call_rcu_data *crdp);                       \
    int F##_create_all_cpu_call_rcu_data(unsigned long flags);                                \
    void F##_free_all_cpu_call_rcu_data(void);                                                \
    void F##_call_rcu_before_fork(void);                                                      \
    void F##_call_rcu_after_fork_parent(void);                                                \
    void F##_call_rcu_after_fork_child(void);                                                 \
    void F##_register_rculfhash_atfork(struct urcu_atfork *atfork);                           \
    void F##_unregister_rculfhash_atfork(struct urcu_atfork *atfork);                         \
    void F##_defer_rcu(void (*fct)(void *p), void *p);                                        \
    int F##_defer_register_thread(void);                                                      \
    void F##_defer_unregister_thread(void);                                                   \
    void F##_defer_barrier(void);                                                             \
    void F##_defer_barrier_thread(void);                                                      \
    void F##_defer_exit(void);                                                                \
    struct urcu_gp_poll_state F##_start_poll_synchronize_rcu(void);                           \
    bool F##_poll_state_synchronize_rcu(struct urcu_gp_poll_state state);                     \
    extern const struct rcu_flavor_struct F##_flavor;

URCU_FLAVOR_FUNCTIONS(urcu_memb)
URCU_FLAVOR_FUNCTIONS(urcu_qsbr)

void urcu_memb_init(void);
void urcu_qsbr_quiescent_state(void);
void urcu_qsbr_thread_offline(void);
void urcu_qsbr_thread_online(void);
void urcu_qsbr_exit(void);

void *rcu_dereference_sym(void *p);
void *rcu_set_pointer_sym(void **p, void *v);
void *rcu_xchg_pointer_sym(void **p, void *v);
void *rcu_cmpxchg_pointer_sym(void **p, void *old, void *_new);

#endif
