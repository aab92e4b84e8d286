/*
 * idle-sessions: hold N authenticated device sessions open against a
 * receiver from one process, to measure what an idle session costs the
 * core (a fleet's gateways are connected far more than they ship).
 *
 * usage: idle-sessions HOST:PORT RECEIVER.pub KEYDIR N
 * Device i (1..N) is "d{i}" with its key in KEYDIR/d{i}.key.  Prints
 * "connected=N" once every handshake succeeded (or "failed at d{i}: why"
 * and exits 1), then holds the sessions, answering nothing, until stdin
 * closes; then closes them and exits 0.
 */
#include "../../agent/common/prog.h"

#include <ingest.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 5 || atoi(argv[4]) < 1) {
        fprintf(stderr, "usage: idle-sessions HOST:PORT RECEIVER.pub KEYDIR N\n");
        return 2;
    }
    const int n = atoi(argv[4]);
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    uint8_t pub[INGEST_PUBKEY_BYTES];
    int *fds = calloc((size_t)n, sizeof(*fds));
    ingest_session **ss = calloc((size_t)n, sizeof(*ss));
    if (ctx == NULL || fds == NULL || ss == NULL || ingest_public_key_load(ctx, argv[2], pub) < 0) {
        fprintf(stderr, "idle-sessions: %s\n", ctx ? ingest_ctx_errmsg(ctx) : "out of memory");
        return 1;
    }
    int status = 0, i;
    for (i = 0; i < n; i++) {
        char id[32], path[4200], err[512] = "";
        snprintf(id, sizeof(id), "d%d", i + 1);
        snprintf(path, sizeof(path), "%s/%s.key", argv[3], id);
        ingest_secret_key k;
        fds[i] = -1;
        if (ingest_secret_key_load(ctx, path, &k) < 0 || (fds[i] = prog_connect(argv[1], 10000, err, sizeof(err))) < 0 ||
            ingest_session_client_create(ctx, id, &k, pub, &ss[i]) < 0 ||
            ingest_session_set_features(ss[i], INGEST_SESSION_FEATURES_ALL & ~INGEST_SESSION_FEATURE_DICT) < 0 ||
            ingest_session_handshake_fd(ss[i], fds[i], 15000) < 0) {
            printf("failed at %s: %s\n", id, fds[i] < 0 ? err : ingest_ctx_errmsg(ctx));
            ingest_secret_key_wipe(&k);
            status = 1;
            i++;
            break;
        }
        ingest_secret_key_wipe(&k);
    }
    if (status == 0) {
        printf("connected=%d\n", n);
        fflush(stdout);
        char buf[256];
        while (fread(buf, 1, sizeof(buf), stdin) > 0)
            ;
    }
    for (int j = 0; j < i; j++) {
        ingest_session_destroy(ss[j]);
        if (fds[j] >= 0)
            close(fds[j]);
    }
    free(ss);
    free(fds);
    ingest_ctx_destroy(ctx);
    return status;
}
