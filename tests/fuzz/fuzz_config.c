/*
 * Fuzz target: the YAML config loader (agent and receiver tables) and the
 * size/duration parsers.  Any input must be rejected or accepted cleanly:
 * no crash, no leak, no unbounded allocation.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ingest/common.h"
#include "ingest/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL)
        return 0;
    ingest_agent_config *a = NULL;
    if (ingest_agent_config_parse(ctx, "/fuzz/agent.yaml", data, size, &a) == 0) {
        /* A config that loads is complete: every string is set. */
        if (a->device_id == NULL || a->sources_count == 0 || a->sources[0].name == NULL ||
            a->metrics_listen == NULL)
            abort();
    } else if (a != NULL || ingest_ctx_errmsg(ctx)[0] == '\0') {
        abort();
    }
    ingest_agent_config_free(a);

    ingest_receiver_config *r = NULL;
    if (ingest_receiver_config_parse(ctx, "fuzz/receiver.yaml", data, size, &r) == 0) {
        if (r->layout == NULL || strstr(r->layout, "{path}") == NULL)
            abort();
        /* devices never share a tree unless the config says so */
        if (strstr(r->layout, "{device}") == NULL && !r->layout_shared)
            abort();
    } else if (r != NULL || ingest_ctx_errmsg(ctx)[0] == '\0') {
        abort();
    }
    ingest_receiver_config_free(r);

    char text[128];
    const size_t n = size < sizeof(text) - 1 ? size : sizeof(text) - 1;
    memcpy(text, data, n);
    text[n] = '\0';
    uint64_t v;
    (void)ingest_parse_size(ctx, text, &v);
    (void)ingest_parse_duration(ctx, text, &v);
    ingest_ctx_destroy(ctx);
    return 0;
}
