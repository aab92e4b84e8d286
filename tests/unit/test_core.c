/*
 * The core side of the protocol (include/ingest/core.h) over an in-memory
 * link (include/ingest/link.h): the test plays the device with the
 * sender's real batches, and the link loses, duplicates, reorders or
 * holds back messages, or the test sends what an honest device never
 * would.  Each case asserts what landed (bytes equal, or nothing) and what
 * the core answered.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "ingest.h"
#include "support/testkit.h"
#include "core/core_int.h" /* the landers' test hook (core/lander_hook.h) */
#include "core/inflight.h"

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEVICE "dev1"

typedef struct env {
    char dir[256], src[300], bronze[300], state[300];
    ingest_ctx *ctx, *sctx;
    ingest_store *st;
    ingest_index *idx;
    ingest_core *core;
    ingest_link *dev, *srv; /* the device's end (the test) and the core's */
    pthread_t thread;
    int serve_rc, serving;
    ingest_sender *snd;
    uint8_t *chunk;
    size_t chunkcap;
    const char *device; /* served as (DEVICE unless set) */
    struct env *owner;  /* a second device of owner's core (env_peer): the core, store and trees are owner's */
} env;

static void *serve_main(void *arg)
{
    env *e = arg;
    e->serve_rc = ingest_core_serve(e->core, e->srv, e->device != NULL ? e->device : DEVICE);
    return NULL;
}

/* A core over a fresh bronze tree, serving one mem link with these features; 3 source files. */
static size_t g_budget; /* queue_budget of the next env_new (0: the default) */
static const ingest_allocator *g_alloc; /* the core context's allocator of the next env_new (NULL: malloc) */
static ingest_dictstore *g_dicts; /* the dictionary store of the next env_new (NULL: none) */
static ingest__lander_hook_fn g_hook; /* the landers' test hook of the next env_new (NULL: none) */
static void *g_hook_ud;

static env *env_new(unsigned features, int idle_ms)
{
    env *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    snprintf(e->dir, sizeof(e->dir), "/tmp/test-core-XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    snprintf(e->src, sizeof(e->src), "%s/src", e->dir);
    snprintf(e->bronze, sizeof(e->bronze), "%s/bronze", e->dir);
    snprintf(e->state, sizeof(e->state), "%s/state", e->dir);
    assert_int_equal(mkdir(e->src, 0755), 0);
    assert_int_equal(mkdir(e->bronze, 0755), 0);
    write_random_file(e->src, "big.bin", 300 * 1024, 1);
    write_random_file(e->src, "small.bin", 5000, 2);
    write_random_file(e->src, "tiny.bin", 10, 3);
    assert_non_null(e->ctx = ingest_ctx_create(g_alloc));
    assert_non_null(e->sctx = ingest_ctx_create(NULL));
    const ingest_store_opts so = { .map_size = 1ull << 28 };
    assert_int_equal(ingest_store_open(e->ctx, e->state, &so, &e->st), 0);
    assert_int_equal(ingest_index_open(e->st, e->bronze, &e->idx), 0);
    const ingest_core_opts o = {
        .store = e->st,
        .index = e->idx,
        .bronze = e->bronze,
        .dedup_key = ingest_default_dedup_key(),
        .idle_timeout_ms = idle_ms,
        .features = INGEST_SESSION_FEATURES_ALL,
        .queue_budget = g_budget,
        .dicts = g_dicts,
    };
    assert_int_equal(ingest_core_create(e->ctx, &o, &e->core), 0);
    e->core->land_hook = g_hook;
    e->core->land_hook_ud = g_hook_ud;
    assert_int_equal(ingest_link_mem_pair(e->ctx, features, &e->dev, &e->srv), 0);
    assert_int_equal(pthread_create(&e->thread, NULL, serve_main, e), 0);
    e->serving = 1;
    const ingest_sender_source src = { "s", e->src, 0 };
    const ingest_sender_opts sopts = {
        .device = DEVICE, .dedup_key = ingest_default_dedup_key(), .sources = &src, .nsources = 1,
        .batch_prefix = "b-", .threads = 1,
    };
    assert_int_equal(ingest_sender_create(e->sctx, &sopts, &e->snd), 0);
    e->chunkcap = ingest_sender_chunk_bound(e->snd);
    assert_non_null(e->chunk = malloc(e->chunkcap));
    return e;
}

/* Close the device's end and wait for the core to finish: its result. */
static int env_end_serve(env *e)
{
    if (e->serving) {
        ingest_link_shutdown(e->dev);
        assert_int_equal(pthread_join(e->thread, NULL), 0);
        e->serving = 0;
    }
    return e->serve_rc;
}

/* A second device, named device, served by e's core over a link of its own; it ships e's source tree. */
static env *env_peer(env *e, const char *device)
{
    env *p = calloc(1, sizeof(*p));
    assert_non_null(p);
    *p = *e;
    p->owner = e;
    p->device = device;
    assert_non_null(p->sctx = ingest_ctx_create(NULL));
    assert_int_equal(ingest_link_mem_pair(e->ctx, 0, &p->dev, &p->srv), 0);
    assert_int_equal(pthread_create(&p->thread, NULL, serve_main, p), 0);
    p->serving = 1;
    const ingest_sender_source src = { "s", e->src, 0 };
    const ingest_sender_opts sopts = {
        .device = device, .dedup_key = ingest_default_dedup_key(), .sources = &src, .nsources = 1,
        .batch_prefix = "b-", .threads = 1,
    };
    assert_int_equal(ingest_sender_create(p->sctx, &sopts, &p->snd), 0);
    p->chunkcap = ingest_sender_chunk_bound(p->snd);
    assert_non_null(p->chunk = malloc(p->chunkcap));
    return p;
}

static void env_free(env *e)
{
    env_end_serve(e);
    ingest_link_destroy(e->dev);
    ingest_link_destroy(e->srv);
    ingest_sender_destroy(e->snd);
    if (e->owner != NULL) { /* a peer: the rest is its owner's */
        ingest_ctx_destroy(e->sctx);
        free(e->chunk);
        free(e);
        return;
    }
    ingest_core_destroy(e->core);
    ingest_index_close(e->idx);
    ingest_store_close(e->st);
    ingest_ctx_destroy(e->sctx);
    ingest_ctx_destroy(e->ctx);
    free(e->chunk);
    remove_tree(e->dir);
    free(e);
}

/* The next batch of the source tree (a new scan each time: same files, a new batch id). */
static ingest_sender_batch *next_batch(env *e)
{
    ingest_sender_batch *b = NULL;
    assert_int_equal(ingest_sender_scan(e->snd), 0);
    assert_int_equal(ingest_sender_next_batch(e->snd, &b), 1);
    return b;
}

static void send_msg(env *e, const ingest_wire_msg *m)
{
    assert_int_equal(ingest_link_send(e->dev, m), 0);
}

static void send_manifest(env *e, ingest_sender_batch *b, uint32_t claim_parts)
{
    const void *mp;
    size_t mlen;
    assert_int_equal(ingest_sender_batch_manifest(b, &mp, &mlen), 0);
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_BATCH_BEGIN;
    snprintf(m.u.begin.batch_id, sizeof(m.u.begin.batch_id), "%s", ingest_sender_batch_id(b));
    send_msg(e, &m);
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_MANIFEST_PART;
    m.u.manifest_part.data = mp;
    m.u.manifest_part.len = mlen;
    send_msg(e, &m);
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_MANIFEST_END;
    m.u.manifest_end.part_count = claim_parts;
    m.u.manifest_end.manifest_bytes = mlen;
    send_msg(e, &m);
}

/* Receive one message, failing the test after 10 s. */
static void recv_msg(env *e, ingest_wire_msg *m)
{
    const int rc = ingest_link_recv(e->dev, m, 10000);
    if (rc != 0)
        fail_msg("receive: %s: %s", ingest_strerror(rc), ingest_link_recv_errmsg(e->dev));
}

/* The WANT frames of batch b (until one without MORE): the wanted indexes into w (cap entries). */
static size_t recv_wants(env *e, ingest_sender_batch *b, uint32_t *w, size_t cap)
{
    size_t n = 0;
    for (;;) {
        ingest_wire_msg m;
        recv_msg(e, &m);
        if (m.type != INGEST_MSG_WANT)
            fail_msg("expected WANT, got %s", ingest_wire_type_name(m.type));
        assert_string_equal(m.u.want.batch_id, ingest_sender_batch_id(b));
        for (uint32_t i = 0; i < m.u.want.count; i++) {
            assert_true(n < cap);
            w[n++] = ingest_wire_want_index(&m.u.want, i);
        }
        if (!(m.u.want.flags & INGEST_WANT_MORE))
            return n;
    }
}

/* Send chunk idx as chunk as_idx: the send's result (the core may have closed the link meanwhile). */
static int send_chunk(env *e, ingest_sender_batch *b, uint32_t idx, uint32_t as_idx)
{
    size_t n = 0;
    assert_int_equal(ingest_sender_batch_chunk(b, idx, e->chunk, e->chunkcap, &n), 0);
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_CHUNK;
    m.u.chunk.index = as_idx;
    m.u.chunk.data = e->chunk;
    m.u.chunk.len = n;
    return ingest_link_send(e->dev, &m);
}

static void send_commit(env *e, const char *batch, uint32_t sent)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_BATCH_COMMIT;
    snprintf(m.u.commit.batch_id, sizeof(m.u.commit.batch_id), "%s", batch);
    m.u.commit.chunks_sent = sent;
    send_msg(e, &m);
}

/* The ACK of batch (RECEIVED first when pipelined): its status. */
static int recv_ack(env *e, const char *batch)
{
    ingest_wire_msg m;
    recv_msg(e, &m);
    if (m.type == INGEST_MSG_RECEIVED) {
        assert_string_equal(m.u.received.batch_id, batch);
        recv_msg(e, &m);
    }
    if (m.type != INGEST_MSG_ACK)
        fail_msg("expected ACK, got %s%s%s", ingest_wire_type_name(m.type), m.type == INGEST_MSG_ERROR ? ": " : "",
                 m.type == INGEST_MSG_ERROR ? m.u.error.message : "");
    assert_string_equal(m.u.ack.batch_id, batch);
    return m.u.ack.status;
}

/* An ERROR from the core: its code (the message must contain expect). */
static int recv_error(env *e, const char *expect)
{
    ingest_wire_msg m;
    recv_msg(e, &m);
    if (m.type != INGEST_MSG_ERROR)
        fail_msg("expected ERROR, got %s", ingest_wire_type_name(m.type));
    if (strstr(m.u.error.message, expect) == NULL)
        fail_msg("ERROR [%s] does not say [%s]", m.u.error.message, expect);
    return m.u.error.code;
}

/*
 * Ship batch b whole: manifest, the wanted chunks in order, commit; the ACK
 * status.  As a device does, it serves WANTs that come after its commit
 * (chunks the core found stale, or that another batch was receiving and
 * did not land in time) and commits again.
 */
static int ship(env *e, ingest_sender_batch *b, size_t *nwanted)
{
    uint32_t w[4096];
    const char *id = ingest_sender_batch_id(b);
    send_manifest(e, b, 1);
    size_t n = recv_wants(e, b, w, 4096), total = n;
    for (;;) {
        for (size_t i = 0; i < n; i++)
            assert_int_equal(send_chunk(e, b, w[i], w[i]), 0);
        send_commit(e, id, (uint32_t)n);
        ingest_wire_msg m;
        recv_msg(e, &m);
        if (m.type != INGEST_MSG_WANT) {
            if (nwanted != NULL)
                *nwanted = total;
            if (m.type == INGEST_MSG_RECEIVED) {
                assert_string_equal(m.u.received.batch_id, id);
                recv_msg(e, &m);
            }
            if (m.type != INGEST_MSG_ACK)
                fail_msg("expected ACK, got %s", ingest_wire_type_name(m.type));
            assert_string_equal(m.u.ack.batch_id, id);
            return m.u.ack.status;
        }
        n = 0;
        for (;;) {
            assert_string_equal(m.u.want.batch_id, id);
            for (uint32_t i = 0; i < m.u.want.count; i++)
                w[n++] = ingest_wire_want_index(&m.u.want, i);
            if (!(m.u.want.flags & INGEST_WANT_MORE))
                break;
            recv_msg(e, &m);
            assert_int_equal(m.type, INGEST_MSG_WANT);
        }
        total += n;
    }
}

/* How many landed copies of src/name match it; *files: every landed file. */
static int landed(env *e, const char *name, int *files)
{
    return count_landed(e->bronze, e->src, name, files);
}

static void assert_all_landed(env *e, int copies)
{
    int files = 0;
    assert_int_equal(landed(e, "big.bin", &files), copies);
    assert_int_equal(landed(e, "small.bin", NULL), copies);
    assert_int_equal(landed(e, "tiny.bin", NULL), copies);
    assert_int_equal(files, 3 * copies);
}

static void assert_nothing_landed(env *e)
{
    int files = -1;
    landed(e, "big.bin", &files);
    assert_int_equal(files, 0);
}

/* ---- cases ----------------------------------------------------------------- */

static void test_lands_then_duplicate_then_dedup(void **state)
{
    (void)state;
    env *e = env_new(0, 10000);
    ingest_sender_batch *b = next_batch(e);
    size_t wanted = 0;
    assert_int_equal(ship(e, b, &wanted), INGEST_ACK_LANDED);
    assert_true(wanted >= 3);
    assert_all_landed(e, 1);
    /* the same batch again: acknowledged as a duplicate, no WANT, nothing more lands */
    send_manifest(e, b, 1);
    assert_int_equal(recv_ack(e, ingest_sender_batch_id(b)), INGEST_ACK_DUPLICATE);
    assert_all_landed(e, 1);
    ingest_sender_batch_destroy(b);
    /* the same files in a new batch: nothing is wanted (every chunk is held) and they land again */
    b = next_batch(e);
    assert_int_equal(ship(e, b, &wanted), INGEST_ACK_LANDED);
    assert_int_equal(wanted, 0);
    ingest_sender_batch_destroy(b);
    assert_int_equal(env_end_serve(e), 0); /* the device closed between batches */
    ingest_core_stats st;
    ingest_core_stats_get(e->core, &st);
    assert_int_equal(st.batches_landed, 2);
    assert_int_equal(st.batches_failed, 0);
    env_free(e);
}

static void test_pipelined(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_PIPELINE, 10000);
    ingest_sender_batch *b = next_batch(e);
    assert_int_equal(ship(e, b, NULL), INGEST_ACK_LANDED);
    ingest_sender_batch_destroy(b);
    assert_all_landed(e, 1);
    assert_int_equal(env_end_serve(e), 0);
    env_free(e);
}

/*
 * A directory in the way of one file at the core: with the refuse feature
 * agreed, that file alone is refused (FILE_REFUSED naming it and why,
 * before the ACK) and the rest of the batch lands; without it (an older
 * device), the batch is refused with the same reason and nothing lands.
 */
static void test_file_refused_alone(void **state)
{
    (void)state;
    for (int with = 0; with < 2; with++) {
        env *e = env_new(with ? INGEST_SESSION_FEATURE_REFUSE | INGEST_SESSION_FEATURE_PIPELINE : 0, 10000);
        char p[1024];
        struct stat sb;
        snprintf(p, sizeof(p), "%s/tiny.bin", e->src);
        assert_int_equal(stat(p, &sb), 0);
        struct tm tm;
        assert_non_null(gmtime_r(&sb.st_mtime, &tm));
        snprintf(p, sizeof(p), "%s/" DEVICE "/%04d/%02d/%02d/s/tiny.bin/in-the-way", e->bronze, tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday);
        char cmd[1200];
        snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", p);
        assert_int_equal(system(cmd), 0);
        ingest_sender_batch *b = next_batch(e);
        uint64_t tiny = UINT64_MAX;
        ingest_sender_batch_stats bs;
        ingest_sender_batch_stats_get(b, &bs);
        for (uint64_t i = 0; i < bs.files; i++) {
            ingest_sender_file_info fi;
            assert_int_equal(ingest_sender_batch_file(b, i, &fi), 0);
            if (strcmp(fi.path, "s/tiny.bin") == 0)
                tiny = i;
        }
        assert_true(tiny < bs.files);
        const char *id = ingest_sender_batch_id(b);
        ingest_wire_msg m;
        send_manifest(e, b, 1);
        if (!with) {
            recv_msg(e, &m);
            assert_int_equal(m.type, INGEST_MSG_ACK);
            assert_true(m.u.ack.status < 0);
            if (strstr(m.u.ack.message, "a directory is there") == NULL)
                fail_msg("the refusal says [%s]", m.u.ack.message);
            assert_nothing_landed(e);
        } else {
            uint32_t w[4096];
            const size_t n = recv_wants(e, b, w, 4096);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(send_chunk(e, b, w[i], w[i]), 0);
            send_commit(e, id, (uint32_t)n);
            recv_msg(e, &m);
            assert_int_equal(m.type, INGEST_MSG_RECEIVED);
            recv_msg(e, &m);
            assert_int_equal(m.type, INGEST_MSG_FILE_REFUSED);
            assert_string_equal(m.u.refused.batch_id, id);
            assert_int_equal(m.u.refused.file_index, tiny);
            assert_int_equal(m.u.refused.code, INGEST_EEXIST);
            if (strstr(m.u.refused.message, "s/tiny.bin") == NULL ||
                strstr(m.u.refused.message, "a directory is there") == NULL)
                fail_msg("FILE_REFUSED says [%s]", m.u.refused.message);
            assert_int_equal(recv_ack(e, id), INGEST_ACK_LANDED);
            int files = 0;
            assert_int_equal(landed(e, "big.bin", &files), 1);
            assert_int_equal(landed(e, "small.bin", NULL), 1);
            assert_int_equal(files, 2);
            /* a replay (its answer was lost): the refusal is told again, from the landed manifest */
            send_manifest(e, b, 1);
            recv_msg(e, &m);
            assert_int_equal(m.type, INGEST_MSG_FILE_REFUSED);
            assert_int_equal(m.u.refused.file_index, tiny);
            if (strstr(m.u.refused.message, "a directory is there") == NULL)
                fail_msg("FILE_REFUSED of the replay says [%s]", m.u.refused.message);
            assert_int_equal(recv_ack(e, id), INGEST_ACK_DUPLICATE);
        }
        ingest_sender_batch_destroy(b);
        env_free(e);
    }
}

static void test_lost_chunk_refuses_the_batch(void **state)
{
    (void)state;
    env *e = env_new(0, 10000);
    ingest_sender_batch *b = next_batch(e);
    assert_int_equal(ingest_link_mem_fault(e->dev, INGEST_LINK_FAULT_DROP, INGEST_MSG_CHUNK, 2), 0);
    const int status = ship(e, b, NULL);
    assert_true(status < 0); /* refused: a chunk never came */
    assert_nothing_landed(e);
    /* the device ships it again on the same link, and it lands whole */
    ingest_sender_batch_destroy(b);
    b = next_batch(e);
    assert_int_equal(ship(e, b, NULL), INGEST_ACK_LANDED);
    ingest_sender_batch_destroy(b);
    assert_all_landed(e, 1);
    env_free(e);
}

static void test_duplicated_chunk_fails_the_batch(void **state)
{
    (void)state;
    env *e = env_new(0, 10000);
    ingest_sender_batch *b = next_batch(e);
    uint32_t w[4096];
    assert_int_equal(ingest_link_mem_fault(e->dev, INGEST_LINK_FAULT_DUP, INGEST_MSG_CHUNK, 1), 0);
    send_manifest(e, b, 1);
    const size_t n = recv_wants(e, b, w, 4096);
    for (size_t i = 0; i < n; i++)
        send_chunk(e, b, w[i], w[i]);
    assert_int_equal(recv_error(e, "chunk 0 was not awaited any more"), INGEST_EPROTO);
    assert_int_equal(env_end_serve(e), INGEST_EPROTO);
    ingest_sender_batch_destroy(b);
    assert_nothing_landed(e);
    env_free(e);
}

static void test_reordered_chunks_land(void **state)
{
    (void)state;
    env *e = env_new(0, 10000);
    ingest_sender_batch *b = next_batch(e);
    assert_int_equal(ingest_link_mem_fault(e->dev, INGEST_LINK_FAULT_SWAP, INGEST_MSG_CHUNK, 1), 0);
    assert_int_equal(ship(e, b, NULL), INGEST_ACK_LANDED);
    ingest_sender_batch_destroy(b);
    assert_all_landed(e, 1);
    env_free(e);
}

static void test_stalled_device_is_closed(void **state)
{
    (void)state;
    env *e = env_new(0, 300);
    ingest_sender_batch *b = next_batch(e);
    uint32_t w[4096];
    send_manifest(e, b, 1);
    const size_t n = recv_wants(e, b, w, 4096);
    assert_true(n >= 2);
    assert_int_equal(ingest_link_mem_fault(e->dev, INGEST_LINK_FAULT_STALL, INGEST_MSG_CHUNK, 2), 0);
    for (size_t i = 0; i < n; i++)
        send_chunk(e, b, w[i], w[i]);
    /* the core gives up after idle_timeout without the device doing anything */
    assert_int_equal(pthread_join(e->thread, NULL), 0);
    e->serving = 0;
    assert_int_equal(e->serve_rc, 0);
    ingest_sender_batch_destroy(b);
    assert_nothing_landed(e);
    env_free(e);
}

static void test_chunk_with_other_bytes_fails(void **state)
{
    (void)state;
    env *e = env_new(0, 10000);
    ingest_sender_batch *b = next_batch(e);
    uint32_t w[4096];
    send_manifest(e, b, 1);
    const size_t n = recv_wants(e, b, w, 4096);
    assert_true(n >= 2);
    /* an honest encoding of another chunk's bytes (of another length: the size check refuses it first) */
    assert_int_equal(send_chunk(e, b, w[1], w[0]), 0);
    const int code = recv_error(e, "chunk 0");
    if (code != INGEST_EMISMATCH && code != INGEST_ECORRUPT && code != INGEST_ETOOBIG)
        fail_msg("ERROR code %d (%s)", code, ingest_strerror(code));
    assert_int_equal(env_end_serve(e), code);
    ingest_sender_batch_destroy(b);
    assert_nothing_landed(e);
    ingest_core_stats st;
    ingest_core_stats_get(e->core, &st);
    assert_int_equal(st.batches_failed, 1);
    env_free(e);
}

static void test_malformed_message_is_named(void **state)
{
    (void)state;
    env *e = env_new(0, 10000);
    static const uint8_t junk[] = { 1, 2, 3 };
    assert_int_equal(ingest_link_mem_send_raw(e->dev, INGEST_MSG_BATCH_BEGIN, junk, sizeof(junk)), 0);
    assert_int_equal(recv_error(e, "BATCH_BEGIN"), INGEST_ECORRUPT);
    assert_int_equal(env_end_serve(e), INGEST_ECORRUPT);
    assert_nothing_landed(e);
    env_free(e);
}

static void test_out_of_order_protocol_is_refused(void **state)
{
    (void)state;
    /* a COMMIT naming another batch */
    env *e = env_new(0, 10000);
    ingest_sender_batch *b = next_batch(e);
    uint32_t w[4096];
    send_manifest(e, b, 1);
    const size_t n = recv_wants(e, b, w, 4096);
    for (size_t i = 0; i < n; i++)
        send_chunk(e, b, w[i], w[i]);
    send_commit(e, "not-this-batch", (uint32_t)n);
    assert_int_equal(recv_error(e, "unexpected message"), INGEST_EPROTO);
    assert_int_equal(env_end_serve(e), INGEST_EPROTO);
    assert_nothing_landed(e);
    ingest_sender_batch_destroy(b);
    env_free(e);
    /* a MANIFEST_END whose part count lies */
    e = env_new(0, 10000);
    b = next_batch(e);
    send_manifest(e, b, 2);
    assert_int_equal(recv_error(e, "unexpected message"), INGEST_EPROTO);
    assert_int_equal(env_end_serve(e), INGEST_EPROTO);
    ingest_sender_batch_destroy(b);
    env_free(e);
    /* a CHUNK_GROUP without the pack feature */
    e = env_new(0, 10000);
    b = next_batch(e);
    send_manifest(e, b, 1);
    (void)recv_wants(e, b, w, 4096);
    uint8_t grp[64];
    memset(grp, 0, sizeof(grp));
    grp[0] = 1; /* count 1 */
    assert_int_equal(ingest_link_mem_send_raw(e->dev, INGEST_MSG_CHUNK_GROUP, grp, sizeof(grp)), 0);
    (void)recv_error(e, "");
    assert_true(env_end_serve(e) < 0);
    ingest_sender_batch_destroy(b);
    assert_nothing_landed(e);
    env_free(e);
}

static void test_device_error_ends_the_link(void **state)
{
    (void)state;
    env *e = env_new(0, 10000);
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_ERROR;
    m.u.error.code = INGEST_ESTALE;
    snprintf(m.u.error.message, sizeof(m.u.error.message), "batch abandoned\n\x1b[2J");
    send_msg(e, &m);
    assert_int_equal(pthread_join(e->thread, NULL), 0);
    e->serving = 0;
    assert_int_equal(e->serve_rc, INGEST_ESTALE);
    env_free(e);
}

static void test_tiny_queue_budget_still_moves(void **state)
{
    (void)state;
    g_budget = 1; /* every reader waits as soon as it holds anything: one message at a time */
    env *e = env_new(INGEST_SESSION_FEATURE_PIPELINE, 10000);
    g_budget = 0;
    ingest_sender_batch *b = next_batch(e);
    assert_int_equal(ship(e, b, NULL), INGEST_ACK_LANDED);
    ingest_sender_batch_destroy(b);
    assert_all_landed(e, 1);
    env_free(e);
}

/*
 * An allocator that counts the bytes held in allocations of 64 KiB or more
 * (each block carries its size in front): group buffers, zstd contexts.
 * Its blocks are aligned as malloc's are and no more, as an allocator may
 * do: a lander batch, which holds an ingest_filehash (_Alignas(64)), is
 * placed inside its block (the sanitizer run checks the alignment).
 */
#define BIG_ALLOC (64u * 1024u)
#define COUNT_HDR sizeof(max_align_t)
static atomic_size_t g_big_live;

/* and how many allocations had the size of a queued item of a small chunk (test_reader_items_are_used_again) */
#define ITEM_SMALL_MAX (sizeof(qitem) + 8192u)
static atomic_size_t g_item_allocs;

/* and how many bytes were allocated in all in blocks of 2 KiB or more (test_dict_without_store) */
#define MID_ALLOC 2048u
static atomic_size_t g_mid_bytes;

static void *counting_alloc(void *opaque, size_t size)
{
    (void)opaque;
    size_t *p = malloc(COUNT_HDR + size);
    if (p == NULL)
        return NULL;
    *p = size;
    if (size >= MID_ALLOC)
        atomic_fetch_add(&g_mid_bytes, size);
    if (size >= BIG_ALLOC)
        atomic_fetch_add(&g_big_live, size);
    if (size >= sizeof(qitem) && size <= ITEM_SMALL_MAX)
        atomic_fetch_add(&g_item_allocs, 1);
    return (char *)p + COUNT_HDR;
}

static void counting_free(void *opaque, void *ptr)
{
    (void)opaque;
    size_t *p = (size_t *)(void *)((char *)ptr - COUNT_HDR);
    if (*p >= BIG_ALLOC)
        atomic_fetch_sub(&g_big_live, *p);
    free(p);
}

/* Wait (at most 10 s) for the core to answer a PING: the link's session loop runs. */
static void ping(env *e)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_PING;
    send_msg(e, &m);
    recv_msg(e, &m);
    assert_int_equal(m.type, INGEST_MSG_PONG);
}

/*
 * Per-device buffers sized to what the link does now (issue 14): an idle
 * link, with the pack feature agreed, holds its reader's codec and nothing
 * else large: no group buffer (a group's scratch is allocated for that
 * group only, under the queue budget; the integration tests ship groups)
 * and no landers with their codecs (made at the first batch).  Before,
 * every such link allocated INGEST_WIRE_GROUP_MAX_RAW (1 MiB) and 128 KiB
 * of ids, and two landers' codecs, when it started.  The core's threads
 * allocate through the core's context, as core.h says.
 */
static void test_idle_link_holds_no_large_buffers(void **state)
{
    (void)state;
    static const ingest_allocator counting = { counting_alloc, counting_free, NULL };
    ingest_ctx *cctx = ingest_ctx_create(&counting);
    assert_non_null(cctx);
    ingest_codec *c = NULL;
    size_t codec_big = atomic_load(&g_big_live);
    assert_int_equal(ingest_codec_create(cctx, 1, &c), 0);
    codec_big = atomic_load(&g_big_live) - codec_big; /* what one codec holds in large blocks */
    ingest_codec_destroy(c);
    ingest_ctx_destroy(cctx);
    /* counted from before the core exists: its serving thread starts inside env_new; the store, index and
     * core hold no block that large */
    const size_t before = atomic_load(&g_big_live);
    g_alloc = &counting;
    env *e = env_new(INGEST_SESSION_FEATURE_PACK | INGEST_SESSION_FEATURE_PIPELINE, 10000);
    g_alloc = NULL;
    ping(e);
    const size_t idle = atomic_load(&g_big_live) - before;
    if (idle > codec_big)
        fail_msg("an idle link holds %zu bytes in blocks of 64 KiB or more; its reader's codec %zu", idle, codec_big);
    env_free(e);
    assert_int_equal(atomic_load(&g_big_live), 0);
}

/*
 * A core made without a dictionary store (ingest_core_opts.dicts NULL:
 * "none are kept") and a device that offers a dictionary: the core asks
 * for it and uses it on this session (it crashed on the store it does not
 * have).  The device sends it one byte per DICT_DATA: the core's buffer
 * grows by doubling, not by one copy of everything before each slice (a
 * 4 MiB dictionary sent so took minutes of a core's CPU).  A slice no one
 * asked for is an ERROR that says why.
 */
/* A dictionary of at most max bytes trained from small JSON events (free with ingest_buf_free(tctx, ...)). */
static void *small_dict(ingest_ctx *tctx, size_t max, size_t *dlen, uint32_t *id)
{
    enum { NS = 400 };
    size_t sizes[NS], total = 0;
    char *samples = malloc(NS * 160);
    assert_non_null(samples);
    for (unsigned i = 0; i < NS; i++) {
        const int n = snprintf(samples + total, 160,
                               "{\"sensor\":\"t%u\",\"site\":\"osaka-bay\",\"value\":%u.%u,\"unit\":\"C\",\"ok\":%s}\n",
                               i % 17, i * 7 % 100, i % 10, i % 3 ? "true" : "false");
        sizes[i] = (size_t)n;
        total += (size_t)n;
    }
    void *dict = NULL;
    assert_int_equal(ingest_dict_train(tctx, samples, sizes, NS, max, &dict, dlen, id), 0);
    free(samples);
    return dict;
}

/* Offer dict (dlen bytes, id) on e's link: the core's answer. */
static unsigned offer_dict(env *e, const void *dict, size_t dlen, uint32_t id)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_DICT_OFFER;
    m.u.dict_offer.dict_id = id;
    m.u.dict_offer.size = (uint32_t)dlen;
    ingest_dict_hash(dict, dlen, m.u.dict_offer.hash);
    send_msg(e, &m);
    recv_msg(e, &m);
    assert_int_equal(m.type, INGEST_MSG_DICT_WANT);
    return m.u.dict_want.answer;
}

/* A DICT_DATA slice: len bytes of dictionary id at offset off. */
static void send_dict_data(env *e, uint32_t id, size_t off, const void *data, size_t len)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_DICT_DATA;
    m.u.dict_data.dict_id = id;
    m.u.dict_data.offset = (uint32_t)off;
    m.u.dict_data.data = data;
    m.u.dict_data.len = len;
    send_msg(e, &m);
}

static void test_dict_without_store(void **state)
{
    (void)state;
    ingest_ctx *tctx = ingest_ctx_create(NULL);
    size_t dlen = 0;
    uint32_t id = 0;
    void *dict = small_dict(tctx, 8192, &dlen, &id);

    static const ingest_allocator counting = { counting_alloc, counting_free, NULL };
    g_alloc = &counting;
    env *e = env_new(INGEST_SESSION_FEATURE_DICT, 10000);
    g_alloc = NULL;
    assert_null(e->core->o.dicts);
    assert_int_equal(offer_dict(e, dict, dlen, id), INGEST_DICT_SEND);
    const size_t before = atomic_load(&g_mid_bytes);
    for (size_t off = 0; off < dlen; off++)
        send_dict_data(e, id, off, (const uint8_t *)dict + off, 1);
    ping(e); /* every slice before it was taken: the dictionary verified and loaded */
    /* (the buffer, then the dictionary's tables loaded for this session) */
    const size_t bytes = atomic_load(&g_mid_bytes) - before;
    if (bytes > 32 * dlen)
        fail_msg("%zu bytes allocated in blocks of 2 KiB or more for a dictionary of %zu bytes sent one byte at a "
                 "time", bytes, dlen);
    /* held on this session: offered again, HAVE */
    assert_int_equal(offer_dict(e, dict, dlen, id), INGEST_DICT_HAVE);
    /* a slice no one asked for */
    send_dict_data(e, id, 0, dict, 1);
    assert_int_equal(recv_error(e, "no dictionary was asked for"), INGEST_EPROTO);
    env_free(e);
    ingest_buf_free(tctx, dict);
    ingest_ctx_destroy(tctx);
}

/*
 * With a store, a dictionary a session received is stored and the session
 * uses the store's copy (held while its codecs may refer to it, let go at
 * its end), not a second copy of its own: up to 8 dictionaries of 4 MiB
 * per connected device were held twice.
 */
static void test_dict_received_uses_the_stores_copy(void **state)
{
    (void)state;
    ingest_ctx *tctx = ingest_ctx_create(NULL);
    size_t dlen = 0;
    uint32_t id = 0;
    void *dict = small_dict(tctx, 4096, &dlen, &id);
    char dir[] = "/tmp/test-core-dicts-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(ingest_dictstore_open(tctx, dir, &g_dicts), 0);
    ingest_dictstore *ds = g_dicts;
    env *e = env_new(INGEST_SESSION_FEATURE_DICT, 10000);
    g_dicts = NULL;
    assert_int_equal(offer_dict(e, dict, dlen, id), INGEST_DICT_SEND);
    send_dict_data(e, id, 0, dict, dlen);
    ping(e);
    assert_int_equal(ingest_dictstore_count(ds), 1);
    assert_int_equal(ingest_dictstore_held(ds), 1); /* the session's: its codecs refer to the store's bytes */
    env_free(e);
    assert_int_equal(ingest_dictstore_held(ds), 0);
    ingest_dictstore_close(ds);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    ingest_buf_free(tctx, dict);
    ingest_ctx_destroy(tctx);
}

/*
 * The reader's queue items are used again once the serving thread is done
 * with them (core_readq_recycle): 600 small files, with a queue budget of
 * 64 KiB (the reader holds a few dozen items before it waits), take far
 * fewer item allocations than chunks.  Before, each chunk's item was
 * allocated by the reader and freed by the serving thread.
 */
static void test_reader_items_are_used_again(void **state)
{
    (void)state;
    static const ingest_allocator counting = { counting_alloc, counting_free, NULL };
    g_alloc = &counting;
    g_budget = 64 * 1024;
    env *e = env_new(INGEST_SESSION_FEATURE_PIPELINE, 10000);
    g_alloc = NULL;
    g_budget = 0;
    enum { NSMALL = 600 };
    for (unsigned i = 0; i < NSMALL; i++) {
        char name[32];
        snprintf(name, sizeof name, "event-%04u.json", i);
        write_random_file(e->src, name, 1000, 100 + i);
    }
    ingest_sender_batch *b = next_batch(e);
    const size_t before = atomic_load(&g_item_allocs);
    size_t wanted = 0;
    assert_int_equal(ship(e, b, &wanted), INGEST_ACK_LANDED);
    const size_t allocs = atomic_load(&g_item_allocs) - before;
    ingest_sender_batch_destroy(b);
    assert_true(wanted >= NSMALL);
    int files = 0;
    assert_int_equal(landed(e, "event-0599.json", &files), 1);
    assert_int_equal(files, NSMALL + 3);
    if (allocs > NSMALL / 3)
        fail_msg("%zu allocations of a small item's size for %zu chunks", allocs, wanted);
    env_free(e);
}

typedef struct second {
    ingest_core *core;
    ingest_link *srv;
    int rc;
} second;

static void *serve_second(void *arg)
{
    second *x = arg;
    x->rc = ingest_core_serve(x->core, x->srv, DEVICE);
    return NULL;
}

static void test_new_session_replaces_the_old(void **state)
{
    (void)state;
    /* the first link stays idle far longer than the test waits for an answer on the second */
    env *e = env_new(0, 120000);
    ingest_sender_batch *b = next_batch(e);
    assert_int_equal(ship(e, b, NULL), INGEST_ACK_LANDED);
    ingest_sender_batch_destroy(b);
    /* the same device connects again (its old connection is stale but still served) */
    ingest_link *dev2, *srv2;
    assert_int_equal(ingest_link_mem_pair(e->ctx, 0, &dev2, &srv2), 0);
    second x = { e->core, srv2, 1 };
    pthread_t t2;
    assert_int_equal(pthread_create(&t2, NULL, serve_second, &x), 0);
    /* the old link is ended at once: its serve returns (it was between batches) */
    assert_int_equal(pthread_join(e->thread, NULL), 0);
    e->serving = 0;
    assert_int_equal(e->serve_rc, 0);
    /* and the new one serves: a batch over it lands (answers within recv_msg's 10 s) */
    ingest_link *old = e->dev;
    e->dev = dev2;
    b = next_batch(e);
    size_t wanted = 1;
    assert_int_equal(ship(e, b, &wanted), INGEST_ACK_LANDED);
    assert_int_equal(wanted, 0);
    ingest_sender_batch_destroy(b);
    ingest_link_shutdown(dev2);
    assert_int_equal(pthread_join(t2, NULL), 0);
    assert_int_equal(x.rc, 0);
    ingest_link_destroy(srv2);
    ingest_link_destroy(old);
    env_free(e);
}

/* ---- landing in parallel: one device held mid-landing, another lands ------ */

/*
 * The hook holds the first batch of device "dev1" at one point of its
 * landing (a disk that stalls, a big manifest being parsed) until the test
 * says the other device's batch was acknowledged, or 8 s passed; it
 * records which came first.  With one lock over all landing, the other
 * device waited behind the held one: its ACK came only after the hold.
 */
typedef struct hold {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int phase;           /* where to hold dev1 */
    int held, done;      /* dev1 is held now; the hold is over */
    int other_acked;     /* the test saw the other device's ACK */
    int acked_while_held;
    ingest_core *core;   /* for the lock checks of test_manifest_parse_holds_no_lock */
    int parse_lock_free, parse_calls, lookup_lock_held, lookup_calls;
} hold;

static void hold_hook(void *ud, const char *device, int phase)
{
    hold *h = ud;
    if (strcmp(device, "dev1") != 0 || phase != h->phase)
        return;
    pthread_mutex_lock(&h->mu);
    if (h->held || h->done) { /* once */
        pthread_mutex_unlock(&h->mu);
        return;
    }
    h->held = 1;
    pthread_cond_broadcast(&h->cv);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 8;
    while (!h->other_acked && pthread_cond_timedwait(&h->cv, &h->mu, &until) != ETIMEDOUT)
        ;
    h->acked_while_held = h->other_acked;
    h->held = 0;
    h->done = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

typedef struct shipper {
    env *e;
    int status;
} shipper;

static void *ship_main(void *arg)
{
    shipper *x = arg;
    ingest_sender_batch *b = next_batch(x->e);
    x->status = ship(x->e, b, NULL);
    ingest_sender_batch_destroy(b);
    return NULL;
}

static void held_device_does_not_stop_another(int phase)
{
    hold h;
    memset(&h, 0, sizeof(h));
    pthread_mutex_init(&h.mu, NULL);
    pthread_cond_init(&h.cv, NULL);
    h.phase = phase;
    g_hook = hold_hook;
    g_hook_ud = &h;
    env *e = env_new(0, 30000); /* DEVICE, "dev1" */
    g_hook = NULL;
    g_hook_ud = NULL;
    env *d2 = env_peer(e, "dev2");
    shipper x = { e, -1 };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, ship_main, &x), 0);
    pthread_mutex_lock(&h.mu);
    while (!h.held && !h.done)
        pthread_cond_wait(&h.cv, &h.mu);
    pthread_mutex_unlock(&h.mu);
    /* dev1 is held inside its landing: dev2 ships a whole batch meanwhile */
    ingest_sender_batch *b = next_batch(d2);
    const int st = ship(d2, b, NULL);
    ingest_sender_batch_destroy(b);
    pthread_mutex_lock(&h.mu);
    h.other_acked = 1;
    pthread_cond_broadcast(&h.cv);
    pthread_mutex_unlock(&h.mu);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(st, INGEST_ACK_LANDED);
    assert_int_equal(x.status, INGEST_ACK_LANDED);
    assert_true(h.acked_while_held); /* dev2 was acknowledged while dev1 was held, not after */
    assert_all_landed(e, 2);         /* each device's tree, byte for byte */
    env_free(d2);
    env_free(e);
    pthread_cond_destroy(&h.cv);
    pthread_mutex_destroy(&h.mu);
}

/*
 * Chunks in flight (issue 14): dev1's batch asked for every chunk of the
 * tree and has not landed yet; dev2's batch of the same files is asked for
 * none of them, and lands by copying them once dev1's batch landed.  If the
 * batch receiving them does not land in time, dev2 is asked for them at
 * its commit and lands all the same; so too when dev1's session dies while
 * dev2's commit waits for them.
 */
static void test_chunks_in_flight_are_not_asked_twice(void **state)
{
    (void)state;
    for (int round = 0; round < 3; round++) {
        env *e = env_new(0, 30000);
        env *d2 = env_peer(e, "dev2");
        ingest_sender_batch *b1 = next_batch(e), *b2 = next_batch(d2);
        uint32_t w1[4096], w2[4096];
        send_manifest(e, b1, 1);
        const size_t n1 = recv_wants(e, b1, w1, 4096);
        assert_true(n1 >= 3);
        send_manifest(d2, b2, 1);
        assert_int_equal(recv_wants(d2, b2, w2, 4096), 0); /* all of them in flight in dev1's batch */
        const char *id1 = ingest_sender_batch_id(b1), *id2 = ingest_sender_batch_id(b2);
        if (round == 0) {
            /* dev1 lands first: dev2 copies every chunk, nothing crosses its link */
            for (size_t i = 0; i < n1; i++)
                assert_int_equal(send_chunk(e, b1, w1[i], w1[i]), 0);
            send_commit(e, id1, (uint32_t)n1);
            assert_int_equal(recv_ack(e, id1), INGEST_ACK_LANDED);
            send_commit(d2, id2, 0);
            assert_int_equal(recv_ack(d2, id2), INGEST_ACK_LANDED);
        } else if (round == 2) {
            /* dev1's session dies while dev2's commit waits for its chunks: dev2 is asked for them, and
             * lands; dev1's batch never does */
            send_commit(d2, id2, 0);
            ingest_link_shutdown(e->dev);
            /* asked as the landing reaches each of them (a WANT, the chunks, a COMMIT, again), then the ACK */
            size_t asked = 0;
            for (;;) {
                ingest_wire_msg m;
                recv_msg(d2, &m);
                if (m.type == INGEST_MSG_ACK) {
                    assert_string_equal(m.u.ack.batch_id, id2);
                    assert_int_equal(m.u.ack.status, INGEST_ACK_LANDED);
                    break;
                }
                if (m.type != INGEST_MSG_WANT)
                    fail_msg("expected WANT or ACK, got %s", ingest_wire_type_name(m.type));
                uint32_t sent = 0;
                for (uint32_t i = 0; i < m.u.want.count; i++, sent++) {
                    const uint32_t w = ingest_wire_want_index(&m.u.want, i);
                    assert_int_equal(send_chunk(d2, b2, w, w), 0);
                }
                asked += sent;
                if (!(m.u.want.flags & INGEST_WANT_MORE))
                    send_commit(d2, id2, sent);
            }
            assert_int_equal(asked, n1); /* every chunk dev1's batch was receiving, once */
            assert_all_landed(e, 1);
            assert_int_equal(ingest__inflight_count(e->idx), 0);
            ingest_sender_batch_destroy(b1);
            ingest_sender_batch_destroy(b2);
            env_free(d2);
            env_free(e);
            continue;
        } else {
            /* dev1 stalls: dev2's commit waits, then asks for them, and lands */
            send_commit(d2, id2, 0);
            const size_t n2 = recv_wants(d2, b2, w2, 4096);
            assert_int_equal(n2, n1);
            for (size_t i = 0; i < n2; i++)
                assert_int_equal(send_chunk(d2, b2, w2[i], w2[i]), 0);
            send_commit(d2, id2, (uint32_t)n2);
            assert_int_equal(recv_ack(d2, id2), INGEST_ACK_LANDED);
            /* and dev1's batch, late, lands too */
            for (size_t i = 0; i < n1; i++)
                assert_int_equal(send_chunk(e, b1, w1[i], w1[i]), 0);
            send_commit(e, id1, (uint32_t)n1);
            assert_int_equal(recv_ack(e, id1), INGEST_ACK_LANDED);
        }
        assert_all_landed(e, 2);
        assert_int_equal(ingest__inflight_count(e->idx), 0);
        ingest_sender_batch_destroy(b1);
        ingest_sender_batch_destroy(b2);
        env_free(d2);
        env_free(e);
    }
}

/* dev1's chunks stall on their way to the disk: dev2's batch lands and is acked meanwhile. */
static void test_device_held_writing_does_not_stop_another(void **state)
{
    (void)state;
    held_device_does_not_stop_another(INGEST__LANDER_HOOK_WRITE);
}

/* dev1's manifest is being parsed: dev2's batch lands and is acked meanwhile. */
static void test_device_held_parsing_does_not_stop_another(void **state)
{
    (void)state;
    held_device_does_not_stop_another(INGEST__LANDER_HOOK_PARSE);
}

/* Where the land lock is, seen from the lander: free while a manifest is parsed, held for the lookups. */
static void lock_hook(void *ud, const char *device, int phase)
{
    hold *h = ud;
    (void)device;
    const int free_now = ingest_core_trylock(h->core) == 0;
    if (free_now)
        ingest_core_unlock(h->core);
    if (phase == INGEST__LANDER_HOOK_PARSE) {
        h->parse_calls++;
        h->parse_lock_free += free_now;
    } else if (phase == INGEST__LANDER_HOOK_LOOKUP) {
        h->lookup_calls++;
        h->lookup_lock_held += !free_now;
    }
}

/* A big manifest (3,000 files) is parsed and its paths checked without the land lock. */
static void test_manifest_parse_holds_no_lock(void **state)
{
    (void)state;
    hold h;
    memset(&h, 0, sizeof(h));
    g_hook = lock_hook;
    g_hook_ud = &h;
    env *e = env_new(0, 30000);
    g_hook = NULL;
    g_hook_ud = NULL;
    h.core = e->core;
    char dir[400];
    snprintf(dir, sizeof(dir), "%s/many", e->src);
    assert_int_equal(mkdir(dir, 0755), 0);
    for (int i = 0; i < 3000; i++) {
        char name[32];
        snprintf(name, sizeof(name), "f%04d.json", i);
        write_random_file(dir, name, 64, (uint64_t)i + 10);
    }
    ingest_sender_batch *b = next_batch(e);
    const void *mp;
    size_t mlen;
    assert_int_equal(ingest_sender_batch_manifest(b, &mp, &mlen), 0);
    assert_true(mlen > 300 * 1000); /* a big manifest */
    assert_int_equal(ship(e, b, NULL), INGEST_ACK_LANDED);
    ingest_sender_batch_destroy(b);
    int files = 0;
    assert_int_equal(landed(e, "big.bin", &files), 1);
    assert_int_equal(files, 3003);
    assert_int_equal(h.parse_calls, 1);
    assert_int_equal(h.parse_lock_free, 1);  /* parsed with the lock free */
    assert_int_equal(h.lookup_calls, 1);
    assert_int_equal(h.lookup_lock_held, 1); /* looked up under it */
    env_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lands_then_duplicate_then_dedup),
        cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_idle_link_holds_no_large_buffers),
        cmocka_unit_test(test_file_refused_alone),
        cmocka_unit_test(test_chunks_in_flight_are_not_asked_twice),
        cmocka_unit_test(test_lost_chunk_refuses_the_batch),
        cmocka_unit_test(test_duplicated_chunk_fails_the_batch),
        cmocka_unit_test(test_reordered_chunks_land),
        cmocka_unit_test(test_stalled_device_is_closed),
        cmocka_unit_test(test_chunk_with_other_bytes_fails),
        cmocka_unit_test(test_malformed_message_is_named),
        cmocka_unit_test(test_out_of_order_protocol_is_refused),
        cmocka_unit_test(test_device_error_ends_the_link),
        cmocka_unit_test(test_tiny_queue_budget_still_moves),
        cmocka_unit_test(test_reader_items_are_used_again),
        cmocka_unit_test(test_new_session_replaces_the_old),
        cmocka_unit_test(test_device_held_writing_does_not_stop_another),
        cmocka_unit_test(test_device_held_parsing_does_not_stop_another),
        cmocka_unit_test(test_manifest_parse_holds_no_lock),
        cmocka_unit_test(test_dict_without_store),
        cmocka_unit_test(test_dict_received_uses_the_stores_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
