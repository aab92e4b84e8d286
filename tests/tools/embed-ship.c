/*
 * embed-ship: what an embedder writes to ship a directory to a receiver
 * with libingest's public API only (include/ingest.h): keys, a sender
 * over the directory, a socket of its own, the session's handshake, a tcp
 * link, and the edge side of the protocol.  tests/integration/test_embed.sh
 * runs it against the real receiver; docs/architecture.md points here.
 *
 * usage: embed-ship DEVICE DEVICE.key RECEIVER.pub DEDUP.key HOST:PORT DIR
 * (the socket comes from the programs' own prog_connect: an embedder
 * brings its own)
 * Prints "shipped: batches=N files=N chunks_sent=N" and exits 0 when every
 * batch was acknowledged.
 */
#include "../../agent/common/prog.h"

#include <ingest.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void log_line(void *ud, int level, const char *msg)
{
    (void)ud;
    fprintf(stderr, "embed-ship[%d]: %s\n", level, msg);
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: embed-ship DEVICE DEVICE.key RECEIVER.pub DEDUP.key HOST:PORT DIR\n");
        return 2;
    }
    const char *device = argv[1];
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL)
        return 1;
    ingest_ctx_set_log(ctx, log_line, NULL, INGEST_LOG_WARN);
    ingest_secret_key key;
    uint8_t receiver_pub[INGEST_PUBKEY_BYTES], dedup[INGEST_KEY_BYTES];
    ingest_sender *snd = NULL;
    ingest_codec *codec = NULL;
    ingest_session *ss = NULL;
    ingest_link *link = NULL;
    ingest_edge *edge = NULL;
    int fd = -1, status = 1, rc;
    if (ingest_secret_key_load(ctx, argv[2], &key) < 0 || ingest_public_key_load(ctx, argv[3], receiver_pub) < 0 ||
        ingest_dedup_key_load(ctx, argv[4], dedup) < 0)
        goto out;
    const ingest_sender_source src = { "data", argv[6], 0 };
    const ingest_sender_opts so = { .device = device, .dedup_key = dedup, .sources = &src, .nsources = 1 };
    if (ingest_sender_create(ctx, &so, &snd) < 0 || ingest_sender_scan(snd) < 0 || ingest_codec_create(ctx, 1, &codec) < 0)
        goto out;
    char err[512];
    if ((fd = prog_connect(argv[5], 10000, err, sizeof(err))) < 0) {
        fprintf(stderr, "embed-ship: %s\n", err);
        goto out;
    }
    if (ingest_session_client_create(ctx, device, &key, receiver_pub, &ss) < 0 ||
        ingest_session_set_features(ss, INGEST_SESSION_FEATURE_PIPELINE | INGEST_SESSION_FEATURE_PACK |
                                            INGEST_SESSION_FEATURE_SHUFFLE2) < 0 ||
        ingest_session_handshake_fd(ss, fd, 15000) < 0 || ingest_link_tcp_create(ctx, ss, fd, argv[5], &link) < 0)
        goto out;
    const ingest_edge_opts eo = {
        .codec = codec, .chunk_cap = ingest_sender_chunk_bound(snd), .log = log_line, .log_level = INGEST_LOG_WARN,
    };
    if (ingest_edge_create(ctx, &eo, &edge) < 0 || ingest_edge_attach(edge, link) < 0)
        goto out;
    ingest_sender_batch *b = NULL;
    int failed = 0;
    while ((rc = ingest_sender_next_batch(snd, &b)) == 1) {
        rc = ingest_edge_send_manifest(edge, b);
        if (rc == 0)
            rc = ingest_edge_finish_batch(edge, b, 0);
        if (rc != 3) /* 3: pipelined, the edge holds it until its ACK */
            ingest_sender_batch_destroy(b);
        if (rc < 0)
            goto out;
        failed |= rc == 1 || rc == 2;
    }
    if (rc < 0 || ingest_edge_wait_pending(edge) < 0)
        goto out;
    ingest_edge_stats st;
    ingest_edge_stats_get(edge, &st);
    printf("shipped: batches=%llu files=%llu chunks_sent=%llu\n", (unsigned long long)st.batches_acked,
           (unsigned long long)st.files, (unsigned long long)st.chunks_sent);
    status = failed || st.batches_failed > 0;
out:
    if (status != 0 && ingest_ctx_errmsg(ctx)[0] != '\0')
        fprintf(stderr, "embed-ship: %s\n", ingest_ctx_errmsg(ctx));
    ingest_edge_destroy(edge); /* before the link and the codec it uses */
    ingest_link_destroy(link);
    ingest_session_destroy(ss);
    if (fd >= 0)
        close(fd);
    ingest_codec_destroy(codec);
    ingest_sender_destroy(snd);
    ingest_secret_key_wipe(&key);
    ingest_ctx_destroy(ctx);
    return status;
}
