/*
 * The Kafka links (include/ingest/klink.h) over an in-memory record bus:
 * the real edge (edge.h) ships through an edge link whose records are
 * opened and fed, in order, to a core link served by the real core
 * (core.h); the core's replies go back to the edge link.  The bus can lose
 * chosen records, as a topic whose chunks a crash never wrote would, and
 * the have-cache is a small table the test fills or empties.  Each case
 * asserts what the edge returned, what landed and what travelled.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "ingest.h"
#include "ingest/klink.h"
#include "support/testkit.h"

#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEVICE "kdev1"
#define HAVE_MAX 4096

typedef struct env {
    char dir[256], src[300], bronze[300], state[300];
    ingest_ctx *ctx, *ectx;
    ingest_store *st;
    ingest_index *idx;
    ingest_core *core;
    ingest_link *edge_link, *core_link;
    pthread_t thread;
    int serving, serve_rc;
    ingest_secret_key dev_key, core_key;
    ingest_krec_keys dk, ck;
    ingest_sender *snd;
    ingest_codec *codec;
    ingest_edge *edge;
    /* the bus */
    pthread_mutex_t mu;
    uint64_t records, chunk_records, bad;
    unsigned drop_chunk_records; /* the first n CHUNK records are lost */
    char drop_batch[64];         /* ...and every record of this batch from record drop_from on, */
    uint32_t drop_from, drop_until; /* or before record drop_until */
    unsigned done;               /* batch_done calls */
    unsigned needed;             /* NEEDED replies */
    /* the have-cache */
    uint8_t have[HAVE_MAX][INGEST_ID_BYTES];
    unsigned nhave, unheld, held;
    unsigned acked;
} env;

static int have_find(env *e, const uint8_t *id)
{
    for (unsigned i = 0; i < e->nhave; i++)
        if (memcmp(e->have[i], id, INGEST_ID_BYTES) == 0)
            return (int)i;
    return -1;
}

static int cb_have(void *ud, const uint8_t id[INGEST_ID_BYTES])
{
    env *e = ud;
    pthread_mutex_lock(&e->mu);
    const int r = have_find(e, id) >= 0;
    pthread_mutex_unlock(&e->mu);
    return r;
}

static void have_add(env *e, const uint8_t *id)
{
    if (have_find(e, id) < 0 && e->nhave < HAVE_MAX)
        memcpy(e->have[e->nhave++], id, INGEST_ID_BYTES);
}

static void cb_held(void *ud, const uint8_t id[INGEST_ID_BYTES])
{
    env *e = ud;
    pthread_mutex_lock(&e->mu);
    e->held++;
    have_add(e, id);
    pthread_mutex_unlock(&e->mu);
}

static void cb_unheld(void *ud, const uint8_t id[INGEST_ID_BYTES])
{
    env *e = ud;
    pthread_mutex_lock(&e->mu);
    e->unheld++;
    const int i = have_find(e, id);
    if (i >= 0)
        memcpy(e->have[i], e->have[--e->nhave], INGEST_ID_BYTES);
    pthread_mutex_unlock(&e->mu);
}

static void core_restart(env *e);

/* The edge's records: opened with the core's keys and fed to the core link, then reported delivered. */
static int bus_edge(void *ud, const char *key, const uint8_t *rec, size_t len, uint64_t token, char *why,
                    size_t whycap)
{
    env *e = ud;
    (void)why;
    (void)whycap;
    assert_string_equal(key, DEVICE);
    assert_true(len <= INGEST_KREC_MAX);
    static uint8_t plain[INGEST_KREC_MAX];
    ingest_krec_hdr h;
    ingest_krec_body b;
    size_t n = 0;
    if (ingest_krec_open(e->ctx, e->ck.open, rec, len, &h, plain, sizeof(plain), &n) != 0 ||
        ingest_krec_body_decode(e->ctx, h.type, plain, n, &b) != 0) {
        e->bad++;
        return 0;
    }
    pthread_mutex_lock(&e->mu);
    const uint64_t r = ++e->records;
    int lose = 0;
    if (e->drop_batch[0] != '\0' && strcmp(h.batch, e->drop_batch) == 0 &&
        (e->drop_until ? h.seq < e->drop_until : h.seq >= e->drop_from))
        lose = 1;
    if (h.type == INGEST_KREC_CHUNK) {
        e->chunk_records++;
        if (e->drop_chunk_records > 0) {
            e->drop_chunk_records--;
            lose = 1;
        }
    }
    pthread_mutex_unlock(&e->mu);
    if (!lose) {
        int rc = ingest_klink_core_feed(e->core_link, &h, &b, r);
        if (rc == INGEST_ECLOSED) {
            /* the core link retired after its last serve (as kserve.c does): a new one */
            core_restart(e);
            rc = ingest_klink_core_feed(e->core_link, &h, &b, r);
        }
        assert_int_equal(rc, 0);
    }
    ingest_klink_delivered(e->edge_link, token, 1, NULL);
    return 0;
}

/* The core's replies go straight to the edge link. */
static int bus_core(void *ud, const char *key, const uint8_t *rec, size_t len, uint64_t token, char *why,
                    size_t whycap)
{
    env *e = ud;
    (void)token;
    (void)why;
    (void)whycap;
    assert_string_equal(key, DEVICE);
    ingest_krec_hdr h;
    assert_int_equal(ingest_krec_peek(e->ctx, rec, len, &h), 0);
    pthread_mutex_lock(&e->mu);
    e->needed += h.type == INGEST_KREC_NEEDED;
    pthread_mutex_unlock(&e->mu);
    assert_true(ingest_klink_edge_reply(e->edge_link, rec, len) >= 0);
    return 0;
}

static void cb_done(void *ud, uint64_t token)
{
    env *e = ud;
    (void)token;
    pthread_mutex_lock(&e->mu);
    e->done++;
    pthread_mutex_unlock(&e->mu);
}

static void *serve_main(void *arg)
{
    env *e = arg;
    do
        e->serve_rc = ingest_core_serve(e->core, e->core_link, DEVICE);
    while (ingest_klink_core_rearm(e->core_link) == 1);
    return NULL;
}

static void core_link_new(env *e)
{
    const ingest_klink_core_opts co = {
        .device = DEVICE, .keys = &e->ck, .bus = { bus_core, e }, .batch_done = cb_done, .ud = e,
    };
    assert_int_equal(ingest_klink_core_create(e->ctx, &co, &e->core_link), 0);
}

static void core_start(env *e)
{
    core_link_new(e);
    assert_int_equal(pthread_create(&e->thread, NULL, serve_main, e), 0);
    e->serving = 1;
}

static void core_restart(env *e)
{
    assert_int_equal(pthread_join(e->thread, NULL), 0);
    ingest_link_destroy(e->core_link);
    core_start(e);
}

static void on_acked(void *ud, ingest_sender_batch *b, uint32_t sent, double t0)
{
    env *e = ud;
    (void)sent;
    (void)t0;
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    pthread_mutex_lock(&e->mu);
    e->acked++;
    for (uint64_t i = 0; i < bs.chunks; i++) {
        uint8_t id[INGEST_ID_BYTES];
        uint32_t clen;
        uint64_t off;
        if (ingest_sender_batch_chunk_info(b, i, id, &clen, &off) == 0)
            have_add(e, id);
    }
    pthread_mutex_unlock(&e->mu);
}

static void tlog(void *ud, int level, const char *msg)
{
    (void)ud;
    if (getenv("KLINK_LOG") != NULL)
        fprintf(stderr, "[%d] %s\n", level, msg);
}

static env *env_new(unsigned features, unsigned nsmall)
{
    env *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    pthread_mutex_init(&e->mu, NULL);
    snprintf(e->dir, sizeof(e->dir), "/tmp/test-klink-XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    snprintf(e->src, sizeof(e->src), "%s/src", e->dir);
    snprintf(e->bronze, sizeof(e->bronze), "%s/bronze", e->dir);
    snprintf(e->state, sizeof(e->state), "%s/state", e->dir);
    assert_int_equal(mkdir(e->src, 0755), 0);
    assert_int_equal(mkdir(e->bronze, 0755), 0);
    /* 2.5 MB: its chunks travel in more than one record when records are small */
    write_random_file(e->src, "big.bin", 2500 * 1024, 21);
    write_random_file(e->src, "small.bin", 5000, 22);
    for (unsigned i = 0; i < nsmall; i++) {
        char name[32];
        snprintf(name, sizeof(name), "s%03u.json", i);
        write_random_file(e->src, name, 700, 200 + i);
    }
    assert_non_null(e->ctx = ingest_ctx_create(NULL));
    assert_non_null(e->ectx = ingest_ctx_create(NULL));
    assert_int_equal(ingest_secret_key_generate(&e->dev_key), 0);
    assert_int_equal(ingest_secret_key_generate(&e->core_key), 0);
    assert_int_equal(ingest_krec_keys_device(&e->dev_key, e->core_key.pk, &e->dk), 0);
    assert_int_equal(ingest_krec_keys_core(&e->core_key, e->dev_key.pk, &e->ck), 0);
    const ingest_store_opts so = { .map_size = 1ull << 28 };
    assert_int_equal(ingest_store_open(e->ctx, e->state, &so, &e->st), 0);
    assert_int_equal(ingest_index_open(e->st, e->bronze, &e->idx), 0);
    const ingest_core_opts o = {
        .store = e->st, .index = e->idx, .bronze = e->bronze, .dedup_key = ingest_default_dedup_key(),
        .idle_timeout_ms = 30000, .features = INGEST_SESSION_FEATURES_ALL, .log = tlog,
        .log_level = INGEST_LOG_DEBUG,
    };
    assert_int_equal(ingest_core_create(e->ctx, &o, &e->core), 0);
    core_start(e);
    assert_int_equal(e->core_link->features, INGEST_SESSION_FEATURE_PACK | INGEST_SESSION_FEATURE_SHUFFLE2);
    /* small records: chunks and manifest parts travel in pieces */
    const ingest_klink_edge_opts eo = {
        .device = DEVICE, .keys = &e->dk, .bus = { bus_edge, e }, .features = features, .record_max = 64 * 1024,
        .have = cb_have, .held = cb_held, .unheld = cb_unheld, .ud = e,
    };
    assert_int_equal(ingest_klink_edge_create(e->ctx, &eo, &e->edge_link), 0);
    const ingest_sender_source src = { "s", e->src, 0 };
    const ingest_sender_opts sopts = {
        .device = DEVICE, .dedup_key = ingest_default_dedup_key(), .sources = &src, .nsources = 1,
        .batch_prefix = "b-", .threads = 1,
    };
    assert_int_equal(ingest_sender_create(e->ectx, &sopts, &e->snd), 0);
    assert_int_equal(ingest_codec_create(e->ectx, 1, &e->codec), 0);
    const ingest_edge_opts eopts = {
        .codec = e->codec, .chunk_cap = ingest_sender_chunk_bound(e->snd), .userdata = e, .on_acked = on_acked,
        .reply_timeout_ms = 20000,
    };
    assert_int_equal(ingest_edge_create(e->ectx, &eopts, &e->edge), 0);
    assert_int_equal(ingest_edge_attach(e->edge, e->edge_link), 0);
    return e;
}

static void env_free(env *e)
{
    ingest_edge_detach(e->edge);
    ingest_edge_destroy(e->edge);
    if (e->serving) {
        ingest_klink_core_stop(e->core_link);
        assert_int_equal(pthread_join(e->thread, NULL), 0);
    }
    ingest_link_destroy(e->edge_link);
    ingest_link_destroy(e->core_link);
    ingest_codec_destroy(e->codec);
    ingest_sender_destroy(e->snd);
    ingest_core_destroy(e->core);
    ingest_index_close(e->idx);
    ingest_store_close(e->st);
    ingest_krec_keys_wipe(&e->dk);
    ingest_krec_keys_wipe(&e->ck);
    ingest_ctx_destroy(e->ectx);
    ingest_ctx_destroy(e->ctx);
    remove_tree(e->dir);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static ingest_sender_batch *next_batch(env *e)
{
    ingest_sender_batch *b = NULL;
    assert_int_equal(ingest_sender_scan(e->snd), 0);
    assert_int_equal(ingest_sender_next_batch(e->snd, &b), 1);
    return b;
}

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

static void test_lands_then_dedups(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_SHUFFLE2, 0);
    assert_int_equal(ship(e, next_batch(e)), 0);
    assert_landed(e, 2);
    ingest_edge_stats st;
    ingest_edge_stats_get(e->edge, &st);
    assert_int_equal(st.batches_acked, 1);
    assert_true(st.chunks_sent > 0);
    assert_int_equal(e->bad, 0);
    const uint64_t chunk_records = e->chunk_records;
    assert_true(chunk_records > st.chunks_sent); /* 64 KiB records: chunks went in pieces */
    /* again, with a fresh sender: the have-cache holds every chunk, so no chunk record travels */
    ingest_sender_destroy(e->snd);
    const ingest_sender_source src = { "s", e->src, 0 };
    const ingest_sender_opts sopts = {
        .device = DEVICE, .dedup_key = ingest_default_dedup_key(), .sources = &src, .nsources = 1,
        .batch_prefix = "c-", .threads = 1,
    };
    assert_int_equal(ingest_sender_create(e->ectx, &sopts, &e->snd), 0);
    assert_int_equal(ship(e, next_batch(e)), 0);
    assert_int_equal(e->chunk_records, chunk_records);
    ingest_edge_stats_get(e->edge, &st);
    assert_int_equal(st.batches_acked, 2);
    assert_int_equal(e->acked, 2);
    /* the core says a batch is over (for its offsets) just after its reply is out: end the serve first */
    ingest_klink_core_stop(e->core_link);
    assert_int_equal(pthread_join(e->thread, NULL), 0);
    e->serving = 0;
    assert_int_equal(e->done, 2);
    env_free(e);
}

static void test_pipelined_and_packed(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_PIPELINE | INGEST_SESSION_FEATURE_PACK | INGEST_SESSION_FEATURE_SHUFFLE2,
                     60);
    assert_int_equal(ship(e, next_batch(e)), 3); /* RECEIVED once every record was delivered */
    assert_int_equal(ingest_edge_wait_pending(e->edge), 0);
    assert_int_equal(e->acked, 1);
    ingest_edge_stats st;
    ingest_edge_stats_get(e->edge, &st);
    assert_true(st.groups_sent > 0);
    assert_landed(e, 62);
    env_free(e);
}

/* Several batches pipelined back to back: the core reads nothing of a batch before the previous one's ACK
 * is out (reading ahead once cut a committed batch off and lost its reply). */
static void test_many_batches_pipelined(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_PIPELINE, 30);
    ingest_sender_destroy(e->snd);
    const ingest_sender_source src = { "s", e->src, 0 };
    const ingest_sender_opts sopts = {
        .device = DEVICE, .dedup_key = ingest_default_dedup_key(), .sources = &src, .nsources = 1,
        .batch_prefix = "p-", .threads = 1, .max_files = 4,
    };
    assert_int_equal(ingest_sender_create(e->ectx, &sopts, &e->snd), 0);
    assert_int_equal(ingest_sender_scan(e->snd), 0);
    int batches = 0;
    ingest_sender_batch *b = NULL;
    while (ingest_sender_next_batch(e->snd, &b) == 1) {
        const int rc = ship(e, b);
        assert_true(rc == 0 || rc == 3);
        batches++;
    }
    assert_int_equal(ingest_edge_wait_pending(e->edge), 0);
    assert_int_equal(batches, 8); /* 32 files, 4 a batch */
    assert_int_equal(e->acked, 8);
    assert_landed(e, 32);
    env_free(e);
}

/* The have-cache claims chunks the core never got: NEEDED, the batch shipped again, and it lands. */
static void test_needed_then_lands(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_SHUFFLE2, 3);
    ingest_sender_batch *b = next_batch(e);
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    for (uint64_t i = 0; i < bs.chunks; i++) { /* a cache that lies about every chunk */
        uint8_t id[INGEST_ID_BYTES];
        uint32_t clen;
        uint64_t off;
        assert_int_equal(ingest_sender_batch_chunk_info(b, i, id, &clen, &off), 0);
        have_add(e, id);
    }
    assert_int_equal(ship(e, b), 1); /* not landed: ship again */
    assert_int_equal(e->chunk_records, 0);
    assert_true(e->unheld > 0);
    assert_landed(e, 0);
    ingest_klink_stats ks;
    ingest_klink_stats_get(e->edge_link, &ks);
    assert_int_equal(ks.batches_needed, 1);
    assert_int_equal(e->needed, 1);
    assert_int_equal(ship(e, next_batch(e)), 0);
    assert_landed(e, 5);
    assert_int_equal(e->acked, 1);
    env_free(e);
}

/* Chunk records lost on the way: the commit finds chunks missing, NEEDED, and a re-ship lands. */
static void test_lost_chunk_records(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_SHUFFLE2, 0);
    e->drop_chunk_records = 3;
    assert_int_equal(ship(e, next_batch(e)), 1); /* the core said ESTALE: records of it never came */
    assert_landed(e, 0);
    assert_int_equal(ship(e, next_batch(e)), 0);
    assert_landed(e, 2);
    assert_int_equal(e->needed, 0);
    env_free(e);
}

/* The tail of a pipelined batch lost on the way (a topic that dropped records): the next batch's records
 * tell the core; it says ESTALE, and both batches land after re-ships. */
static void test_lost_tail_pipelined(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_PIPELINE, 8);
    ingest_sender_destroy(e->snd);
    const ingest_sender_source src = { "s", e->src, 0 };
    const ingest_sender_opts sopts = {
        .device = DEVICE, .dedup_key = ingest_default_dedup_key(), .sources = &src, .nsources = 1,
        .batch_prefix = "t-", .threads = 1, .max_files = 5,
    };
    assert_int_equal(ingest_sender_create(e->ectx, &sopts, &e->snd), 0);
    assert_int_equal(ingest_sender_scan(e->snd), 0);
    ingest_sender_batch *b1 = NULL, *b2 = NULL;
    assert_int_equal(ingest_sender_next_batch(e->snd, &b1), 1);
    snprintf(e->drop_batch, sizeof(e->drop_batch), "%s", ingest_sender_batch_id(b1));
    e->drop_from = 3; /* its begin and manifest arrive, nothing after */
    assert_int_equal(ship(e, b1), 3); /* delivered: RECEIVED */
    assert_int_equal(ingest_sender_next_batch(e->snd, &b2), 1);
    const int rc = ship(e, b2); /* its records cut the first off: the first's answer is ESTALE */
    assert_true(rc == 0 || rc == 3 || rc == 1);
    if (rc == 3)
        assert_int_equal(ingest_edge_wait_pending(e->edge), 0);
    ingest_edge_stats st;
    ingest_edge_stats_get(e->edge, &st);
    assert_true(st.batches_abandoned >= 1); /* the first, to ship again */
    e->drop_batch[0] = '\0';
    /* everything again (a second pass, as the agent makes): what had not landed lands */
    ingest_sender_destroy(e->snd);
    const ingest_sender_opts again = {
        .device = DEVICE, .dedup_key = ingest_default_dedup_key(), .sources = &src, .nsources = 1,
        .batch_prefix = "u-", .threads = 1,
    };
    assert_int_equal(ingest_sender_create(e->ectx, &again, &e->snd), 0);
    assert_int_equal(ship(e, next_batch(e)), 3);
    assert_int_equal(ingest_edge_wait_pending(e->edge), 0);
    assert_landed(e, 10);
    env_free(e);
}

/* A whole pipelined batch lost on the way: the core never hears of it; the answer to the next one tells the
 * edge, which ships the lost one again (ESTALE) instead of waiting for an answer that cannot come. */
static void test_lost_whole_batch(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_PIPELINE, 8);
    ingest_sender_destroy(e->snd);
    const ingest_sender_source src = { "s", e->src, 0 };
    const ingest_sender_opts sopts = {
        .device = DEVICE, .dedup_key = ingest_default_dedup_key(), .sources = &src, .nsources = 1,
        .batch_prefix = "w-", .threads = 1, .max_files = 5,
    };
    assert_int_equal(ingest_sender_create(e->ectx, &sopts, &e->snd), 0);
    assert_int_equal(ingest_sender_scan(e->snd), 0);
    ingest_sender_batch *b1 = NULL, *b2 = NULL;
    assert_int_equal(ingest_sender_next_batch(e->snd, &b1), 1);
    snprintf(e->drop_batch, sizeof(e->drop_batch), "%s", ingest_sender_batch_id(b1));
    e->drop_from = 0; /* every record of it */
    assert_int_equal(ship(e, b1), 3);
    assert_int_equal(ingest_sender_next_batch(e->snd, &b2), 1);
    const int rc = ship(e, b2);
    assert_true(rc == 0 || rc == 3);
    assert_int_equal(ingest_edge_wait_pending(e->edge), 0);
    ingest_edge_stats st;
    ingest_edge_stats_get(e->edge, &st);
    assert_int_equal(st.batches_abandoned, 1); /* b1, to ship again */
    assert_int_equal(st.batches_acked, 1);     /* b2 */
    ingest_klink_stats ks;
    ingest_klink_stats_get(e->edge_link, &ks);
    assert_int_equal(ks.batches_lost, 1);
    env_free(e);
}

/* The beginning of a batch lost on the way: its other records tell the core which batch it was; the
 * device is answered ESTALE (it would wait for an answer), ships it again, and it lands. */
static void test_lost_beginning(void **state)
{
    (void)state;
    env *e = env_new(0, 3);
    ingest_sender_batch *b = next_batch(e);
    snprintf(e->drop_batch, sizeof(e->drop_batch), "%s", ingest_sender_batch_id(b));
    e->drop_until = 2;
    assert_int_equal(ship(e, b), 1);
    assert_landed(e, 0);
    e->drop_batch[0] = '\0';
    assert_int_equal(ship(e, next_batch(e)), 0);
    assert_landed(e, 5);
    env_free(e);
}

/* A batch cut off (a device that restarted) ends (ESTALE, to nobody now), and the next batch lands. */
static void test_cut_off_batch(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_SHUFFLE2, 0);
    ingest_sender_batch *b = next_batch(e);
    assert_int_equal(ingest_edge_send_manifest(e->edge, b), 0); /* then the device "restarts" */
    ingest_sender_batch_destroy(b);
    ingest_edge_detach(e->edge);
    ingest_link *old = e->edge_link;
    const ingest_klink_edge_opts eo = {
        .device = DEVICE, .keys = &e->dk, .bus = { bus_edge, e }, .features = 0, .have = cb_have, .ud = e,
    };
    assert_int_equal(ingest_klink_edge_create(e->ctx, &eo, &e->edge_link), 0);
    ingest_link_destroy(old);
    assert_int_equal(ingest_edge_attach(e->edge, e->edge_link), 0);
    const int rc = ship(e, next_batch(e));
    if (rc != 0)
        fprintf(stderr, "ship: %s\n", ingest_ctx_errmsg(e->ectx));
    assert_int_equal(rc, 0);
    assert_landed(e, 2);
    env_free(e);
}

/* The serve takes a batch's first records (its manifest), its chunks never come, and the link is ended by
 * end: the batch reported over done times. */
static void mid_batch_ended(void (*end)(ingest_link *), int done)
{
    env *e = env_new(INGEST_SESSION_FEATURE_SHUFFLE2, 0);
    ingest_sender_batch *b = next_batch(e);
    assert_int_equal(ingest_edge_send_manifest(e->edge, b), 0);
    usleep(300000);
    end(e->core_link);
    assert_int_equal(pthread_join(e->thread, NULL), 0);
    e->serving = 0;
    assert_int_equal(e->done, done);
    ingest_sender_batch_destroy(b);
    env_free(e);
}

/*
 * The core's link stopped (a rebalance, the receiver stopping) while a batch
 * is being received: the batch is not reported over, so its first record's
 * offset stays open and the offsets committed at the stop stay before it;
 * the partition's next owner reads the batch from its beginning.  (It was
 * reported over, and the commit passed its beginning: the next owner saw
 * only its tail, or nothing of it, and the device waited for a reply.)
 */
static void test_stopped_mid_batch(void **state)
{
    (void)state;
    mid_batch_ended(ingest_klink_core_stop, 0);
}

/* Dropped (the device revoked or given a new key): reported over, so the offsets committed move past its
 * beginning (the device ships it again, under its new key). */
static void test_dropped_mid_batch(void **state)
{
    (void)state;
    mid_batch_ended(ingest_klink_core_drop, 1);
}

/* Dropped before its serve took anything: the batch whose beginning was queued is over all the same. */
static void test_dropped_queued_batch(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_SHUFFLE2, 0);
    ingest_klink_core_stop(e->core_link); /* a link no serve reads: what is fed to it stays queued */
    assert_int_equal(pthread_join(e->thread, NULL), 0);
    e->serving = 0;
    ingest_link_destroy(e->core_link);
    core_link_new(e);
    ingest_sender_batch *b = next_batch(e);
    const int rc = ingest_edge_send_manifest(e->edge, b);
    ingest_klink_core_drop(e->core_link);
    assert_int_equal(rc, 0);
    assert_int_equal(e->done, 1);
    ingest_sender_batch_destroy(b);
    env_free(e);
}

/*
 * Offer never waits (kserve.c pauses the device's partition instead): with
 * queue_max bytes queued on a link no serve reads, the next record is
 * INGEST_EBUSY and not queued, the one-record queue of an empty link takes
 * any size, and room says yes only while at most half the queue is used
 * and the record fits, or once the link is stopped (its offers then fail at once with INGEST_ECLOSED).
 */
static void test_offer_full_queue(void **state)
{
    (void)state;
    env *e = env_new(INGEST_SESSION_FEATURE_SHUFFLE2, 0);
    ingest_klink_core_stop(e->core_link); /* the env's serve ends: a link no serve reads */
    assert_int_equal(pthread_join(e->thread, NULL), 0);
    e->serving = 0;
    ingest_link_destroy(e->core_link);
    const ingest_klink_core_opts co = {
        .device = DEVICE, .keys = &e->ck, .bus = { bus_core, e }, .batch_done = cb_done, .ud = e,
        .queue_max = 1000,
    };
    assert_int_equal(ingest_klink_core_create(e->ctx, &co, &e->core_link), 0);
    static uint8_t piece[1500];
    ingest_krec_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = INGEST_KREC_CHUNK;
    snprintf(h.device, sizeof(h.device), "%s", DEVICE);
    snprintf(h.batch, sizeof(h.batch), "b-1");
    ingest_krec_body b;
    memset(&b, 0, sizeof(b));
    b.type = INGEST_KREC_CHUNK;
    b.u.msg.wtype = INGEST_MSG_CHUNK;
    b.u.msg.data = piece;
    b.u.msg.total = b.u.msg.len = 1500;
    assert_int_equal(ingest_klink_core_room(e->core_link, 1500), 1); /* empty: any record goes in */
    assert_int_equal(ingest_klink_core_offer(e->core_link, &h, &b, 1), 0);
    b.u.msg.total = b.u.msg.len = 10;
    assert_int_equal(ingest_klink_core_room(e->core_link, 10), 0);
    assert_int_equal(ingest_klink_core_offer(e->core_link, &h, &b, 2), INGEST_EBUSY);
    ingest_link_destroy(e->core_link); /* with its one record (the one refused was freed by the offer) */
    /* below the bound, then at it: room while at most half is used and the record fits */
    assert_int_equal(ingest_klink_core_create(e->ctx, &co, &e->core_link), 0);
    b.u.msg.total = b.u.msg.len = 400;
    assert_int_equal(ingest_klink_core_offer(e->core_link, &h, &b, 3), 0);
    assert_int_equal(ingest_klink_core_room(e->core_link, 600), 1);  /* 400 used: fits exactly */
    assert_int_equal(ingest_klink_core_room(e->core_link, 601), 0);
    b.u.msg.total = b.u.msg.len = 100;
    assert_int_equal(ingest_klink_core_offer(e->core_link, &h, &b, 31), 0); /* 500: half */
    assert_int_equal(ingest_klink_core_room(e->core_link, 1), 1);
    b.u.msg.total = b.u.msg.len = 1;
    assert_int_equal(ingest_klink_core_offer(e->core_link, &h, &b, 32), 0); /* 501: over half */
    assert_int_equal(ingest_klink_core_room(e->core_link, 1), 0);
    ingest_link_destroy(e->core_link);
    assert_int_equal(ingest_klink_core_create(e->ctx, &co, &e->core_link), 0);
    b.u.msg.total = b.u.msg.len = 400;
    assert_int_equal(ingest_klink_core_offer(e->core_link, &h, &b, 3), 0);
    assert_int_equal(ingest_klink_core_offer(e->core_link, &h, &b, 4), 0); /* 800 */
    assert_int_equal(ingest_klink_core_room(e->core_link, 10), 0);
    b.u.msg.total = b.u.msg.len = 201;
    assert_int_equal(ingest_klink_core_offer(e->core_link, &h, &b, 5), INGEST_EBUSY);
    b.u.msg.total = b.u.msg.len = 200;
    assert_int_equal(ingest_klink_core_offer(e->core_link, &h, &b, 6), 0); /* exactly 1000 */
    ingest_klink_core_stop(e->core_link);
    assert_int_equal(ingest_klink_core_room(e->core_link, 1000), 1);
    assert_int_equal(ingest_klink_core_offer(e->core_link, &h, &b, 7), INGEST_ECLOSED);
    env_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lands_then_dedups),
        cmocka_unit_test(test_pipelined_and_packed),
        cmocka_unit_test(test_many_batches_pipelined),
        cmocka_unit_test(test_needed_then_lands),
        cmocka_unit_test(test_lost_chunk_records),
        cmocka_unit_test(test_lost_tail_pipelined),
        cmocka_unit_test(test_lost_beginning),
        cmocka_unit_test(test_lost_whole_batch),
        cmocka_unit_test(test_cut_off_batch),
        cmocka_unit_test(test_stopped_mid_batch),
        cmocka_unit_test(test_dropped_mid_batch),
        cmocka_unit_test(test_dropped_queued_batch),
        cmocka_unit_test(test_offer_full_queue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
