/*
 * Configuration: the errors a correct program must handle come back as status codes with a
 * message; good settings build working domains; the global domain can be configured once.
 */
#include "check.h"
#include <rcukit/rcukit.h>
#include <string.h>

int main(void) {
    CHECK(strcmp(rcukit_last_error(), "no error") == 0);
    CHECK(strcmp(rcukit_version(), "0.1.0") == 0);
    CHECK(strcmp(rcukit_status_str(RCUKIT_ALREADY_BUILT), "the global domain is already built") == 0);
    CHECK(strcmp(rcukit_status_str(99), "unknown status") == 0);

    /* The global domain takes a configuration before its first use, and only then. A domain
     * made and freed before that does not use it (freeing one builds no global domain). */
    rcukit_domain *early = rcukit_domain_new(NULL);
    CHECK(early != NULL);
    rcukit_synchronize(early);
    rcukit_domain_free(early);
    rcukit_config *config = rcukit_config_new();
    CHECK(rcukit_config_set_name(config, "my-global") == RCUKIT_OK);
    CHECK(rcukit_global_init(config) == RCUKIT_OK);
    CHECK(rcukit_global_init(config) == RCUKIT_ALREADY_BUILT);
    CHECK(strstr(rcukit_last_error(), "already exists") != NULL);
    rcukit_synchronize(rcukit_global());

    /* Out-of-range settings: NULL, with the setting named. */
    CHECK(rcukit_config_set_stall_timeout_ms(config, 0) == RCUKIT_OK);
    CHECK(rcukit_domain_new(config) == NULL);
    CHECK(strstr(rcukit_last_error(), "stall_timeout") != NULL);
    CHECK(rcukit_config_set_stall_timeout_ms(config, 1000) == RCUKIT_OK);
    CHECK(rcukit_config_set_callback_workers(config, 0) == RCUKIT_OK);
    CHECK(rcukit_domain_new(config) == NULL);
    CHECK(strstr(rcukit_last_error(), "callback_workers") != NULL);
    CHECK(rcukit_config_set_callback_workers(config, 3) == RCUKIT_OK);
    CHECK(rcukit_config_set_normal_gp_delay_us(config, 20ull * 1000 * 1000) == RCUKIT_OK);
    CHECK(rcukit_domain_new(config) == NULL);
    CHECK(strstr(rcukit_last_error(), "normal_gp_delay") != NULL);
    CHECK(rcukit_config_set_normal_gp_delay_us(config, 200) == RCUKIT_OK);
    CHECK(rcukit_config_set_name(config, "") == RCUKIT_OK);
    CHECK(rcukit_domain_new(config) == NULL);
    CHECK(strstr(rcukit_last_error(), "name") != NULL);

    /* Arguments a setter cannot even store. */
    CHECK(rcukit_config_set_name(config, "\xff\xfe") == RCUKIT_INVALID_ARGUMENT);
    CHECK(strstr(rcukit_last_error(), "UTF-8") != NULL);
    CHECK(rcukit_config_set_name(config, NULL) == RCUKIT_INVALID_ARGUMENT);
    CHECK(rcukit_config_set_fence(config, 42) == RCUKIT_INVALID_ARGUMENT);
    CHECK(strstr(rcukit_last_error(), "42") != NULL);
    CHECK(rcukit_config_set_backlog_callbacks(NULL, 1) == RCUKIT_INVALID_ARGUMENT);

    /* Good settings build a working domain. */
    CHECK(rcukit_config_set_name(config, "configured") == RCUKIT_OK);
    CHECK(rcukit_config_set_fence(config, RCUKIT_FENCE_SEQCST) == RCUKIT_OK);
    CHECK(rcukit_config_set_backlog_callbacks(config, 100) == RCUKIT_OK);
    CHECK(rcukit_config_set_backlog_bytes(config, 1 << 20) == RCUKIT_OK);
    CHECK(rcukit_config_set_callback_batch(config, 64) == RCUKIT_OK);
    CHECK(rcukit_config_set_expedited_callbacks(config, false) == RCUKIT_OK);
    rcukit_domain *domain = rcukit_domain_new(config);
    CHECK(domain != NULL);
    CHECK(rcukit_domain_id(domain) != rcukit_domain_id(rcukit_global()));
    rcukit_synchronize(domain);
    rcukit_domain_free(domain);

    /* QSBR refuses RCU-only settings, and takes the shared ones. */
    rcukit_qsbr *qsbr = rcukit_qsbr_new(config);
    CHECK(qsbr == NULL);
    CHECK(strstr(rcukit_last_error(), "fence") != NULL);
    CHECK(strstr(rcukit_last_error(), "QSBR") != NULL);
    rcukit_config *shared = rcukit_config_new();
    CHECK(rcukit_config_set_name(shared, "q") == RCUKIT_OK);
    CHECK(rcukit_config_set_callback_workers(shared, 2) == RCUKIT_OK);
    CHECK(rcukit_config_set_backlog_callbacks(shared, 100) == RCUKIT_OK);
    CHECK(rcukit_config_set_normal_gp_delay_us(shared, 100) == RCUKIT_OK);
    qsbr = rcukit_qsbr_new(shared);
    CHECK(qsbr != NULL);
    rcukit_qsbr_synchronize(qsbr);
    rcukit_qsbr_free(qsbr);

    /* RCU domains refuse QSBR-only settings. */
    CHECK(rcukit_config_set_fenced_quiescent_states(NULL, true) == RCUKIT_INVALID_ARGUMENT);
    CHECK(rcukit_config_set_fenced_quiescent_states(shared, true) == RCUKIT_OK);
    CHECK(rcukit_domain_new(shared) == NULL);
    CHECK(strstr(rcukit_last_error(), "fenced_quiescent_states") != NULL);
    CHECK(strstr(rcukit_last_error(), "QSBR") != NULL);
    CHECK(rcukit_global_init(shared) == RCUKIT_INVALID_SETTING);
    qsbr = rcukit_qsbr_new(shared);
    CHECK(qsbr != NULL);
    rcukit_qsbr_synchronize_expedited(qsbr);
    rcukit_qsbr_free(qsbr);

    /* Readers giving way: QSBR only too. */
    rcukit_config *give_way = rcukit_config_new();
    CHECK(give_way != NULL);
    CHECK(rcukit_config_set_readers_give_way(NULL, false) == RCUKIT_INVALID_ARGUMENT);
    CHECK(rcukit_config_set_readers_give_way(give_way, false) == RCUKIT_OK);
    CHECK(rcukit_domain_new(give_way) == NULL);
    CHECK(strstr(rcukit_last_error(), "readers_give_way") != NULL);
    qsbr = rcukit_qsbr_new(give_way);
    CHECK(qsbr != NULL);
    rcukit_qsbr_synchronize_expedited(qsbr);
    rcukit_qsbr_free(qsbr);
    rcukit_config_free(give_way);

    /* Freeing NULL does nothing. */
    rcukit_domain_free(NULL);
    rcukit_qsbr_free(NULL);
    rcukit_qsbr_unregister(NULL);
    rcukit_config_free(NULL);
    rcukit_config_free(config);
    rcukit_config_free(shared);
    printf("ok\n");
    return 0;
}
