/* `ingestctl status`: ask a running ingest-agent over its unix socket. */
#include "../common/status.h"
#include "ingestctl.h"

#include <ingest.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ANSWER_MAX (256u * 1024u)

int cmd_status(int argc, char **argv)
{
    const char *socket = NULL, *config = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc)
            socket = argv[++i];
        else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            config = argv[++i];
        else {
            fprintf(stderr, "usage: ingestctl status [--json] [--socket PATH | --config AGENT.yaml]\n");
            return 2;
        }
    }
    if (socket != NULL && config != NULL) {
        fprintf(stderr, "ingestctl status: --socket and --config name the agent two ways: give one\n");
        return 2;
    }
    char path[4200];
    if (socket == NULL) {
        if (config == NULL)
            config = "/etc/ingest/agent.yaml";
        ingest_ctx *ctx = ingest_ctx_create(NULL);
        ingest_agent_config *cfg = NULL;
        if (ctx == NULL || ingest_agent_config_load(ctx, config, &cfg) != 0) {
            fprintf(stderr, "ingestctl status: %s (or give --socket PATH)\n", ctx ? ingest_ctx_errmsg(ctx) : "no memory");
            ingest_ctx_destroy(ctx);
            return 1;
        }
        snprintf(path, sizeof(path), "%s", cfg->status_socket);
        ingest_agent_config_free(cfg);
        ingest_ctx_destroy(ctx);
        socket = path;
    }
    char *out = malloc(ANSWER_MAX), err[512];
    if (out == NULL)
        return 1;
    if (status_query(socket, json, out, ANSWER_MAX, err, sizeof(err)) != 0) {
        fprintf(stderr, "ingestctl status: %s\n", err);
        free(out);
        return 1;
    }
    fputs(out, stdout);
    if (out[0] && out[strlen(out) - 1] != '\n')
        putchar('\n');
    free(out);
    return 0;
}
