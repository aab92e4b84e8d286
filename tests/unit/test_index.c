/* The core's chunk index, landed files, batches, rebuild and the edge have-cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ingest/manifest.h"
#include "store.h"

/* Under ASan or TSan, whose shadow memory counts in RssAnon: no memory bound is checked */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

static const ingest_store_opts small_opts = { .map_size = 1ull << 30 };
/* Unsynced commits: the same transactions and dirty pages, minus the fsyncs. */
static const ingest_store_opts nosync_opts = { .map_size = 1ull << 30, .flags = INGEST_STORE_NOSYNC };

static bool env_on(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

typedef struct fixture {
    char dir[64];
    char state[96];
    char bronze[96];
    ingest_ctx *ctx;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_index.XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    snprintf(f->state, sizeof(f->state), "%s/state", f->dir);
    snprintf(f->bronze, sizeof(f->bronze), "%s/bronze", f->dir);
    if (mkdir(f->bronze, 0700) != 0)
        return -1;
    f->ctx = ingest_ctx_create(NULL);
    *state = f;
    return f->ctx != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    fixture *f = *state;
    nftw(f->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    ingest_ctx_destroy(f->ctx);
    free(f);
    return 0;
}

/* Deterministic ids: i -> 32 bytes. */
static void make_id(uint64_t i, uint8_t id[INGEST_ID_BYTES])
{
    uint64_t x = i * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    for (int w = 0; w < 4; w++) {
        x ^= x >> 31;
        x *= 0xBF58476D1CE4E5B9ull;
        x ^= x >> 29;
        ingest__put_u64(id + 8 * w, x);
    }
}

/* Write bronze/rel (directories included) with n bytes, mtime mtime_ns; identity out. */
static void write_file(const fixture *f, const char *rel, size_t n, int64_t mtime_ns, ingest_file_identity *ident)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", f->bronze, rel);
    for (char *p = path + strlen(f->bronze) + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(path, 0700);
            *p = '/';
        }
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    for (size_t i = 0; i < n; i++)
        fputc((int)(i * 7 + n) & 0xff, fp);
    assert_int_equal(fclose(fp), 0);
    const struct timespec ts[2] = { { mtime_ns / 1000000000, mtime_ns % 1000000000 },
                                    { mtime_ns / 1000000000, mtime_ns % 1000000000 } };
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
    if (ident != NULL) {
        struct stat sb;
        assert_int_equal(stat(path, &sb), 0);
        ident->dev = (uint64_t)sb.st_dev;
        ident->ino = (uint64_t)sb.st_ino;
        ident->size = (uint64_t)sb.st_size;
        ident->mtime_ns = mtime_ns;
    }
}

static long rss_anon_kib(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    if (fp == NULL)
        return -1;
    while (fgets(line, sizeof(line), fp) != NULL)
        if (sscanf(line, "RssAnon: %ld kB", &v) == 1)
            break;
    fclose(fp);
    return v;
}

typedef struct problems {
    int n;
    char last[512];
    int stale_lines, bad_lines;
} problems;

static void problem_cb(void *ud, const char *msg)
{
    problems *p = ud;
    p->n++;
    if (strncmp(msg, "stale", 5) == 0)
        p->stale_lines++;
    if (strncmp(msg, "bad", 3) == 0)
        p->bad_lines++;
    snprintf(p->last, sizeof(p->last), "%s", msg);
}

/* ---- round trip ---- */

static void test_round_trip(void **state)
{
    fixture *f = *state;
    ingest_store *st = NULL;
    ingest_index *idx = NULL;
    ingest_file_identity ia, ib;
    uint64_t fa = 0, fb = 0;
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_loc loc;
    char path[512], want[512];

    write_file(f, "dev1/2024/a.bin", 3000, 1700000000123456789ll, &ia);
    write_file(f, "dev1/b.bin", 100, 1700000001000000000ll, &ib);
    assert_int_equal(ingest_store_open(f->ctx, f->state, &small_opts, &st), 0);
    assert_int_equal(ingest_index_open(st, f->bronze, &idx), 0);
    assert_int_equal(ingest_index_rebuild_needed(idx), 1);
    assert_int_equal(ingest_index_add_file(idx, "dev1/2024/a.bin", &ia, &fa), 0);
    assert_int_equal(ingest_index_add_file(idx, "dev1/b.bin", &ib, &fb), 0);
    assert_int_equal(fa, 1);
    assert_int_equal(fb, 2);
    for (uint64_t i = 0; i < 3; i++) {
        make_id(i, id);
        const ingest_chunk_loc l = { fa, i * 1000, 1000 };
        assert_int_equal(ingest_index_add_chunk(idx, id, &l), 0);
    }
    make_id(99, id);
    const ingest_chunk_loc lb = { fb, 0, 100 };
    assert_int_equal(ingest_index_add_chunk(idx, id, &lb), 0);
    assert_int_equal(ingest_index_batch_mark(idx, "dev1", "b-0001"), 0);
    assert_int_equal(ingest_store_commit(st), 0);

    make_id(1, id);
    assert_int_equal(ingest_index_find(idx, id, &loc), 0);
    assert_int_equal(loc.file_no, fa);
    assert_int_equal(loc.offset, 1000);
    assert_int_equal(loc.length, 1000);
    make_id(7, id);
    assert_int_equal(ingest_index_find(idx, id, &loc), INGEST_ENOTFOUND);
    assert_int_equal(ingest_index_file_path(idx, fa, path, sizeof(path)), 0);
    snprintf(want, sizeof(want), "%s/dev1/2024/a.bin", f->bronze);
    assert_string_equal(path, want);
    assert_int_equal(ingest_index_file_path(idx, 77, path, sizeof(path)), INGEST_ENOTFOUND);
    assert_int_equal(ingest_index_file_path(idx, fa, path, 10), INGEST_ETOOBIG);
    assert_int_equal(ingest_index_batch_landed(idx, "dev1", "b-0001"), 1);
    assert_int_equal(ingest_index_batch_landed(idx, "dev1", "b-0002"), 0);
    assert_int_equal(ingest_index_batch_landed(idx, "dev2", "b-0001"), 0);
    assert_int_equal(ingest_index_add_file(idx, "../escape", &ia, NULL), INGEST_EINVAL);
    assert_int_equal(ingest_index_add_file(idx, "/abs", &ia, NULL), INGEST_EINVAL);
    ingest_index_close(idx);
    ingest_store_close(st);

    /* Reopen: everything is still there. */
    st = NULL;
    idx = NULL;
    assert_int_equal(ingest_store_open(f->ctx, f->state, &small_opts, &st), 0);
    assert_int_equal(ingest_index_open(st, f->bronze, &idx), 0);
    make_id(2, id);
    assert_int_equal(ingest_index_find(idx, id, &loc), 0);
    assert_int_equal(loc.file_no, fa);
    assert_int_equal(loc.offset, 2000);
    make_id(99, id);
    assert_int_equal(ingest_index_find(idx, id, &loc), 0);
    assert_int_equal(loc.file_no, fb);
    assert_int_equal(ingest_index_file_path(idx, fb, path, sizeof(path)), 0);
    assert_int_equal(ingest_index_batch_landed(idx, "dev1", "b-0001"), 1);
    uint64_t fc = 0;
    assert_int_equal(ingest_index_add_file(idx, "dev1/c.bin", &ib, &fc), 0);
    assert_int_equal(fc, 3); /* the counter survived */

    ingest_index_stats s;
    problems p = { 0 };
    assert_int_equal(ingest_index_forget_chunk(idx, id), 0);
    assert_int_equal(ingest_index_find(idx, id, &loc), INGEST_ENOTFOUND);
    assert_int_equal(ingest_index_forget_chunk(idx, id), INGEST_ENOTFOUND);
    /* c.bin was recorded with b.bin's identity and does not exist: stale. */
    assert_int_equal(ingest_index_check(idx, problem_cb, &p, &s), 0);
    assert_int_equal(s.chunks, 3);
    assert_int_equal(s.files, 3);
    assert_int_equal(s.batches, 1);
    assert_int_equal(s.bad, 0);
    assert_int_equal(s.stale, 1);
    assert_int_equal(p.n, 1);
    assert_non_null(strstr(p.last, "c.bin"));
    ingest_index_close(idx);
    ingest_store_close(st);
}

/* ---- many inserts, bounded private memory ---- */

static void test_many_inserts_memory(void **state)
{
    fixture *f = *state;
    const bool quick = env_on("INGEST_TEST_QUICK");
    const uint64_t n = quick ? 10000 : env_on("INGEST_TEST_FULL") ? 1000000 : 200000;
    ingest_store *st = NULL;
    ingest_index *idx = NULL;
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_loc loc;
    long peak = rss_anon_kib();

    assert_int_equal(ingest_store_open(f->ctx, f->state, &nosync_opts, &st), 0);
    assert_int_equal(ingest_index_open(st, f->bronze, &idx), 0);
    for (uint64_t i = 0; i < n; i++) {
        make_id(i, id);
        const ingest_chunk_loc l = { 1 + i / 100, (i % 100) * 65536, 65536 };
        assert_int_equal(ingest_index_add_chunk(idx, id, &l), 0);
        if (i % 5000 == 0) {
            const long r = rss_anon_kib();
            if (r > peak)
                peak = r;
        }
    }
    assert_int_equal(ingest_store_commit(st), 0);
    for (uint64_t i = 0; i < n; i += 997) {
        make_id(i, id);
        assert_int_equal(ingest_index_find(idx, id, &loc), 0);
        assert_int_equal(loc.file_no, 1 + i / 100);
        assert_int_equal(loc.offset, (i % 100) * 65536);
    }
    make_id(n + 5, id);
    assert_int_equal(ingest_index_find(idx, id, &loc), INGEST_ENOTFOUND);
    const long r = rss_anon_kib();
    if (r > peak)
        peak = r;
    print_message("index: %llu inserts, peak RssAnon %ld KiB\n", (unsigned long long)n, peak);
    if (!quick && !UNDER_SANITIZER)
        assert_true(peak < 16 * 1024);
    ingest_index_close(idx);
    ingest_store_close(st);
}

/* ---- kill -9 mid-transaction loses only that transaction ---- */

#define KILL_BATCHES 5
#define KILL_PER_BATCH 400

static void test_kill_mid_transaction(void **state)
{
    fixture *f = *state;
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ingest_ctx *ctx = ingest_ctx_create(NULL);
        ingest_store *st = NULL;
        ingest_index *idx = NULL;
        ingest_store_opts o = small_opts;
        uint8_t id[INGEST_ID_BYTES];
        o.txn_max_writes = 100000; /* no auto-commit: one open transaction at the end */
        if (ctx == NULL || ingest_store_open(ctx, f->state, &o, &st) != 0 || ingest_index_open(st, f->bronze, &idx) != 0)
            _exit(3);
        uint64_t i = 0;
        for (int b = 0; b < KILL_BATCHES; b++) {
            for (int k = 0; k < KILL_PER_BATCH; k++, i++) {
                make_id(i, id);
                const ingest_chunk_loc l = { 1, i * 10, 10 };
                if (ingest_index_add_chunk(idx, id, &l) != 0)
                    _exit(4);
            }
            if (ingest_store_commit(st) != 0)
                _exit(5);
        }
        for (int k = 0; k < 5000; k++, i++) {
            make_id(i, id);
            const ingest_chunk_loc l = { 1, i * 10, 10 };
            if (ingest_index_add_chunk(idx, id, &l) != 0)
                _exit(6);
        }
        raise(SIGKILL);
        _exit(7);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);

    ingest_store *st = NULL;
    ingest_index *idx = NULL;
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_loc loc;
    ingest_index_stats s;
    assert_int_equal(ingest_store_open(f->ctx, f->state, &small_opts, &st), 0);
    assert_int_equal(ingest_index_open(st, f->bronze, &idx), 0);
    const uint64_t committed = KILL_BATCHES * KILL_PER_BATCH;
    for (uint64_t i = 0; i < committed + 5000; i++) {
        make_id(i, id);
        const int rc = ingest_index_find(idx, id, &loc);
        if (i < committed) {
            assert_int_equal(rc, 0);
            assert_int_equal(loc.offset, i * 10);
        } else {
            assert_int_equal(rc, INGEST_ENOTFOUND);
        }
    }
    assert_int_equal(ingest_index_check(idx, NULL, NULL, &s), 0);
    assert_int_equal(s.chunks, committed);
    /* Writing again after the crash works (the writer lock was recovered). */
    make_id(1u << 30, id);
    const ingest_chunk_loc l = { 1, 0, 10 };
    assert_int_equal(ingest_index_add_chunk(idx, id, &l), 0);
    assert_int_equal(ingest_store_commit(st), 0);
    ingest_index_close(idx);
    ingest_store_close(st);
}

/* ---- rebuild from manifests ---- */

#define M_FILES 3

static void write_manifest(const fixture *f, const char *device, const char *batch, const char *const *landed,
                           const size_t *sizes, const int64_t *mtimes, size_t nfiles, uint64_t id_base)
{
    ingest_manifest_writer *w = NULL;
    ingest_manifest_rec rec;
    ingest_manifest_chunk chunks[8];
    uint64_t total = 0;
    for (size_t i = 0; i < nfiles; i++)
        total += sizes[i];
    assert_int_equal(ingest_manifest_writer_create(f->ctx, &w), 0);
    memset(&rec, 0, sizeof(rec));
    rec.type = INGEST_MREC_HEADER;
    rec.format = INGEST_MANIFEST_FORMAT;
    rec.device = device;
    rec.batch = batch;
    rec.nfiles = nfiles;
    rec.total_bytes = total;
    rec.created_ns = 1700000000000000000ll;
    assert_int_equal(ingest_manifest_writer_add(w, &rec), 0);
    for (size_t i = 0; i < nfiles; i++) {
        /* Chunks of at most 1000 bytes. */
        uint32_t nc = 0;
        for (size_t off = 0; off < sizes[i]; off += 1000, nc++) {
            make_id(id_base + i * 16 + nc, chunks[nc].id);
            chunks[nc].len = (uint32_t)(sizes[i] - off < 1000 ? sizes[i] - off : 1000);
        }
        memset(&rec, 0, sizeof(rec));
        rec.type = INGEST_MREC_FILE;
        rec.path = landed[i];
        rec.landed = landed[i];
        rec.size = sizes[i];
        rec.mtime_ns = mtimes[i];
        rec.mode = 0644;
        rec.version = 1;
        rec.chunks = chunks;
        rec.nchunks = nc;
        rec.nchunks_total = nc;
        assert_int_equal(ingest_manifest_writer_add(w, &rec), 0);
    }
    assert_int_equal(ingest_manifest_writer_finish(w), 0);
    size_t len = 0;
    const void *data = ingest_manifest_writer_data(w, &len);
    char path[512];
    snprintf(path, sizeof(path), "%s/_manifests/%s", f->bronze, device);
    char top[512];
    snprintf(top, sizeof(top), "%s/_manifests", f->bronze);
    mkdir(top, 0700);
    mkdir(path, 0700);
    snprintf(path, sizeof(path), "%s/_manifests/%s/%s.jsonl", f->bronze, device, batch);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
    ingest_manifest_writer_destroy(w);
}

/* Two batches of landed files, a stale file, a malformed manifest. */
static void make_bronze(const fixture *f)
{
    const char *const l1[M_FILES] = { "dev1/x/one.csv", "dev1/x/two.csv", "dev1/gone.csv" };
    const size_t s1[M_FILES] = { 2500, 1000, 300 };
    const int64_t m1[M_FILES] = { 1700000000000000001ll, 1700000000000000002ll, 1700000000000000003ll };
    const char *const l2[2] = { "dev2/three.csv", "dev1/x/one.v2.csv" };
    const size_t s2[2] = { 1500, 10 };
    const int64_t m2[2] = { 1700000000000000004ll, 1700000000000000005ll };
    for (size_t i = 0; i < M_FILES; i++)
        write_file(f, l1[i], s1[i], m1[i], NULL);
    for (size_t i = 0; i < 2; i++)
        write_file(f, l2[i], s2[i], m2[i], NULL);
    write_manifest(f, "dev1", "b-0001", l1, s1, m1, M_FILES, 1000);
    write_manifest(f, "dev2", "b-0001", l2, s2, m2, 2, 2000);
    /* dev1/gone.csv changed downstream since it landed. */
    write_file(f, "dev1/gone.csv", 301, m1[2], NULL);
    /* A malformed manifest: counted, skipped. */
    char path[512];
    snprintf(path, sizeof(path), "%s/_manifests/dev1/b-0002.jsonl", f->bronze);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fputs("{\"type\":\"header\",\"format\":2,\n", fp);
    fclose(fp);
}

static void expect_rebuilt(const fixture *f, ingest_index *idx)
{
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_loc loc;
    char path[512], want[512];
    /* one.csv: 3 chunks at 0, 1000, 2000. */
    make_id(1000 + 2, id);
    assert_int_equal(ingest_index_find(idx, id, &loc), 0);
    assert_int_equal(loc.offset, 2000);
    assert_int_equal(loc.length, 500);
    assert_int_equal(ingest_index_file_path(idx, loc.file_no, path, sizeof(path)), 0);
    snprintf(want, sizeof(want), "%s/dev1/x/one.csv", f->bronze);
    assert_string_equal(path, want);
    /* three.csv of dev2. */
    make_id(2000 + 1, id);
    assert_int_equal(ingest_index_find(idx, id, &loc), 0);
    assert_int_equal(loc.offset, 1000);
    assert_int_equal(ingest_index_file_path(idx, loc.file_no, path, sizeof(path)), 0);
    snprintf(want, sizeof(want), "%s/dev2/three.csv", f->bronze);
    assert_string_equal(path, want);
    /* gone.csv changed: left out. */
    make_id(1000 + 2 * 16, id);
    assert_int_equal(ingest_index_find(idx, id, &loc), INGEST_ENOTFOUND);
    assert_int_equal(ingest_index_batch_landed(idx, "dev1", "b-0001"), 1);
    assert_int_equal(ingest_index_batch_landed(idx, "dev2", "b-0001"), 1);
    assert_int_equal(ingest_index_batch_landed(idx, "dev1", "b-0002"), 0);
    assert_int_equal(ingest_index_rebuild_needed(idx), 0);
}

static void log_cb(void *ud, int level, const char *msg)
{
    (void)ud;
    print_message("log %d: %s\n", level, msg);
}

static void rebuild_and_expect(const fixture *f)
{
    if (env_on("INGEST_TEST_VERBOSE"))
        ingest_ctx_set_log(f->ctx, log_cb, NULL, INGEST_LOG_INFO);
    ingest_store *st = NULL;
    ingest_index *idx = NULL;
    ingest_index_stats s;
    problems p = { 0 };
    int rc = ingest_store_open(f->ctx, f->state, &small_opts, &st);
    if (rc == INGEST_ECORRUPT || rc == INGEST_EVERSION) {
        assert_int_equal(ingest_store_wipe(f->ctx, f->state), 0);
        rc = ingest_store_open(f->ctx, f->state, &small_opts, &st);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(ingest_index_open(st, f->bronze, &idx), 0);
    assert_int_equal(ingest_index_rebuild_needed(idx), 1);
    assert_int_equal(ingest_index_rebuild(idx, &s), 0);
    assert_int_equal(s.files, 4);      /* one, two, three, one.v2 */
    assert_int_equal(s.chunks, 3 + 1 + 2 + 1);
    assert_int_equal(s.batches, 2);
    assert_int_equal(s.bad, 1);        /* b-0002.jsonl */
    assert_int_equal(s.stale, 1);      /* gone.csv */
    expect_rebuilt(f, idx);
    assert_int_equal(ingest_index_check(idx, problem_cb, &p, &s), 0);
    assert_int_equal(s.bad + s.stale, 0);
    assert_int_equal(p.n, 0);
    ingest_index_close(idx);
    ingest_store_close(st);
}

static void test_rebuild_deleted_and_corrupt(void **state)
{
    fixture *f = *state;
    make_bronze(f);
    rebuild_and_expect(f);

    /* Reopen: no rebuild needed, the entries are there. */
    ingest_store *st = NULL;
    ingest_index *idx = NULL;
    assert_int_equal(ingest_store_open(f->ctx, f->state, &small_opts, &st), 0);
    assert_int_equal(ingest_index_open(st, f->bronze, &idx), 0);
    expect_rebuilt(f, idx);
    ingest_index_close(idx);
    ingest_store_close(st);

    /* The index deleted: a new empty store says it needs a rebuild. */
    nftw(f->state, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    rebuild_and_expect(f);

    /* data.mdb overwritten with garbage: ECORRUPT, wipe, rebuild. */
    char path[512];
    snprintf(path, sizeof(path), "%s/data.mdb", f->state);
    const int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    char junk[8192];
    memset(junk, 0x5a, sizeof(junk));
    assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    close(fd);
    st = NULL;
    assert_int_equal(ingest_store_open(f->ctx, f->state, &small_opts, &st), INGEST_ECORRUPT);
    assert_null(st);
    rebuild_and_expect(f);
}

/* ---- dedup scope ---- */

/* The lookup rule: fleet scope finds any device's entry; device scope only the asking device's own. */
static void test_dedup_scope(void **state)
{
    fixture *f = *state;
    ingest_store *st = NULL;
    ingest_index *idx = NULL;
    ingest_file_identity ia;
    uint64_t fa = 0;
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_loc got;
    ingest_index_stats s;
    problems p = { 0 };

    assert_int_equal(ingest_store_open(f->ctx, f->state, &small_opts, &st), 0);
    assert_int_equal(ingest_index_open(st, f->bronze, &idx), 0);
    assert_int_equal(ingest_index_scope(idx), INGEST_DEDUP_FLEET); /* a new index */
    write_file(f, "dev1/a.bin", 1000, 1700000000000000001ll, &ia);
    assert_int_equal(ingest_index_add_file(idx, "dev1/a.bin", &ia, &fa), 0);
    make_id(1, id);
    const ingest_chunk_loc l1 = { fa, 0, 100 }, l2 = { fa, 100, 100 };

    /* fleet: one entry per id, whoever landed it, found by every device */
    assert_int_equal(ingest_index_add_chunk_for(idx, "dev1", id, &l1), 0);
    assert_int_equal(ingest_index_find_for(idx, "dev2", id, &got), 0);
    assert_int_equal(got.file_no, fa);
    assert_int_equal(ingest_index_find(idx, id, &got), 0);

    /* to device scope: the fleet entries go, a rebuild is due */
    assert_int_equal(ingest_index_set_scope(idx, INGEST_DEDUP_DEVICE), 1);
    assert_int_equal(ingest_index_set_scope(idx, INGEST_DEDUP_DEVICE), 0);
    assert_int_equal(ingest_index_set_scope(idx, 7), INGEST_EINVAL);
    assert_int_equal(ingest_index_scope(idx), INGEST_DEDUP_DEVICE);
    assert_int_equal(ingest_index_rebuild_needed(idx), 1);
    assert_int_equal(ingest_index_find_for(idx, "dev1", id, &got), INGEST_ENOTFOUND);

    /* a device finds what it landed, and nothing another device landed */
    assert_int_equal(ingest_index_add_chunk_for(idx, "dev1", id, &l1), 0);
    assert_int_equal(ingest_index_find_for(idx, "dev1", id, &got), 0);
    assert_int_equal(got.offset, 0);
    assert_int_equal(ingest_index_find_for(idx, "dev2", id, &got), INGEST_ENOTFOUND);
    assert_int_equal(ingest_index_find_for(idx, "dev", id, &got), INGEST_ENOTFOUND);
    assert_int_equal(ingest_index_find_for(idx, "dev10", id, &got), INGEST_ENOTFOUND);
    /* without a device name there is no answer */
    assert_int_equal(ingest_index_find(idx, id, &got), INGEST_EINVAL);
    assert_int_equal(ingest_index_find_for(idx, "", id, &got), INGEST_EINVAL);
    assert_int_equal(ingest_index_add_chunk(idx, id, &l1), INGEST_EINVAL);
    assert_int_equal(ingest_index_forget_chunk(idx, id), INGEST_EINVAL);
    /* dev2 landing the same id has an entry of its own; forgetting it leaves dev1's */
    assert_int_equal(ingest_index_add_chunk_for(idx, "dev2", id, &l2), 0);
    assert_int_equal(ingest_index_find_for(idx, "dev2", id, &got), 0);
    assert_int_equal(got.offset, 100);
    assert_int_equal(ingest_index_find_for(idx, "dev1", id, &got), 0);
    assert_int_equal(got.offset, 0);
    assert_int_equal(ingest_index_forget_chunk_for(idx, "dev2", id), 0);
    assert_int_equal(ingest_index_find_for(idx, "dev2", id, &got), INGEST_ENOTFOUND);
    assert_int_equal(ingest_index_find_for(idx, "dev1", id, &got), 0);
    assert_int_equal(ingest_index_check(idx, problem_cb, &p, &s), 0);
    assert_int_equal(s.chunks, 1);
    assert_int_equal(s.bad + s.stale, 0);
    ingest_index_close(idx);
    ingest_store_close(st);

    /* the scope is the index's format: kept across a reopen, read-only too */
    const ingest_store_opts ro = { .flags = INGEST_STORE_RDONLY };
    assert_int_equal(ingest_store_open(f->ctx, f->state, &ro, &st), 0);
    assert_int_equal(ingest_index_open(st, f->bronze, &idx), 0);
    assert_int_equal(ingest_index_scope(idx), INGEST_DEDUP_DEVICE);
    assert_int_equal(ingest_index_find_for(idx, "dev1", id, &got), 0);
    assert_int_equal(ingest_index_find_for(idx, "dev2", id, &got), INGEST_ENOTFOUND);
    assert_int_equal(ingest_index_set_scope(idx, INGEST_DEDUP_FLEET), INGEST_EINVAL);
    assert_int_equal(ingest_index_check(idx, problem_cb, &p, &s), 0);
    assert_int_equal(s.bad, 0);
    assert_int_equal(p.n, 0);
    ingest_index_close(idx);
    ingest_store_close(st);

    /* back to fleet: the device-keyed entries go too (never a mix) */
    assert_int_equal(ingest_store_open(f->ctx, f->state, &small_opts, &st), 0);
    assert_int_equal(ingest_index_open(st, f->bronze, &idx), 0);
    assert_int_equal(ingest_index_set_scope(idx, INGEST_DEDUP_FLEET), 1);
    assert_int_equal(ingest_index_scope(idx), INGEST_DEDUP_FLEET);
    assert_int_equal(ingest_index_find_for(idx, "dev1", id, &got), INGEST_ENOTFOUND);
    assert_int_equal(ingest_index_check(idx, problem_cb, &p, &s), 0);
    assert_int_equal(s.chunks, 0);
    ingest_index_close(idx);
    ingest_store_close(st);
}

/* A rebuild in device scope keys each manifest's chunks by the device its header names. */
static void test_dedup_scope_rebuild(void **state)
{
    fixture *f = *state;
    ingest_store *st = NULL;
    ingest_index *idx = NULL;
    ingest_index_stats s;
    problems p = { 0 };
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_loc loc;
    char path[512];
    make_bronze(f);
    assert_int_equal(ingest_store_open(f->ctx, f->state, &small_opts, &st), 0);
    assert_int_equal(ingest_index_open(st, f->bronze, &idx), 0);
    assert_int_equal(ingest_index_set_scope(idx, INGEST_DEDUP_DEVICE), 1);
    assert_int_equal(ingest_index_rebuild(idx, &s), 0);
    assert_int_equal(s.files, 4);
    assert_int_equal(s.chunks, 3 + 1 + 2 + 1);
    assert_int_equal(s.bad, 1);
    assert_int_equal(s.stale, 1);
    assert_int_equal(ingest_index_rebuild_needed(idx), 0);
    make_id(1000 + 2, id); /* dev1's one.csv */
    assert_int_equal(ingest_index_find_for(idx, "dev1", id, &loc), 0);
    assert_int_equal(loc.offset, 2000);
    assert_int_equal(ingest_index_file_path(idx, loc.file_no, path, sizeof(path)), 0);
    assert_int_equal(ingest_index_find_for(idx, "dev2", id, &loc), INGEST_ENOTFOUND);
    make_id(2000 + 1, id); /* dev2's three.csv */
    assert_int_equal(ingest_index_find_for(idx, "dev2", id, &loc), 0);
    assert_int_equal(loc.offset, 1000);
    assert_int_equal(ingest_index_find_for(idx, "dev1", id, &loc), INGEST_ENOTFOUND);
    assert_int_equal(ingest_index_check(idx, problem_cb, &p, &s), 0);
    assert_int_equal(s.bad + s.stale, 0);
    assert_int_equal(p.n, 0);
    /* and back: the fleet rebuild answers every device */
    assert_int_equal(ingest_index_set_scope(idx, INGEST_DEDUP_FLEET), 1);
    assert_int_equal(ingest_index_rebuild(idx, &s), 0);
    expect_rebuilt(f, idx);
    assert_int_equal(ingest_index_find_for(idx, "dev2", id, &loc), 0);
    ingest_index_close(idx);
    ingest_store_close(st);
}

/* ---- stale entries ---- */

static void test_stale_detected(void **state)
{
    fixture *f = *state;
    ingest_store *st = NULL;
    ingest_index *idx = NULL;
    ingest_file_identity ident[3];
    uint64_t no[3];
    char path[512];
    const char *const names[3] = { "a", "b", "c" };
    uint8_t id[INGEST_ID_BYTES];
    ingest_index_stats s;
    problems p = { 0 };

    assert_int_equal(ingest_store_open(f->ctx, f->state, &small_opts, &st), 0);
    assert_int_equal(ingest_index_open(st, f->bronze, &idx), 0);
    for (int i = 0; i < 3; i++) {
        write_file(f, names[i], 100, 1600000000000000000ll + i, &ident[i]);
        assert_int_equal(ingest_index_add_file(idx, names[i], &ident[i], &no[i]), 0);
        make_id((uint64_t)i, id);
        const ingest_chunk_loc l = { no[i], 0, 100 };
        assert_int_equal(ingest_index_add_chunk(idx, id, &l), 0);
        assert_int_equal(ingest_index_file_path(idx, no[i], path, sizeof(path)), 0);
    }
    assert_int_equal(ingest_index_check(idx, problem_cb, &p, &s), 0);
    assert_int_equal(s.stale + s.bad, 0);

    write_file(f, "a", 120, 1600000000000000000ll, NULL);      /* size changed */
    write_file(f, "b", 100, 1600000000000000999ll, NULL);      /* mtime changed */
    snprintf(path, sizeof(path), "%s/c", f->bronze);
    assert_int_equal(unlink(path), 0);                          /* deleted */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ingest_index_file_path(idx, no[i], path, sizeof(path)), INGEST_ESTALE);
        assert_string_equal(path, "");
    }
    assert_non_null(strstr(ingest_ctx_errmsg(f->ctx), "missing"));
    memset(&p, 0, sizeof(p));
    assert_int_equal(ingest_index_check(idx, problem_cb, &p, &s), 0);
    assert_int_equal(s.files, 3);
    assert_int_equal(s.chunks, 3);
    assert_int_equal(s.stale, 6); /* three files and their three chunks */
    assert_int_equal(s.bad, 0);
    assert_int_equal(p.stale_lines, 6);

    /* The same path landed again replaces the record; the old chunk is stale. */
    write_file(f, "a", 50, 1600000000000000050ll, &ident[0]);
    uint64_t again = 0;
    assert_int_equal(ingest_index_add_file(idx, "a", &ident[0], &again), 0);
    assert_true(again > no[2]);
    assert_int_equal(ingest_index_file_path(idx, again, path, sizeof(path)), 0);
    assert_int_equal(ingest_index_file_path(idx, no[0], path, sizeof(path)), INGEST_ESTALE);
    memset(&p, 0, sizeof(p));
    assert_int_equal(ingest_index_check(idx, problem_cb, &p, &s), 0);
    assert_int_equal(s.files, 3);
    assert_int_equal(s.stale, 5); /* b, c and their chunks, plus a's old chunk */
    ingest_index_close(idx);
    ingest_store_close(st);
}

/* ---- malformed stored values ---- */

static void test_malformed_values(void **state)
{
    fixture *f = *state;
    ingest_store *st = NULL;
    ingest_index *idx = NULL;
    ingest__dbi chunks, files, meta;
    uint8_t id[INGEST_ID_BYTES], key[8];
    ingest_chunk_loc loc;
    ingest_index_stats s;
    problems p = { 0 };
    char path[256];

    assert_int_equal(ingest_store_open(f->ctx, f->state, &small_opts, &st), 0);
    assert_int_equal(ingest_index_open(st, f->bronze, &idx), 0);
    assert_int_equal(ingest__store_db(st, "chunks", &chunks), 0);
    assert_int_equal(ingest__store_db(st, "files", &files), 0);
    make_id(1, id);
    assert_int_equal(ingest__store_put(st, chunks, id, sizeof(id), "garbage", 7), 0);
    make_id(2, id);
    uint8_t v[21] = { 9 }; /* wrong version byte */
    assert_int_equal(ingest__store_put(st, chunks, id, sizeof(id), v, sizeof(v)), 0);
    ingest__put_be64(key, 5);
    assert_int_equal(ingest__store_put(st, files, key, 8, "\x01short", 6), 0);
    assert_int_equal(ingest_store_commit(st), 0);

    make_id(1, id);
    assert_int_equal(ingest_index_find(idx, id, &loc), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(f->ctx), "malformed value (7 bytes)"));
    make_id(2, id);
    assert_int_equal(ingest_index_find(idx, id, &loc), INGEST_ECORRUPT);
    assert_int_equal(ingest_index_file_path(idx, 5, path, sizeof(path)), INGEST_ECORRUPT);
    assert_int_equal(ingest_index_check(idx, problem_cb, &p, &s), 0);
    assert_int_equal(s.bad, 3);
    assert_int_equal(p.bad_lines, 3);

    /* A bad next-file counter: ECORRUPT at open. */
    ingest_index_close(idx);
    idx = NULL;
    assert_int_equal(ingest__store_db(st, "meta", &meta), 0);
    assert_int_equal(ingest__store_put(st, meta, "index.next_file", 15, "x", 1), 0);
    assert_int_equal(ingest_store_commit(st), 0);
    assert_int_equal(ingest_index_open(st, f->bronze, &idx), INGEST_ECORRUPT);
    assert_null(idx);
    ingest_store_close(st);
}

/* ---- have-cache ---- */

static void test_havecache(void **state)
{
    fixture *f = *state;
    ingest_store *st = NULL;
    ingest_havecache *hc = NULL;
    uint8_t id[INGEST_ID_BYTES];

    assert_int_equal(ingest_store_open(f->ctx, f->state, &small_opts, &st), 0);
    assert_int_equal(ingest_havecache_open(st, 0, &hc), INGEST_EINVAL);
    assert_int_equal(ingest_havecache_open(st, 5, &hc), 0);
    for (uint64_t i = 0; i < 5; i++) {
        make_id(i, id);
        assert_int_equal(ingest_havecache_has(hc, id), 0);
        assert_int_equal(ingest_havecache_add(hc, id), 0);
        assert_int_equal(ingest_havecache_has(hc, id), 1);
    }
    assert_int_equal(ingest_havecache_count(hc), 5);
    /* Refresh 0: now 1 is the oldest. */
    make_id(0, id);
    assert_int_equal(ingest_havecache_add(hc, id), 0);
    assert_int_equal(ingest_havecache_count(hc), 5);
    make_id(5, id);
    assert_int_equal(ingest_havecache_add(hc, id), 0);
    assert_int_equal(ingest_havecache_count(hc), 5);
    make_id(1, id);
    assert_int_equal(ingest_havecache_has(hc, id), 0);
    make_id(0, id);
    assert_int_equal(ingest_havecache_has(hc, id), 1);
    make_id(6, id);
    assert_int_equal(ingest_havecache_add(hc, id), 0);
    make_id(2, id);
    assert_int_equal(ingest_havecache_has(hc, id), 0);
    assert_int_equal(ingest_havecache_count(hc), 5);
    ingest_havecache_close(hc);
    ingest_store_close(st);

    /* Reopen with a smaller bound: the next add prunes down to it, oldest first. */
    st = NULL;
    hc = NULL;
    assert_int_equal(ingest_store_open(f->ctx, f->state, &small_opts, &st), 0);
    assert_int_equal(ingest_havecache_open(st, 2, &hc), 0);
    assert_int_equal(ingest_havecache_count(hc), 5);
    make_id(7, id);
    assert_int_equal(ingest_havecache_add(hc, id), 0);
    assert_int_equal(ingest_havecache_count(hc), 2);
    make_id(6, id);
    assert_int_equal(ingest_havecache_has(hc, id), 1);
    make_id(7, id);
    assert_int_equal(ingest_havecache_has(hc, id), 1);
    for (uint64_t i = 0; i < 6; i++) {
        make_id(i, id);
        assert_int_equal(ingest_havecache_has(hc, id), 0);
    }
    ingest_havecache_close(hc);
    ingest_havecache_close(NULL);
    ingest_store_close(st);
}

/* ---- allocation failure ---- */

typedef struct failing {
    long countdown;
} failing;

static void *fail_alloc(void *opaque, size_t size)
{
    failing *fa = opaque;
    if (fa->countdown >= 0 && fa->countdown-- == 0)
        return NULL;
    return test_malloc(size);
}

static void fail_free(void *opaque, void *p)
{
    (void)opaque;
    test_free(p);
}

/* Every public operation once; returns the first failure. */
static int all_ops(const fixture *f, ingest_ctx *ctx)
{
    ingest_store *st = NULL;
    ingest_index *idx = NULL;
    ingest_havecache *hc = NULL;
    ingest_index_stats s;
    ingest_file_identity ident;
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_loc loc;
    char path[512];
    uint64_t no = 0;
    int rc;
    write_file(f, "dev1/x/one.csv", 2500, 1700000000000000001ll, &ident);
    if ((rc = ingest_store_open(ctx, f->state, &nosync_opts, &st)) < 0)
        goto out;
    if ((rc = ingest_index_open(st, f->bronze, &idx)) < 0)
        goto out;
    if ((rc = ingest_index_rebuild(idx, &s)) < 0)
        goto out;
    if ((rc = ingest_index_add_file(idx, "dev1/x/one.csv", &ident, &no)) < 0)
        goto out;
    make_id(424242, id);
    const ingest_chunk_loc l = { no, 0, 10 };
    if ((rc = ingest_index_add_chunk(idx, id, &l)) < 0 || (rc = ingest_index_find(idx, id, &loc)) < 0 ||
        (rc = ingest_index_file_path(idx, no, path, sizeof(path))) < 0 ||
        (rc = ingest_index_batch_mark(idx, "d", "b")) < 0 || (rc = ingest_index_check(idx, NULL, NULL, &s)) < 0)
        goto out;
    if ((rc = ingest_havecache_open(st, 2, &hc)) < 0 || (rc = ingest_havecache_add(hc, id)) < 0)
        goto out;
    for (uint64_t i = 0; i < 3; i++) {
        make_id(i, id);
        if ((rc = ingest_havecache_add(hc, id)) < 0)
            goto out;
    }
    rc = ingest_havecache_has(hc, id) == 1 ? 0 : INGEST_EIO;
out:
    ingest_havecache_close(hc);
    ingest_index_close(idx);
    ingest_store_close(st);
    return rc;
}

static void test_alloc_failure(void **state)
{
    fixture *f = *state;
    make_bronze(f);
    bool done = false;
    long n;
    for (n = 0; n < 2000 && !done; n++) {
        failing fa = { -1 };
        const ingest_allocator a = { fail_alloc, fail_free, &fa };
        ingest_ctx *ctx = ingest_ctx_create(&a);
        assert_non_null(ctx);
        nftw(f->state, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
        fa.countdown = n;
        const int rc = all_ops(f, ctx);
        if (rc == 0)
            done = true;
        else if (rc != INGEST_ENOMEM)
            fail_msg("allocation %ld failed: %s (%s)", n, ingest_strerror(rc), ingest_ctx_errmsg(ctx));
        ingest_ctx_destroy(ctx);
    }
    assert_true(done);
    assert_true(n > 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_inserts_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill_mid_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rebuild_deleted_and_corrupt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dedup_scope, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dedup_scope_rebuild, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_detected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_havecache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alloc_failure, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
