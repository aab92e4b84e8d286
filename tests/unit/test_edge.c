/*
 * The edge side of the protocol (include/ingest/edge.h) over in-memory
 * links (include/ingest/link.h): against the real core side (core.h) in a
 * thread, with the link losing or holding back messages, and against a
 * core the test plays by hand that lies (a WANT past the batch, an ACK
 * for another batch, RECEIVED without pipelining, an ERROR).  Each case
 * asserts what the edge returned, what it counted and what landed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "ingest.h"
#include "support/testkit.h"

#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEVICE "dev1"

typedef struct env {
    char dir[256], src[300], bronze[300], state[300];
    ingest_ctx *ctx, *ectx;
    ingest_store *st;
    ingest_index *idx;
    ingest_core *core;     /* NULL when the test plays the core */
    ingest_link *dev, *srv;
    pthread_t thread;
    int serve_rc, serving;
    ingest_sender *snd;
    ingest_codec *codec;
    ingest_edge *edge;
    unsigned acked;        /* on_acked calls */
    uint64_t acked_files;
    uint64_t acked_refused; /* files on_acked saw refused */
    char refused_why[256];  /* the last reason it saw */
} env;

static void *serve_main(void *arg)
{
    env *e = arg;
    e->serve_rc = ingest_core_serve(e->core, e->srv, DEVICE);
    return NULL;
}

static void on_acked(void *ud, ingest_sender_batch *b, uint32_t sent, double t0)
{
    env *e = ud;
    (void)sent;
    (void)t0;
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    e->acked++;
    e->acked_files += bs.files;
    for (uint64_t i = 0; i < bs.files; i++) {
        ingest_sender_file_info fi;
        assert_int_equal(ingest_sender_batch_file(b, i, &fi), 0);
        if (fi.refused != NULL) {
            e->acked_refused++;
            snprintf(e->refused_why, sizeof(e->refused_why), "%s", fi.refused);
        }
    }
    assert_int_equal(bs.refused, e->acked_refused);
}

/* compression.encoders of the edges env_new makes (0: the online CPUs, at most 3) */
static unsigned env_encoders;
static int env_ack_delay_ms; /* the real core holds each ACK this long once its batch is durable */

/*
 * An edge on a mem link with these features, and (with_core) the real
 * core serving the other end; nsmall extra files of 700 bytes in the tree.
 */
static env *env_new(unsigned features, int with_core, unsigned nsmall, int reply_ms)
{
    env *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    snprintf(e->dir, sizeof(e->dir), "/tmp/test-edge-XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    snprintf(e->src, sizeof(e->src), "%s/src", e->dir);
    snprintf(e->bronze, sizeof(e->bronze), "%s/bronze", e->dir);
    snprintf(e->state, sizeof(e->state), "%s/state", e->dir);
    assert_int_equal(mkdir(e->src, 0755), 0);
    assert_int_equal(mkdir(e->bronze, 0755), 0);
    write_random_file(e->src, "big.bin", 700 * 1024, 11);
    write_random_file(e->src, "small.bin", 5000, 12);
    for (unsigned i = 0; i < nsmall; i++) {
        char name[32];
        snprintf(name, sizeof(name), "s%03u.json", i);
        write_random_file(e->src, name, 700, 100 + i);
    }
    assert_non_null(e->ctx = ingest_ctx_create(NULL));
    assert_non_null(e->ectx = ingest_ctx_create(NULL));
    assert_int_equal(ingest_link_mem_pair(e->ctx, features, &e->dev, &e->srv), 0);
    if (with_core) {
        const ingest_store_opts so = { .map_size = 1ull << 28 };
        assert_int_equal(ingest_store_open(e->ctx, e->state, &so, &e->st), 0);
        assert_int_equal(ingest_index_open(e->st, e->bronze, &e->idx), 0);
        const ingest_core_opts o = {
            .store = e->st, .index = e->idx, .bronze = e->bronze, .dedup_key = ingest_default_dedup_key(),
            .idle_timeout_ms = 10000, .features = INGEST_SESSION_FEATURES_ALL,
            .test_ack_delay_ms = env_ack_delay_ms,
        };
        assert_int_equal(ingest_core_create(e->ctx, &o, &e->core), 0);
        assert_int_equal(pthread_create(&e->thread, NULL, serve_main, e), 0);
        e->serving = 1;
    }
    const ingest_sender_source src = { "s", e->src, 0 };
    const ingest_sender_opts sopts = {
        .device = DEVICE, .dedup_key = ingest_default_dedup_key(), .sources = &src, .nsources = 1,
        .batch_prefix = "b-", .threads = 1,
    };
    assert_int_equal(ingest_sender_create(e->ectx, &sopts, &e->snd), 0);
    assert_int_equal(ingest_codec_create(e->ectx, 1, &e->codec), 0);
    const ingest_edge_opts eo = {
        .codec = e->codec, .chunk_cap = ingest_sender_chunk_bound(e->snd), .userdata = e, .on_acked = on_acked,
        .reply_timeout_ms = reply_ms, .encoders = env_encoders,
    };
    assert_int_equal(ingest_edge_create(e->ectx, &eo, &e->edge), 0);
    assert_int_equal(ingest_edge_attach(e->edge, e->dev), 0);
    return e;
}

static int env_end_serve(env *e)
{
    if (e->serving) {
        ingest_link_shutdown(e->dev);
        assert_int_equal(pthread_join(e->thread, NULL), 0);
        e->serving = 0;
    }
    return e->serve_rc;
}

static void env_free(env *e)
{
    env_end_serve(e);
    ingest_edge_detach(e->edge);
    ingest_edge_destroy(e->edge);
    ingest_codec_destroy(e->codec);
    ingest_link_destroy(e->dev);
    ingest_link_destroy(e->srv);
    ingest_sender_destroy(e->snd);
    ingest_core_destroy(e->core);
    ingest_index_close(e->idx);
    ingest_store_close(e->st);
    ingest_ctx_destroy(e->ectx);
    ingest_ctx_destroy(e->ctx);
    remove_tree(e->dir);
    free(e);
}

static ingest_sender_batch *next_batch(env *e)
{
    ingest_sender_batch *b = NULL;
    assert_int_equal(ingest_sender_scan(e->snd), 0);
    assert_int_equal(ingest_sender_next_batch(e->snd, &b), 1);
    return b;
}

/* Ship b: the edge's result (b is destroyed unless it became pending). */
static int ship(env *e, ingest_sender_batch *b)
{
    int rc = ingest_edge_send_manifest(e->edge, b);
    if (rc == 0)
        rc = ingest_edge_finish_batch(e->edge, b, 0);
    if (rc != 3)
        ingest_sender_batch_destroy(b);
    return rc;
}

static void assert_landed(env *e, int files)
{
    int n = 0;
    assert_int_equal(count_landed(e->bronze, e->src, NULL, &n), files);
    assert_int_equal(n, files);
}

/* ---- against the real core ---------------------------------------------------- */

static void test_ships_and_dedups(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_SHUFFLE2, 1, 0, 0);
    assert_int_equal(ship(e, next_batch(e)), 0);
    assert_landed(e, 2);
    ingest_edge_stats st;
    ingest_edge_stats_get(e->edge, &st);
    assert_int_equal(e->acked, 1);
    assert_int_equal(st.batches_acked, 1);
    assert_int_equal(st.files, 2);
    assert_true(st.chunks_sent > 0);
    assert_int_equal(st.chunks_dedup, 0);
    const uint64_t sent = st.chunks_sent;
    /* the same files again: nothing travels but the manifest */
    assert_int_equal(ship(e, next_batch(e)), 0);
    ingest_edge_stats_get(e->edge, &st);
    assert_int_equal(st.chunks_sent, sent);
    assert_int_equal(st.chunks_dedup, sent);
    assert_int_equal(e->acked, 2);
    assert_int_equal(env_end_serve(e), 0);
    env_free(e);
}

static void test_pipelined_and_packed(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_PIPELINE | INGEST_SESSION_FEATURE_PACK, 1, 40, 0);
    assert_int_equal(ship(e, next_batch(e)), 3); /* received: pending */
    assert_non_null(ingest_edge_pending(e->edge));
    assert_int_equal(ingest_edge_wait_pending(e->edge), 0);
    assert_null(ingest_edge_pending(e->edge));
    assert_int_equal(e->acked, 1);
    assert_int_equal(e->acked_files, 42);
    ingest_edge_stats st;
    ingest_edge_stats_get(e->edge, &st);
    assert_true(st.groups_sent > 0); /* the small files travelled in groups */
    assert_landed(e, 42);
    env_free(e);
}

/*
 * The real core, its ACKs held 5 s after each batch is durable: it answers
 * RECEIVED of the second batch while the first's ACK is still held (two
 * batches received and unacknowledged), then sends both ACKs in order.
 */
static void test_core_receives_while_one_waits(void **state)
{
    (void)state;
    env_ack_delay_ms = 5000;
    env *e = env_new(INGEST_SESSION_FEATURE_PIPELINE, 1, 0, 30000);
    env_ack_delay_ms = 0;
    assert_int_equal(ship(e, next_batch(e)), 3);
    write_random_file(e->src, "more.bin", 3000, 77);
    assert_int_equal(ship(e, next_batch(e)), 3);
    assert_int_equal(e->acked, 0); /* RECEIVED 2 came before ACK 1 */
    assert_non_null(ingest_edge_pending_at(e->edge, 1));
    assert_int_equal(ingest_edge_wait_pending(e->edge), 0);
    assert_int_equal(e->acked, 2);
    assert_landed(e, 3);
    assert_int_equal(env_end_serve(e), 0);
    env_free(e);
}

static void test_changed_file_abandons_the_batch(void **state)
{
    (void)state;
    env *e = env_new(0, 1, 0, 0);
    ingest_sender_batch *b = next_batch(e);
    write_random_file(e->src, "big.bin", 700 * 1024, 99); /* changed after it was chunked: its chunks are stale */
    assert_int_equal(ship(e, b), 1);
    ingest_edge_stats st;
    ingest_edge_stats_get(e->edge, &st);
    assert_int_equal(st.batches_abandoned, 1);
    assert_int_equal(env_end_serve(e), INGEST_ESTALE); /* the core was told and dropped it */
    assert_landed(e, 0);
    env_free(e);
}

static void test_lost_ack_times_out(void **state)
{
    (void)state;
    env *e = env_new(0, 1, 0, 300);
    assert_int_equal(ingest_link_mem_fault(e->srv, INGEST_LINK_FAULT_DROP, INGEST_MSG_ACK, 1), 0);
    assert_int_equal(ship(e, next_batch(e)), INGEST_ETIMEDOUT);
    assert_int_equal(e->acked, 0); /* never counted as delivered without its ACK */
    assert_landed(e, 2);           /* it did land: a re-send is acknowledged as a duplicate */
    env_free(e);
}

/* ---- against a core that lies (played by the test) ----------------------------------- */

static void core_recv(env *e, ingest_wire_msg *m, unsigned type)
{
    assert_int_equal(ingest_link_recv(e->srv, m, 5000), 0);
    if (m->type != type)
        fail_msg("expected %s from the edge, got %s", ingest_wire_type_name(type), ingest_wire_type_name(m->type));
}

/* Read the edge's BATCH_BEGIN, manifest and MANIFEST_END; the batch id into id. */
static void core_take_manifest(env *e, char *id, size_t cap)
{
    ingest_wire_msg m;
    core_recv(e, &m, INGEST_MSG_BATCH_BEGIN);
    snprintf(id, cap, "%s", m.u.begin.batch_id);
    core_recv(e, &m, INGEST_MSG_MANIFEST_PART);
    core_recv(e, &m, INGEST_MSG_MANIFEST_END);
}

static void core_send(env *e, const ingest_wire_msg *m)
{
    assert_int_equal(ingest_link_send(e->srv, m), 0);
}

/* The edge sends the next batch's manifest; the test, as the core, reads it: the batch, its id in id. */
static ingest_sender_batch *manifest_out(env *e, char *id, size_t cap)
{
    ingest_sender_batch *b = next_batch(e);
    assert_int_equal(ingest_edge_send_manifest(e->edge, b), 0);
    core_take_manifest(e, id, cap);
    return b;
}

/* A chunk travels whole in one CHUNK (its 4-byte index, then the encoded chunk): an edge whose chunks could
 * not fit the link's bound refuses to attach, naming the sizes, rather than failing every batch later. */
static void test_attach_refuses_chunks_past_the_bound(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    assert_non_null(ctx);
    ingest_link *dev = NULL, *srv = NULL;
    assert_int_equal(ingest_link_mem_pair(ctx, 0, &dev, &srv), 0);
    assert_int_equal(dev->peer_max_payload, INGEST_WIRE_MAX_PAYLOAD);
    ingest_codec *codec = NULL;
    assert_int_equal(ingest_codec_create(ctx, 1, &codec), 0);
    for (int over = 0; over <= 1; over++) {
        const ingest_edge_opts eo = { .codec = codec, .chunk_cap = INGEST_WIRE_MAX_PAYLOAD - 4 + (size_t)over };
        ingest_edge *edge = NULL;
        assert_int_equal(ingest_edge_create(ctx, &eo, &edge), 0);
        if (over) {
            assert_int_equal(ingest_edge_attach(edge, dev), INGEST_EINVAL);
            assert_non_null(strstr(ingest_ctx_errmsg(ctx), "chunks of up to 4194301 bytes encoded"));
            assert_non_null(strstr(ingest_ctx_errmsg(ctx), "do not fit the 4194304 bytes"));
        } else {
            assert_int_equal(ingest_edge_attach(edge, dev), 0);
            ingest_edge_detach(edge);
        }
        ingest_edge_destroy(edge);
    }
    /* the agent's largest chunking.max, stored raw, is the largest chunk that fits */
    ingest_chunk_params p = { .min = 1u << 20, .avg = 2u << 20, .max = INGEST_WIRE_MAX_PAYLOAD - 16 };
    assert_int_equal(ingest_chunk_params_check(ctx, &p), 0);
    assert_int_equal(ingest_codec_bound(p.max) + 4, INGEST_WIRE_MAX_PAYLOAD);
    ingest_codec_destroy(codec);
    ingest_link_destroy(dev);
    ingest_link_destroy(srv);
    ingest_ctx_destroy(ctx);
}

static void test_want_past_the_batch(void **state)
{
    (void)state;
    env *e = env_new(0, 0, 0, 2000);
    char id[INGEST_WIRE_BATCH_ID_MAX + 1];
    ingest_sender_batch *b = manifest_out(e, id, sizeof(id));
    const uint32_t idx[2] = { 0, 1000000 };
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_WANT;
    snprintf(m.u.want.batch_id, sizeof(m.u.want.batch_id), "%s", id);
    m.u.want.count = 2;
    m.u.want.idx = idx;
    core_send(e, &m);
    const int rc = ingest_edge_finish_batch(e->edge, b, 0);
    assert_true(rc < 0 && rc != 1 && rc != 2);
    assert_int_equal(e->acked, 0);
    ingest_sender_batch_destroy(b);
    env_free(e);
}

static void test_ack_for_another_batch(void **state)
{
    (void)state;
    env *e = env_new(0, 0, 0, 2000);
    char id[INGEST_WIRE_BATCH_ID_MAX + 1];
    ingest_sender_batch *b = manifest_out(e, id, sizeof(id));
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_ACK;
    snprintf(m.u.ack.batch_id, sizeof(m.u.ack.batch_id), "someone-else");
    core_send(e, &m);
    assert_int_equal(ingest_edge_finish_batch(e->edge, b, 0), INGEST_EPROTO);
    assert_int_equal(e->acked, 0);
    ingest_sender_batch_destroy(b);
    env_free(e);
}

static void test_received_without_pipelining(void **state)
{
    (void)state;
    env *e = env_new(0, 0, 0, 2000);
    char id[INGEST_WIRE_BATCH_ID_MAX + 1];
    ingest_sender_batch *b = manifest_out(e, id, sizeof(id));
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_RECEIVED;
    snprintf(m.u.received.batch_id, sizeof(m.u.received.batch_id), "%s", id);
    core_send(e, &m);
    assert_int_equal(ingest_edge_finish_batch(e->edge, b, 0), INGEST_EPROTO);
    assert_null(ingest_edge_pending(e->edge));
    ingest_sender_batch_destroy(b);
    env_free(e);
}

/* As the core: an empty WANT for batch id (it has every chunk), then `type` (RECEIVED or ACK) for batch of. */
static void core_want_none_then(env *e, const char *id, unsigned type, const char *of)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_WANT;
    snprintf(m.u.want.batch_id, sizeof(m.u.want.batch_id), "%s", id);
    core_send(e, &m);
    memset(&m, 0, sizeof(m));
    m.type = type;
    if (type == INGEST_MSG_RECEIVED)
        snprintf(m.u.received.batch_id, sizeof(m.u.received.batch_id), "%s", of);
    else
        snprintf(m.u.ack.batch_id, sizeof(m.u.ack.batch_id), "%s", of);
    core_send(e, &m);
}

static void core_ack(env *e, const char *id)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_ACK;
    snprintf(m.u.ack.batch_id, sizeof(m.u.ack.batch_id), "%s", id);
    core_send(e, &m);
}

/*
 * Pipelined (docs/protocol.md, "Pipelined batches"): two batches may wait
 * between RECEIVED and ACK.  RECEIVED of the second before the first's ACK
 * leaves both pending (the edge reads no ACK for it); a third RECEIVED
 * while two wait makes the edge read the oldest's ACK first; ACKs come in
 * order and each is accounted to its batch.
 */
static void test_two_batches_pending(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_PIPELINE, 0, 0, 2000);
    char id1[INGEST_WIRE_BATCH_ID_MAX + 1], id2[INGEST_WIRE_BATCH_ID_MAX + 1], id3[INGEST_WIRE_BATCH_ID_MAX + 1];
    ingest_wire_msg m;
    ingest_sender_batch *b1 = manifest_out(e, id1, sizeof(id1));
    core_want_none_then(e, id1, INGEST_MSG_RECEIVED, id1);
    assert_int_equal(ingest_edge_finish_batch(e->edge, b1, 0), 3);
    core_recv(e, &m, INGEST_MSG_BATCH_COMMIT);
    ingest_sender_batch *b2 = manifest_out(e, id2, sizeof(id2));
    core_want_none_then(e, id2, INGEST_MSG_RECEIVED, id2); /* no ACK of batch 1 yet */
    assert_int_equal(ingest_edge_finish_batch(e->edge, b2, 0), 3);
    core_recv(e, &m, INGEST_MSG_BATCH_COMMIT);
    assert_ptr_equal(ingest_edge_pending_at(e->edge, 0), b1);
    assert_ptr_equal(ingest_edge_pending_at(e->edge, 1), b2);
    assert_ptr_equal(ingest_edge_pending(e->edge), b1);
    assert_int_equal(e->acked, 0);
    /* a third: received while two wait; ACK 1 comes after that RECEIVED and is read first */
    ingest_sender_batch *b3 = manifest_out(e, id3, sizeof(id3));
    core_want_none_then(e, id3, INGEST_MSG_RECEIVED, id3);
    core_ack(e, id1);
    assert_int_equal(ingest_edge_finish_batch(e->edge, b3, 0), 3);
    core_recv(e, &m, INGEST_MSG_BATCH_COMMIT);
    assert_int_equal(e->acked, 1);
    assert_ptr_equal(ingest_edge_pending_at(e->edge, 0), b2);
    assert_ptr_equal(ingest_edge_pending_at(e->edge, 1), b3);
    assert_null(ingest_edge_pending_at(e->edge, 2));
    /* an ACK out of order is a protocol error */
    core_ack(e, id3);
    assert_int_equal(ingest_edge_wait_pending(e->edge), INGEST_EPROTO);
    env_free(e);
    /* in order: both accounted */
    e = env_new(INGEST_SESSION_FEATURE_PIPELINE, 0, 0, 2000);
    b1 = manifest_out(e, id1, sizeof(id1));
    core_want_none_then(e, id1, INGEST_MSG_RECEIVED, id1);
    assert_int_equal(ingest_edge_finish_batch(e->edge, b1, 0), 3);
    core_recv(e, &m, INGEST_MSG_BATCH_COMMIT);
    b2 = manifest_out(e, id2, sizeof(id2));
    core_want_none_then(e, id2, INGEST_MSG_RECEIVED, id2);
    assert_int_equal(ingest_edge_finish_batch(e->edge, b2, 0), 3);
    core_recv(e, &m, INGEST_MSG_BATCH_COMMIT);
    core_ack(e, id1);
    core_ack(e, id2);
    assert_int_equal(ingest_edge_wait_pending(e->edge), 0);
    assert_int_equal(e->acked, 2);
    assert_null(ingest_edge_pending(e->edge));
    ingest_edge_stats st;
    ingest_edge_stats_get(e->edge, &st);
    assert_int_equal(st.batches_acked, 2);
    env_free(e);
}

static void send_refusal(env *e, const char *id, uint32_t file_index)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_FILE_REFUSED;
    snprintf(m.u.refused.batch_id, sizeof(m.u.refused.batch_id), "%s", id);
    m.u.refused.file_index = file_index;
    m.u.refused.code = INGEST_EEXIST;
    snprintf(m.u.refused.message, sizeof(m.u.refused.message), "file x: a directory is there");
    core_send(e, &m);
}

/*
 * FILE_REFUSED before the ACK (refuse feature agreed): the file is marked
 * refused for on_acked and counted; the batch is acknowledged.  Without
 * the feature, for a batch that is not open, or for a file past the
 * batch, it is a protocol error.
 */
static void test_file_refused(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_REFUSE, 0, 0, 2000);
    char id[INGEST_WIRE_BATCH_ID_MAX + 1];
    ingest_sender_batch *b = manifest_out(e, id, sizeof(id));
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_WANT;
    snprintf(m.u.want.batch_id, sizeof(m.u.want.batch_id), "%s", id);
    core_send(e, &m); /* an empty WANT: the core has every chunk */
    send_refusal(e, id, 1);
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_ACK;
    snprintf(m.u.ack.batch_id, sizeof(m.u.ack.batch_id), "%s", id);
    core_send(e, &m);
    assert_int_equal(ingest_edge_finish_batch(e->edge, b, 0), 0);
    core_recv(e, &m, INGEST_MSG_BATCH_COMMIT);
    assert_int_equal(e->acked, 1);
    assert_int_equal(e->acked_refused, 1);
    assert_string_equal(e->refused_why, "file x: a directory is there");
    ingest_edge_stats st;
    ingest_edge_stats_get(e->edge, &st);
    assert_int_equal(st.files_refused, 1);
    ingest_sender_batch_destroy(b);
    /* for another batch, and for a file past the batch: protocol errors */
    b = manifest_out(e, id, sizeof(id));
    send_refusal(e, "someone-else", 0);
    assert_int_equal(ingest_edge_finish_batch(e->edge, b, 0), INGEST_EPROTO);
    ingest_sender_batch_destroy(b);
    b = manifest_out(e, id, sizeof(id));
    send_refusal(e, id, 1000000);
    assert_int_equal(ingest_edge_finish_batch(e->edge, b, 0), INGEST_EPROTO);
    ingest_sender_batch_destroy(b);
    env_free(e);
    /* without the feature agreed */
    e = env_new(0, 0, 0, 2000);
    b = manifest_out(e, id, sizeof(id));
    send_refusal(e, id, 0);
    assert_int_equal(ingest_edge_finish_batch(e->edge, b, 0), INGEST_EPROTO);
    assert_int_equal(e->acked, 0);
    ingest_sender_batch_destroy(b);
    env_free(e);
}

static void test_refused_and_error(void **state)
{
    (void)state;
    env *e = env_new(0, 0, 0, 2000);
    /* an ACK that refuses the batch: 2, counted, nothing recorded */
    char id[INGEST_WIRE_BATCH_ID_MAX + 1];
    ingest_sender_batch *b = manifest_out(e, id, sizeof(id));
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_ACK;
    snprintf(m.u.ack.batch_id, sizeof(m.u.ack.batch_id), "%s", id);
    m.u.ack.status = INGEST_ENOSPC;
    snprintf(m.u.ack.message, sizeof(m.u.ack.message), "bronze is full");
    core_send(e, &m);
    assert_int_equal(ingest_edge_finish_batch(e->edge, b, 0), 2);
    ingest_edge_stats st;
    ingest_edge_stats_get(e->edge, &st);
    assert_int_equal(st.batches_failed, 1);
    assert_int_equal(e->acked, 0);
    /* an ERROR: its code */
    assert_int_equal(ingest_edge_send_manifest(e->edge, b), 0);
    core_take_manifest(e, id, sizeof(id));
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_ERROR;
    m.u.error.code = INGEST_EBUSY;
    snprintf(m.u.error.message, sizeof(m.u.error.message), "receiver busy");
    core_send(e, &m);
    assert_int_equal(ingest_edge_finish_batch(e->edge, b, 0), INGEST_EBUSY);
    ingest_sender_batch_destroy(b);
    /* garbage instead of a WANT: the decoder's error, named */
    b = manifest_out(e, id, sizeof(id));
    static const uint8_t junk[] = { 9, 9 };
    assert_int_equal(ingest_link_mem_send_raw(e->srv, INGEST_MSG_WANT, junk, sizeof(junk)), 0);
    assert_int_equal(ingest_edge_finish_batch(e->edge, b, 0), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_link_recv_errmsg(e->dev), "WANT"));
    ingest_sender_batch_destroy(b);
    env_free(e);
}

/* ingest_edge_finish_batch in a thread of its own, while the test plays the core */
typedef struct finisher {
    env *e;
    ingest_sender_batch *b;
    int rc;
} finisher;

static void *finish_main(void *arg)
{
    finisher *f = arg;
    f->rc = ingest_edge_finish_batch(f->e->edge, f->b, 0);
    return NULL;
}

static void send_want(env *e, const char *id, const uint32_t *idx, uint32_t n, int more)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_WANT;
    snprintf(m.u.want.batch_id, sizeof(m.u.want.batch_id), "%s", id);
    m.u.want.flags = more ? INGEST_WANT_MORE : 0;
    m.u.want.count = n;
    m.u.want.idx = idx;
    core_send(e, &m);
}

/*
 * A file withdrawn in one WANT frame (FILE_WITHDRAWN: it vanished) is
 * passed over in the batch's later WANT frames too, with 1 and 3 encoder
 * threads, even when its name is back by then (renamed away and back: the
 * same file, which reads fine): the protocol never sends a chunk of a
 * withdrawn file (the receiver refuses it as not awaited).
 */
static void test_withdrawn_file_skipped_in_later_wants(void **state)
{
    (void)state;
    static const unsigned counts[] = { 1, 3 };
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        env_encoders = counts[c];
        env *e = env_new(INGEST_SESSION_FEATURE_WITHDRAW | INGEST_SESSION_FEATURE_REFUSE, 0, 0, 5000);
        env_encoders = 0;
        char id[INGEST_WIRE_BATCH_ID_MAX + 1];
        ingest_sender_batch *b = manifest_out(e, id, sizeof(id));
        /* big.bin (700 KiB: several chunks) and small.bin, one chunk */
        ingest_sender_file_info big, small;
        memset(&big, 0, sizeof(big));
        memset(&small, 0, sizeof(small));
        uint64_t fbig = 0, fsmall = 0;
        for (uint64_t i = 0; i < 2; i++) {
            ingest_sender_file_info fi;
            assert_int_equal(ingest_sender_batch_file(b, i, &fi), 0);
            if (strstr(fi.path, "big.bin") != NULL) {
                big = fi;
                fbig = i;
            } else {
                small = fi;
                fsmall = i;
            }
        }
        assert_true(fbig != fsmall);
        assert_true(big.nchunks >= 4);
        assert_int_equal(small.nchunks, 1);
        char from[400], away[400];
        snprintf(from, sizeof(from), "%s/big.bin", e->src);
        snprintf(away, sizeof(away), "%s/big.away", e->src);
        assert_int_equal(rename(from, away), 0);
        finisher f = { e, b, 0 };
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, finish_main, &f), 0);
        /* the first frame: its chunks cannot be read, the file is withdrawn */
        const uint32_t first[2] = { (uint32_t)big.first_chunk, (uint32_t)big.first_chunk + 1 };
        send_want(e, id, first, 2, 1);
        ingest_wire_msg m;
        core_recv(e, &m, INGEST_MSG_FILE_WITHDRAWN);
        assert_int_equal(m.u.withdrawn.file_index, fbig);
        /* the file is back (the same one) before the next frame asks for more of it */
        assert_int_equal(rename(away, from), 0);
        const uint32_t second[3] = { (uint32_t)big.first_chunk + 2, (uint32_t)big.first_chunk + 3,
                                     (uint32_t)small.first_chunk };
        send_want(e, id, second, 3, 0);
        /* what the edge sends up to its COMMIT (the ACK then lets it finish, whatever came) */
        unsigned chunks = 0, of_big = 0, commits = 0, sent = 0;
        for (int k = 0; k < 16 && commits == 0; k++) {
            assert_int_equal(ingest_link_recv(e->srv, &m, 5000), 0);
            if (m.type == INGEST_MSG_CHUNK) {
                chunks++;
                of_big += m.u.chunk.index >= big.first_chunk && m.u.chunk.index < big.first_chunk + big.nchunks;
            } else if (m.type == INGEST_MSG_BATCH_COMMIT) {
                commits++;
                sent = m.u.commit.chunks_sent;
            }
        }
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_ACK;
        snprintf(m.u.ack.batch_id, sizeof(m.u.ack.batch_id), "%s", id);
        core_send(e, &m);
        assert_int_equal(pthread_join(th, NULL), 0);
        assert_int_equal(commits, 1);
        if (of_big > 0)
            fail_msg("encoders %u: %u chunks of the withdrawn file were sent after its FILE_WITHDRAWN", counts[c],
                     of_big);
        assert_int_equal(chunks, 1); /* small.bin's */
        assert_int_equal(sent, 1);
        assert_int_equal(f.rc, 0);
        ingest_edge_stats st;
        ingest_edge_stats_get(e->edge, &st);
        assert_int_equal(st.files_withdrawn, 1);
        ingest_sender_batch_destroy(b);
        env_free(e);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ships_and_dedups),
        cmocka_unit_test(test_pipelined_and_packed),
        cmocka_unit_test(test_changed_file_abandons_the_batch),
        cmocka_unit_test(test_lost_ack_times_out),
        cmocka_unit_test(test_attach_refuses_chunks_past_the_bound),
        cmocka_unit_test(test_want_past_the_batch),
        cmocka_unit_test(test_ack_for_another_batch),
        cmocka_unit_test(test_received_without_pipelining),
        cmocka_unit_test(test_two_batches_pending),
        cmocka_unit_test(test_core_receives_while_one_waits),
        cmocka_unit_test(test_refused_and_error),
        cmocka_unit_test(test_file_refused),
        cmocka_unit_test(test_withdrawn_file_skipped_in_later_wants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
