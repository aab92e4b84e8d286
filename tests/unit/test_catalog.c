/* Unit tests of the catalog (include/ingest/catalog.h): encodings, parsers, catch-up, listing, feed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <ingest.h>

#include "catalog_fmt.h"

/* ---- helpers ------------------------------------------------------------------ */

static char *tmp_bronze(void)
{
    char *d = strdup("/tmp/test_catalog.XXXXXX");
    assert_non_null(mkdtemp(d));
    return d;
}

static void rm_tree(const char *d)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
    assert_int_equal(system(cmd), 0);
}

static void mkdir_p(const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", path);
    assert_int_equal(system(cmd), 0);
}

/* Write manifest _manifests/DEV/BATCH.jsonl: n files "landed[i]" (version[i]), one chunk each. */
static void write_manifest(const char *bronze, const char *dev, const char *batch, int64_t created, size_t n,
                           const char *const *landed, const uint64_t *version)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_manifest_writer *w = NULL;
    assert_int_equal(ingest_manifest_writer_create(ctx, &w), 0);
    ingest_manifest_rec rec;
    memset(&rec, 0, sizeof(rec));
    rec.type = INGEST_MREC_HEADER;
    rec.format = INGEST_MANIFEST_FORMAT;
    rec.device = dev;
    rec.batch = batch;
    rec.nfiles = n;
    rec.total_bytes = 10 * n;
    rec.created_ns = created;
    assert_int_equal(ingest_manifest_writer_add(w, &rec), 0);
    for (size_t i = 0; i < n; i++) {
        ingest_manifest_chunk ch;
        memset(&ch, 0, sizeof(ch));
        ch.id[0] = (uint8_t)i;
        ch.len = 10;
        memset(&rec, 0, sizeof(rec));
        rec.type = INGEST_MREC_FILE;
        const char *slash = strchr(landed[i], '/');
        rec.path = slash ? slash + 1 : landed[i];
        rec.landed = landed[i];
        rec.size = 10;
        rec.mtime_ns = 1000 + (int64_t)i;
        rec.mode = 0100644;
        rec.version = version ? version[i] : 1;
        rec.hash[0] = (uint8_t)(i + 1);
        rec.hash[1] = (uint8_t)rec.version;
        rec.nchunks_total = 1;
        rec.chunks = &ch;
        rec.nchunks = 1;
        assert_int_equal(ingest_manifest_writer_add(w, &rec), 0);
    }
    assert_int_equal(ingest_manifest_writer_finish(w), 0);
    char dir[600], path[800];
    snprintf(dir, sizeof(dir), "%s/_manifests/%s", bronze, dev);
    mkdir_p(dir);
    snprintf(path, sizeof(path), "%s/%s.jsonl", dir, batch);
    size_t len;
    const void *d = ingest_manifest_writer_data(w, &len);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(d, 1, len, f), len);
    fclose(f);
    ingest_manifest_writer_destroy(w);
    ingest_ctx_destroy(ctx);
}

typedef struct seen {
    char landed[64][128];
    uint64_t version[64];
    int replaced[64];
    char device[64][16];
    size_t n;
    uint64_t count; /* beyond the 64 kept */
} seen;

static int collect(void *ud, const ingest_catalog_entry *e)
{
    seen *s = ud;
    if (s->n < 64) {
        snprintf(s->landed[s->n], sizeof(s->landed[0]), "%s", e->landed);
        s->version[s->n] = e->version;
        s->replaced[s->n] = e->replaced;
        snprintf(s->device[s->n], sizeof(s->device[0]), "%s", e->device ? e->device : "");
        s->n++;
    }
    s->count++;
    return 0;
}

/* ---- encodings ------------------------------------------------------------------ */

static void test_block_round_trip(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest__catblock_w w;
    ingest__catblock_w_init(&w, ctx);
    const char *landed[] = { "d/a/x.log", "d/a/x.log", "d/a/y.log", "d/b/other" };
    const char *path[] = { "a/x.log", "a/x.log", "elsewhere", "other" };
    const uint64_t ver[] = { 1, 7, 1, 3 };
    for (int i = 0; i < 4; i++) {
        ingest__catrec r;
        memset(&r, 0, sizeof(r));
        r.landed = landed[i];
        r.landed_len = strlen(landed[i]);
        r.path = path[i];
        r.path_len = strlen(path[i]);
        r.version = ver[i];
        r.batch_no = 10 + (uint64_t)i;
        r.size = (uint64_t)i * 1000;
        r.mtime_ns = i == 2 ? -5 : 1795000000000000000ll + i;
        r.mode = 0100644;
        r.hash[31] = (uint8_t)i;
        assert_int_equal(ingest__catblock_w_add(&w, &r), 0);
    }
    size_t len;
    const uint8_t *v = ingest__catblock_w_finish(&w, &len);
    static ingest__catblock_r rd;
    assert_int_equal(ingest__catblock_r_reset(&rd, v, len), 0);
    ingest__catrec r, prev;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(ingest__catblock_r_next(&rd, &r), 1);
        assert_string_equal(r.landed, landed[i]);
        assert_string_equal(r.path, path[i]);
        assert_int_equal(r.version, ver[i]);
        assert_int_equal(r.batch_no, 10 + (uint64_t)i);
        assert_int_equal(r.mtime_ns, i == 2 ? -5 : 1795000000000000000ll + i);
        assert_int_equal(r.hash[31], i);
        if (i > 0) /* the record before stays valid */
            assert_string_equal(prev.landed, landed[i - 1]);
        prev = r;
    }
    assert_int_equal(ingest__catblock_r_next(&rd, &r), 0);
    /* every truncation is refused, never read past */
    for (size_t cut = 0; cut < len; cut++) {
        int rc = ingest__catblock_r_reset(&rd, v, cut);
        while (rc == 0 && (rc = ingest__catblock_r_next(&rd, &r)) > 0)
            rc = 0;
        assert_int_equal(rc, INGEST_ECORRUPT);
        assert_non_null(rd.err);
    }
    ingest__catblock_w_free(&w);
    ingest_ctx_destroy(ctx);
}

static void test_varint_bounds(void **state)
{
    (void)state;
    uint8_t b[10];
    const uint64_t vals[] = { 0, 1, 127, 128, 300, UINT64_MAX };
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        const size_t n = ingest__varint_put(b, vals[i]);
        const uint8_t *p = b;
        uint64_t v;
        assert_int_equal(ingest__varint_get(&p, b + n, &v), 0);
        assert_true(v == vals[i] && p == b + n);
        p = b;
        assert_int_equal(ingest__varint_get(&p, b + n - 1, &v), -1);
    }
    const uint8_t over[11] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0 };
    const uint8_t *p = over;
    uint64_t v;
    assert_int_equal(ingest__varint_get(&p, over + 11, &v), -1);
}

static void test_cursor_and_time(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    uint64_t id, b;
    assert_int_equal(ingest_catalog_cursor_parse(ctx, "c1-00000000000000ff-12", &id, &b), 0);
    assert_true(id == 255 && b == 12);
    const char *bad[] = { "", "c2-00000000000000ff-1", "c1-00000000000000f-1", "c1-00000000000000ff1",
                          "c1-00000000000000ff-", "c1-00000000000000ff-01", "c1-00000000000000ff-1x",
                          "c1-00000000000000ff-99999999999999999999", "c1-00000000000000ff-1111111111111111111111111111111" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(ingest_catalog_cursor_parse(ctx, bad[i], &id, &b), INGEST_EINVAL);
        assert_true(strlen(ingest_ctx_errmsg(ctx)) > 0);
    }
    assert_non_null(strstr((ingest_catalog_cursor_parse(ctx, "c1-0000000000000zff-1", &id, &b),
                            ingest_ctx_errmsg(ctx)), "byte 17"));
    int64_t t;
    const int64_t now = 1795000000ll * 1000000000;
    assert_int_equal(ingest_parse_time(ctx, "1970-01-02", now, &t), 0);
    assert_true(t == 86400ll * 1000000000);
    assert_int_equal(ingest_parse_time(ctx, "2026-11-22T10:30:05.25Z", now, &t), 0);
    assert_true(t == 1795343405250000000ll);
    assert_int_equal(ingest_parse_time(ctx, "2026-11-22 11:30:05.25+01:00", now, &t), 0);
    assert_true(t == 1795343405250000000ll);
    assert_int_equal(ingest_parse_time(ctx, "2000-02-29", now, &t), 0);
    assert_int_equal(ingest_parse_time(ctx, "@1795000000.5", now, &t), 0);
    assert_true(t == now + 500000000);
    assert_int_equal(ingest_parse_time(ctx, "-36h", now, &t), 0);
    assert_true(t == now - 36ll * 3600 * 1000000000);
    const char *tbad[] = { "", "2026-13-01", "2026-02-30", "1900-01-01", "2026-1-01", "2026-11-22T25:00", "-5y",
                           "@", "2026-11-22T10:30Zx", "2026-11-22T10:30:00.1234567891", "9999-01-01" };
    for (size_t i = 0; i < sizeof(tbad) / sizeof(tbad[0]); i++) {
        assert_int_equal(ingest_parse_time(ctx, tbad[i], now, &t), INGEST_EINVAL);
        assert_non_null(strstr(ingest_ctx_errmsg(ctx), "byte"));
    }
    ingest_ctx_destroy(ctx);
}

/* ---- the catalog ------------------------------------------------------------------ */

static void test_catch_up_list_feed(void **state)
{
    (void)state;
    char *bronze = tmp_bronze();
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    const char *l1[] = { "d1/b.txt", "d1/a.txt", "d1/dir/c.txt" };
    write_manifest(bronze, "d1", "b1", 100, 3, l1, NULL);
    const char *l2[] = { "d2/x.txt" };
    write_manifest(bronze, "d2", "b1", 200, 1, l2, NULL);
    ingest_catalog *cat = NULL;
    assert_int_equal(ingest_catalog_open(ctx, bronze, INGEST_CATALOG_NOSYNC, &cat), 0);
    ingest_catalog_stats st;
    assert_int_equal(ingest_catalog_catch_up(cat, &st), 0);
    assert_int_equal(st.batches, 2);
    assert_int_equal(st.files, 4);
    assert_int_equal(ingest_catalog_catch_up(cat, &st), 0);
    assert_int_equal(st.batches, 0); /* held already */
    seen s;
    memset(&s, 0, sizeof(s));
    assert_int_equal(ingest_catalog_list(cat, NULL, collect, &s), 0);
    assert_int_equal(s.n, 4);
    assert_string_equal(s.landed[0], "d1/a.txt"); /* landed-path order */
    assert_string_equal(s.landed[3], "d2/x.txt");
    assert_string_equal(s.device[3], "d2");
    /* a feed from the start, then nothing new */
    char cur[INGEST_CATALOG_CURSOR_MAX], cur2[INGEST_CATALOG_CURSOR_MAX];
    memset(&s, 0, sizeof(s));
    assert_int_equal(ingest_catalog_feed(cat, "", 0, NULL, collect, &s, cur, sizeof(cur)), 0);
    assert_int_equal(s.n, 4);
    memset(&s, 0, sizeof(s));
    assert_int_equal(ingest_catalog_feed(cat, cur, 0, NULL, collect, &s, cur2, sizeof(cur2)), 0);
    assert_int_equal(s.n, 0);
    assert_string_equal(cur, cur2);
    /* a new version of d1/a.txt, and a new file */
    const char *l3[] = { "d1/a.txt", "d1/z.txt" };
    const uint64_t v3[] = { 2, 1 };
    write_manifest(bronze, "d1", "b2", 300, 2, l3, v3);
    assert_int_equal(ingest_catalog_add_batch(cat, "d1", "b2"), 1);
    assert_int_equal(ingest_catalog_add_batch(cat, "d1", "b2"), 0);
    memset(&s, 0, sizeof(s));
    assert_int_equal(ingest_catalog_list(cat, NULL, collect, &s), 0);
    assert_int_equal(s.n, 5);
    assert_int_equal(s.version[0], 2);
    ingest_catalog_filter f;
    memset(&f, 0, sizeof(f));
    f.flags = INGEST_CATALOG_ALL_VERSIONS;
    f.prefix = "d1/a";
    memset(&s, 0, sizeof(s));
    assert_int_equal(ingest_catalog_list(cat, &f, collect, &s), 0);
    assert_int_equal(s.n, 2);
    assert_true(s.version[0] == 1 && s.replaced[0] == 1 && s.version[1] == 2 && s.replaced[1] == 0);
    /* filters: device, time */
    memset(&f, 0, sizeof(f));
    f.device = "d2";
    memset(&s, 0, sizeof(s));
    assert_int_equal(ingest_catalog_list(cat, &f, collect, &s), 0);
    assert_int_equal(s.n, 1);
    memset(&f, 0, sizeof(f));
    f.since_ns = 250;
    memset(&s, 0, sizeof(s));
    assert_int_equal(ingest_catalog_list(cat, &f, collect, &s), 0);
    assert_int_equal(s.n, 2);
    /* the feed after the old cursor: only b2, the replaced version passed once at its landing */
    memset(&s, 0, sizeof(s));
    assert_int_equal(ingest_catalog_feed(cat, cur, 0, NULL, collect, &s, cur2, sizeof(cur2)), 0);
    assert_int_equal(s.n, 2);
    memset(&s, 0, sizeof(s));
    assert_int_equal(ingest_catalog_feed(cat, "", 0, NULL, collect, &s, cur2, sizeof(cur2)), 0);
    assert_int_equal(s.n, 6);
    ingest_catalog_close(cat);
    /* deleted: made again, the old cursor refused */
    char p[600];
    snprintf(p, sizeof(p), "%s/_manifests/.catalog", bronze);
    rm_tree(p);
    assert_int_equal(ingest_catalog_open(ctx, bronze, INGEST_CATALOG_NOSYNC, &cat), 0);
    assert_int_equal(ingest_catalog_catch_up(cat, &st), 0);
    assert_int_equal(st.batches, 3);
    memset(&s, 0, sizeof(s));
    assert_int_equal(ingest_catalog_list(cat, NULL, collect, &s), 0);
    assert_int_equal(s.n, 5);
    assert_int_equal(ingest_catalog_feed(cat, cur, 0, NULL, collect, &s, cur2, sizeof(cur2)), INGEST_ESTALE);
    /* a malformed manifest is skipped, counted, and does not stop the others */
    snprintf(p, sizeof(p), "%s/_manifests/d3", bronze);
    mkdir_p(p);
    snprintf(p, sizeof(p), "%s/_manifests/d3/bad.jsonl", bronze);
    FILE *fp = fopen(p, "w");
    fputs("{\"type\":\"batch\"}\n", fp);
    fclose(fp);
    assert_int_equal(ingest_catalog_catch_up(cat, &st), 0);
    assert_int_equal(st.bad, 1);
    ingest_catalog_close(cat);
    ingest_ctx_destroy(ctx);
    rm_tree(bronze);
    free(bronze);
}

/*
 * The adder: batches queued with ingest_catalog_add_batch_later are added by
 * the catalog's thread, in order (the feed lists them in queue order);
 * more than the queue holds makes the caller wait, none is lost; closing
 * with batches queued adds them first.  Without an adder the call adds at
 * once; a bad name is refused either way.
 */
static void test_adder(void **state)
{
    (void)state;
    char *bronze = tmp_bronze();
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    enum { NB = 150 }; /* past the queue's 64 */
    for (int i = 0; i < NB; i++) {
        char batch[16], landed[32];
        snprintf(batch, sizeof(batch), "b%03d", i);
        snprintf(landed, sizeof(landed), "d1/f%03d.txt", i);
        const char *l[] = { landed };
        write_manifest(bronze, "d1", batch, 100 + i, 1, l, NULL);
    }
    ingest_catalog *cat = NULL;
    assert_int_equal(ingest_catalog_open(ctx, bronze, INGEST_CATALOG_NOSYNC, &cat), 0);
    assert_int_equal(ingest_catalog_add_batch_later(cat, "d1", "b000"), 1); /* no adder: added at once */
    assert_int_equal(ingest_catalog_start_adder(cat), 0);
    assert_int_equal(ingest_catalog_start_adder(cat), 0); /* once */
    for (int i = 1; i < 100; i++) {
        char batch[16];
        snprintf(batch, sizeof(batch), "b%03d", i);
        assert_int_equal(ingest_catalog_add_batch_later(cat, "d1", batch), 2);
    }
    assert_int_equal(ingest_catalog_add_batch_later(cat, "d1", ".bad"), INGEST_EINVAL);
    ingest_catalog_drain(cat);
    ingest_catalog_stats st;
    assert_int_equal(ingest_catalog_info(cat, &st), 0);
    assert_int_equal(st.batches, 100);
    assert_int_equal(st.files, 100);
    seen s;
    memset(&s, 0, sizeof(s));
    char cur[INGEST_CATALOG_CURSOR_MAX];
    assert_int_equal(ingest_catalog_feed(cat, "", 0, NULL, collect, &s, cur, sizeof(cur)), 0);
    assert_int_equal(s.count, 100);
    for (int i = 0; i < 64; i++) { /* queue order */
        char want[32];
        snprintf(want, sizeof(want), "d1/f%03d.txt", i);
        assert_string_equal(s.landed[i], want);
    }
    /* queued, then closed at once: the close adds them */
    for (int i = 100; i < NB; i++) {
        char batch[16];
        snprintf(batch, sizeof(batch), "b%03d", i);
        assert_int_equal(ingest_catalog_add_batch_later(cat, "d1", batch), 2);
    }
    ingest_catalog_close(cat);
    assert_int_equal(ingest_catalog_open(ctx, bronze, INGEST_CATALOG_NOSYNC, &cat), 0);
    assert_int_equal(ingest_catalog_info(cat, &st), 0);
    assert_int_equal(st.batches, NB);
    assert_int_equal(st.files, NB);
    ingest_catalog_close(cat);
    /* read-only: no adder */
    assert_int_equal(ingest_catalog_open(ctx, bronze, INGEST_CATALOG_RDONLY, &cat), 0);
    assert_int_equal(ingest_catalog_start_adder(cat), INGEST_EINVAL);
    ingest_catalog_close(cat);
    ingest_ctx_destroy(ctx);
    rm_tree(bronze);
    free(bronze);
}

/* Many files in interleaved batches: blocks split and merge; listing and prefixes stay exact. */
static void test_many_files_blocks(void **state)
{
    (void)state;
    char *bronze = tmp_bronze();
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    enum { BATCHES = 20, PER = 500 };
    static char names[BATCHES * PER][64];
    const char *ptr[PER];
    for (int b = 0; b < BATCHES; b++) {
        for (int i = 0; i < PER; i++) {
            /* batch b holds every BATCHES-th file: inserts land all over the existing blocks */
            snprintf(names[b * PER + i], sizeof(names[0]), "dev/dir%02d/file-%06d.json", i % 7, i * BATCHES + b);
            ptr[i] = names[b * PER + i];
        }
        char bn[16];
        snprintf(bn, sizeof(bn), "b%03d", b);
        write_manifest(bronze, "dev", bn, 1000 + b, PER, ptr, NULL);
    }
    ingest_catalog *cat = NULL;
    assert_int_equal(ingest_catalog_open(ctx, bronze, INGEST_CATALOG_NOSYNC, &cat), 0);
    ingest_catalog_stats st;
    assert_int_equal(ingest_catalog_catch_up(cat, &st), 0);
    assert_int_equal(st.files, BATCHES * PER);
    seen s;
    memset(&s, 0, sizeof(s));
    assert_int_equal(ingest_catalog_list(cat, NULL, collect, &s), 0);
    assert_int_equal(s.count, BATCHES * PER);
    ingest_catalog_filter f;
    memset(&f, 0, sizeof(f));
    f.prefix = "dev/dir03/";
    memset(&s, 0, sizeof(s));
    assert_int_equal(ingest_catalog_list(cat, &f, collect, &s), 0);
    uint64_t want = 0;
    for (int i = 0; i < BATCHES * PER; i++)
        want += strncmp(names[i], "dev/dir03/", 10) == 0;
    assert_int_equal(s.count, want);
    f.prefix = "dev/dir03/file-0001";
    memset(&s, 0, sizeof(s));
    assert_int_equal(ingest_catalog_list(cat, &f, collect, &s), 0);
    want = 0;
    for (int i = 0; i < BATCHES * PER; i++)
        want += strncmp(names[i], "dev/dir03/file-0001", 19) == 0;
    assert_int_equal(s.count, want);
    f.prefix = "nothing/";
    memset(&s, 0, sizeof(s));
    assert_int_equal(ingest_catalog_list(cat, &f, collect, &s), 0);
    assert_int_equal(s.count, 0);
    ingest_catalog_info(cat, &st);
    assert_int_equal(st.batches, BATCHES);
    ingest_catalog_close(cat);
    ingest_ctx_destroy(ctx);
    rm_tree(bronze);
    free(bronze);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_round_trip),
        cmocka_unit_test(test_varint_bounds),
        cmocka_unit_test(test_cursor_and_time),
        cmocka_unit_test(test_catch_up_list_feed),
        cmocka_unit_test(test_adder),
        cmocka_unit_test(test_many_files_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
