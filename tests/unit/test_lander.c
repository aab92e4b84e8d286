/* The landing engine: manifests in, bronze files + manifests + index out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ingest/codec.h"
#include "ingest/hash.h"
#include "ingest/index.h"
#include "ingest/lander.h"
#include "ingest/manifest.h"
#include "store.h" /* the store probe takes its write lock from another process */
#include "core/lander_syncs.h" /* landers counting their syncfs calls together, as a core's do */
#include "core/lander_hook.h" /* the smallest file written with O_DIRECT */

#define CH 4096 /* fixed-size chunking of the tests */
#define MAXCH 256

typedef struct tfile {
    const char *path;
    const uint8_t *data;
    size_t len;
    int64_t mtime_ns;
    uint32_t mode;
} tfile;

typedef struct tbatch {
    uint8_t *manifest;
    size_t mlen;
    uint32_t nchunks;
    const uint8_t *cdata[MAXCH];
    uint32_t clen[MAXCH];
} tbatch;

typedef struct env {
    char dir[64];
    char bronze[96];
    char state[96];
    ingest_ctx *ctx;
    ingest_store *st;
    ingest_index *idx;
    ingest_codec *codec;
    ingest_lander *l;
    const uint8_t *key;
} env;

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static int setup(void **state)
{
    env *e = calloc(1, sizeof *e);
    assert_non_null(e);
    snprintf(e->dir, sizeof e->dir, "/tmp/test-lander-XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    snprintf(e->bronze, sizeof e->bronze, "%s/bronze", e->dir);
    snprintf(e->state, sizeof e->state, "%s/state", e->dir);
    assert_int_equal(mkdir(e->bronze, 0755), 0);
    e->ctx = ingest_ctx_create(NULL);
    assert_non_null(e->ctx);
    const ingest_store_opts o = {.map_size = 1ull << 28};
    assert_int_equal(ingest_store_open(e->ctx, e->state, &o, &e->st), 0);
    assert_int_equal(ingest_index_open(e->st, e->bronze, &e->idx), 0);
    assert_int_equal(ingest_codec_create(e->ctx, 1, &e->codec), 0);
    e->key = ingest_default_dedup_key();
    assert_int_equal(ingest_lander_create(e->ctx, e->st, e->idx, e->bronze, NULL, e->key, e->codec, &e->l), 0);
    /* every test lands files of 4 KiB or more with O_DIRECT (smaller ones through the cache; the
     * receiver's lander from 256 KiB), so small test files take that path; INGEST_TEST_BUFFERED=1 runs
     * them all through the cache */
    const char *buffered = getenv("INGEST_TEST_BUFFERED");
    assert_int_equal(ingest_lander_set_direct_io(e->l, !(buffered && buffered[0] == '1')), 0);
    ingest__lander_set_dio_min(e->l, 4096);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    env *e = *state;
    ingest_lander_destroy(e->l);
    ingest_codec_destroy(e->codec);
    ingest_index_close(e->idx);
    ingest_store_close(e->st);
    ingest_ctx_destroy(e->ctx);
    nftw(e->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    free(e);
    return 0;
}

/* Chunk lengths for make_batch_cuts: cuts[k] is the length of chunk k of every file (then CH). */
static const uint32_t *g_cuts;
static size_t g_ncuts;
/* Pushed files (docs/protocol.md "Pushed chunks"): files of at most g_push bytes are listed without
 * chunk ids nor hash; the header then has the digest unless g_no_digest. */
static uint32_t g_push;
static int g_no_digest;

/* Compose a device manifest for files (fixed-size chunks, or g_cuts). */
static void make_batch(env *e, const char *device, const char *batch, const tfile *f, size_t n, tbatch *tb)
{
    ingest_manifest_writer *w = NULL;
    assert_int_equal(ingest_manifest_writer_create(e->ctx, &w), 0);
    ingest_manifest_rec rec;
    memset(&rec, 0, sizeof rec);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += f[i].len;
    rec.type = INGEST_MREC_HEADER;
    rec.format = INGEST_MANIFEST_FORMAT;
    rec.device = device;
    rec.batch = batch;
    rec.nfiles = n;
    rec.total_bytes = total;
    rec.created_ns = 1;
    if (g_push > 0 && !g_no_digest) {
        ingest_filehash dg;
        ingest_filehash_init(&dg, e->key);
        for (size_t i = 0; i < n; i++) {
            uint8_t h[INGEST_ID_BYTES];
            ingest_filehash fh;
            ingest_filehash_init(&fh, e->key);
            for (size_t off = 0, cl; off < f[i].len; off += cl) {
                uint8_t id[INGEST_ID_BYTES];
                cl = f[i].len - off < CH ? f[i].len - off : CH;
                ingest_chunk_id(e->key, f[i].data + off, cl, id);
                ingest_filehash_update(&fh, id, INGEST_ID_BYTES);
            }
            ingest_filehash_final(&fh, h);
            ingest_manifest_digest_add(&dg, f[i].path, h);
        }
        ingest_filehash_final(&dg, rec.digest);
        rec.has_digest = 1;
    }
    assert_int_equal(ingest_manifest_writer_add(w, &rec), 0);
    memset(tb, 0, sizeof *tb);
    for (size_t i = 0; i < n; i++) {
        ingest_manifest_chunk ch[MAXCH];
        uint32_t nc = 0;
        for (size_t off = 0, cl; off < f[i].len; off += cl) {
            const size_t want = nc < g_ncuts ? g_cuts[nc] : CH;
            cl = f[i].len - off < want ? f[i].len - off : want;
            assert_true(nc < MAXCH && tb->nchunks < MAXCH);
            ingest_chunk_id(e->key, f[i].data + off, cl, ch[nc].id);
            ch[nc].len = (uint32_t)cl;
            tb->cdata[tb->nchunks] = f[i].data + off;
            tb->clen[tb->nchunks] = (uint32_t)cl;
            tb->nchunks++;
            nc++;
        }
        memset(&rec, 0, sizeof rec);
        rec.type = INGEST_MREC_FILE;
        rec.path = f[i].path;
        rec.size = f[i].len;
        rec.mtime_ns = f[i].mtime_ns;
        rec.mode = f[i].mode;
        ingest_filehash fh;
        ingest_filehash_init(&fh, e->key);
        for (uint32_t k = 0; k < nc; k++)
            ingest_filehash_update(&fh, ch[k].id, INGEST_ID_BYTES);
        ingest_filehash_final(&fh, rec.hash);
        rec.chunks = ch;
        rec.nchunks = nc;
        rec.nchunks_total = nc;
        if (g_push > 0 && f[i].len <= g_push) {
            rec.omit_hash = 1;
            rec.push_max = g_push;
        }
        assert_int_equal(ingest_manifest_writer_add(w, &rec), 0);
    }
    size_t len;
    const void *d = ingest_manifest_writer_data(w, &len);
    tb->manifest = malloc(len);
    assert_non_null(tb->manifest);
    memcpy(tb->manifest, d, len);
    tb->mlen = len;
    ingest_manifest_writer_destroy(w);
}

static int put(env *e, ingest_lander_batch *b, const tbatch *tb, uint32_t i)
{
    static uint8_t enc[4 * CH + 128];
    size_t el = 0;
    assert_true(ingest_codec_bound(tb->clen[i]) <= sizeof enc);
    assert_int_equal(ingest_codec_encode(e->codec, tb->cdata[i], tb->clen[i], enc, sizeof enc, &el), 0);
    return ingest_lander_put_chunk(b, i, enc, el);
}

/* Send every want and re-want, then commit. */
static void land_all(env *e, ingest_lander_batch *b, const tbatch *tb)
{
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(put(e, b, tb, w[k]), 0);
    for (;;) {
        int rc = ingest_lander_commit(b);
        if (rc == 0)
            break;
        assert_int_equal(rc, INGEST_EBUSY);
        ingest_lander_rewants(b, &w, &n);
        assert_true(n > 0);
        for (size_t k = 0; k < n; k++)
            assert_int_equal(put(e, b, tb, w[k]), 0);
    }
}

static uint8_t *pattern(size_t n, uint32_t seed)
{
    uint8_t *p = malloc(n ? n : 1);
    assert_non_null(p);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
    return p;
}

static void assert_file(const env *e, const char *rel, const uint8_t *data, size_t len, int64_t mtime_ns,
                        mode_t mode)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    struct stat sb;
    assert_int_equal(lstat(p, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    assert_int_equal((uint64_t)sb.st_size, len);
    assert_int_equal(sb.st_mode & 07777, mode);
    assert_int_equal((int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec, mtime_ns);
    FILE *fp = fopen(p, "rb");
    assert_non_null(fp);
    uint8_t *got = malloc(len + 1);
    assert_non_null(got);
    assert_int_equal(fread(got, 1, len + 1, fp), len);
    fclose(fp);
    if (len)
        assert_memory_equal(got, data, len);
    free(got);
}

/* Regular files under the bronze root outside _manifests (names in out, if any). */
static int count_cb_n;
static int count_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_F && strstr(p, "/_manifests/") == NULL)
        count_cb_n++;
    return 0;
}
static int count_files(const env *e)
{
    count_cb_n = 0;
    nftw(e->bronze, count_cb, 16, FTW_PHYS);
    return count_cb_n;
}

#define T2024 (1709251199ll * 1000000000ll + 123456789ll) /* 2024-02-29T23:59:59.123456789Z */

/*
 * Landed modes whatever the umask: 0644, or 0755 for a file executable at
 * the edge.  A file smaller than a block has its mode checked with the stat
 * at its end (open_tmp), a larger one right after it is created: both
 * kinds, under a umask that takes bits away.
 */
static void test_land_modes_under_umask(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(100, 5), *a2 = pattern(50, 7), *c = pattern(CH, 6), *c2 = pattern(5000, 8);
    const tfile f[] = {
        {"small.txt", a, 100, T2024, 0600},
        {"small.sh", a2, 50, T2024, 0700},
        {"empty.sh", a, 0, T2024, 0711},
        {"big.sh", c, CH, T2024 + 1, 0750},
        {"big.bin", c2, 5000, T2024 + 2, 0444},
    };
    tbatch tb;
    make_batch(e, "dev1", "m1", f, 5, &tb);
    const mode_t old = umask(077);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    land_all(e, b, &tb);
    ingest_lander_batch_destroy(b);
    umask(old);
    assert_file(e, "dev1/2024/02/29/small.txt", a, 100, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/small.sh", a2, 50, T2024, 0755);
    assert_file(e, "dev1/2024/02/29/empty.sh", a, 0, T2024, 0755);
    assert_file(e, "dev1/2024/02/29/big.sh", c, CH, T2024 + 1, 0755);
    assert_file(e, "dev1/2024/02/29/big.bin", c2, 5000, T2024 + 2, 0644);
    free(tb.manifest);
    free(a);
    free(a2);
    free(c);
    free(c2);
}

/*
 * A batch of many small files: whole files of one received chunk are made
 * by the small-file helper (lander_sf.c) while the landing thread makes
 * others.  Every file lands with its bytes, mtime and mode, repeats are
 * copied from a first copy the helper may be making, files of two chunks
 * and empty ones land the usual way, and the identities the helper read
 * index the files: a second batch of the same content copies every chunk,
 * none found stale.  With ids listed and with pushed chunks (ids from the
 * bytes, the hash found at landing and checked against the digest).
 */
#define SF_N 100
static void sf_begin(env *e, const tbatch *tb, ingest_lander_batch **b)
{
    assert_int_equal(ingest_lander_parse_ex(e->l, "dev1", tb->manifest, tb->mlen,
                                            g_push > 0 ? INGEST_LANDER_PARSE_PUSH : 0u, b), 0);
    assert_int_equal(ingest_lander_lookup(*b), 0);
}

static void small_files_case(env *e, const char *batch, const char *again)
{
    uint8_t *d[SF_N];
    size_t len[SF_N];
    char paths[SF_N][32], paths2[SF_N][32];
    tfile f[SF_N], f2[SF_N];
    static const size_t sizes[] = {1, 100, 900, 2047, 3000, CH - 1, CH};
    for (int k = 0; k < SF_N; k++) {
        len[k] = k == 50 ? 0 : k == 60 ? CH + 500 : k % 10 == 9 ? 900 : sizes[k % 7];
        d[k] = pattern(len[k], k % 10 == 9 ? 1000 : (uint32_t)(2000 + k + 131 * batch[1])); /* every tenth: a repeat */
        snprintf(paths[k], sizeof paths[k], "%s/d%d/f%03d", batch, k % 4, k);
        snprintf(paths2[k], sizeof paths2[k], "%s/d%d/f%03d", again, k % 4, k);
        f[k] = (tfile){paths[k], d[k], len[k], T2024 + k, k % 3 == 0 ? 0750u : 0640u};
        f2[k] = (tfile){paths2[k], d[k], len[k], T2024 + k, 0644u};
    }
    tbatch tb;
    make_batch(e, "dev1", batch, f, SF_N, &tb);
    const mode_t old = umask(077);
    ingest_lander_batch *b = NULL;
    sf_begin(e, &tb, &b);
    land_all(e, b, &tb);
    ingest_lander_stats st;
    ingest_lander_batch_stats(b, &st);
    assert_true(st.files_helped > 0); /* the helper made some (the landing thread the others) */
    assert_true(st.files_helped <= SF_N - 2); /* not the empty file, nor the one of two chunks */
    ingest_lander_batch_destroy(b);
    umask(old);
    free(tb.manifest);
    for (int k = 0; k < SF_N; k++) {
        char p[64];
        snprintf(p, sizeof p, "dev1/2024/02/29/%s", paths[k]);
        assert_file(e, p, d[k], len[k], T2024 + k, k % 3 == 0 ? 0755 : 0644);
    }
    /* the same bytes again: every chunk known, at the identity the helper read */
    make_batch(e, "dev1", again, f2, SF_N, &tb);
    sf_begin(e, &tb, &b);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    size_t pushed = 0; /* listed without ids: sent again (pushed files' chunks are never known) */
    for (int k = 0; k < SF_N; k++)
        pushed += len[k] > 0 && len[k] <= g_push;
    assert_int_equal(n, pushed);
    land_all(e, b, &tb);
    ingest_lander_batch_stats(b, &st);
    assert_int_equal(st.chunks_rewanted, 0);
    assert_int_equal(st.chunks_known, tb.nchunks - pushed); /* every other chunk (the empty file has none) */
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
    for (int k = 0; k < SF_N; k++) {
        char p[64];
        snprintf(p, sizeof p, "dev1/2024/02/29/%s", paths2[k]);
        assert_file(e, p, d[k], len[k], T2024 + k, 0644);
        free(d[k]);
    }
}

static void test_small_files_helper(void **state)
{
    env *e = *state;
    small_files_case(e, "s1", "s2");
    g_push = 2000;
    small_files_case(e, "s3", "s4");
    g_push = 0;
    assert_int_equal(count_files(e), 4 * SF_N);
}

/*
 * Many small files in many directories: the helper's slots are taken and
 * given back many times over while the landing thread hands files over
 * and lands others itself.  Every file lands with its bytes, mtime and
 * mode, whichever thread made it.
 */
static void test_small_files_many(void **state)
{
    env *e = *state;
    enum { RN = 240, RDIR = 20 }; /* the harness holds fewer than MAXCH chunks a batch */
    static const size_t sizes[] = {1, 700, 2047, 3000, CH};
    uint8_t **d = calloc(RN, sizeof *d);
    char(*paths)[32] = calloc(RN, sizeof *paths);
    tfile *f = calloc(RN, sizeof *f);
    assert_true(d && paths && f);
    for (int k = 0; k < RN; k++) {
        const size_t len = sizes[k % 5];
        d[k] = pattern(len, 7000u + (uint32_t)k);
        snprintf(paths[k], sizeof paths[k], "r/d%02d/f%04d", k / RDIR, k);
        f[k] = (tfile){paths[k], d[k], len, T2024 + k % 60, k % 3 == 0 ? 0750u : 0640u};
    }
    tbatch tb;
    make_batch(e, "dev1", "r1", f, RN, &tb);
    ingest_lander_batch *b = NULL;
    sf_begin(e, &tb, &b);
    land_all(e, b, &tb);
    ingest_lander_stats st;
    ingest_lander_batch_stats(b, &st);
    assert_true(st.files_helped > 0); /* the first file is the helper's */
    assert_true(st.files_helped <= RN);
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
    for (int k = 0; k < RN; k++) {
        char p[64];
        snprintf(p, sizeof p, "dev1/2024/02/29/%s", paths[k]);
        assert_file(e, p, d[k], sizes[k % 5], T2024 + k % 60, k % 3 == 0 ? 0755 : 0644); /* landed modes */
        free(d[k]);
    }
    assert_int_equal(count_files(e), RN);
    free(d);
    free(paths);
    free(f);
}

/* Whether a thread of this process is named name (/proc/self/task/TID/comm). */
static bool thread_named(const char *name)
{
    DIR *dir = opendir("/proc/self/task");
    assert_non_null(dir);
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(dir)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char p[sizeof("/proc/self/task//comm") + sizeof(de->d_name)], comm[32] = "";
        snprintf(p, sizeof p, "/proc/self/task/%s/comm", de->d_name);
        FILE *fp = fopen(p, "r");
        if (fp == NULL)
            continue; /* the thread ended */
        if (fgets(comm, sizeof comm, fp) != NULL) {
            comm[strcspn(comm, "\n")] = '\0';
            found = strcmp(comm, name) == 0;
        }
        fclose(fp);
    }
    closedir(dir);
    return found;
}

/* SF_N files of len bytes each (pattern seed + k) named DIR/fNNN, mode 0644, one mtime: d, paths and f filled. */
static void same_size_files(const char *dir, size_t len, uint32_t seed, uint8_t *d[SF_N], char paths[SF_N][32],
                            tfile f[SF_N])
{
    for (int k = 0; k < SF_N; k++) {
        d[k] = pattern(len, seed + (uint32_t)k);
        snprintf(paths[k], 32, "%s/f%03d", dir, k);
        f[k] = (tfile){paths[k], d[k], len, T2024, 0644u};
    }
}

/*
 * The small-file helper is named (docs/architecture.md "Threads") while
 * its batch lands, and gone once the batch is committed.
 */
static void test_small_files_helper_named(void **state)
{
    env *e = *state;
    uint8_t *d[SF_N];
    char paths[SF_N][32];
    tfile f[SF_N];
    same_size_files("n", 700, 4000, d, paths, f);
    tbatch tb;
    make_batch(e, "dev1", "n1", f, SF_N, &tb);
    ingest_lander_batch *b = NULL;
    assert_false(thread_named("ingest-smallf"));
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    assert_int_equal(n, SF_N);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(put(e, b, &tb, w[k]), 0);
    assert_true(thread_named("ingest-smallf"));
    assert_int_equal(ingest_lander_commit(b), 0);
    assert_false(thread_named("ingest-smallf"));
    ingest_lander_stats st;
    ingest_lander_batch_stats(b, &st);
    assert_true(st.files_helped > 0);
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
    for (int k = 0; k < SF_N; k++)
        free(d[k]);
}

/*
 * A small file the helper fails to write (a file size limit: EFBIG) fails
 * the batch with the write named, and leaves no file of it behind: the
 * helper is stopped before the temporary files are removed.
 */
static void test_small_files_helper_failure(void **state)
{
    env *e = *state;
    uint8_t *d[SF_N];
    char paths[SF_N][32];
    tfile f[SF_N];
    same_size_files("x", 500, 3000, d, paths, f);
    tbatch tb;
    make_batch(e, "dev1", "x1", f, SF_N, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    assert_int_equal(n, SF_N);
    void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit old_lim, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old_lim), 0);
    lim = old_lim;
    lim.rlim_cur = 100;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++)
        rc = put(e, b, &tb, w[k]);
    if (rc == 0)
        rc = ingest_lander_commit(b);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old_lim), 0);
    signal(SIGXFSZ, old_sig);
    assert_true(rc < 0);
    if (strstr(ingest_ctx_errmsg(e->ctx), "write") == NULL)
        fail_msg("message '%s' does not name the write", ingest_ctx_errmsg(e->ctx));
    ingest_lander_batch_destroy(b);
    assert_int_equal(count_files(e), 0);
    free(tb.manifest);
    for (int k = 0; k < SF_N; k++)
        free(d[k]);
}

static void test_land_new(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(10000, 1), *c = pattern(CH, 3);
    const tfile f[] = {
        {"a.bin", a, 10000, T2024, 0640},
        {"empty", a, 0, T2024, 0600},
        {"sub/dir/c.sh", c, CH, T2024 + 1, 0750},
    };
    tbatch tb;
    make_batch(e, "dev1", "b1", f, 3, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    assert_string_equal(ingest_lander_batch_name(b), "b1");
    assert_int_equal(ingest_lander_batch_chunks(b), 4);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    assert_int_equal(n, 4);
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(w[i], i);
    assert_int_equal(ingest_lander_awaited(b), 4);
    land_all(e, b, &tb);
    ingest_lander_stats s;
    ingest_lander_batch_stats(b, &s);
    assert_int_equal(s.files, 3);
    assert_int_equal(s.bytes, 10000 + CH);
    assert_int_equal(s.chunks_new, 4);
    assert_int_equal(s.chunks_known, 0);
    assert_int_equal(s.copies, 0);
    assert_true(s.bytes_written > 10000 + CH); /* files + manifest */
    assert_true(s.syncs >= 4);                  /* 3 files + manifest + dirs */
    ingest_lander_batch_destroy(b);

    assert_file(e, "dev1/2024/02/29/a.bin", a, 10000, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/empty", a, 0, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/sub/dir/c.sh", c, CH, T2024 + 1, 0755);
    assert_int_equal(count_files(e), 3);

    /* the landed manifest, read back */
    char mp[256];
    snprintf(mp, sizeof mp, "%s/_manifests/dev1/b1.jsonl", e->bronze);
    ingest_manifest_reader *r = NULL;
    assert_int_equal(ingest_manifest_reader_open(e->ctx, mp, &r), 0);
    ingest_manifest_rec rec;
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(rec.type, INGEST_MREC_HEADER);
    assert_string_equal(rec.device, "dev1");
    assert_string_equal(rec.batch, "b1");
    assert_int_equal(rec.nfiles, 3);
    assert_int_equal(rec.total_bytes, 10000 + CH);
    const char *landed[] = {"dev1/2024/02/29/a.bin", "dev1/2024/02/29/empty", "dev1/2024/02/29/sub/dir/c.sh"};
    const uint32_t nch[] = {3, 0, 1};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
        assert_int_equal(rec.type, INGEST_MREC_FILE);
        assert_string_equal(rec.path, f[i].path);
        assert_string_equal(rec.landed, landed[i]);
        assert_int_equal(rec.version, 1);
        assert_int_equal(rec.size, f[i].len);
        assert_int_equal(rec.mtime_ns, f[i].mtime_ns);
        assert_int_equal(rec.nchunks_total, nch[i]);
    }
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 0);
    ingest_manifest_reader_close(r);

    /* the index knows the chunks, at the new file */
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_id(e->key, c, CH, id);
    ingest_chunk_loc loc;
    assert_int_equal(ingest_index_find(e->idx, id, &loc), 0);
    assert_int_equal(loc.offset, 0);
    assert_int_equal(loc.length, CH);
    char p[512];
    assert_int_equal(ingest_index_file_path(e->idx, loc.file_no, p, sizeof p), 0);
    assert_non_null(strstr(p, "dev1/2024/02/29/sub/dir/c.sh"));
    assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", "b1"), 1);

    /* replay: recognised, nothing to do */
    b = (ingest_lander_batch *)1;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), INGEST_LANDER_ALREADY);
    assert_null(b);
    free(tb.manifest);
    free(a);
    free(c);
}

/*
 * Direct I/O: one file of 200 chunks plus a short tail whose chunks repeat
 * chunks of the same file 3 back (still in the 256 KiB write buffer) and 70
 * back (already written out), and a file under 4 KiB (written through the
 * cache): both land byte for byte, the repeats copied from the file itself.
 */
static void test_direct_io_repeats(void **state)
{
    env *e = *state;
    enum { NCH = 200, TAIL = 1000 };
    const size_t len = (size_t)NCH * CH + TAIL;
    uint8_t *d = malloc(len), *small = pattern(900, 41);
    assert_non_null(d);
    for (uint32_t k = 0; k < NCH; k++) {
        uint8_t *u = pattern(CH, 100 + k);
        const uint8_t *src = u;
        if (k >= 80 && k % 5 == 0)
            src = d + (size_t)(k - 70) * CH;
        else if (k >= 3 && k % 7 == 0)
            src = d + (size_t)(k - 3) * CH;
        memmove(d + (size_t)k * CH, src, CH);
        free(u);
    }
    uint8_t *t = pattern(TAIL, 99);
    memcpy(d + (size_t)NCH * CH, t, TAIL);
    free(t);
    const tfile f[] = {{"big.bin", d, len, T2024, 0644}, {"small.txt", small, 900, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "dio", f, 2, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    land_all(e, b, &tb);
    ingest_lander_stats st;
    ingest_lander_batch_stats(b, &st);
    assert_true(st.copies >= 30);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/big.bin", d, len, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/small.txt", small, 900, T2024, 0644);
    free(tb.manifest);
    free(d);
    free(small);
}

/*
 * A direct write that fails in the direct-I/O writer (lander_dw.c; here past
 * RLIMIT_FSIZE: EFBIG) fails the batch with the write's error and the
 * file's name, as a write of the landing thread's own would; nothing of
 * the batch stays.
 */
static void test_direct_write_fails(void **state)
{
    env *e = *state;
    enum { NCH = 200 };
    const size_t len = (size_t)NCH * CH;
    uint8_t *d = pattern(len, 77), *o = pattern(40 * CH, 78);
    const tfile f[] = {{"ok.bin", o, 40 * CH, T2024, 0644}, {"big.bin", d, len, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "dwfail", f, 2, &tb);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 512 * 1024;
    void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++)
        rc = put(e, b, &tb, w[k]);
    if (rc == 0)
        rc = ingest_lander_commit(b);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, oldsig);
    assert_int_equal(rc, ingest__errno(EFBIG));
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "write"));
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "big.bin"));
    ingest_lander_batch_destroy(b);
    assert_int_equal(count_files(e), 0);
    free(tb.manifest);
    free(d);
    free(o);
}

/*
 * Zero chunks land as holes (docs/landing.md, "Holes"): zero chunks of
 * two lengths at unaligned offsets, each repeated after the other (so the
 * lander's one remembered zero id misses and the repeat is read back from
 * the file being written, across its holes), a data chunk repeated after
 * them, and a hole at the end; with direct I/O, then through the cache.
 */
static void holes_case(env *e, int direct, const char *batch, uint32_t extra)
{
    const uint32_t z8 = 8192 + extra, z12 = 12000 + extra;
    const uint32_t cuts[] = { 6000, z8, z12, z8, 4096, z12, 6000, 9000 };
    const int zero[] = { 0, 1, 1, 1, 0, 1, 0, 1 };
    size_t len = 0;
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++)
        len += cuts[k];
    uint8_t *d = calloc(1, len);
    assert_non_null(d);
    uint8_t *p0 = pattern(6000, 7 + extra), *p1 = pattern(4096, 8 + extra);
    size_t off = 0, sparse = 0;
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        if (k == 0 || k == 6)
            memcpy(d + off, p0, 6000); /* chunk 6 repeats chunk 0 */
        else if (k == 4)
            memcpy(d + off, p1, 4096);
        if (zero[k])
            sparse += cuts[k];
        off += cuts[k];
    }
    assert_int_equal(ingest_lander_set_direct_io(e->l, direct), 0);
    char path[32];
    snprintf(path, sizeof path, "%s.bin", batch);
    const tfile f[] = {{path, d, len, T2024, 0644}};
    tbatch tb;
    g_cuts = cuts;
    g_ncuts = sizeof cuts / sizeof cuts[0];
    make_batch(e, "dev1", batch, f, 1, &tb);
    g_cuts = NULL;
    g_ncuts = 0;
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    land_all(e, b, &tb);
    ingest_lander_stats st;
    ingest_lander_batch_stats(b, &st);
    assert_int_equal(st.bytes_sparse, sparse);
    ingest_lander_batch_destroy(b);
    char rel[96], p[512];
    snprintf(rel, sizeof rel, "dev1/2024/02/29/%s", path);
    assert_file(e, rel, d, len, T2024, 0644);
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    /* the data (16,096 bytes) in at most 9 blocks: the zeros between are not allocated */
    assert_true((uint64_t)sb.st_blocks * 512 <= 9u * 4096u);
    free(tb.manifest);
    free(d);
    free(p0);
    free(p1);
}

static void test_holes(void **state)
{
    env *e = *state;
    holes_case(e, 1, "holes-direct", 0);
    holes_case(e, 0, "holes-cached", 4096);
}

static void test_dedup_copies(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(3 * CH, 7), *x = pattern(CH, 8);
    const tfile f1[] = {{"a", a, 3 * CH, T2024, 0644}};
    tbatch t1;
    make_batch(e, "dev1", "b1", f1, 1, &t1);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t1.manifest, t1.mlen, &b), 0);
    land_all(e, b, &t1);
    ingest_lander_batch_destroy(b);

    /* b = a's chunks 2,0 + new x + x again + a's chunk 1 */
    uint8_t *bb = malloc(5 * CH);
    memcpy(bb, a + 2 * CH, CH);
    memcpy(bb + CH, a, CH);
    memcpy(bb + 2 * CH, x, CH);
    memcpy(bb + 3 * CH, x, CH);
    memcpy(bb + 4 * CH, a + CH, CH);
    const tfile f2[] = {{"b", bb, 5 * CH, T2024, 0644}, {"x2", x, CH, T2024, 0644}};
    tbatch t2;
    make_batch(e, "dev2", "b2", f2, 2, &t2);
    assert_int_equal(ingest_lander_begin(e->l, "dev2", t2.manifest, t2.mlen, &b), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    assert_int_equal(n, 1);
    assert_int_equal(w[0], 2);
    land_all(e, b, &t2);
    ingest_lander_stats s;
    ingest_lander_batch_stats(b, &s);
    assert_int_equal(s.chunks_new, 1);
    assert_int_equal(s.chunks_known, 5);
    assert_int_equal(s.copies, 5);
    assert_int_equal(s.chunks_rewanted, 0);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev2/2024/02/29/b", bb, 5 * CH, T2024, 0644);
    assert_file(e, "dev2/2024/02/29/x2", x, CH, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/a", a, 3 * CH, T2024, 0644);
    free(t1.manifest);
    free(t2.manifest);
    free(a);
    free(x);
    free(bb);
}

/* A known chunk's landed file deleted, or overwritten in place, after begin: re-wanted. */
static void rewant_case(env *e, int how)
{
    uint8_t *a = pattern(4 * CH, 11), *bb = pattern(4 * CH, 11);
    bb[4 * CH - 1] ^= 0x55; /* last chunk differs */
    const tfile f1[] = {{"a", a, 4 * CH, T2024, 0644}};
    tbatch t1;
    make_batch(e, "dev1", "b1", f1, 1, &t1);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t1.manifest, t1.mlen, &b), 0);
    land_all(e, b, &t1);
    ingest_lander_batch_destroy(b);

    const tfile f2[] = {{"b", bb, 4 * CH, T2024, 0644}};
    tbatch t2;
    make_batch(e, "dev1", "b2", f2, 1, &t2);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t2.manifest, t2.mlen, &b), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    assert_int_equal(n, 1);
    assert_int_equal(w[0], 3);

    char p[512];
    snprintf(p, sizeof p, "%s/dev1/2024/02/29/a", e->bronze);
    if (how == 0) {
        assert_int_equal(unlink(p), 0);
    } else {
        /* same size, same mtime, same inode: only the bytes tell */
        const int fd = open(p, O_WRONLY);
        assert_true(fd >= 0);
        uint8_t z[16] = {0};
        assert_int_equal(pwrite(fd, z, sizeof z, CH + 5), (ssize_t)sizeof z);
        const struct timespec ts[2] = {{1709251199, 123456789}, {1709251199, 123456789}};
        assert_int_equal(futimens(fd, ts), 0);
        close(fd);
    }
    assert_int_equal(ingest_lander_advance(b), how == 0 ? 4 : 2);
    ingest_lander_rewants(b, &w, &n);
    if (how == 0) {
        assert_int_equal(n, 3);
        assert_int_equal(w[0], 0);
        assert_int_equal(w[2], 2);
    } else {
        assert_int_equal(n, 1);
        assert_int_equal(w[0], 1);
    }
    const uint32_t first = w[0];
    assert_int_equal(ingest_lander_commit(b), INGEST_EBUSY);
    /* the rewants were taken: the next call reports nothing new */
    ingest_lander_rewants(b, &w, &n);
    assert_int_equal(n, 0);
    for (uint32_t i = first; i < (how == 0 ? 3u : 2u); i++)
        assert_int_equal(put(e, b, &t2, i), 0);
    assert_int_equal(put(e, b, &t2, 3), 0);
    assert_int_equal(ingest_lander_commit(b), 0);
    ingest_lander_stats s;
    ingest_lander_batch_stats(b, &s);
    assert_int_equal(s.chunks_rewanted, how == 0 ? 3 : 1);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/b", bb, 4 * CH, T2024, 0644);
    free(t1.manifest);
    free(t2.manifest);
    free(a);
    free(bb);
}

/* Land one file of content a as path under device; returns how many chunks were wanted. */
static size_t land_wanted(env *e, const char *device, const char *batch, const char *path, const uint8_t *a,
                          size_t len, ingest_lander_stats *s)
{
    const tfile f[] = {{path, a, len, T2024, 0644}};
    tbatch tb;
    make_batch(e, device, batch, f, 1, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, device, tb.manifest, tb.mlen, &b), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    land_all(e, b, &tb);
    ingest_lander_batch_stats(b, s);
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
    return n;
}

/*
 * dedup.scope device: a batch knows only the chunks its own device landed,
 * so another device's content is wanted whole, and known chunks are copied
 * from the device's own files.
 */
static void test_dedup_scope_device(void **state)
{
    env *e = *state;
    assert_int_equal(ingest_index_set_scope(e->idx, INGEST_DEDUP_DEVICE), 1);
    uint8_t *a = pattern(3 * CH, 21);
    ingest_lander_stats s;
    assert_int_equal(land_wanted(e, "dev1", "b1", "a", a, 3 * CH, &s), 3);
    /* the same bytes from dev2: every chunk wanted, none copied */
    assert_int_equal(land_wanted(e, "dev2", "b1", "a", a, 3 * CH, &s), 3);
    assert_int_equal(s.chunks_new, 3);
    assert_int_equal(s.chunks_known, 0);
    assert_int_equal(s.copies, 0);
    /* each device's renamed copy: nothing wanted */
    assert_int_equal(land_wanted(e, "dev1", "b2", "a-renamed", a, 3 * CH, &s), 0);
    assert_int_equal(s.chunks_known, 3);
    assert_int_equal(s.chunks_rewanted, 0);
    /* dev2's copies come from dev2's own file: dev1's landed files gone changes nothing for dev2 */
    char p[512];
    snprintf(p, sizeof p, "%s/dev1/2024/02/29/a", e->bronze);
    assert_int_equal(unlink(p), 0);
    snprintf(p, sizeof p, "%s/dev1/2024/02/29/a-renamed", e->bronze);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(land_wanted(e, "dev2", "b2", "a-renamed", a, 3 * CH, &s), 0);
    assert_int_equal(s.chunks_known, 3);
    assert_int_equal(s.chunks_rewanted, 0);
    assert_file(e, "dev2/2024/02/29/a", a, 3 * CH, T2024, 0644);
    assert_file(e, "dev2/2024/02/29/a-renamed", a, 3 * CH, T2024, 0644);
    /* a third device still knows nothing */
    assert_int_equal(land_wanted(e, "dev3", "b1", "a", a, 3 * CH, &s), 3);
    free(a);
}

static void test_rewant_deleted(void **state) { rewant_case(*state, 0); }
static void test_rewant_overwritten(void **state) { rewant_case(*state, 1); }

static void test_bad_id(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(3 * CH, 21), *evil = pattern(CH, 22);
    const tfile f[] = {{"a", a, 3 * CH, T2024, 0644}, {"b", a, CH, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "b1", f, 2, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    assert_int_equal(put(e, b, &tb, 0), 0);
    tb.cdata[1] = evil;
    assert_int_equal(put(e, b, &tb, 1), INGEST_EMISMATCH);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "chunk 1"));
    assert_int_equal(count_files(e), 0); /* temp file removed, nothing final */
    tb.cdata[1] = a + CH;
    assert_int_equal(put(e, b, &tb, 1), INGEST_EINVAL); /* the batch is dead */
    assert_int_equal(ingest_lander_commit(b), INGEST_EINVAL);
    ingest_lander_batch_destroy(b);
    assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", "b1"), 0);
    free(tb.manifest);
    free(a);
    free(evil);
}

/*
 * The receiver's verification path: chunks decoded and checked on another
 * thread, handed over with the id they were checked against.  The right id
 * lands; an id of another batch (a chunk sent before its WANT and checked
 * against the previous manifest) is refused and nothing lands; a chunk
 * nobody asked for (known, or received already) is refused.
 */
static void test_put_verified(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(2 * CH, 41), *other = pattern(CH, 42);
    const tfile f[] = {{"a", a, 2 * CH, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "b1", f, 1, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    uint8_t id[INGEST_ID_BYTES], oid[INGEST_ID_BYTES];
    uint32_t len = 0;
    for (uint32_t i = 0; i < 2; i++) {
        assert_int_equal(ingest_lander_chunk_expect(b, i, id, &len), 0);
        assert_int_equal(len, CH);
        assert_int_equal(ingest_lander_put_verified(b, i, a + (size_t)i * CH, CH, CH, id), 0);
    }
    /* received already: not awaited any more */
    assert_int_equal(ingest_lander_put_verified(b, 1, a + CH, CH, CH, id), INGEST_EPROTO);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "awaited"));
    ingest_lander_batch_destroy(b);
    free(tb.manifest);

    /* checked against another id: the other content is refused, nothing lands */
    make_batch(e, "dev1", "b2", (const tfile[]){{"c", other, CH, T2024, 0644}}, 1, &tb);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    ingest_chunk_id(e->key, a, CH, oid); /* an id a's bytes do hash to, but not chunk 0's */
    assert_int_equal(ingest_lander_put_verified(b, 0, a, CH, CH, oid), INGEST_EMISMATCH);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "another id"));
    assert_int_equal(ingest_lander_commit(b), INGEST_EINVAL);
    ingest_lander_batch_destroy(b);
    assert_int_equal(count_files(e), 0);
    assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", "b2"), 0);
    free(tb.manifest);
    free(a);
    free(other);
}

/* The landed manifest of (dev1, batch) has each file's chunk ids and whole-file hash of its bytes. */
static void assert_landed_ids(const env *e, const char *batch, const tfile *f, size_t n)
{
    char mp[256];
    snprintf(mp, sizeof mp, "%s/_manifests/dev1/%s.jsonl", e->bronze, batch);
    ingest_manifest_reader *r = NULL;
    ingest_manifest_rec rec;
    assert_int_equal(ingest_manifest_reader_open(e->ctx, mp, &r), 0);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
        assert_string_equal(rec.path, f[i].path);
        ingest_filehash fh;
        ingest_filehash_init(&fh, e->key);
        for (uint32_t k = 0; k < rec.nchunks; k++) {
            uint8_t id[INGEST_ID_BYTES];
            ingest_chunk_id(e->key, f[i].data + (size_t)k * CH, rec.chunks[k].len, id);
            assert_memory_equal(rec.chunks[k].id, id, INGEST_ID_BYTES);
            ingest_filehash_update(&fh, id, INGEST_ID_BYTES);
        }
        uint8_t h[INGEST_ID_BYTES];
        ingest_filehash_final(&fh, h);
        assert_memory_equal(rec.hash, h, INGEST_ID_BYTES);
    }
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 0);
    ingest_manifest_reader_close(r);
}

/*
 * Pushed chunks: listed without ids, wanted without a lookup (also when
 * the index holds them), their ids taken from their bytes (put_chunk, or
 * the caller's with put_verified); the landed manifest has every id and
 * hash.  A replay is recognised by the digest; a reused id with other
 * bytes, or a pushed replay without a digest, is EBATCHID; a lander not told
 * of push refuses such a manifest.
 */
static void test_pushed(void **state)
{
    env *e = *state;
    uint8_t *s1 = pattern(300, 61), *big = pattern(3 * CH, 62), *s2 = pattern(300, 63);
    const tfile f[] = {
        {"s1.json", s1, 300, T2024, 0644},
        {"s1-copy.json", s1, 300, T2024, 0644},
        {"big.bin", big, 3 * CH, T2024, 0644},
    };
    g_push = 2000;
    tbatch tb;
    make_batch(e, "dev1", "b1", f, 3, &tb);
    ingest_lander_batch *b = NULL;
    /* not agreed: the lander refuses the form */
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "a chunk must be"));
    assert_int_equal(ingest_lander_parse_ex(e->l, "dev1", tb.manifest, tb.mlen, INGEST_LANDER_PARSE_PUSH, &b), 0);
    assert_int_equal(ingest_lander_lookup(b), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    assert_int_equal(n, 5); /* the copy too: a pushed chunk is never found a repeat */
    const uint8_t zero[INGEST_ID_BYTES] = {0};
    uint8_t id[INGEST_ID_BYTES];
    uint32_t len;
    for (uint32_t i = 0; i < 5; i++) {
        assert_int_equal(ingest_lander_chunk_pushed(b, i), i < 2);
        assert_int_equal(ingest_lander_chunk_expect(b, i, id, &len), 0);
        assert_int_equal(memcmp(id, zero, INGEST_ID_BYTES) == 0, i < 2);
    }
    assert_int_equal(ingest_lander_chunk_pushed(b, 5), 0);
    land_all(e, b, &tb);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/s1.json", s1, 300, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/s1-copy.json", s1, 300, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/big.bin", big, 3 * CH, T2024, 0644);
    assert_landed_ids(e, "b1", f, 3);
    ingest_chunk_loc loc;
    ingest_chunk_id(e->key, s1, 300, id);
    assert_int_equal(ingest_index_find(e->idx, id, &loc), 0);
    assert_int_equal(loc.length, 300);

    /* the replay: recognised by its digest */
    assert_int_equal(ingest_lander_parse_ex(e->l, "dev1", tb.manifest, tb.mlen, INGEST_LANDER_PARSE_PUSH, &b), 0);
    assert_int_equal(ingest_lander_lookup(b), INGEST_LANDER_ALREADY);
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
    /* the same id for other bytes of a pushed file: refused */
    const tfile g[] = {
        {"s1.json", s2, 300, T2024, 0644},
        {"s1-copy.json", s1, 300, T2024, 0644},
        {"big.bin", big, 3 * CH, T2024, 0644},
    };
    make_batch(e, "dev1", "b1", g, 3, &tb);
    assert_int_equal(ingest_lander_parse_ex(e->l, "dev1", tb.manifest, tb.mlen, INGEST_LANDER_PARSE_PUSH, &b), 0);
    assert_int_equal(ingest_lander_lookup(b), INGEST_EBATCHID);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "already used for other data"));
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
    /* pushed chunks without a digest: refused at parse */
    g_no_digest = 1;
    make_batch(e, "dev1", "b1", f, 3, &tb);
    g_no_digest = 0;
    assert_int_equal(ingest_lander_parse_ex(e->l, "dev1", tb.manifest, tb.mlen, INGEST_LANDER_PARSE_PUSH, &b),
                     INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "no digest"));
    free(tb.manifest);
    /* a replay that leaves a file out (changed since): the digest of the rest, from the landed hashes */
    make_batch(e, "dev1", "b1", (const tfile[]){f[0], f[2]}, 2, &tb);
    assert_int_equal(ingest_lander_parse_ex(e->l, "dev1", tb.manifest, tb.mlen, INGEST_LANDER_PARSE_PUSH, &b), 0);
    assert_int_equal(ingest_lander_lookup(b), INGEST_LANDER_ALREADY);
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
    /* a pushed file of another size than the receiver's bound: refused (what [length] entries may cost) */
    uint8_t *huge = pattern(40000, 64);
    g_push = 64000;
    make_batch(e, "dev1", "b9", (const tfile[]){{"huge.json", huge, 40000, T2024, 0644}}, 1, &tb);
    g_push = 2000;
    assert_int_equal(ingest_lander_parse_ex(e->l, "dev1", tb.manifest, tb.mlen, INGEST_LANDER_PARSE_PUSH, &b),
                     INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "chunks listed without ids (at most 32768 bytes)"));
    free(tb.manifest);
    free(huge);

    /* known content pushed again (a new batch): wanted, and landed with put_verified and the caller's ids */
    const tfile h[] = {{"again.json", s1, 300, T2024, 0644}, {"s2.json", s2, 300, T2024, 0644}};
    make_batch(e, "dev1", "b2", h, 2, &tb);
    assert_int_equal(ingest_lander_parse_ex(e->l, "dev1", tb.manifest, tb.mlen, INGEST_LANDER_PARSE_PUSH, &b), 0);
    assert_int_equal(ingest_lander_lookup(b), 0);
    ingest_lander_wants(b, &w, &n);
    assert_int_equal(n, 2);
    for (uint32_t i = 0; i < 2; i++) {
        ingest_chunk_id(e->key, h[i].data, 300, id);
        assert_int_equal(ingest_lander_put_verified(b, i, h[i].data, 300, 300, id), 0);
    }
    assert_int_equal(ingest_lander_commit(b), 0);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/s2.json", s2, 300, T2024, 0644);
    assert_landed_ids(e, "b2", h, 2);
    free(tb.manifest);

    /* a pushed file refused (a directory where it lands): its hash is never known at the core, and the
     * replay of exactly that batch is still recognised, by the digest kept in the landed manifest */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/dev1/2024/02/29/x.json", e->bronze);
    assert_int_equal(mkdir(dir, 0755), 0);
    const tfile x[] = {{"x.json", s2, 300, T2024, 0644}, {"y.json", big, 300, T2024, 0644}};
    make_batch(e, "dev1", "b3", x, 2, &tb);
    assert_int_equal(ingest_lander_parse_ex(e->l, "dev1", tb.manifest, tb.mlen, INGEST_LANDER_PARSE_PUSH, &b), 0);
    assert_int_equal(ingest_lander_refused_count(b), 1);
    assert_int_equal(ingest_lander_lookup(b), 0);
    ingest_lander_wants(b, &w, &n);
    assert_int_equal(n, 2); /* the refused file's too: its hash is known once its bytes came */
    land_all(e, b, &tb);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/y.json", big, 300, T2024, 0644);
    assert_landed_ids(e, "b3", x, 2); /* the refused record with its real ids and hash */
    assert_int_equal(ingest_lander_parse_ex(e->l, "dev1", tb.manifest, tb.mlen, INGEST_LANDER_PARSE_PUSH, &b), 0);
    assert_int_equal(ingest_lander_lookup(b), INGEST_LANDER_ALREADY);
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
    /* ... and a replay without it (the other file only), by the landed hashes */
    make_batch(e, "dev1", "b3", x + 1, 1, &tb);
    assert_int_equal(ingest_lander_parse_ex(e->l, "dev1", tb.manifest, tb.mlen, INGEST_LANDER_PARSE_PUSH, &b), 0);
    assert_int_equal(ingest_lander_lookup(b), INGEST_LANDER_ALREADY);
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
    g_push = 0;
    free(s1);
    free(s2);
    free(big);
}

static void touch(const env *e, const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    for (char *c = p + strlen(e->bronze) + 1; *c; c++)
        if (*c == '/') {
            *c = '\0';
            mkdir(p, 0755);
            *c = '/';
        }
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("x", f);
    fclose(f);
}

static bool exists(const env *e, const char *rel)
{
    char p[512];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    return lstat(p, &sb) == 0;
}

/*
 * The crash sweep removes what unfinished batches leave (tagged temporary
 * files, temporary manifests at their one location) and nothing a device
 * landed, whatever its name; a second lander of the tree shares the tag.
 */
/* The landed file of rel: its inode. */
static ino_t ino_of(const env *e, const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    struct stat sb;
    assert_int_equal(lstat(p, &sb), 0);
    return sb.st_ino;
}

/* The append intents left under _manifests/.append. */
static int count_intents(const env *e)
{
    char p[512];
    snprintf(p, sizeof p, "%s/_manifests/.append", e->bronze);
    DIR *d = opendir(p);
    if (d == NULL)
        return 0;
    int n = 0;
    const struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* ---- appends in place that go wrong ---- */

/* A lock whose first taking unlinks a path: between commit's step 1 (the syncs, unlocked) and step 2. */
static const char *g_unlink_at_lock;
static int g_lock_calls;
static void unlinking_lock(void *ud)
{
    (void)ud;
    if (g_lock_calls++ == 0 && g_unlink_at_lock != NULL)
        assert_int_equal(unlink(g_unlink_at_lock), 0);
}
static void plain_unlock(void *ud) { (void)ud; }

/* The undo hook: from here no descriptor can be opened (the lowest free one made the limit). */
/* Leave exactly nfree descriptors free: lower the soft limit and fill what is below it with /dev/null (the
 * descriptors the test runner inherited need not be contiguous, nor fd 0 open). fds_release closes the fill. */
static int g_fill[600];
static int g_nfill;
static void fds_leave_free(int nfree)
{
    struct rlimit lim;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &lim), 0);
    if (lim.rlim_cur > 512) {
        lim.rlim_cur = 512;
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    }
    for (;;) {
        assert_true(g_nfill < (int)(sizeof g_fill / sizeof g_fill[0]));
        const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            assert_int_equal(errno, EMFILE);
            break;
        }
        g_fill[g_nfill++] = fd;
    }
    assert_true(g_nfill >= nfree);
    for (int i = 0; i < nfree; i++)
        close(g_fill[--g_nfill]);
}

static void fds_release(void)
{
    while (g_nfill > 0)
        close(g_fill[--g_nfill]);
}

static int g_no_fd_undos;
static void no_fd_at_undo(void *ud, const char *device, int phase)
{
    (void)ud;
    (void)device;
    if (phase != INGEST__LANDER_HOOK_UNDO)
        return;
    g_no_fd_undos++;
    fds_leave_free(0);
}

/* Land b1 (v[0, n1)) at "log", then begin b2 (v[0, n2), the next second) appending in place: b2. */
/* Entries of bronze-relative directory rel whose names begin with prefix (-1: no such directory). */
static int prefixed_entries(const env *e, const char *rel, const char *prefix)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    DIR *d = opendir(p);
    if (d == NULL)
        return -1;
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static ingest_lander_batch *append_begun(env *e, const uint8_t *v, size_t n1, size_t n2, tbatch *t1, tbatch *t2)
{
    assert_int_equal(ingest_lander_set_append(e->l, 1), 0);
    const tfile f1[] = {{"log", v, n1, T2024, 0644}};
    const tfile f2[] = {{"log", v, n2, T2024 + 1, 0644}};
    make_batch(e, "dev1", "b1", f1, 1, t1);
    make_batch(e, "dev1", "b2", f2, 1, t2);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t1->manifest, t1->mlen, &b), 0);
    land_all(e, b, t1);
    ingest_lander_batch_destroy(b);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t2->manifest, t2->mlen, &b), 0);
    return b;
}

#define APPENDED_LOG "dev1/2024/02/29/log"

/*
 * append_begun, then the first two chunks of the second version appended
 * to the landed log (its intent made): the batch, its wants in *w and *nw, and
 * the log's length then (more than n1).
 */
static ingest_lander_batch *append_torn(env *e, const uint8_t *v, size_t n1, size_t n2, tbatch *t1, tbatch *t2,
                                        const uint32_t **w, size_t *nw, off_t *torn)
{
    ingest_lander_batch *b = append_begun(e, v, n1, n2, t1, t2);
    ingest_lander_wants(b, w, nw);
    assert_true(*nw >= 2);
    assert_int_equal(put(e, b, t2, (*w)[0]), 0);
    assert_int_equal(put(e, b, t2, (*w)[1]), 0);
    char p[512];
    snprintf(p, sizeof p, "%s/" APPENDED_LOG, e->bronze);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_true((size_t)sb.st_size > n1);
    assert_int_equal(count_intents(e), 1);
    *torn = sb.st_size;
    return b;
}

/* Abort and destroy b with no descriptor free for its cut-back: the cut fails, the intent stays. */
static void abort_uncut(env *e, ingest_lander_batch *b)
{
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    ingest__lander_set_hook(e->l, no_fd_at_undo, NULL);
    ingest_lander_abort(b);
    ingest_lander_batch_destroy(b); /* (tries the cut again) */
    ingest__lander_set_hook(e->l, NULL, NULL);
    fds_release();
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    assert_true(g_no_fd_undos >= 1);
    assert_int_equal(count_intents(e), 1); /* kept: the cut is still owed */
}

/*
 * An earlier try of a batch cannot cut its append back (no descriptor
 * free), the file is then removed at the edge, and a later try of the batch
 * lands without it: the start's sweep takes the intent for not landed (the
 * batch's manifest does not list the file) and cuts the torn tail off,
 * instead of keeping bytes no manifest lists.
 */
static void test_append_earlier_try(void **state)
{
    env *e = *state;
    const size_t n1 = 3 * CH, n2 = 8 * CH + 100;
    uint8_t *v = pattern(n2, 85), *q = pattern(100, 86);
    tbatch t1, t2, t3;
    const uint32_t *w;
    size_t nw;
    off_t torn;
    ingest_lander_batch *b = append_torn(e, v, n1, n2, &t1, &t2, &w, &nw, &torn);
    abort_uncut(e, b);
    const char *rel = APPENDED_LOG;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_size, torn);
    /* the log removed at the edge: the next try of b2 lands another file alone */
    const tfile f3[] = {{"other", q, 100, T2024, 0644}};
    make_batch(e, "dev1", "b2", f3, 1, &t3);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t3.manifest, t3.mlen, &b), 0);
    land_all(e, b, &t3);
    ingest_lander_batch_destroy(b);
    uint64_t cut = 9, left = 9;
    assert_int_equal(ingest_lander_sweep_appends(e->ctx, e->bronze, &cut, &left), 0);
    assert_int_equal(cut, 1);
    assert_int_equal(left, 0);
    assert_int_equal(count_intents(e), 0);
    assert_file(e, rel, v, n1, T2024, 0644);
    free(t1.manifest);
    free(t2.manifest);
    free(t3.manifest);
    free(q);
    free(v);
}

/*
 * A receiver starting on the same bronze tree (its sweep at every start)
 * while a batch appends in place: the batch's intent is locked, so the
 * sweep leaves the file alone (it cut the live append back before); the
 * batch lands the whole new version, and its intent and lock go.
 */
static void test_append_live_left_alone(void **state)
{
    env *e = *state;
    const size_t n1 = 3 * CH, n2 = 8 * CH + 100;
    uint8_t *v = pattern(n2, 84);
    tbatch t1, t2;
    const uint32_t *w;
    size_t nw;
    off_t torn;
    ingest_lander_batch *b = append_torn(e, v, n1, n2, &t1, &t2, &w, &nw, &torn);
    const char *rel = APPENDED_LOG;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    struct stat after;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    assert_non_null(ctx);
    uint64_t cut = 9, left = 9, removed = 9, failed = 9;
    assert_int_equal(ingest_lander_sweep_appends(ctx, e->bronze, &cut, &left), 0);
    assert_int_equal(cut, 0);
    assert_int_equal(left, 0);
    assert_int_equal(ingest_lander_sweep(ctx, e->bronze, &removed, &failed), 0);
    ingest_ctx_destroy(ctx);
    assert_int_equal(stat(p, &after), 0);
    assert_int_equal(after.st_size, torn);
    assert_int_equal(count_intents(e), 1);
    for (size_t k = 2; k < nw; k++)
        assert_int_equal(put(e, b, &t2, w[k]), 0);
    assert_int_equal(ingest_lander_commit(b), 0);
    ingest_lander_batch_destroy(b);
    assert_file(e, rel, v, n2, T2024 + 1, 0644);
    assert_int_equal(count_intents(e), 0);
    assert_int_equal(prefixed_entries(e, "_manifests/.append", ".") - 2, 0); /* no lock file left */
    free(t1.manifest);
    free(t2.manifest);
    free(v);
}

/*
 * The file appended to is unlinked (an archiver downstream) after the
 * batch synced it and before its commit checks the final names: the batch
 * fails, saying so; it was acknowledged with nothing at the final name.
 */
static void test_append_file_removed_at_commit(void **state)
{
    env *e = *state;
    const size_t n1 = 3 * CH, n2 = 4 * CH + 100;
    uint8_t *v = pattern(n2, 81);
    tbatch t1, t2;
    ingest_lander_batch *b = append_begun(e, v, n1, n2, &t1, &t2);
    const uint32_t *w;
    size_t nw;
    ingest_lander_wants(b, &w, &nw);
    for (size_t k = 0; k < nw; k++)
        assert_int_equal(put(e, b, &t2, w[k]), 0);
    assert_int_equal(ingest_lander_commit_prepare(b), 0);
    char p[512];
    snprintf(p, sizeof p, "%s/dev1/2024/02/29/log", e->bronze);
    g_unlink_at_lock = p;
    g_lock_calls = 0;
    const ingest_lander_lock lk = {plain_unlock, unlinking_lock, NULL};
    const int rc = ingest_lander_commit_finish(b, &lk);
    g_unlink_at_lock = NULL;
    assert_int_equal(rc, INGEST_EEXIST);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "was removed or moved away while batch b2 appended to it"));
    char mp[512];
    snprintf(mp, sizeof mp, "%s/_manifests/dev1/b2.jsonl", e->bronze);
    assert_int_equal(access(mp, F_OK), -1); /* not landed */
    ingest_lander_batch_destroy(b);
    assert_int_equal(count_intents(e), 0);
    free(t1.manifest);
    free(t2.manifest);
    free(v);
}

/*
 * An append aborted while no descriptor is free (EMFILE, often what failed
 * the batch): the file cannot be cut back now, so its intent stays (it was
 * removed, the torn tail left for good), the next batch of the file does
 * not append to it (it is written whole and renamed over it), and the
 * sweep at the next start leaves that file alone.  Then an intent of an
 * append cut back and followed by a larger append that landed: the sweep
 * does not cut the landed bytes off (it cut to the old length before).
 */
static void test_append_undo_fails(void **state)
{
    env *e = *state;
    const size_t n1 = 3 * CH, n2 = 8 * CH + 100, n3 = 9 * CH + 7;
    uint8_t *v = pattern(n3, 82);
    tbatch t1, t2, t3;
    const uint32_t *w;
    size_t nw;
    off_t torn;
    ingest_lander_batch *b = append_torn(e, v, n1, n2, &t1, &t2, &w, &nw, &torn);
    const char *rel = APPENDED_LOG;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    const ino_t ino1 = ino_of(e, rel);
    abort_uncut(e, b);
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_size, torn);
    /* a start's sweep that cannot open the file either (four descriptors: the root, the intents' directory,
     * its listing, then the intent, closed again, and the file's directory; none for the file): the intent
     * stays, counted (it was removed, and appending left on) */
    {
        fds_leave_free(4);
        uint64_t c = 9, k = 9;
        const int src = ingest_lander_sweep_appends(e->ctx, e->bronze, &c, &k);
        fds_release();
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
        assert_int_equal(src, 0);
        assert_int_equal(c, 0);
        assert_int_equal(k, 1);
        assert_int_equal(count_intents(e), 1);
        assert_int_equal(stat(p, &sb), 0);
        assert_int_equal(sb.st_size, torn);
    }

    /* the next version of the file: written whole, a new inode; the landed file is exactly it */
    const tfile f3[] = {{"log", v, n3, T2024 + 2, 0644}};
    make_batch(e, "dev1", "b3", f3, 1, &t3);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t3.manifest, t3.mlen, &b), 0);
    land_all(e, b, &t3);
    ingest_lander_batch_destroy(b);
    assert_file(e, rel, v, n3, T2024 + 2, 0644);
    assert_true(ino_of(e, rel) != ino1);
    uint64_t cut = 9, left = 9;
    assert_int_equal(ingest_lander_sweep_appends(e->ctx, e->bronze, &cut, &left), 0);
    assert_int_equal(cut, 0);
    assert_int_equal(left, 0);
    assert_int_equal(count_intents(e), 0);
    assert_file(e, rel, v, n3, T2024 + 2, 0644);

    /* b4 appends n3 -> n4 and is aborted (cut back), its intent kept as if that cut's fsync had failed;
     * b5 appends n3 -> n5 > n4 in place and lands; the old intent must not cut b5's bytes off */
    const size_t n4 = n3 + 2 * CH, n5 = n3 + 5 * CH + 3;
    uint8_t *u = pattern(n5, 83);
    memcpy(u, v, n3);
    const tfile f4[] = {{"log", u, n4, T2024 + 3, 0644}};
    const tfile f5[] = {{"log", u, n5, T2024 + 4, 0644}};
    tbatch t4, t5;
    make_batch(e, "dev1", "b4", f4, 1, &t4);
    make_batch(e, "dev1", "b5", f5, 1, &t5);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t4.manifest, t4.mlen, &b), 0);
    ingest_lander_wants(b, &w, &nw);
    assert_true(nw >= 1);
    assert_int_equal(put(e, b, &t4, w[0]), 0);
    assert_int_equal(count_intents(e), 1);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "cp -a '%s/_manifests/.append' '%s/kept'", e->bronze, e->dir);
    assert_int_equal(system(cmd), 0);
    ingest_lander_abort(b);
    ingest_lander_batch_destroy(b);
    assert_file(e, rel, v, n3, T2024 + 2, 0644);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t5.manifest, t5.mlen, &b), 0);
    land_all(e, b, &t5);
    ingest_lander_batch_destroy(b);
    assert_file(e, rel, u, n5, T2024 + 4, 0644);
    snprintf(cmd, sizeof cmd, "cp -a '%s/kept/.' '%s/_manifests/.append/'", e->dir, e->bronze);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(count_intents(e), 1);
    assert_int_equal(ingest_lander_sweep_appends(e->ctx, e->bronze, &cut, &left), 0);
    assert_int_equal(cut, 0);
    assert_int_equal(count_intents(e), 0);
    assert_file(e, rel, u, n5, T2024 + 4, 0644);
    free(t1.manifest);
    free(t2.manifest);
    free(t3.manifest);
    free(t4.manifest);
    free(t5.manifest);
    free(u);
    free(v);
}

/*
 * Appending in place (ingest_lander_set_append): a grown version lands in
 * the landed file (same inode), writing about the new bytes; a version that
 * differs below the landed size is written whole (a new inode); an aborted
 * append is cut back (bytes, mode, mtime); an intent a crash left is cut
 * back by the sweep, unless the batch's manifest is in place.
 */
static void test_append_in_place(void **state)
{
    env *e = *state;
    assert_int_equal(ingest_lander_set_append(e->l, 1), 0);
    const size_t n1 = 3 * CH, n2 = 4 * CH + 100, n4 = 7 * CH + 9;
    uint8_t *v = pattern(n4, 81); /* v1 = v[0, n1), v2 = v[0, n2); v3 differs from v2 inside; v4 grows v3 */
    uint8_t *v3 = malloc(n4);
    assert_non_null(v3);
    memcpy(v3, v, n4);
    v3[CH + 7] ^= 0x5a;
    const char *rel = "dev1/2024/02/29/log";
    const tfile f1[] = {{"log", v, n1, T2024, 0644}};
    const tfile f2[] = {{"log", v, n2, T2024 + 1, 0644}};
    const tfile f3[] = {{"log", v3, n2, T2024 + 2, 0644}};
    const tfile f4[] = {{"log", v3, n4, T2024 + 3, 0755}};
    tbatch t1, t2, t3, t4;
    make_batch(e, "dev1", "b1", f1, 1, &t1);
    make_batch(e, "dev1", "b2", f2, 1, &t2);
    make_batch(e, "dev1", "b3", f3, 1, &t3);
    make_batch(e, "dev1", "b4", f4, 1, &t4);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t1.manifest, t1.mlen, &b), 0);
    land_all(e, b, &t1);
    ingest_lander_batch_destroy(b);
    const ino_t ino1 = ino_of(e, rel);

    /* grown: appended in place, writing the new chunks (and the manifest) only */
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t2.manifest, t2.mlen, &b), 0);
    land_all(e, b, &t2);
    ingest_lander_stats st;
    ingest_lander_batch_stats(b, &st);
    ingest_lander_batch_destroy(b);
    assert_file(e, rel, v, n2, T2024 + 1, 0644);
    assert_int_equal(ino_of(e, rel), ino1);
    assert_true(st.bytes_written < n2 - n1 + 2048);
    assert_int_equal(count_intents(e), 0);

    /* changed below the landed size: written whole, renamed into place */
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t3.manifest, t3.mlen, &b), 0);
    land_all(e, b, &t3);
    ingest_lander_batch_destroy(b);
    assert_file(e, rel, v3, n2, T2024 + 2, 0644);
    const ino_t ino3 = ino_of(e, rel);
    assert_true(ino3 != ino1);
    assert_int_equal(count_intents(e), 0);

    /* an append cut short: aborted, the file is v3 again (bytes, mode, mtime) */
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t4.manifest, t4.mlen, &b), 0);
    const uint32_t *w;
    size_t nw;
    ingest_lander_wants(b, &w, &nw);
    assert_true(nw >= 2);
    assert_int_equal(put(e, b, &t4, w[0]), 0);
    assert_int_equal(put(e, b, &t4, w[1]), 0);
    char p[512], ip[512], keep[1024];
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_true((size_t)sb.st_size > n2); /* grown in place */
    assert_int_equal(count_intents(e), 1);
    /* keep the intent, as a crash would have left it */
    snprintf(ip, sizeof ip, "%s/_manifests/.append", e->bronze);
    DIR *d = opendir(ip);
    assert_non_null(d);
    const struct dirent *de;
    while ((de = readdir(d)) != NULL && de->d_name[0] == '.')
        ;
    assert_non_null(de);
    snprintf(keep, sizeof keep, "%s/%s", ip, de->d_name);
    closedir(d);
    char saved[512];
    snprintf(saved, sizeof saved, "%s/intent", e->dir);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", keep, saved);
    assert_int_equal(system(cmd), 0);
    ingest_lander_abort(b);
    ingest_lander_batch_destroy(b);
    assert_file(e, rel, v3, n2, T2024 + 2, 0644);
    assert_int_equal(ino_of(e, rel), ino3);
    assert_int_equal(count_intents(e), 0);

    /* the crash: the file grown past its landed length, the intent there, no manifest of b4 */
    FILE *fp = fopen(p, "ab");
    assert_non_null(fp);
    assert_int_equal(fwrite(v3 + n2, 1, n4 - n2, fp), n4 - n2); /* a torn tail: the rest of v3 */
    fclose(fp);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", saved, keep);
    assert_int_equal(system(cmd), 0);
    /* b4's manifest there but empty: renamed into place before the syncfs that would have written it */
    char mp[512];
    snprintf(mp, sizeof mp, "%s/_manifests/dev1/b4.jsonl", e->bronze);
    FILE *mf = fopen(mp, "w");
    assert_non_null(mf);
    fclose(mf);
    uint64_t removed = 0, failed = 0;
    assert_int_equal(ingest_lander_sweep(e->ctx, e->bronze, &removed, &failed), 0);
    assert_file(e, rel, v3, n2, T2024 + 2, 0644);
    assert_int_equal(count_intents(e), 0);
    assert_int_equal(unlink(mp), 0);

    /* then it lands, appended in place; an intent whose batch's manifest is there changes nothing */
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t4.manifest, t4.mlen, &b), 0);
    land_all(e, b, &t4);
    ingest_lander_batch_destroy(b);
    assert_file(e, rel, v3, n4, T2024 + 3, 0755);
    assert_int_equal(ino_of(e, rel), ino3);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", saved, keep);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(ingest_lander_sweep(e->ctx, e->bronze, &removed, &failed), 0);
    assert_file(e, rel, v3, n4, T2024 + 3, 0755);
    assert_int_equal(count_intents(e), 0);
    free(t1.manifest);
    free(t2.manifest);
    free(t3.manifest);
    free(t4.manifest);
    free(v);
    free(v3);
}

/* The bronze tree's temporary-file tag (16 hex digits) into tag; p: the tag file's path. */
static void read_tag(const env *e, char tag[64], char p[512])
{
    snprintf(p, 512, "%s/_manifests/.tmp-tag", e->bronze);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    assert_non_null(fgets(tag, 64, f));
    fclose(f);
    assert_int_equal(strlen(tag), 17);
    tag[16] = '\0';
}

static void test_sweep(void **state)
{
    env *e = *state;
    char tag[64] = "", p[512];
    read_tag(e, tag, p);
    char mine[256], mine_long[256], refused[256];
    snprintf(mine, sizeof mine, "dev1/a/.x.csv.ingest-tmp-%s.b7", tag);
    snprintf(mine_long, sizeof mine_long, "dev1/deep/er/.ingest-tmp-%s.b7.3", tag);
    /* a refused file's scratch copy, left by a crash before its batch's commit removed it */
    snprintf(refused, sizeof refused, "_manifests/.refused/.f0.ingest-tmp-%s.0123456789abcdef.b7", tag);
    const char *gone[] = {mine, mine_long, "_manifests/dev1/.b7.jsonl.tmp", "_manifests/.tmp-tag.0badc0de",
                          refused};
    const char *kept[] = {"dev1/a/.x.csv.ingest-tmp.b7", "dev1/logs/_manifests/.2024.jsonl.tmp",
                          "dev1/_manifests/dev1/.b8.jsonl.tmp", "_manifests/dev1/b6.jsonl",
                          "dev1/a/x.csv", "dev1/a/.x.csv.ingest-tmp-0123456789abcdef.b7",
                          "_manifests/.refused/.f1.ingest-tmp-0123456789abcdef.b7"};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        touch(e, gone[i]);
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        touch(e, kept[i]);
    /* a temporary symlink (a file landing as a symlink, cut short at commit) goes too; a landed
     * symlink without the tag stays; neither is followed */
    char lp[512], lk[512];
    snprintf(lp, sizeof lp, "%s/dev1/a/.ingest-tmp-%s.%s.b7.0.l", e->bronze, tag, "0123456789abcdef");
    assert_int_equal(symlink("x.csv", lp), 0);
    snprintf(lk, sizeof lk, "%s/dev1/a/link", e->bronze);
    assert_int_equal(symlink("x.csv", lk), 0);
    /* a second lander of the same tree reads the same tag */
    ingest_lander *l2 = NULL;
    assert_int_equal(ingest_lander_create(e->ctx, e->st, e->idx, e->bronze, NULL, e->key, e->codec, &l2), 0);
    ingest_lander_destroy(l2);
    uint64_t removed = 99, failed = 99;
    assert_int_equal(ingest_lander_sweep(e->ctx, e->bronze, &removed, &failed), 0);
    assert_int_equal(removed, 6);
    assert_int_equal(failed, 0);
    struct stat lsb;
    assert_int_equal(lstat(lp, &lsb), -1);
    assert_int_equal(lstat(lk, &lsb), 0);
    assert_true(exists(e, "dev1/a/x.csv"));
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        assert_false(exists(e, gone[i]));
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        assert_true(exists(e, kept[i]));
    assert_true(exists(e, "_manifests/.tmp-tag"));
    /* a malformed tag stops the sweep with a message naming the file */
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("not hex\n", f);
    fclose(f);
    assert_int_equal(ingest_lander_sweep(e->ctx, e->bronze, &removed, &failed), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), ".tmp-tag"));
    assert_int_equal(ingest_lander_create(e->ctx, e->st, e->idx, e->bronze, NULL, e->key, e->codec, &l2),
                     INGEST_ECORRUPT);
    assert_null(l2);
}

/*
 * A file put at a final name that was free when the batch began (another
 * writer landed the path meanwhile): the batch's version replaces it like
 * any earlier version, and every file lands.
 */
static void test_rename_name_taken_meanwhile(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(CH, 52);
    const tfile f[] = {{"t1", a, 100, T2024, 0644}, {"t2", a + 100, 100, T2024, 0644},
                       {"t3", a + 200, 100, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "b1", f, 3, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(put(e, b, &tb, w[k]), 0);
    char p[512];
    snprintf(p, sizeof p, "%s/dev1/2024/02/29/t2", e->bronze);
    FILE *fp = fopen(p, "w");
    assert_non_null(fp);
    fputs("someone else's bytes", fp);
    fclose(fp);
    assert_int_equal(ingest_lander_commit(b), 0);
    ingest_lander_batch_destroy(b);
    assert_int_equal(count_files(e), 3);
    assert_file(e, "dev1/2024/02/29/t1", a, 100, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/t2", a + 100, 100, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/t3", a + 200, 100, T2024, 0644);
    free(tb.manifest);
    free(a);
}

/*
 * A final name taken by a directory after the batch began (downstream, or
 * by another writer): the batch fails before its first rename, and no file
 * of it is left under a final name.  Once the way is clear, a new batch
 * lands every file.
 */
static void test_rename_blocked(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(CH, 51);
    const tfile f[] = {{"a1", a, 100, T2024, 0644}, {"a2", a + 100, 100, T2024, 0644},
                       {"a3", a + 200, 100, T2024, 0644}, {"a4", a + 300, 100, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "b1", f, 4, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(put(e, b, &tb, w[k]), 0);
    char p[512];
    snprintf(p, sizeof p, "%s/dev1/2024/02/29/a3", e->bronze);
    assert_int_equal(mkdir(p, 0755), 0);
    assert_int_equal(ingest_lander_commit(b), INGEST_EEXIST);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "a directory is there"));
    ingest_lander_batch_destroy(b);
    assert_int_equal(count_files(e), 0); /* neither a1, a2 under final names nor temporaries */
    assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", "b1"), 0);
    assert_int_equal(rmdir(p), 0);
    free(tb.manifest);
    make_batch(e, "dev1", "b2", f, 4, &tb);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    land_all(e, b, &tb);
    ingest_lander_batch_destroy(b);
    assert_int_equal(count_files(e), 4);
    assert_file(e, "dev1/2024/02/29/a3", a + 200, 100, T2024, 0644);
    free(tb.manifest);
    free(a);
}

static void test_protocol_errors(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(2 * CH, 31);
    const tfile f[] = {{"a", a, 2 * CH, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "b1", f, 1, &tb);
    ingest_lander_batch *b = NULL;
    /* another device's manifest */
    assert_int_equal(ingest_lander_begin(e->l, "dev9", tb.manifest, tb.mlen, &b), INGEST_EPROTO);
    assert_null(b);
    /* truncated manifest */
    assert_true(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen / 2, &b) < 0);
    assert_null(b);
    /* a chunk index past the end, and one put twice */
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    assert_int_equal(put(e, b, &tb, 0), 0);
    assert_int_equal(put(e, b, &tb, 0), INGEST_EPROTO);
    ingest_lander_batch_destroy(b);
    assert_int_equal(count_files(e), 0);
    free(tb.manifest);
    free(a);
}

static void refused(env *e, const char *path, const char *msg_part)
{
    uint8_t d[10] = "0123456789";
    const tfile f[] = {{"ok", d, 10, T2024, 0644}, {path, d, 10, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "bx", f, 2, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), INGEST_EINVAL);
    assert_null(b);
    const char *m = ingest_ctx_errmsg(e->ctx);
    if (strstr(m, msg_part) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", m, msg_part);
    free(tb.manifest);
}

/* The manifest writer refuses to write bad paths, so forge them by editing the JSON. */
static void refused_raw(env *e, const char *path, const char *msg_part)
{
    uint8_t d[10] = "0123456789";
    const tfile f[] = {{"PLACEHOLDER_PATH", d, 10, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "bx", f, 1, &tb);
    const char *at = strstr((char *)tb.manifest, "PLACEHOLDER_PATH");
    assert_non_null(at);
    const size_t pre = (size_t)(at - (char *)tb.manifest), pl = strlen(path), old = strlen("PLACEHOLDER_PATH");
    uint8_t *m2 = malloc(tb.mlen + pl);
    memcpy(m2, tb.manifest, pre);
    memcpy(m2 + pre, path, pl);
    memcpy(m2 + pre + pl, at + old, tb.mlen - pre - old);
    ingest_lander_batch *b = NULL;
    const int rc = ingest_lander_begin(e->l, "dev1", m2, tb.mlen - old + pl, &b);
    assert_true(rc == INGEST_EINVAL || rc == INGEST_ECORRUPT);
    assert_null(b);
    const char *m = ingest_ctx_errmsg(e->ctx);
    if (strstr(m, msg_part) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", m, msg_part);
    free(m2);
    free(tb.manifest);
}

/* A header announcing more files than its bytes can hold is refused before anything is sized from it. */
static void test_header_claims_bounded_by_bytes(void **state)
{
    env *e = *state;
    uint8_t d[10] = "0123456789";
    const tfile f[] = {{"a.bin", d, 10, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "bclaim", f, 1, &tb);
    const char *at = strstr((char *)tb.manifest, "\"files\":1,");
    assert_non_null(at);
    /* "files":999 in a manifest of a few hundred bytes: at most len / 40 file lines fit */
    const size_t pre = (size_t)(at - (char *)tb.manifest) + 8, len = tb.mlen + 2;
    uint8_t *m2 = malloc(len);
    assert_non_null(m2);
    memcpy(m2, tb.manifest, pre);
    memcpy(m2 + pre, "999", 3);
    memcpy(m2 + pre + 3, tb.manifest + pre + 1, tb.mlen - pre - 1);
    assert_true(len / 40 < 999);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", m2, len, &b), INGEST_ECORRUPT);
    assert_null(b);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "announces 999 files, but its manifest of"));
    free(m2);
    free(tb.manifest);
}

static void test_traversal(void **state)
{
    env *e = *state;
    refused_raw(e, "../x", "..");
    refused_raw(e, "a/../../x", "..");
    refused_raw(e, "/abs", "abs");
}

/*
 * File 0 of a two-file batch cannot land where the bronze tree stands: it is
 * refused alone, with a reason naming msg_part; file 1 ("ok", the same bytes,
 * so its chunk is copied from the refused file's scratch copy) lands; the
 * manifest records the refusal and no scratch copy is left.
 */
static void refused_alone(env *e, const char *batch, const char *path, int code, const char *msg_part)
{
    /* bytes of this batch only: new to the index (which knows the copies of earlier calls) */
    char dc[11];
    snprintf(dc, sizeof dc, "%-10.10s", batch);
    const uint8_t *d = (const uint8_t *)dc;
    const tfile f[] = {{path, d, 10, T2024, 0644}, {"ok", d, 10, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", batch, f, 2, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    assert_int_equal(ingest_lander_refused_count(b), 1);
    uint32_t fi = 9;
    int rc = 0;
    const char *why = NULL;
    assert_int_equal(ingest_lander_refused(b, 0, &fi, &rc, &why), 0);
    assert_int_equal(ingest_lander_refused(b, 1, &fi, &rc, &why), INGEST_EINVAL);
    assert_int_equal(ingest_lander_refused(b, 0, &fi, &rc, &why), 0);
    assert_int_equal(fi, 0);
    assert_int_equal(rc, code);
    if (strstr(why, msg_part) == NULL)
        fail_msg("reason \"%s\" lacks \"%s\"", why, msg_part);
    land_all(e, b, &tb);
    ingest_lander_stats st;
    ingest_lander_batch_stats(b, &st);
    assert_int_equal(st.chunks_new, 1); /* the copy for "ok" came from the refused file's scratch copy */
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/ok", d, 10, T2024, 0644);
    char p[512], line[4096];
    snprintf(p, sizeof p, "%s/_manifests/dev1/%s.jsonl", e->bronze, batch);
    FILE *mf = fopen(p, "r");
    assert_non_null(mf);
    int found = 0;
    while (fgets(line, sizeof line, mf) != NULL)
        found += strstr(line, "\"landed\":\"\"") != NULL && strstr(line, "\"refused\":\"file ") != NULL &&
                 strstr(line, msg_part) != NULL;
    fclose(mf);
    assert_int_equal(found, 1);
    snprintf(p, sizeof p, "%s/_manifests/.refused", e->bronze);
    DIR *sd = opendir(p); /* removed with the scratch copies when the batch made it */
    for (struct dirent *de; sd != NULL && (de = readdir(sd)) != NULL;)
        if (de->d_name[0] != '.' || (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0))
            fail_msg("scratch copy %s left", de->d_name);
    if (sd != NULL)
        closedir(sd);
    /* the index knows the landed copy only */
    assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", batch), 1);
    free(tb.manifest);
}

/*
 * Refused files that copy from each other: B (refused) holds X, A (refused)
 * holds X again then Y, "ok" holds Y.  ok needs A's scratch copy, which
 * needs B's: the need passes down the chain, and the batch lands ok (before,
 * B was passed over and landing A failed: "temporary file ... vanished").
 */
static void test_refused_chain(void **state)
{
    env *e = *state;
    uint8_t *x = pattern(2 * CH, 77);
    const tfile f[] = {{"B", x, CH, T2024, 0644}, {"A", x, 2 * CH, T2024, 0644}, {"ok", x + CH, CH, T2024, 0644}};
    char p[600];
    snprintf(p, sizeof p, "%s/dev1/2024/02/29/A/in-the-way", e->bronze);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s/dev1/2024/02/29/B/in-the-way'", p, e->bronze);
    assert_int_equal(system(cmd), 0);
    tbatch tb;
    make_batch(e, "dev1", "bchain", f, 3, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    assert_int_equal(ingest_lander_refused_count(b), 2);
    land_all(e, b, &tb);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/ok", x + CH, CH, T2024, 0644);
    assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", "bchain"), 1);
    free(tb.manifest);
    free(x);
}

static void test_symlink_in_bronze(void **state)
{
    env *e = *state;
    char outside[128], lnk[256];
    snprintf(outside, sizeof outside, "%s/outside", e->dir);
    assert_int_equal(mkdir(outside, 0755), 0);
    /* dev1/2024/02/29/sub -> outside: x/... under it is refused, "ok" lands */
    snprintf(lnk, sizeof lnk, "%s/dev1/2024/02/29", e->bronze);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && ln -s %s %s/sub", lnk, outside, lnk);
    assert_int_equal(system(cmd), 0);
    refused_alone(e, "bsym1", "sub/x", INGEST_EINVAL, "symlink or not a directory");
    /* a symlink at the final name's place (an earlier version, as a device's landed symlink is) is
     * replaced by the rename, never written through */
    snprintf(cmd, sizeof cmd, "ln -s %s/target %s/x", outside, lnk);
    assert_int_equal(system(cmd), 0);
    {
        uint8_t d[10] = "abcdefghij"; /* not refused_alone's bytes, which must be new to the index */
        const tfile f[] = {{"x", d, 10, T2024, 0644}};
        tbatch tb;
        make_batch(e, "dev1", "bsym2", f, 1, &tb);
        ingest_lander_batch *b = NULL;
        assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
        assert_int_equal(ingest_lander_refused_count(b), 0);
        land_all(e, b, &tb);
        ingest_lander_batch_destroy(b);
        assert_file(e, "dev1/2024/02/29/x", d, 10, T2024, 0644);
        free(tb.manifest);
    }
    /* a directory there still refuses the file alone */
    snprintf(cmd, sizeof cmd, "mkdir %s/dir", lnk);
    assert_int_equal(system(cmd), 0);
    refused_alone(e, "bsym3", "dir", INGEST_EEXIST, "a directory is there");
    /* and a landed path past 4095 bytes with the layout */
    char longp[4100];
    memset(longp, 'a', sizeof longp);
    for (size_t k = 200; k < 4090; k += 201)
        longp[k] = '/';
    longp[4089] = '\0';
    refused_alone(e, "blong", longp, INGEST_ETOOBIG, "the bronze tree takes at most 4095");
    DIR *d = opendir(outside);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        n += de->d_name[0] != '.';
    closedir(d);
    assert_int_equal(n, 0);
}

/* readlink of bronze/rel, which must be a symlink with mtime mtime_ns */
static void assert_link(const env *e, const char *rel, const char *target, int64_t mtime_ns)
{
    char p[512], got[4096];
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    struct stat sb;
    assert_int_equal(lstat(p, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_int_equal((int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec, mtime_ns);
    const ssize_t n = readlink(p, got, sizeof got);
    assert_int_equal(n, (ssize_t)strlen(target));
    assert_memory_equal(got, target, (size_t)n);
}

/* Entries of directory bronze/rel (names not starting with '.', then those that do). */
static void dir_entries(const env *e, const char *rel, int *plain, int *dotted)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    DIR *d = opendir(p);
    assert_non_null(d);
    *plain = *dotted = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (de->d_name[0] == '.')
            (*dotted)++;
        else
            (*plain)++;
    }
    closedir(d);
}

/*
 * A file whose manifest mode is a symlink lands as a symlink with its bytes
 * as the target (never followed: it points outside bronze), is not indexed
 * (a later regular file of the same bytes wants its chunk), a later file of
 * the same batch copies its chunk from its temporary data file, a new
 * version replaces it, and a target of 0 or more than 4095 bytes refuses the
 * file alone.
 */
static void test_symlink_entry(void **state)
{
    env *e = *state;
    char outside[128];
    snprintf(outside, sizeof outside, "%s/outside", e->dir);
    assert_int_equal(mkdir(outside, 0755), 0);
    const char *t1 = "../../../../../outside/target";
    const tfile f1[] = {{"l", (const uint8_t *)t1, strlen(t1), T2024, S_IFLNK | 0777},
                        {"same", (const uint8_t *)t1, strlen(t1), T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "bl1", f1, 2, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    assert_int_equal(ingest_lander_refused_count(b), 0);
    land_all(e, b, &tb);
    ingest_lander_stats st;
    ingest_lander_batch_stats(b, &st);
    assert_int_equal(st.chunks_new, 1); /* "same" copied the link's chunk from its temporary data file */
    ingest_lander_batch_destroy(b);
    assert_link(e, "dev1/2024/02/29/l", t1, T2024);
    assert_file(e, "dev1/2024/02/29/same", (const uint8_t *)t1, strlen(t1), T2024, 0644);
    int plain = 0, dotted = 0;
    dir_entries(e, "dev1/2024/02/29", &plain, &dotted);
    assert_int_equal(plain, 2);
    assert_int_equal(dotted, 0); /* no temporary data file or symlink left */
    /* the index names "same", never the link */
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_id(e->key, (const uint8_t *)t1, strlen(t1), id);
    ingest_chunk_loc loc;
    assert_int_equal(ingest_index_find(e->idx, id, &loc), 0);
    char p[512];
    assert_int_equal(ingest_index_file_path(e->idx, loc.file_no, p, sizeof p), 0);
    assert_non_null(strstr(p, "/same"));
    free(tb.manifest);

    /* a link alone: not indexed, so a regular file of the same bytes wants its chunk */
    const char *t2 = "/etc/passwd";
    const tfile f2[] = {{"l2", (const uint8_t *)t2, strlen(t2), T2024, S_IFLNK | 0777}};
    make_batch(e, "dev1", "bl2", f2, 1, &tb);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    land_all(e, b, &tb);
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
    assert_link(e, "dev1/2024/02/29/l2", t2, T2024);
    ingest_chunk_id(e->key, (const uint8_t *)t2, strlen(t2), id);
    assert_int_equal(ingest_index_find(e->idx, id, &loc), INGEST_ENOTFOUND);
    const tfile f3[] = {{"r2", (const uint8_t *)t2, strlen(t2), T2024, 0644}};
    make_batch(e, "dev1", "bl3", f3, 1, &tb);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    const uint32_t *w;
    size_t nw;
    ingest_lander_wants(b, &w, &nw);
    assert_int_equal(nw, 1);
    land_all(e, b, &tb);
    ingest_lander_batch_destroy(b);
    free(tb.manifest);

    /* a new version of the link replaces it; then a regular file replaces that */
    const char *t4 = "elsewhere";
    const tfile f4[] = {{"l", (const uint8_t *)t4, strlen(t4), T2024 + 5, S_IFLNK | 0777}};
    make_batch(e, "dev1", "bl4", f4, 1, &tb);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    land_all(e, b, &tb);
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
    assert_link(e, "dev1/2024/02/29/l", t4, T2024 + 5);
    uint8_t d[10] = "0123456789";
    const tfile f5[] = {{"l", d, 10, T2024, 0644}};
    make_batch(e, "dev1", "bl5", f5, 1, &tb);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    land_all(e, b, &tb);
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
    assert_file(e, "dev1/2024/02/29/l", d, 10, T2024, 0644);

    /* an empty target, or one over 4095 bytes: refused alone */
    uint8_t *big = pattern(4096, 7);
    for (size_t k = 0; k < 4096; k++)
        big[k] = (uint8_t)('a' + big[k] % 26);
    const tfile f6[] = {{"empty", d, 0, T2024, S_IFLNK | 0777}, {"big", big, 4096, T2024, S_IFLNK | 0777},
                        {"ok", d, 10, T2024, 0644}};
    make_batch(e, "dev1", "bl6", f6, 3, &tb);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    assert_int_equal(ingest_lander_refused_count(b), 2);
    for (uint32_t k = 0; k < 2; k++) {
        uint32_t fi = 9;
        int rc = 0;
        const char *why = NULL;
        assert_int_equal(ingest_lander_refused(b, k, &fi, &rc, &why), 0);
        assert_int_equal(fi, k);
        assert_non_null(strstr(why, "a symlink's target is 1..4095 bytes"));
    }
    land_all(e, b, &tb);
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
    free(big);
    snprintf(p, sizeof p, "%s/dev1/2024/02/29/big", e->bronze);
    struct stat sb;
    assert_int_equal(lstat(p, &sb), -1);

    /* nothing was written outside bronze */
    plain = dotted = 0;
    DIR *od = opendir(outside);
    assert_non_null(od);
    for (struct dirent *de; (de = readdir(od)) != NULL;)
        plain += de->d_name[0] != '.';
    closedir(od);
    assert_int_equal(plain, 0);
}

static void test_refused_misc(void **state)
{
    env *e = *state;
    refused(e, "ok", "two files"); /* two files landing at one path */
    refused(e, "ok/sub", "both a file and a directory");
}

static void test_abort(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(3 * CH, 41), *c = pattern(CH, 42);
    const tfile f[] = {{"d1/a", c, CH, T2024, 0644}, {"d2/b", a, 3 * CH, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "b1", f, 2, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    /* chunk 3 first (spilled), then 0 and 1: a done, b half-written */
    assert_int_equal(put(e, b, &tb, 3), 0);
    assert_int_equal(put(e, b, &tb, 0), 0);
    assert_int_equal(put(e, b, &tb, 1), 0);
    assert_int_equal(count_files(e), 2);
    char p[600];
    snprintf(p, sizeof p, "%s/dev1/2024/02/29/d1", e->bronze);
    assert_int_equal(access(p, F_OK), 0);
    /* an existing directory of the layout stays; the ones the batch made go with it (issue 18 item 9) */
    snprintf(p, sizeof p, "%s/dev1/keep", e->bronze);
    assert_int_equal(mkdir(p, 0755), 0);
    ingest_lander_abort(b);
    assert_int_equal(count_files(e), 0);
    snprintf(p, sizeof p, "%s/dev1/2024", e->bronze);
    assert_int_equal(access(p, F_OK), -1);
    snprintf(p, sizeof p, "%s/dev1/keep", e->bronze);
    assert_int_equal(access(p, F_OK), 0);
    assert_int_equal(rmdir(p), 0);
    assert_int_equal(ingest_lander_commit(b), INGEST_EINVAL);
    ingest_lander_batch_destroy(b);
    /* destroy of an uncommitted batch removes its temporaries too */
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    assert_int_equal(put(e, b, &tb, 0), 0);
    assert_int_equal(count_files(e), 2); /* a complete, b opened */
    ingest_lander_batch_destroy(b);
    assert_int_equal(count_files(e), 0);
    assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", "b1"), 0);
    free(tb.manifest);
    free(a);
    free(c);
}

static void test_out_of_order(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(5 * CH + 17, 51), *c = pattern(2 * CH, 52);
    const tfile f[] = {{"a", a, 5 * CH + 17, T2024, 0644}, {"c", c, 2 * CH, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "b1", f, 2, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    for (int i = (int)tb.nchunks - 1; i >= 0; i--)
        assert_int_equal(put(e, b, &tb, (uint32_t)i), 0);
    assert_int_equal(ingest_lander_awaited(b), 0);
    assert_int_equal(ingest_lander_commit(b), 0);
    ingest_lander_stats s;
    ingest_lander_batch_stats(b, &s);
    assert_int_equal(s.chunks_spilled, tb.nchunks - 1);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/a", a, 5 * CH + 17, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/c", c, 2 * CH, T2024, 0644);
    free(tb.manifest);
    free(a);
    free(c);
}

/*
 * A file the device withdraws (it vanished at the edge) while the cursor
 * is in it: its temporary file and the directory made for it go, the
 * chunks only it needs are not awaited, the rest lands; it is refused
 * with the device's reason.  A file another file repeats a chunk of, or
 * one landed already, cannot go (EBUSY) and the batch lands as it was.
 */
static void test_withdraw(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(2 * CH, 61), *w = pattern(3 * CH, 62), *c = pattern(2 * CH, 63);
    const tfile f[] = {{"a", a, 2 * CH, T2024, 0644}, {"sub/w", w, 3 * CH, T2024, 0644}, {"c", c, 2 * CH, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "wd1", f, 3, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    assert_int_equal(put(e, b, &tb, 0), 0);
    assert_int_equal(put(e, b, &tb, 1), 0);
    assert_int_equal(put(e, b, &tb, 2), 0); /* the first chunk of sub/w: its temporary file is written */
    assert_true(exists(e, "dev1/2024/02/29/sub"));
    assert_int_equal(ingest_lander_withdraw(b, 0, INGEST_ENOTFOUND, "x"), INGEST_EBUSY); /* landed already */
    assert_int_equal(ingest_lander_withdraw(b, 7, INGEST_ENOTFOUND, "x"), INGEST_EINVAL);
    assert_int_equal(ingest_lander_withdraw(b, 1, INGEST_ENOTFOUND, "vanished at the edge"), 0);
    assert_int_equal(ingest_lander_withdraw(b, 1, INGEST_ENOTFOUND, "again"), INGEST_EINVAL);
    assert_false(exists(e, "dev1/2024/02/29/sub"));
    assert_int_equal(ingest_lander_awaited(b), 2); /* c's two chunks; sub/w's other two are not awaited */
    assert_int_equal(put(e, b, &tb, 5), 0);
    assert_int_equal(put(e, b, &tb, 6), 0);
    assert_int_equal(ingest_lander_commit(b), 0);
    assert_int_equal(ingest_lander_refused_count(b), 1);
    uint32_t fi = 9;
    int code = 0;
    const char *why = NULL;
    assert_int_equal(ingest_lander_refused(b, 0, &fi, &code, &why), 0);
    assert_int_equal(fi, 1);
    assert_int_equal(code, INGEST_ENOTFOUND);
    assert_string_equal(why, "vanished at the edge");
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/a", a, 2 * CH, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/c", c, 2 * CH, T2024, 0644);
    assert_false(exists(e, "dev1/2024/02/29/sub"));
    free(tb.manifest);
    /* y repeats x's bytes: x cannot be withdrawn, the batch lands whole */
    const tfile g[] = {{"x", w, CH, T2024, 0644}, {"y", w, CH, T2024, 0644}};
    make_batch(e, "dev1", "wd2", g, 2, &tb);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    assert_int_equal(ingest_lander_withdraw(b, 0, INGEST_ENOTFOUND, "vanished"), INGEST_EBUSY);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "repeats its chunk"));
    land_all(e, b, &tb);
    assert_int_equal(ingest_lander_refused_count(b), 0);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/x", w, CH, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/y", w, CH, T2024, 0644);
    free(tb.manifest);
    free(a);
    free(w);
    free(c);
}

static void test_new_version(void **state)
{
    env *e = *state;
    uint8_t *v1 = pattern(2 * CH, 61), *v2 = pattern(CH + 5, 62);
    const tfile f1[] = {{"p/q", v1, 2 * CH, T2024, 0644}};
    const tfile f2[] = {{"p/q", v2, CH + 5, T2024 + 7, 0755}};
    tbatch t1, t2;
    make_batch(e, "dev1", "b1", f1, 1, &t1);
    make_batch(e, "dev1", "b2", f2, 1, &t2);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t1.manifest, t1.mlen, &b), 0);
    land_all(e, b, &t1);
    ingest_lander_batch_destroy(b);
    char p[512];
    snprintf(p, sizeof p, "%s/dev1/2024/02/29/p/q", e->bronze);
    struct stat s1;
    assert_int_equal(stat(p, &s1), 0);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t2.manifest, t2.mlen, &b), 0);
    land_all(e, b, &t2);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/p/q", v2, CH + 5, T2024 + 7, 0755);
    assert_int_equal(count_files(e), 1);
    char mp[256];
    snprintf(mp, sizeof mp, "%s/_manifests/dev1/b2.jsonl", e->bronze);
    ingest_manifest_reader *r = NULL;
    assert_int_equal(ingest_manifest_reader_open(e->ctx, mp, &r), 0);
    ingest_manifest_rec rec;
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(rec.version, 2);
    assert_string_equal(rec.landed, "dev1/2024/02/29/p/q");
    ingest_manifest_reader_close(r);
    /* chunks of the old version now point at a replaced file: a batch needing them wants them */
    const tfile f3[] = {{"r", v1, 2 * CH, T2024, 0644}};
    tbatch t3;
    make_batch(e, "dev1", "b3", f3, 1, &t3);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t3.manifest, t3.mlen, &b), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    assert_int_equal(n, 2);
    land_all(e, b, &t3);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/r", v1, 2 * CH, T2024, 0644);
    free(t1.manifest);
    free(t2.manifest);
    free(t3.manifest);
    free(v1);
    free(v2);
}

/* Delta chunks: the predecessor of a wanted chunk is its landed file's bytes at the same offset, clipped. */
static void test_chunk_base(void **state)
{
    env *e = *state;
    const size_t n1 = 3 * CH + 100, n2 = 5 * CH;
    uint8_t *v = pattern(n2, 91), *fresh = pattern(2 * CH, 92);
    const tfile f1[] = {{"p/d", v, n1, T2024, 0644}};
    tbatch t1, t2;
    make_batch(e, "dev1", "b1", f1, 1, &t1);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t1.manifest, t1.mlen, &b), 0);
    land_all(e, b, &t1);
    ingest_lander_batch_destroy(b);
    uint8_t *v2 = malloc(n2);
    assert_non_null(v2);
    memcpy(v2, v, n2);
    v2[CH + 10] ^= 0x33; /* chunk 1 changed in place; chunks 3 (100 bytes were landed) and 4 are new */
    const tfile f2[] = {{"n", fresh, 2 * CH, T2024, 0644}, {"p/d", v2, n2, T2024 + 1, 0644}};
    make_batch(e, "dev1", "b2", f2, 2, &t2);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t2.manifest, t2.mlen, &b), 0);
    const uint32_t *w;
    size_t nw;
    ingest_lander_wants(b, &w, &nw);
    assert_int_equal(nw, 5); /* n: 0, 1; p/d: 3, 5, 6 */
    static uint8_t got[CH];
    uint32_t blen = 0;
    assert_int_equal(ingest_lander_chunk_base(b, 0, got, sizeof got, &blen), 1); /* a new file: nothing landed */
    assert_int_equal(blen, 0);
    assert_int_equal(ingest_lander_chunk_base(b, 3, got, sizeof got, &blen), 0);
    assert_int_equal(blen, CH);
    assert_memory_equal(got, v + CH, CH); /* the old bytes at the chunk's offset */
    assert_int_equal(ingest_lander_chunk_base(b, 5, got, sizeof got, &blen), 0);
    assert_int_equal(blen, 100); /* clipped to the landed size */
    assert_memory_equal(got, v + 3 * CH, 100);
    assert_int_equal(ingest_lander_chunk_base(b, 6, NULL, 0, &blen), 1); /* past the landed size */
    assert_int_equal(ingest_lander_chunk_base(b, 3, got, sizeof got, &blen), 0); /* backwards: from the file's start */
    assert_memory_equal(got, v + CH, CH);
    assert_int_equal(ingest_lander_chunk_base(b, 3, got, CH - 1, &blen), INGEST_EINVAL); /* cap below the chunk */
    assert_int_equal(ingest_lander_chunk_base(b, 7, NULL, 0, &blen), INGEST_EINVAL);
    land_all(e, b, &t2);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/p/d", v2, n2, T2024 + 1, 0644);
    free(t1.manifest);
    free(t2.manifest);
    free(v);
    free(v2);
    free(fresh);
}

static void test_layout(void **state)
{
    env *e = *state;
    char out[512];
    assert_int_equal(ingest_lander_landed_path(e->l, "dev1", "b1", "x/y.csv", T2024, out, sizeof out), 0);
    assert_string_equal(out, "dev1/2024/02/29/x/y.csv");
    /* one ns before the epoch is 1969-12-31 */
    assert_int_equal(ingest_lander_landed_path(e->l, "dev1", "b1", "z", -1, out, sizeof out), 0);
    assert_string_equal(out, "dev1/1969/12/31/z");
    assert_int_equal(ingest_lander_landed_path(e->l, "dev1", "b1", "../z", 0, out, sizeof out), INGEST_EINVAL);
    assert_int_equal(ingest_lander_landed_path(e->l, "dev1", "b1", "a//z", 0, out, sizeof out), INGEST_EINVAL);
    assert_int_equal(ingest_lander_landed_path(e->l, "dev1", "b1", "./z", 0, out, sizeof out), INGEST_EINVAL);
    assert_int_equal(ingest_lander_landed_path(e->l, "../d", "b1", "z", 0, out, sizeof out), INGEST_EINVAL);
    assert_int_equal(ingest_lander_landed_path(e->l, "dev1", "b1", "z", 0, out, 8), INGEST_ETOOBIG);

    ingest_lander *l2 = NULL;
    assert_int_equal(ingest_lander_create(e->ctx, e->st, e->idx, e->bronze, "{batch}/{yyyy}-{mm}-{dd}/{device}_{path}",
                                          e->key, e->codec, &l2),
                     0);
    assert_int_equal(ingest_lander_landed_path(l2, "dev1", "b7", "x/y.csv", 86400ll * 1000000000ll, out, sizeof out), 0);
    assert_string_equal(out, "b7/1970-01-02/dev1_x/y.csv");
    ingest_lander_destroy(l2);
    const char *bad[] = {"{device}/{nope}/{path}", "/abs/{path}", "{device}/x", "{device}/../{path}",
                         "_manifests/{path}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        l2 = (ingest_lander *)1;
        assert_int_equal(ingest_lander_create(e->ctx, e->st, e->idx, e->bronze, bad[i], e->key, e->codec, &l2),
                         INGEST_EINVAL);
        assert_null(l2);
    }
}

/* A batch of nf files under dir/, its chunks all put, prepared (not committed). */
static ingest_lander_batch *prepared_batch(env *e, ingest_lander *l, const char *name, const char *dir, int nf,
                                           uint8_t **d, char (*names)[32], tbatch *tb)
{
    tfile f[32];
    assert_true(nf <= 32);
    for (int i = 0; i < nf; i++) {
        d[i] = pattern(300 + (size_t)i, (uint32_t)(name[0] * 100 + i));
        snprintf(names[i], 32, "%s/f%02d", dir, i);
        f[i] = (tfile){names[i], d[i], 300 + (size_t)i, T2024, 0644};
    }
    make_batch(e, "dev1", name, f, (size_t)nf, tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(l, "dev1", tb->manifest, tb->mlen, &b), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    assert_int_equal(n, (size_t)nf);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(put(e, b, tb, w[k]), 0);
    assert_int_equal(ingest_lander_commit_prepare(b), 0);
    return b;
}

/*
 * Landers sharing their syncfs count (a core's): a batch whose files were
 * all written before the second syncfs of the batch ahead of it needs no
 * syncfs of its own before its renames; one prepared after it does.
 */
static void test_syncfs_shared(void **state)
{
    env *e = *state;
    enum { NF = 20 };
    ingest__syncs sy;
    ingest__syncs_init(&sy);
    ingest_lander *l2 = NULL;
    assert_int_equal(ingest_lander_create(e->ctx, e->st, e->idx, e->bronze, NULL, e->key, e->codec, &l2), 0);
    ingest__lander_share_syncs(e->l, &sy);
    ingest__lander_share_syncs(l2, &sy);
    uint8_t *d[3][NF];
    char names[3][NF][32];
    tbatch tb[3];
    ingest_lander_batch *a = prepared_batch(e, e->l, "a1", "x", NF, d[0], names[0], &tb[0]);
    ingest_lander_batch *b = prepared_batch(e, l2, "b1", "y", NF, d[1], names[1], &tb[1]);
    ingest_lander_stats s;
    assert_int_equal(ingest_lander_commit_finish(a, NULL), 0);
    ingest_lander_batch_stats(a, &s);
    assert_int_equal(s.syncs, 2); /* its data, then its names and manifest (b's data with them) */
    assert_int_equal(ingest_lander_commit_finish(b, NULL), 0);
    ingest_lander_batch_stats(b, &s);
    assert_int_equal(s.syncs, 1); /* a's second syncfs began after b's last write */
    ingest_lander_batch_destroy(a);
    ingest_lander_batch_destroy(b);
    /* prepared after every syncfs so far: its own two */
    ingest_lander_batch *c = prepared_batch(e, e->l, "c1", "z", NF, d[2], names[2], &tb[2]);
    assert_int_equal(ingest_lander_commit_finish(c, NULL), 0);
    ingest_lander_batch_stats(c, &s);
    assert_int_equal(s.syncs, 2);
    assert_int_equal(atomic_load(&sy.started), 5);
    ingest_lander_batch_destroy(c);
    /* a lander counting alone does not see the others' syncfs */
    ingest__lander_share_syncs(l2, NULL);
    uint8_t *d4[NF];
    char n4[NF][32];
    tbatch t4;
    ingest_lander_batch *g = prepared_batch(e, l2, "g1", "w", NF, d4, n4, &t4);
    assert_int_equal(ingest_lander_commit_finish(g, NULL), 0); /* its own count had none since: both its own */
    ingest_lander_batch_stats(g, &s);
    assert_int_equal(s.syncs, 2);
    ingest_lander_batch_destroy(g);
    ingest_lander_destroy(l2);
    ingest__lander_share_syncs(e->l, NULL); /* sy ends with this function */
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < NF; i++) {
            char rel[64];
            snprintf(rel, sizeof rel, "dev1/2024/02/29/%s", names[k][i]);
            assert_file(e, rel, d[k][i], 300 + (size_t)i, T2024, 0644);
            free(d[k][i]);
        }
        free(tb[k].manifest);
    }
    for (int i = 0; i < NF; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "dev1/2024/02/29/%s", n4[i]);
        assert_file(e, rel, d4[i], 300 + (size_t)i, T2024, 0644);
        free(d4[i]);
    }
    free(t4.manifest);
    assert_int_equal(count_files(e), 4 * NF);
}

/* Names in bronze/rel holding the temporary-file tag (a staged directory or a temporary file). */
static int tagged_entries(const env *e, const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    DIR *d = opendir(p);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        n += strstr(de->d_name, ".ingest-tmp-") != NULL;
    closedir(d);
    return n;
}

static void free_files(uint8_t **d, int n)
{
    for (int i = 0; i < n; i++)
        free(d[i]);
}

#define DAY "dev1/2024/02/29/"

/*
 * A batch of 16 files or more writes the files of a directory missing from
 * bronze into that directory made under a temporary name, and renames it
 * into place whole at commit: before the commit the final directory is not
 * there (only its staged twin), after it every file is, byte for byte, a
 * directory made inside the staged one included, and no temporary name is
 * left.
 */
static void test_stage_whole(void **state)
{
    env *e = *state;
    uint8_t *d[20];
    char names[20][32];
    tfile f[20];
    for (int i = 0; i < 20; i++) {
        d[i] = pattern(200 + (size_t)i, 700u + (uint32_t)i);
        snprintf(names[i], 32, i < 17 ? "n1/s/f%02d" : "n1/s/in/g%02d", i);
        f[i] = (tfile){names[i], d[i], 200 + (size_t)i, T2024, 0644};
    }
    tbatch tb;
    make_batch(e, "dev1", "w1", f, 20, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    assert_int_equal(n, 20);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(put(e, b, &tb, w[k]), 0);
    assert_int_equal(ingest_lander_commit_prepare(b), 0);
    assert_true(exists(e, DAY "n1"));        /* its parent: made as for any file */
    assert_false(exists(e, DAY "n1/s"));     /* not there before the commit ... */
    assert_int_equal(tagged_entries(e, DAY "n1"), 1); /* ... but its staged twin is */
    assert_int_equal(ingest_lander_commit_finish(b, NULL), 0);
    ingest_lander_batch_destroy(b);
    for (int i = 0; i < 20; i++) {
        char rel[96];
        snprintf(rel, sizeof rel, DAY "%s", names[i]);
        assert_file(e, rel, d[i], 200 + (size_t)i, T2024, 0644);
    }
    assert_int_equal(count_files(e), 20);
    assert_int_equal(tagged_entries(e, DAY "n1"), 0);
    assert_int_equal(tagged_entries(e, DAY "n1/s"), 0);
    free(tb.manifest);
    free_files(d, 20);
}

/*
 * Two batches landing into the same new directory, the second written
 * before the first commits (a pipelined link: a directory's files split
 * between batches): both stage it; the first is renamed into place, the
 * second finds the directory there and moves its files in one by one
 * (merge), a directory the first did not make included.  Every file lands,
 * and no staged directory is left.
 */
static void test_stage_merge(void **state)
{
    env *e = *state;
    uint8_t *d1[20], *d2[20];
    char n1[20][32], n2[20][32];
    tbatch t1, t2;
    ingest_lander_batch *b1 = prepared_batch(e, e->l, "m1", "m/x", 20, d1, n1, &t1);
    /* the second batch: 18 files beside the first's, 2 in a directory under it */
    tfile f[20];
    for (int i = 0; i < 20; i++) {
        d2[i] = pattern(300 + (size_t)i, 900u + (uint32_t)i);
        snprintf(n2[i], 32, i < 18 ? "m/x/h%02d" : "m/x/y/h%02d", i);
        f[i] = (tfile){n2[i], d2[i], 300 + (size_t)i, T2024, 0644};
    }
    make_batch(e, "dev1", "m2", f, 20, &t2);
    ingest_lander *l2 = NULL; /* a second lander of the tree, as a core's next batch has */
    assert_int_equal(ingest_lander_create(e->ctx, e->st, e->idx, e->bronze, NULL, e->key, e->codec, &l2), 0);
    ingest_lander_batch *b2 = NULL;
    assert_int_equal(ingest_lander_begin(l2, "dev1", t2.manifest, t2.mlen, &b2), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b2, &w, &n);
    assert_int_equal(n, 20);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(put(e, b2, &t2, w[k]), 0);
    assert_int_equal(ingest_lander_commit_prepare(b2), 0);
    assert_int_equal(tagged_entries(e, DAY "m"), 2); /* both staged m/x */
    assert_int_equal(ingest_lander_commit_finish(b1, NULL), 0);
    assert_int_equal(ingest_lander_commit_finish(b2, NULL), 0);
    ingest_lander_batch_destroy(b1);
    ingest_lander_batch_destroy(b2);
    ingest_lander_destroy(l2);
    for (int i = 0; i < 20; i++) {
        char rel[96];
        snprintf(rel, sizeof rel, DAY "%s", n1[i]);
        assert_file(e, rel, d1[i], 300 + (size_t)i, T2024, 0644);
        snprintf(rel, sizeof rel, DAY "%s", n2[i]);
        assert_file(e, rel, d2[i], 300 + (size_t)i, T2024, 0644);
    }
    assert_int_equal(count_files(e), 40);
    assert_int_equal(tagged_entries(e, DAY "m"), 0);
    assert_int_equal(tagged_entries(e, DAY "m/x"), 0);
    free(t1.manifest);
    free(t2.manifest);
    free_files(d1, 20);
    free_files(d2, 20);
}

/* The hook of test_stage_taken: makes bronze/DAY "t/x" (and a file in it) when the commit starts its renames. */
typedef struct {
    const env *e;
    int placed;
} taker;

static void take_dir(void *ud, const char *device, int phase)
{
    taker *t = ud;
    (void)device;
    if (phase != INGEST__LANDER_HOOK_PLACE || t->placed++)
        return;
    char p[512];
    snprintf(p, sizeof p, "%s/" DAY "t/x", t->e->bronze);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/" DAY "t/x/other", t->e->bronze);
    const int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "x", 1), 1);
    close(fd);
}

/*
 * A staged directory whose final name is taken after the commit checked it
 * free and before its rename (a batch of few files, landing meanwhile, made
 * the directory for files of its own: such a batch makes its directories
 * as it goes, without the lock the commit holds): the stage is merged
 * instead, every file lands byte for byte beside what was there, and no
 * staged directory is left.  Before, the batch failed ("rename into place
 * the directory ...: File exists"), seen with two test suites at once.
 */
static void test_stage_taken(void **state)
{
    env *e = *state;
    uint8_t *d[20];
    char names[20][32];
    tbatch tb;
    ingest_lander_batch *b = prepared_batch(e, e->l, "tk", "t/x", 20, d, names, &tb);
    assert_false(exists(e, DAY "t/x"));
    taker t = {e, 0};
    ingest__lander_set_hook(e->l, take_dir, &t);
    assert_int_equal(ingest_lander_commit_finish(b, NULL), 0);
    ingest__lander_set_hook(e->l, NULL, NULL);
    ingest_lander_batch_destroy(b);
    assert_int_equal(t.placed, 1);
    for (int i = 0; i < 20; i++) {
        char rel[96];
        snprintf(rel, sizeof rel, DAY "%s", names[i]);
        assert_file(e, rel, d[i], 300 + (size_t)i, T2024, 0644);
    }
    assert_true(exists(e, DAY "t/x/other"));
    assert_int_equal(count_files(e), 21);
    assert_int_equal(tagged_entries(e, DAY "t"), 0);
    assert_int_equal(tagged_entries(e, DAY "t/x"), 0);
    free(tb.manifest);
    free_files(d, 20);
}

/*
 * A directory removed after the batch entered it and before it made its
 * file there (another batch that failed removing the empty directories it
 * had made, or a job tidying bronze): the create finds ENOENT.  The batch
 * makes the directory again and lands, whichever thread was making the
 * file: the landing thread (files of two chunks, and small ones it keeps)
 * or the small-file helper (small ones handed over).  Before, the batch
 * failed ("create temporary file for ...: No such file or directory") and
 * the device sent it again.  Each file has a directory of its own, there
 * before the batch and empty; the hook removes a file's directory just
 * before its create (but every eighth).
 */
#define RM_N 64

/* Make directory rel under bronze (new), and its parents as needed. */
static void make_dirs(const env *e, const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    for (char *c = p + strlen(e->bronze) + 1; *c; c++)
        if (*c == '/') {
            *c = '\0';
            (void)mkdir(p, 0755);
            *c = '/';
        }
    assert_int_equal(mkdir(p, 0755), 0);
}

typedef struct remover {
    env *e;
    int calls, removed;
} remover;

/* Land batch name of files f[0, n) of dev1 with hook on the lander meanwhile; its statistics in *st. */
static void land_hooked(env *e, const char *name, const tfile *f, size_t n, ingest__lander_hook_fn hook, void *ud,
                        ingest_lander_stats *st)
{
    tbatch tb;
    make_batch(e, "dev1", name, f, n, &tb);
    ingest_lander_batch *b = NULL;
    sf_begin(e, &tb, &b);
    ingest__lander_set_hook(e->l, hook, ud);
    land_all(e, b, &tb);
    ingest__lander_set_hook(e->l, NULL, NULL);
    ingest_lander_batch_stats(b, st);
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
}

static void remove_dir_at_create(void *ud, const char *device, int phase)
{
    remover *r = ud;
    (void)device;
    if (phase != INGEST__LANDER_HOOK_CREATE)
        return;
    const int k = r->calls++ % RM_N;
    if (k % 8 == 4)
        return; /* kept: the helper makes some files where it was given them */
    char p[512];
    snprintf(p, sizeof p, "%s/" DAY "g/d%02d", r->e->bronze, k);
    if (rmdir(p) == 0)
        r->removed++;
}

static void test_dir_removed_before_create(void **state)
{
    env *e = *state;
    uint8_t *d[RM_N];
    size_t len[RM_N];
    char paths[RM_N][32];
    tfile f[RM_N];
    char p[512];
    make_dirs(e, DAY "g");
    for (int k = 0; k < RM_N; k++) {
        len[k] = k % 4 == 3 ? CH + 500 : 700; /* two chunks: the landing thread's own create */
        d[k] = pattern(len[k], 9100u + (uint32_t)k);
        snprintf(paths[k], sizeof paths[k], "g/d%02d/f", k);
        f[k] = (tfile){paths[k], d[k], len[k], T2024, 0644u};
        snprintf(p, sizeof p, "%s/" DAY "g/d%02d", e->bronze, k);
        assert_int_equal(mkdir(p, 0755), 0);
    }
    remover r = {e, 0, 0};
    ingest_lander_stats st;
    land_hooked(e, "rm1", f, RM_N, remove_dir_at_create, &r, &st);
    assert_int_equal(r.calls, RM_N);         /* one create a file */
    assert_true(r.removed >= RM_N / 2);     /* the files land in order: nearly every directory went */
    assert_int_equal(st.dirs_remade, r.removed); /* and each was made again */
    assert_true(st.files_helped > 0);       /* some by the helper (those it was to make and could not: not counted) */
    for (int k = 0; k < RM_N; k++) {
        snprintf(p, sizeof p, DAY "%s", paths[k]);
        assert_file(e, p, d[k], len[k], T2024, 0644);
        snprintf(p, sizeof p, DAY "g/d%02d", k);
        assert_int_equal(tagged_entries(e, p), 0);
        free(d[k]);
    }
    assert_int_equal(tagged_entries(e, DAY "g"), 0);
    assert_int_equal(count_files(e), RM_N);
}

/*
 * The same with every file in one directory, removed once, at the first
 * create: the directory is made again once (not once per file whose
 * create found the removed directory's descriptor), and every file lands.
 */
static void remove_h_once(void *ud, const char *device, int phase)
{
    remover *r = ud;
    (void)device;
    if (phase != INGEST__LANDER_HOOK_CREATE || r->calls++ > 0)
        return;
    char p[512];
    snprintf(p, sizeof p, "%s/" DAY "h", r->e->bronze);
    if (rmdir(p) == 0)
        r->removed++;
}

static void test_dir_removed_once(void **state)
{
    env *e = *state;
    uint8_t *d[SF_N];
    char paths[SF_N][32];
    tfile f[SF_N];
    same_size_files("h", 700, 9300, d, paths, f);
    char p[512];
    make_dirs(e, DAY "h");
    remover r = {e, 0, 0};
    ingest_lander_stats st;
    land_hooked(e, "rm2", f, SF_N, remove_h_once, &r, &st);
    assert_int_equal(r.removed, 1);
    assert_int_equal(st.dirs_remade, 1);
    for (int k = 0; k < SF_N; k++) {
        snprintf(p, sizeof p, DAY "%s", paths[k]);
        assert_file(e, p, d[k], 700, T2024, 0644);
        free(d[k]);
    }
    assert_int_equal(tagged_entries(e, DAY "h"), 0);
    assert_int_equal(count_files(e), SF_N);
}

/*
 * A staged directory removed with files the batch had made in it (the
 * crash sweep of another receiver sharing the tree, docs/kafka.md), while
 * later files of the batch still go there: the stage is made again for
 * them, but the files made before are gone, and the batch fails at its
 * commit.  (It did not: the stage made again was put in place with the
 * later files only, and the batch was acknowledged without the others.)
 * Sent again, it lands whole.
 */
typedef struct sweeper {
    env *e;
    int calls, at;
    int files_only; /* remove the files in the batch's stages, not the stages */
    uint64_t swept;
} sweeper;

/* Unlink the files in the staged directories (tagged names) under bronze/DAY, leaving the directories. */
static uint64_t unlink_staged_files(const env *e)
{
    char p[512];
    snprintf(p, sizeof p, "%s/" DAY, e->bronze);
    DIR *d = opendir(p);
    assert_non_null(d);
    uint64_t n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (strstr(de->d_name, ".ingest-tmp-") == NULL)
            continue;
        const int sfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY);
        assert_true(sfd >= 0);
        DIR *sd = fdopendir(sfd);
        assert_non_null(sd);
        for (struct dirent *fe; (fe = readdir(sd)) != NULL;)
            if (fe->d_name[0] != '.' && unlinkat(dirfd(sd), fe->d_name, 0) == 0)
                n++;
        closedir(sd);
    }
    closedir(d);
    return n;
}

static void sweep_at_create(void *ud, const char *device, int phase)
{
    sweeper *w = ud;
    (void)device;
    if (phase != INGEST__LANDER_HOOK_CREATE || ++w->calls != w->at)
        return;
    if (w->files_only) {
        /* as a sweep whose rmdir of the stage lost to a file made meanwhile: its mark made anew first
         * (lander__sweep_mark), then the files gone, the stage left */
        char m[512], mn[520];
        snprintf(m, sizeof m, "%s/_manifests/.sweep", w->e->bronze);
        snprintf(mn, sizeof mn, "%s.new", m);
        FILE *f = fopen(mn, "w");
        assert_non_null(f);
        fclose(f);
        assert_int_equal(rename(mn, m), 0);
        w->swept = unlink_staged_files(w->e);
        return;
    }
    ingest_ctx *c = ingest_ctx_create(NULL); /* (the hook may run on the small-file helper's thread) */
    assert_non_null(c);
    uint64_t failed = 0; /* (the stage's rmdir can lose to a file the helper makes meanwhile: then it stays) */
    assert_int_equal(ingest_lander_sweep(c, w->e->bronze, &w->swept, &failed), 0);
    ingest_ctx_destroy(c);
}

static void swept_case(env *e, int files_only)
{
    uint8_t *d[SF_N];
    char paths[SF_N][32], p[512];
    tfile f[SF_N];
    same_size_files(files_only ? "m" : "k", 700, 9500, d, paths, f);
    tbatch tb;
    const char *name = files_only ? "sw2" : "sw1";
    make_batch(e, "dev1", name, f, SF_N, &tb);
    ingest_lander_batch *b = NULL;
    sf_begin(e, &tb, &b);
    sweeper w = {e, 0, SF_N / 2, files_only, 0};
    ingest__lander_set_hook(e->l, sweep_at_create, &w);
    const uint32_t *wl;
    size_t n;
    ingest_lander_wants(b, &wl, &n);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(put(e, b, &tb, wl[k]), 0);
    int rc;
    while ((rc = ingest_lander_commit(b)) == INGEST_EBUSY) {
        ingest_lander_rewants(b, &wl, &n);
        for (size_t k = 0; k < n; k++)
            assert_int_equal(put(e, b, &tb, wl[k]), 0);
    }
    ingest__lander_set_hook(e->l, NULL, NULL);
    assert_true(w.swept > 0);                  /* the files made before (and their stage, when swept) */
    assert_int_equal(rc, INGEST_EIO);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "is gone (removed from bronze under the batch"));
    ingest_lander_batch_destroy(b);
    assert_int_equal(count_files(e), 0);                      /* nothing of it stays: no file, */
    assert_false(exists(e, files_only ? DAY "m" : DAY "k")); /* no directory */
    land_hooked(e, name, f, SF_N, NULL, NULL, &(ingest_lander_stats){0});
    for (int k = 0; k < SF_N; k++) {
        snprintf(p, sizeof p, DAY "%s", paths[k]);
        assert_file(e, p, d[k], 700, T2024, 0644);
        free(d[k]);
    }
    assert_int_equal(count_files(e), SF_N);
    free(tb.manifest);
}

static void test_dir_swept_with_files(void **state)
{
    swept_case(*state, 0);
}

/* The same with the files removed from the stage and the stage left (no directory made again), after the
 * sweep's mark: the batch fails too (it was acknowledged with the files made after the removal only). */
static void test_stage_files_removed(void **state)
{
    swept_case(*state, 1);
}

/*
 * A file put where a staged directory goes, after the batch wrote it: the
 * commit refuses the batch before any rename, naming the directory; nothing
 * of the batch stays, its staged directory included.  Once the way is
 * clear, the batch lands.
 */
static void test_stage_blocked(void **state)
{
    env *e = *state;
    uint8_t *d[20];
    char names[20][32];
    tbatch tb;
    ingest_lander_batch *b = prepared_batch(e, e->l, "k1", "k/z", 20, d, names, &tb);
    touch(e, DAY "k/z");
    assert_int_equal(ingest_lander_commit_finish(b, NULL), INGEST_EEXIST);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "cannot make directory " DAY "k/z: a file is there"));
    ingest_lander_batch_destroy(b);
    assert_int_equal(count_files(e), 1); /* the file in the way alone */
    assert_int_equal(tagged_entries(e, DAY "k"), 0);
    assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", "k1"), 0);
    char p[512];
    snprintf(p, sizeof p, "%s/" DAY "k/z", e->bronze);
    assert_int_equal(unlink(p), 0);
    free(tb.manifest);
    free_files(d, 20);
    b = prepared_batch(e, e->l, "k1", "k/z", 20, d, names, &tb);
    assert_int_equal(ingest_lander_commit_finish(b, NULL), 0);
    ingest_lander_batch_destroy(b);
    assert_int_equal(count_files(e), 20);
    free(tb.manifest);
    free_files(d, 20);
}

/*
 * The only file of a staged directory withdrawn while it was being
 * written: the staged directory goes with it, and the batch's other files
 * (in another staged directory, one written after the withdrawal
 * included) land; nothing of the withdrawn one is left.
 */
static void test_stage_withdraw(void **state)
{
    env *e = *state;
    uint8_t *d[18];
    char names[18][32];
    tfile f[18];
    for (int i = 0; i < 18; i++) {
        const size_t len = i == 16 ? 3 * CH : 100 + (size_t)i;
        d[i] = pattern(len, 1100u + (uint32_t)i);
        snprintf(names[i], 32, i == 16 ? "wd/q/w" : "wd/p/a%02d", i);
        f[i] = (tfile){names[i], d[i], len, T2024, 0644};
    }
    tbatch tb;
    make_batch(e, "dev1", "sw1", f, 18, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    for (uint32_t k = 0; k <= 16; k++) /* files 0..15, then the first chunk of wd/q/w */
        assert_int_equal(put(e, b, &tb, k), 0);
    assert_int_equal(tagged_entries(e, DAY "wd"), 2);
    assert_int_equal(ingest_lander_withdraw(b, 16, INGEST_ENOTFOUND, "vanished at the edge"), 0);
    assert_int_equal(tagged_entries(e, DAY "wd"), 1); /* wd/q's staged directory went with it */
    assert_int_equal(put(e, b, &tb, 19), 0);
    assert_int_equal(ingest_lander_commit(b), 0);
    assert_int_equal(ingest_lander_refused_count(b), 1);
    ingest_lander_batch_destroy(b);
    for (int i = 0; i < 18; i++) {
        char rel[96];
        snprintf(rel, sizeof rel, DAY "%s", names[i]);
        if (i == 16)
            assert_false(exists(e, rel));
        else
            assert_file(e, rel, d[i], 100 + (size_t)i, T2024, 0644);
    }
    assert_false(exists(e, DAY "wd/q"));
    assert_int_equal(tagged_entries(e, DAY "wd"), 0);
    assert_int_equal(count_files(e), 17);
    free(tb.manifest);
    free_files(d, 18);
}

/* Read bronze/rel (any length: opened one component at a time) into buf; its length, or -1. */
static ssize_t read_deep(const env *e, const char *rel, uint8_t *buf, size_t cap)
{
    int fd = open(e->bronze, O_RDONLY | O_DIRECTORY);
    char part[4400];
    snprintf(part, sizeof part, "%s", rel);
    char *c = part;
    for (char *slash; fd >= 0 && (slash = strchr(c, '/')) != NULL; c = slash + 1) {
        *slash = '\0';
        const int nfd = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        close(fd);
        fd = nfd;
    }
    if (fd < 0)
        return -1;
    const int f = openat(fd, c, O_RDONLY | O_NOFOLLOW);
    close(fd);
    if (f < 0)
        return -1;
    const ssize_t n = read(f, buf, cap);
    close(f);
    return n;
}

/*
 * A new directory whose staged path would pass the bound of a landed path
 * (the temporary name is longer than the final one): its files, landed at
 * 4,076 bytes, are written the usual way, and every one lands.
 */
static void test_stage_long_path(void **state)
{
    env *e = *state;
    static char dir[4200], names[20][4300];
    size_t o = 0;
    for (int k = 0; k < 17; k++) {
        /* the last one short enough for its staged name to be the long form: its name and the tags */
        const size_t n = k < 16 ? 244 : 119;
        memset(dir + o, 'a' + k, n);
        o += n;
        dir[o++] = '/';
    }
    dir[o - 1] = '\0'; /* 17 components: 4,039 bytes */
    uint8_t *d[20];
    tfile f[20];
    for (int i = 0; i < 20; i++) {
        d[i] = pattern(100 + (size_t)i, 1300u + (uint32_t)i);
        char base[21];
        memset(base, 'x', 20);
        base[20] = '\0';
        base[0] = (char)('A' + i);
        snprintf(names[i], sizeof names[i], "%s/%s", dir, base);
        f[i] = (tfile){names[i], d[i], 100 + (size_t)i, T2024, 0644};
    }
    /* 4,076 bytes landed; staged, the directory alone would be 4,107 */
    assert_int_equal(strlen(DAY) + strlen(names[0]), 4076);
    tbatch tb;
    make_batch(e, "dev1", "lp1", f, 20, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    land_all(e, b, &tb);
    ingest_lander_batch_destroy(b);
    for (int i = 0; i < 20; i++) {
        char rel[4400];
        snprintf(rel, sizeof rel, DAY "%.4200s", names[i]);
        uint8_t got[256];
        assert_int_equal(read_deep(e, rel, got, sizeof got), 100 + i);
        assert_memory_equal(got, d[i], 100 + (size_t)i);
    }
    assert_int_equal(count_files(e), 20);
    free(tb.manifest);
    free_files(d, 20);
}

/*
 * A staged directory a crash left (files, a directory and a symlink in it)
 * is removed by the sweep with all it holds, the symlink's target
 * untouched; a directory whose name lacks the tag stays.
 */
static void test_sweep_staged(void **state)
{
    env *e = *state;
    char tag[64] = "", p[512];
    read_tag(e, tag, p);
    char st[256], rel[320];
    snprintf(st, sizeof st, DAY ".z.ingest-tmp-%s.0123456789abcdef.b3.d", tag);
    snprintf(rel, sizeof rel, "%s/a.json", st);
    touch(e, rel);
    snprintf(rel, sizeof rel, "%s/in/b.json", st);
    touch(e, rel);
    touch(e, DAY "keep/c.json");
    snprintf(p, sizeof p, "%s/%s/link", e->bronze, st);
    char target[512];
    snprintf(target, sizeof target, "%s/" DAY "keep", e->bronze);
    assert_int_equal(symlink(target, p), 0);
    uint64_t removed = 0, failed = 99;
    assert_int_equal(ingest_lander_sweep(e->ctx, e->bronze, &removed, &failed), 0);
    assert_int_equal(failed, 0);
    assert_int_equal(removed, 5); /* a.json, link, in/b.json, in and the staged directory */
    assert_false(exists(e, st));
    assert_true(exists(e, DAY "keep/c.json"));
    assert_int_equal(count_files(e), 1);
}

static void test_hash_mismatch(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(2 * CH, 71);
    const tfile f[] = {{"a", a, 2 * CH, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "b1", f, 1, &tb);
    /* corrupt the whole-file hash in the manifest (first hex digit after "hash":") */
    char *h = strstr((char *)tb.manifest, "\"hash\":\"");
    assert_non_null(h);
    h += 8;
    *h = *h == '0' ? '1' : '0';
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    assert_int_equal(put(e, b, &tb, 0), 0);
    assert_int_equal(put(e, b, &tb, 1), INGEST_EMISMATCH);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "whole-file hash"));
    assert_int_equal(count_files(e), 0);
    ingest_lander_batch_destroy(b);
    free(tb.manifest);
    free(a);
}

/* 16 files or more: two syncfs() per batch instead of an fsync per file. */
static void test_many_files(void **state)
{
    env *e = *state;
    enum { NF = 20 };
    uint8_t *d[NF];
    tfile f[NF];
    char names[NF][32];
    for (int i = 0; i < NF; i++) {
        d[i] = pattern(100 + (size_t)i, 200 + (uint32_t)i);
        snprintf(names[i], sizeof names[i], "d%d/f%02d", i % 3, i);
        f[i] = (tfile){names[i], d[i], 100 + (size_t)i, T2024, 0644};
    }
    tbatch tb;
    make_batch(e, "dev1", "many", f, NF, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    land_all(e, b, &tb);
    ingest_lander_stats s;
    ingest_lander_batch_stats(b, &s);
    assert_int_equal(s.syncs, 2); /* one syncfs before the renames, one after the manifest */
    ingest_lander_batch_destroy(b);
    for (int i = 0; i < NF; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "dev1/2024/02/29/%s", names[i]);
        assert_file(e, rel, d[i], 100 + (size_t)i, T2024, 0644);
        free(d[i]);
    }
    assert_int_equal(count_files(e), NF);
    free(tb.manifest);
}

/* ------------------------------------------------- two-phase commit */

/* Land every want, then prepare (re-wants put as asked) and finish with lk. */
/* Send every want and re-want until the batch is prepared (ingest_lander_commit_prepare). */
static void prepare_all(env *e, ingest_lander_batch *b, const tbatch *tb)
{
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(put(e, b, tb, w[k]), 0);
    for (;;) {
        const int rc = ingest_lander_commit_prepare(b);
        if (rc == 0)
            break;
        assert_int_equal(rc, INGEST_EBUSY);
        ingest_lander_rewants(b, &w, &n);
        assert_true(n > 0);
        for (size_t k = 0; k < n; k++)
            assert_int_equal(put(e, b, tb, w[k]), 0);
    }
}

static void land_two_phase(env *e, ingest_lander_batch *b, const tbatch *tb, const ingest_lander_lock *lk)
{
    prepare_all(e, b, tb);
    assert_int_equal(ingest_lander_commit_finish(b, lk), 0);
}

/* The landed manifests of (device, batch) in e1 and e2 carry the same records (created_ns aside). */
static void assert_same_manifest(const env *e1, const env *e2, const char *device, const char *batch)
{
    char p1[256], p2[256];
    snprintf(p1, sizeof p1, "%s/_manifests/%s/%s.jsonl", e1->bronze, device, batch);
    snprintf(p2, sizeof p2, "%s/_manifests/%s/%s.jsonl", e2->bronze, device, batch);
    ingest_manifest_reader *r1 = NULL, *r2 = NULL;
    assert_int_equal(ingest_manifest_reader_open(e1->ctx, p1, &r1), 0);
    assert_int_equal(ingest_manifest_reader_open(e2->ctx, p2, &r2), 0);
    int nrec = 0;
    for (;;) {
        ingest_manifest_rec a, b;
        const int ra = ingest_manifest_reader_next(r1, &a), rb = ingest_manifest_reader_next(r2, &b);
        assert_int_equal(ra, rb);
        if (ra == 0)
            break;
        assert_int_equal(ra, 1);
        nrec++;
        assert_int_equal(a.type, b.type);
        if (a.type == INGEST_MREC_HEADER) {
            assert_string_equal(a.device, b.device);
            assert_string_equal(a.batch, b.batch);
            assert_int_equal(a.nfiles, b.nfiles);
            assert_int_equal(a.total_bytes, b.total_bytes);
            continue;
        }
        if (a.type == INGEST_MREC_FILE) {
            assert_string_equal(a.path, b.path);
            assert_string_equal(a.landed, b.landed);
            assert_int_equal(a.size, b.size);
            assert_int_equal(a.mtime_ns, b.mtime_ns);
            assert_int_equal(a.mode, b.mode);
            assert_int_equal(a.version, b.version);
            assert_memory_equal(a.hash, b.hash, INGEST_ID_BYTES);
            assert_int_equal(a.nchunks_total, b.nchunks_total);
        }
        assert_int_equal(a.nchunks, b.nchunks);
        if (a.nchunks)
            assert_memory_equal(a.chunks, b.chunks, a.nchunks * sizeof *a.chunks);
    }
    assert_true(nrec >= 2);
    ingest_manifest_reader_close(r1);
    ingest_manifest_reader_close(r2);
}

/* Chunk i of tb is in the index, at a landed file that is still valid. */
static void assert_indexed(const env *e, const tbatch *tb, uint32_t i)
{
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_id(e->key, tb->cdata[i], tb->clen[i], id);
    ingest_chunk_loc loc;
    assert_int_equal(ingest_index_find(e->idx, id, &loc), 0);
    assert_int_equal(loc.length, tb->clen[i]);
    char p[512];
    assert_int_equal(ingest_index_file_path(e->idx, loc.file_no, p, sizeof p), 0);
}

/* prepare + finish(NULL) lands exactly what commit lands: two stores, the same batch. */
static void test_two_phase_equals_commit(void **state)
{
    env *e1 = *state;
    void *state2 = NULL;
    setup(&state2);
    env *e2 = state2;
    uint8_t *a = pattern(3 * CH + 100, 81), *c = pattern(2 * CH, 82);
    uint8_t *d = malloc(3 * CH); /* c's first chunk twice (a dup), then a's first */
    assert_non_null(d);
    memcpy(d, c, CH);
    memcpy(d + CH, c, CH);
    memcpy(d + 2 * CH, a, CH);
    const tfile f[] = {
        {"a.bin", a, 3 * CH + 100, T2024, 0640},
        {"sub/c.sh", c, 2 * CH, T2024 + 1, 0750},
        {"sub/d", d, 3 * CH, T2024 + 2, 0644},
        {"empty", a, 0, T2024, 0600},
    };
    tbatch tb;
    make_batch(e1, "dev1", "b1", f, 4, &tb);
    ingest_lander_batch *b1 = NULL, *b2 = NULL;
    assert_int_equal(ingest_lander_begin(e1->l, "dev1", tb.manifest, tb.mlen, &b1), 0);
    land_all(e1, b1, &tb);
    assert_int_equal(ingest_lander_begin(e2->l, "dev1", tb.manifest, tb.mlen, &b2), 0);
    land_two_phase(e2, b2, &tb, NULL);
    ingest_lander_stats s1, s2;
    ingest_lander_batch_stats(b1, &s1);
    ingest_lander_batch_stats(b2, &s2);
    assert_memory_equal(&s1, &s2, sizeof s1);
    assert_int_equal(s2.chunks_known, 3); /* d is made of dups */
    assert_true(s2.syncs >= 6);            /* 4 files + manifest + directories */
    ingest_lander_batch_destroy(b1);
    ingest_lander_batch_destroy(b2);
    for (int k = 0; k < 2; k++) {
        const env *e = k ? e2 : e1;
        assert_file(e, "dev1/2024/02/29/a.bin", a, 3 * CH + 100, T2024, 0644);
        assert_file(e, "dev1/2024/02/29/sub/c.sh", c, 2 * CH, T2024 + 1, 0755);
        assert_file(e, "dev1/2024/02/29/sub/d", d, 3 * CH, T2024 + 2, 0644);
        assert_file(e, "dev1/2024/02/29/empty", a, 0, T2024, 0644);
        assert_int_equal(count_files(e), 4);
        assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", "b1"), 1);
        for (uint32_t i = 0; i < tb.nchunks; i++)
            assert_indexed(e, &tb, i);
    }
    assert_same_manifest(e1, e2, "dev1", "b1");
    /* the same index entries: each chunk at the same offset of the same landed path */
    for (uint32_t i = 0; i < tb.nchunks; i++) {
        uint8_t id[INGEST_ID_BYTES];
        ingest_chunk_id(e1->key, tb.cdata[i], tb.clen[i], id);
        ingest_chunk_loc l1, l2;
        assert_int_equal(ingest_index_find(e1->idx, id, &l1), 0);
        assert_int_equal(ingest_index_find(e2->idx, id, &l2), 0);
        assert_int_equal(l1.offset, l2.offset);
        char p1[512], p2[512];
        assert_int_equal(ingest_index_file_path(e1->idx, l1.file_no, p1, sizeof p1), 0);
        assert_int_equal(ingest_index_file_path(e2->idx, l2.file_no, p2, sizeof p2), 0);
        assert_string_equal(p1 + strlen(e1->bronze), p2 + strlen(e2->bronze));
    }
    teardown(&state2);
    free(tb.manifest);
    free(a);
    free(c);
    free(d);
}

/*
 * From another process, as another writer of the store would: take the
 * store's write lock (the child is killed by SIGALRM while a write
 * transaction of ours holds it), then read the version counter of landed
 * path vpath and whether (dev1, batch) is marked landed.  Returns
 * version * 2 + landed, -1 when the write lock could not be taken, -2 when
 * the child failed otherwise.
 */
static int probe_store(const env *e, const char *vpath, const char *batch)
{
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0)
        return -2;
    if (pid == 0) {
        alarm(3);
        ingest_ctx *ctx = ingest_ctx_create(NULL);
        ingest_store *st = NULL;
        ingest_index *idx = NULL;
        const ingest_store_opts o = {.map_size = 1ull << 28, .flags = INGEST_STORE_NOCREATE};
        if (ctx == NULL || ingest_store_open(ctx, e->state, &o, &st) < 0)
            _exit(101);
        if (ingest__store_write_begin(st, 1) < 0)
            _exit(102);
        ingest__store_abort(st);
        ingest__dbi vdb;
        if (ingest__store_db(st, "lander_versions", &vdb) < 0)
            _exit(103);
        uint8_t v[8];
        size_t vl = 0;
        uint64_t ver = 0;
        const int r = ingest__store_get(st, vdb, vpath, strlen(vpath), v, sizeof v, &vl);
        if (r == 0 && vl == 8)
            ver = ingest__get_u64(v);
        else if (r != INGEST_ENOTFOUND)
            _exit(104);
        if (ingest_index_open(st, e->bronze, &idx) < 0)
            _exit(105);
        const int landed = ingest_index_batch_landed(idx, "dev1", batch);
        ingest__store_abort(st);
        _exit(landed < 0 || ver > 40 ? 106 : (int)ver * 2 + landed);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        return -2;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        return -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) > 100)
        return -2;
    return WEXITSTATUS(status);
}

/* The caller's lock as the tests see it: a flag and counters. */
typedef struct lockrec {
    env *e;
    bool locked;
    int unlocks, locks, misuse;
    const char *vpath, *batch; /* probe_store in each unlocked window, when set */
    int probe[4];
    void (*hook)(struct lockrec *r, int window); /* runs in each unlocked window, when set */
    void *hook_ud;
} lockrec;

static void rec_unlock(void *ud)
{
    lockrec *r = ud;
    if (!r->locked)
        r->misuse++;
    r->locked = false;
    if (r->vpath && r->unlocks < 4)
        r->probe[r->unlocks] = probe_store(r->e, r->vpath, r->batch);
    r->unlocks++;
    if (r->hook)
        r->hook(r, r->unlocks);
}

static void rec_lock(void *ud)
{
    lockrec *r = ud;
    if (r->locked)
        r->misuse++;
    r->locked = true;
    r->locks++;
}

/* finish with lock callbacks: balanced, returns locked, no store write pending while unlocked. */
static void lock_case(env *e, int nf)
{
    uint8_t *d[20];
    tfile f[20];
    char names[20][32];
    assert_true(nf <= 20);
    for (int i = 0; i < nf; i++) {
        d[i] = pattern(CH + 10 * (size_t)i, 300 + (uint32_t)i);
        snprintf(names[i], sizeof names[i], "d%d/f%02d", i % 2, i);
        f[i] = (tfile){names[i], d[i], CH + 10 * (size_t)i, T2024, 0644};
    }
    tbatch tb;
    make_batch(e, "dev1", "bl", f, (size_t)nf, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    lockrec r = {.e = e, .locked = true, .vpath = "dev1/2024/02/29/d0/f00", .batch = "bl"};
    const ingest_lander_lock lk = {rec_unlock, rec_lock, &r};
    land_two_phase(e, b, &tb, &lk);
    assert_true(r.locked);
    assert_int_equal(r.misuse, 0);
    assert_int_equal(r.unlocks, r.locks);
    assert_int_equal(r.unlocks, 2);
    /* window 1 (file syncs): no version, not marked; window 2 (manifest, directories):
     * the version stored and committed, not marked yet; the write lock free in both */
    assert_int_equal(r.probe[0], 0);
    assert_int_equal(r.probe[1], 2);
    ingest_lander_stats s;
    ingest_lander_batch_stats(b, &s);
    if (nf >= 16)
        assert_int_equal(s.syncs, 2);
    else
        assert_true(s.syncs >= (uint64_t)nf + 2);
    ingest_lander_batch_destroy(b);
    assert_int_equal(probe_store(e, "dev1/2024/02/29/d0/f00", "bl"), 3);
    for (int i = 0; i < nf; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "dev1/2024/02/29/%.31s", names[i]);
        assert_file(e, rel, d[i], CH + 10 * (size_t)i, T2024, 0644);
    }
    for (uint32_t i = 0; i < tb.nchunks; i++)
        assert_indexed(e, &tb, i);
    for (int i = 0; i < nf; i++)
        free(d[i]);
    free(tb.manifest);
}

static void test_finish_lock_fsync(void **state) { lock_case(*state, 3); }
static void test_finish_lock_syncfs(void **state) { lock_case(*state, 20); }

/* Intents under _manifests/.replace (0 when the directory is not there). */
static int replace_intents(const env *e)
{
    const int n = prefixed_entries(e, "_manifests/.replace", "");
    return n < 0 ? 0 : n - 2; /* . and .. */
}

enum { RP_CRASH, RP_FAIL, RP_LAND };
typedef struct rpcase {
    int mode;
    int nf;
    uint8_t **a, **bb;
    char (*rel)[64];
    int seen; /* the hook ran in window 2 */
} rpcase;

/* What bronze holds after the batch replacing a's versions with bb's stopped: a's versions, no backup, no intent. */
static void assert_old_back(env *e, const rpcase *c)
{
    for (int i = 0; i < c->nf - 1; i++)
        assert_file(e, c->rel[i], c->a[i], CH + 10 * (size_t)i, T2024, 0644);
    assert_int_equal(prefixed_entries(e, DAY "o", ".ingest-old-"), 0);
    assert_int_equal(replace_intents(e), 0);
}

static void replace_hook(lockrec *r, int window)
{
    rpcase *c = r->hook_ud;
    if (window != 2)
        return;
    c->seen = 1;
    /* the renames are done, the manifest not written: the new versions in place, the landed ones kept */
    for (int i = 0; i < c->nf - 1; i++)
        assert_file(r->e, c->rel[i], c->bb[i], CH + 10 * (size_t)i + 1, T2024, 0644);
    assert_int_equal(prefixed_entries(r->e, DAY "o", ".ingest-old-"), c->nf - 1);
    assert_int_equal(replace_intents(r->e), 1);
    if (c->mode == RP_CRASH) {
        /* a crash here, then the receiver's start: its sweep (in a context of its own, as a new process); a
         * crash releases the batch's lock on its intent */
        ingest__lander_release_intent(r->e->l);
        ingest_ctx *ctx = ingest_ctx_create(NULL);
        assert_non_null(ctx);
        uint64_t cut = 9, left = 9, removed = 9, failed = 9;
        assert_int_equal(ingest_lander_sweep_appends(ctx, r->e->bronze, &cut, &left), 0);
        assert_int_equal(cut + left, 0);
        assert_old_back(r->e, c);
        assert_int_equal(ingest_lander_sweep(ctx, r->e->bronze, &removed, &failed), 0);
        assert_int_equal(failed, 0);
        assert_old_back(r->e, c);
        ingest_ctx_destroy(ctx);
    } else if (c->mode == RP_FAIL) {
        /* the manifest cannot be written (its temporary name taken by a directory): the batch fails */
        char p[512];
        snprintf(p, sizeof p, "%s/_manifests/dev1/.o2.jsonl.tmp", r->e->bronze);
        assert_int_equal(mkdir(p, 0755), 0);
    }
}

/*
 * Files renamed over landed versions in commit step 2 keep those versions
 * under a backup name, with a durable intent, until the batch's manifest is
 * in place: a crash after the renames (the receiver's start sweeps) and a
 * failure after them (the manifest not written) put the landed versions
 * back; a batch that lands removes the backups and the intent.  nf files:
 * nf - 1 replace a landed version, one is new.
 */
static void replace_case(env *e, int nf, int mode)
{
    uint8_t *a[20], *bb[20];
    char rel[20][64], names[20][32];
    tfile fa[20], fb[20];
    assert_true(nf <= 20);
    for (int i = 0; i < nf; i++) {
        a[i] = pattern(CH + 10 * (size_t)i, 900 + (uint32_t)i);
        bb[i] = pattern(CH + 10 * (size_t)i + 1, 950 + (uint32_t)i);
        snprintf(names[i], sizeof names[i], i < nf - 1 ? "o/f%02d" : "o/new", i);
        snprintf(rel[i], sizeof rel[i], DAY "%s", names[i]);
        fa[i] = (tfile){names[i], a[i], CH + 10 * (size_t)i, T2024, 0644};
        fb[i] = (tfile){names[i], bb[i], CH + 10 * (size_t)i + 1, T2024, 0644};
    }
    tbatch ta, tb;
    make_batch(e, "dev1", "o1", fa, (size_t)nf - 1, &ta);
    make_batch(e, "dev1", "o2", fb, (size_t)nf, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", ta.manifest, ta.mlen, &b), 0);
    land_all(e, b, &ta);
    ingest_lander_batch_destroy(b);
    rpcase c = {.mode = mode, .nf = nf, .a = a, .bb = bb, .rel = rel};
    lockrec r = {.e = e, .locked = true, .hook = replace_hook, .hook_ud = &c};
    const ingest_lander_lock lk = {rec_unlock, rec_lock, &r};
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    prepare_all(e, b, &tb);
    const int rc = ingest_lander_commit_finish(b, &lk);
    assert_int_equal(c.seen, 1);
    if (mode == RP_FAIL) {
        assert_int_not_equal(rc, 0);
        ingest_lander_batch_destroy(b);
        assert_old_back(e, &c);
        /* the new file of the batch stays, as every file renamed in place without an earlier version */
        assert_file(e, rel[nf - 1], bb[nf - 1], CH + 10 * (size_t)(nf - 1) + 1, T2024, 0644);
        char p[512];
        snprintf(p, sizeof p, "%s/_manifests/dev1/.o2.jsonl.tmp", e->bronze);
        assert_int_equal(rmdir(p), 0);
    } else if (mode == RP_LAND) {
        assert_int_equal(rc, 0);
        ingest_lander_batch_destroy(b);
        for (int i = 0; i < nf; i++)
            assert_file(e, rel[i], bb[i], CH + 10 * (size_t)i + 1, T2024, 0644);
        assert_int_equal(prefixed_entries(e, DAY "o", ".ingest-old-"), 0);
        assert_int_equal(replace_intents(e), 0);
        uint64_t cut = 9, left = 9;
        assert_int_equal(ingest_lander_sweep_appends(e->ctx, e->bronze, &cut, &left), 0);
        for (int i = 0; i < nf; i++)
            assert_file(e, rel[i], bb[i], CH + 10 * (size_t)i + 1, T2024, 0644);
    } else {
        ingest_lander_batch_destroy(b); /* (whatever the commit made of the simulated crash) */
    }
    for (int i = 0; i < nf; i++) {
        free(a[i]);
        free(bb[i]);
    }
    free(ta.manifest);
    free(tb.manifest);
}

static void test_replaced_crash_fsync(void **state) { replace_case(*state, 3, RP_CRASH); }
static void test_replaced_crash_syncfs(void **state) { replace_case(*state, 20, RP_CRASH); }
static void test_replaced_fail(void **state) { replace_case(*state, 20, RP_FAIL); }
static void test_replaced_land(void **state) { replace_case(*state, 3, RP_LAND); }

/* Which of versions v[0, n) (lengths len) bronze-relative rel holds: its index, -1 another, -2 none. */
static int which_version(const env *e, const char *rel, uint8_t *const *v, const size_t *len, int n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    FILE *fp = fopen(p, "rb");
    if (fp == NULL)
        return -2;
    uint8_t got[CH + 64];
    const size_t gl = fread(got, 1, sizeof got, fp);
    fclose(fp);
    for (int i = 0; i < n; i++)
        if (gl == len[i] && memcmp(got, v[i], gl) == 0)
            return i;
    return -1;
}

/* Land one file (path, bytes d) as batch name with lander l, whole. */
static void land_one(env *e, ingest_lander *l, const char *name, const char *path, const uint8_t *d, size_t len)
{
    const tfile f[] = {{path, d, len, T2024, 0644}};
    tbatch t;
    make_batch(e, "dev1", name, f, 1, &t);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(l, "dev1", t.manifest, t.mlen, &b), 0);
    land_all(e, b, &t);
    ingest_lander_batch_destroy(b);
    free(t.manifest);
}

/* Begin batch name of one file (path, d) with lander l and prepare it; the commit is the caller's. */
static ingest_lander_batch *one_prepared(env *e, ingest_lander *l, const char *name, const char *path, const uint8_t *d,
                                         size_t len, tbatch *t)
{
    const tfile f[] = {{path, d, len, T2024, 0644}};
    make_batch(e, "dev1", name, f, 1, t);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(l, "dev1", t->manifest, t->mlen, &b), 0);
    prepare_all(e, b, t);
    return b;
}

typedef struct later {
    ingest_lander *l2;
    uint8_t **v;
    size_t *len;
    const char *path;
    /* 0: Y lands in X's window; 1: Y is held too, then both crash (sweep); 2: a sweep in X's window; 3: Y lands
     * between X's steps 1 and 2 */
    int mode;
    int result;
    env *e;
    int seen;
} later;

static void later_y_hook(lockrec *r, int window)
{
    later *c = r->hook_ud;
    if (window != 2)
        return;
    /* X (v1 -> v2) and Y (v2 -> v3) both renamed, neither manifest written: a crash, then the start's sweep */
    ingest__lander_release_intent(r->e->l);
    ingest__lander_release_intent(c->l2);
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    assert_non_null(ctx);
    uint64_t cut = 0, left = 0;
    assert_int_equal(ingest_lander_sweep_appends(ctx, r->e->bronze, &cut, &left), 0);
    ingest_ctx_destroy(ctx);
    char rel[96];
    snprintf(rel, sizeof rel, DAY "%s", c->path);
    c->result = which_version(r->e, rel, c->v, c->len, 3);
}

static void later_x_hook(lockrec *r, int window)
{
    later *c = r->hook_ud;
    if (window != 2)
        return;
    c->seen = 1;
    if (c->mode == 3) {
        /* Y landed while X was between its final names' check and its renames: X's manifest cannot be
         * written, and X fails after its renames */
        char p[512];
        snprintf(p, sizeof p, "%s/_manifests/dev1/.lx.jsonl.tmp", r->e->bronze);
        assert_int_equal(mkdir(p, 0755), 0);
        return;
    }
    if (c->mode == 2) {
        /* another receiver of the tree starts: it leaves the intent of this live batch alone */
        ingest_ctx *ctx = ingest_ctx_create(NULL);
        assert_non_null(ctx);
        uint64_t cut = 0, left = 0, removed = 0, failed = 0;
        assert_int_equal(ingest_lander_sweep_appends(ctx, r->e->bronze, &cut, &left), 0);
        assert_int_equal(ingest_lander_sweep(ctx, r->e->bronze, &removed, &failed), 0);
        ingest_ctx_destroy(ctx);
        assert_int_equal(prefixed_entries(r->e, DAY, ".ingest-old-"), 1);
        return;
    }
    /* Y, another lander (a pipelined batch of the device), replaces the same path in X's window */
    tbatch ty;
    ingest_lander_batch *y = one_prepared(r->e, c->l2, "ly", c->path, c->v[2], c->len[2], &ty);
    if (c->mode == 0) {
        assert_int_equal(ingest_lander_commit_finish(y, NULL), 0);
        /* X's manifest cannot be written: X fails after its renames */
        char p[512];
        snprintf(p, sizeof p, "%s/_manifests/dev1/.lx.jsonl.tmp", r->e->bronze);
        assert_int_equal(mkdir(p, 0755), 0);
    } else {
        lockrec ry = {.e = r->e, .locked = true, .hook = later_y_hook, .hook_ud = c};
        const ingest_lander_lock lky = {rec_unlock, rec_lock, &ry};
        (void)ingest_lander_commit_finish(y, &lky);
    }
    ingest_lander_batch_destroy(y);
    free(ty.manifest);
}

/* Lander hook: at X's PLACE (step 2, before its renames, after its backup of v1 was made in step 1), Y lands v3. */
static void later_place_hook(void *ud, const char *device, int phase)
{
    later *c = ud;
    (void)device;
    if (phase != INGEST__LANDER_HOOK_PLACE || c->result == 7)
        return;
    c->result = 7; /* once */
    tbatch ty;
    ingest_lander_batch *y = one_prepared(c->e, c->l2, "ly", c->path, c->v[2], c->len[2], &ty);
    assert_int_equal(ingest_lander_commit_finish(y, NULL), 0);
    ingest_lander_batch_destroy(y);
    free(ty.manifest);
}

/*
 * Batches replacing one path one after the other (v1 landed; X puts v2,
 * Y v3): X failing after Y landed leaves Y's v3 (X's undo puts nothing
 * back over a version it did not put there); X and Y both cut by a crash
 * leave v1, whatever order the sweep reads their intents in; a sweep by
 * another receiver while X commits leaves X alone (it lands with v2); Y
 * landing between X's step 1 (its backup of v1) and its renames, then X
 * failing, leaves Y's v3 (X keeps v3 instead at its rename).
 */
static void later_case(env *e, int mode)
{
    ingest_lander *l2 = NULL;
    assert_int_equal(ingest_lander_create(e->ctx, e->st, e->idx, e->bronze, NULL, e->key, e->codec, &l2), 0);
    uint8_t *v[3] = {pattern(CH, 1200), pattern(CH + 1, 1201), pattern(CH + 2, 1202)};
    size_t len[3] = {CH, CH + 1, CH + 2};
    land_one(e, e->l, "l0", "lp", v[0], len[0]);
    later c = {.l2 = l2, .v = v, .len = len, .path = "lp", .mode = mode, .result = -9, .e = e};
    lockrec r = {.e = e, .locked = true, .hook = later_x_hook, .hook_ud = &c};
    if (mode == 3)
        ingest__lander_set_hook(e->l, later_place_hook, &c);
    const ingest_lander_lock lk = {rec_unlock, rec_lock, &r};
    tbatch tx;
    ingest_lander_batch *x = one_prepared(e, e->l, "lx", "lp", v[1], len[1], &tx);
    const int rc = ingest_lander_commit_finish(x, &lk);
    ingest__lander_set_hook(e->l, NULL, NULL);
    ingest_lander_batch_destroy(x);
    assert_int_equal(c.seen, 1);
    if (mode == 0 || mode == 3) {
        assert_int_not_equal(rc, 0);
        assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", "ly"), 1);
        assert_int_equal(which_version(e, DAY "lp", v, len, 3), 2);
        char p[512];
        snprintf(p, sizeof p, "%s/_manifests/dev1/.lx.jsonl.tmp", e->bronze);
        assert_int_equal(rmdir(p), 0);
        if (mode == 0) {
            /* X's undo found a version it did not put there: its backup and intent wait for a sweep (had Y
             * failed too, its undo would have put X's version back, and the sweep then X's landed one) */
            assert_int_equal(prefixed_entries(e, DAY, ".ingest-old-"), 1);
            assert_int_equal(replace_intents(e), 1);
            /* X's replay is not held up by it (each try has its own intent) and lands; the next start's sweep
             * finds the batch landed and removes what the first try left */
            land_one(e, e->l, "lx", "lp", v[1], len[1]);
            assert_int_equal(which_version(e, DAY "lp", v, len, 3), 1);
            assert_int_equal(replace_intents(e), 1);
            uint64_t cut = 0, left = 0;
            assert_int_equal(ingest_lander_sweep_appends(e->ctx, e->bronze, &cut, &left), 0);
            assert_int_equal(which_version(e, DAY "lp", v, len, 3), 1);
        }
    } else if (mode == 1) {
        assert_int_equal(c.result, 0);
    } else {
        assert_int_equal(rc, 0);
        assert_int_equal(which_version(e, DAY "lp", v, len, 3), 1);
    }
    assert_int_equal(prefixed_entries(e, DAY, ".ingest-old-"), 0);
    assert_int_equal(replace_intents(e), 0);
    ingest_lander_destroy(l2);
    free(tx.manifest);
    for (int i = 0; i < 3; i++)
        free(v[i]);
}

static void test_replaced_later_stays(void **state) { later_case(*state, 0); }
static void test_replaced_sweep_order(void **state) { later_case(*state, 1); }
static void test_replaced_live_left_alone(void **state) { later_case(*state, 2); }
static void test_replaced_between_steps(void **state) { later_case(*state, 3); }

/* Set or clear the immutable flag of bronze-relative directory rel: 0, or -1 (not here: not root, tmpfs). */
static int set_immutable(const env *e, const char *rel, bool on)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", e->bronze, rel);
    const int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int flags = 0, r = -1;
    if (fd >= 0 && ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
        flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
        r = ioctl(fd, FS_IOC_SETFLAGS, &flags);
    }
    if (fd >= 0)
        close(fd);
    return r;
}

typedef struct earlier {
    env *e;
    int immutable; /* the directory was made immutable in the window (1), or could not be (-1) */
} earlier;

static void earlier_hook(lockrec *r, int window)
{
    earlier *c = r->hook_ud;
    if (window != 2)
        return;
    /* the renames are done: the version cannot be put back (the directory immutable), and the manifest
     * cannot be written: the try fails, keeping its intent and backup */
    c->immutable = set_immutable(r->e, DAY "ep", true) == 0 ? 1 : -1;
    char p[512];
    snprintf(p, sizeof p, "%s/_manifests/dev1/.ex.jsonl.tmp", r->e->bronze);
    assert_int_equal(mkdir(p, 0755), 0);
}

/*
 * An earlier try of a batch leaves its intent (its undo failed), the file
 * it replaced is removed at the edge, and a later try of the same batch
 * lands without it: the start's sweep takes the earlier try's entry for
 * not landed (the batch's manifest does not list that path) and puts the
 * acknowledged version back, instead of keeping bytes no manifest lists.
 */
static void test_replaced_earlier_try(void **state)
{
    env *e = *state;
    uint8_t *v[2] = {pattern(CH, 1400), pattern(CH + 1, 1401)};
    size_t len[2] = {CH, CH + 1};
    uint8_t *q = pattern(100, 1402);
    land_one(e, e->l, "e0", "ep/f", v[0], len[0]);
    const tfile f1[] = {{"ep/f", v[1], len[1], T2024, 0644}, {"eq", q, 100, T2024, 0644}};
    const tfile f2[] = {{"eq", q, 100, T2024, 0644}};
    tbatch t1, t2;
    make_batch(e, "dev1", "ex", f1, 2, &t1);
    earlier c = {.e = e};
    lockrec r = {.e = e, .locked = true, .hook = earlier_hook, .hook_ud = &c};
    const ingest_lander_lock lk = {rec_unlock, rec_lock, &r};
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t1.manifest, t1.mlen, &b), 0);
    prepare_all(e, b, &t1);
    assert_int_not_equal(ingest_lander_commit_finish(b, &lk), 0);
    ingest_lander_batch_destroy(b);
    set_immutable(e, DAY "ep", false);
    char p[512];
    snprintf(p, sizeof p, "%s/_manifests/dev1/.ex.jsonl.tmp", e->bronze);
    assert_int_equal(rmdir(p), 0);
    if (c.immutable < 0) {
        free(t1.manifest);
        free(v[0]);
        free(v[1]);
        free(q);
        skip(); /* (no immutable flag here: not root, or a filesystem without it) */
    }
    assert_int_equal(which_version(e, DAY "ep/f", v, len, 2), 1); /* not put back */
    assert_int_equal(replace_intents(e), 1);
    /* ep/f removed at the edge: the next try of ex lands eq alone */
    make_batch(e, "dev1", "ex", f2, 1, &t2);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t2.manifest, t2.mlen, &b), 0);
    land_all(e, b, &t2);
    ingest_lander_batch_destroy(b);
    assert_true(exists(e, "_manifests/dev1/ex.jsonl"));
    uint64_t cut = 0, left = 0;
    assert_int_equal(ingest_lander_sweep_appends(e->ctx, e->bronze, &cut, &left), 0);
    assert_int_equal(which_version(e, DAY "ep/f", v, len, 2), 0);
    assert_int_equal(replace_intents(e), 0);
    assert_int_equal(prefixed_entries(e, DAY "ep", ".ingest-old-"), 0);
    free(t1.manifest);
    free(t2.manifest);
    free(v[0]);
    free(v[1]);
    free(q);
}

/* A failure after the manifest is in place (step 4): the batch landed, and its new version stays. */
static void test_replaced_fail_after_manifest(void **state)
{
    env *e = *state;
    uint8_t *v[2] = {pattern(CH, 1300), pattern(CH + 1, 1301)};
    size_t len[2] = {CH, CH + 1};
    land_one(e, e->l, "m0", "mp", v[0], len[0]);
    tbatch t;
    ingest_lander_batch *b = one_prepared(e, e->l, "m1", "mp", v[1], len[1], &t);
    ingest__lander_set_fail_index(e->l, 1);
    assert_int_equal(ingest_lander_commit_finish(b, NULL), INGEST_EIO);
    ingest__lander_set_fail_index(e->l, 0);
    ingest_lander_batch_destroy(b);
    /* its manifest in place, it is a landed batch (for the start's sweep, the index's catch-up, the catalog):
     * the version it lists stays */
    assert_true(exists(e, "_manifests/dev1/m1.jsonl"));
    assert_int_equal(which_version(e, DAY "mp", v, len, 2), 1);
    assert_int_equal(prefixed_entries(e, DAY, ".ingest-old-"), 0);
    assert_int_equal(replace_intents(e), 0);
    free(t.manifest);
    free(v[0]);
    free(v[1]);
}

/*
 * The crash sweep removes backups of replaced versions whose intent is gone
 * (a power cut can keep one whose removal was not synced); one whose intent
 * is there (locked by a batch at work in another receiver of the tree)
 * stays.
 */
static void test_replaced_orphans(void **state)
{
    env *e = *state;
    char tag[64] = "", p[512], orphan[256], needed[256];
    read_tag(e, tag, p);
    snprintf(orphan, sizeof orphan, "dev1/o/.ingest-old-%s.0123456789abcdef.b5.0", tag);
    snprintf(needed, sizeof needed, "dev1/o/.ingest-old-%s.0123456789abcdef.b6.0", tag);
    touch(e, orphan);
    touch(e, needed);
    touch(e, "dev1/o/.ingest-old-0000000000000000.0123456789abcdef.b5.0"); /* not this tree's tag: data */
    touch(e, "_manifests/.replace/.0123456789abcdef.b7.tmp"); /* an intent a crash cut while it was written */
    /* b6's intent, held by its batch at work in another receiver of the tree */
    touch(e, "_manifests/.replace/0123456789abcdef.b6");
    snprintf(p, sizeof p, "%s/_manifests/.replace/0123456789abcdef.b6", e->bronze);
    const int fd = open(p, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX), 0);
    uint64_t removed = 9, failed = 9;
    assert_int_equal(ingest_lander_sweep(e->ctx, e->bronze, &removed, &failed), 0);
    assert_false(exists(e, orphan));
    assert_true(exists(e, needed));
    assert_false(exists(e, "_manifests/.replace/.0123456789abcdef.b7.tmp"));
    assert_int_equal(replace_intents(e), 1);
    close(fd); /* that batch is gone; its intent (empty: never whole) goes, and then its backup */
    assert_int_equal(ingest_lander_sweep(e->ctx, e->bronze, &removed, &failed), 0);
    assert_int_equal(replace_intents(e), 0);
    assert_false(exists(e, needed));
    assert_true(exists(e, "dev1/o/.ingest-old-0000000000000000.0123456789abcdef.b5.0"));
}

/* Intents the sweep cannot take whole (torn, or naming paths outside bronze) are removed, nothing acted on. */
static void test_replaced_bad_intents(void **state)
{
    env *e = *state;
    const char *bad[] = {
        "", "ingest-replace 1\n", "ingest-replace 1\ndev1\nb9\n1\n",
        "ingest-replace 1\ndev1\nb9\n1\n1 2 3 9 30\n../../etc/x\n.ingest-old-0000000000000000.x\n",
        "ingest-replace 1\ndev1\nb9\n1\n1 2 3 5 6\ndev1/a\nnot-ok\n",
        "ingest-replace 1\ndev1\nb9\n1\n1 2 3 5 99999\ndev1/a\n.ingest-old-\n",
        "ingest-replace 1\ndev1\nb9\n2\n1 2 3 5 13\ndev1/a\n.ingest-old-x\n",
        "ingest-replace 1\n../x\nb9\n1\n1 2 3 5 13\ndev1/a\n.ingest-old-x\n",
        "ingest-replace 1\ndev1\nb9\n1\n1 2 3 5 13\ndev1/a\n.ingest-old-x\ntrailing",
    };
    char p[512];
    touch(e, "dev1/a");
    touch(e, "dev1/.ingest-old-x");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        touch(e, "_manifests/.replace/t.b9");
        snprintf(p, sizeof p, "%s/_manifests/.replace/t.b9", e->bronze);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fputs(bad[i], f);
        fclose(f);
        uint64_t cut = 9, left = 9;
        assert_int_equal(ingest_lander_sweep_appends(e->ctx, e->bronze, &cut, &left), 0);
        assert_int_equal(replace_intents(e), 0);
        assert_true(exists(e, "dev1/a"));
        assert_true(exists(e, "dev1/.ingest-old-x")); /* not acted on */
    }
    /* a whole one whose batch has no manifest and whose final name does not hold the new version: the
     * backup goes, the file stays */
    snprintf(p, sizeof p, "%s/_manifests/.replace/t.b9", e->bronze);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("ingest-replace 1\ndev1\nb9\n1\n1 2 3 6 13\ndev1/a\n.ingest-old-x\n", f);
    fclose(f);
    uint64_t cut = 9, left = 9;
    assert_int_equal(ingest_lander_sweep_appends(e->ctx, e->bronze, &cut, &left), 0);
    assert_int_equal(replace_intents(e), 0);
    assert_true(exists(e, "dev1/a"));
    assert_false(exists(e, "dev1/.ingest-old-x"));
}

/*
 * The lander's own lock (ingest_lander_set_lock): parse takes it never,
 * lookup once, landing only for the lookups of known chunks, finish for
 * the versions with the renames and for the index; never held on return;
 * a replay is found by lookup.
 */
static void test_own_lock(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(3 * CH + 7, 700), *c = pattern(CH, 701);
    const tfile fa[] = {{"x/a.bin", a, 3 * CH + 7, T2024, 0644}, {"x/c.bin", c, CH, T2024, 0644}};
    const tfile fb[] = {{"y/a-again.bin", a, 3 * CH + 7, T2024, 0644}};
    tbatch ta, tb;
    make_batch(e, "dev1", "own-a", fa, 2, &ta);
    make_batch(e, "dev1", "own-b", fb, 1, &tb);
    lockrec r = {.e = e, .locked = false};
    const ingest_lander_lock lk = {rec_unlock, rec_lock, &r};
    assert_int_equal(ingest_lander_set_lock(e->l, &lk), 0);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_parse(e->l, "dev1", ta.manifest, ta.mlen, &b), 0);
    assert_int_equal(r.locks, 0); /* parsed without it */
    assert_int_equal(ingest_lander_set_lock(e->l, NULL), INGEST_EBUSY); /* not with a batch open */
    assert_int_equal(put(e, b, &ta, 0), INGEST_EINVAL); /* parsed, not looked up: nothing to put yet */
    assert_int_equal(ingest_lander_lookup(b), 0);
    assert_int_equal(r.locks, 1);
    assert_int_equal(r.unlocks, 1);
    assert_int_equal(ingest_lander_lookup(b), INGEST_EINVAL); /* once */
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    assert_int_equal(n, ta.nchunks);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(put(e, b, &ta, w[k]), 0);
    assert_int_equal(r.locks, 1); /* new chunks are written without it */
    assert_int_equal(ingest_lander_commit_prepare(b), 0);
    assert_int_equal(ingest_lander_commit_finish(b, &lk), INGEST_EINVAL); /* it takes its own */
    assert_int_equal(ingest_lander_commit_finish(b, NULL), 0);
    assert_int_equal(r.locks, 3); /* versions with the renames; the index, mark and commit */
    ingest_lander_batch_destroy(b);
    /* a batch of known chunks: their lookups while landing take it */
    assert_int_equal(ingest_lander_parse(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    assert_int_equal(ingest_lander_lookup(b), 0);
    ingest_lander_wants(b, &w, &n);
    assert_int_equal(n, 0);
    const int before = r.locks;
    assert_int_equal(ingest_lander_commit(b), 0);
    assert_true(r.locks > before + 2);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/y/a-again.bin", a, 3 * CH + 7, T2024, 0644);
    /* a replay: parsed, then found by lookup */
    assert_int_equal(ingest_lander_parse(e->l, "dev1", ta.manifest, ta.mlen, &b), 0);
    assert_int_equal(ingest_lander_lookup(b), INGEST_LANDER_ALREADY);
    ingest_lander_batch_destroy(b);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", ta.manifest, ta.mlen, &b), INGEST_LANDER_ALREADY);
    assert_null(b);
    assert_false(r.locked);
    assert_int_equal(r.misuse, 0);
    assert_int_equal(r.locks, r.unlocks);
    assert_int_equal(probe_store(e, "dev1/2024/02/29/x/a.bin", "own-a"), 3); /* no write transaction left open */
    assert_int_equal(ingest_lander_set_lock(e->l, NULL), 0);
    free(a);
    free(c);
    free(ta.manifest);
    free(tb.manifest);
}

/* A stale known chunk: prepare says EBUSY with the re-wants; once they are put, prepare and finish land. */
static void test_prepare_rewants(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(4 * CH, 91), *bb = pattern(4 * CH, 91);
    bb[4 * CH - 1] ^= 0x55; /* last chunk differs */
    const tfile f1[] = {{"a", a, 4 * CH, T2024, 0644}};
    const tfile f2[] = {{"b", bb, 4 * CH, T2024, 0644}};
    tbatch t1, t2;
    make_batch(e, "dev1", "b1", f1, 1, &t1);
    make_batch(e, "dev1", "b2", f2, 1, &t2);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t1.manifest, t1.mlen, &b), 0);
    land_all(e, b, &t1);
    ingest_lander_batch_destroy(b);

    assert_int_equal(ingest_lander_begin(e->l, "dev1", t2.manifest, t2.mlen, &b), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(b, &w, &n);
    assert_int_equal(n, 1);
    assert_int_equal(w[0], 3);
    /* the known chunks' landed file goes away: prepare finds it when it copies them */
    char p[512];
    snprintf(p, sizeof p, "%s/dev1/2024/02/29/a", e->bronze);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(ingest_lander_commit_prepare(b), INGEST_EBUSY);
    ingest_lander_rewants(b, &w, &n);
    assert_int_equal(n, 3);
    for (uint32_t i = 0; i < 3; i++)
        assert_int_equal(w[i], i);
    assert_int_equal(ingest_lander_awaited(b), 4);
    /* the stale chunks were dropped from the index and that is committed: the write lock is free */
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_loc loc;
    ingest_chunk_id(e->key, a, CH, id);
    assert_int_equal(ingest_index_find(e->idx, id, &loc), INGEST_ENOTFOUND);
    assert_int_equal(probe_store(e, "dev1/2024/02/29/b", "b2"), 0);
    /* still busy until every re-want is in; the batch stays intact */
    assert_int_equal(put(e, b, &t2, 0), 0);
    assert_int_equal(ingest_lander_commit_prepare(b), INGEST_EBUSY);
    ingest_lander_rewants(b, &w, &n);
    assert_int_equal(n, 0);
    assert_int_equal(put(e, b, &t2, 1), 0);
    assert_int_equal(put(e, b, &t2, 2), 0);
    assert_int_equal(ingest_lander_commit_prepare(b), INGEST_EBUSY);
    assert_int_equal(put(e, b, &t2, 3), 0);
    assert_int_equal(ingest_lander_commit_prepare(b), 0);
    assert_int_equal(ingest_lander_commit_finish(b, NULL), 0);
    ingest_lander_stats s;
    ingest_lander_batch_stats(b, &s);
    assert_int_equal(s.chunks_rewanted, 3);
    assert_int_equal(s.chunks_new, 4);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/b", bb, 4 * CH, T2024, 0644);
    for (uint32_t i = 0; i < 4; i++)
        assert_indexed(e, &t2, i);
    free(t1.manifest);
    free(t2.manifest);
    free(a);
    free(bb);
}

/* A PREPARED batch takes no more chunks; misuse of finish leaves a batch intact. */
static void test_prepared_refuses(void **state)
{
    env *e = *state;
    uint8_t *a = pattern(2 * CH, 95);
    const tfile f[] = {{"a", a, 2 * CH, T2024, 0644}};
    tbatch tb;
    make_batch(e, "dev1", "b1", f, 1, &tb);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    assert_int_equal(put(e, b, &tb, 0), 0);
    /* not prepared yet: finish refuses, the batch lives on */
    assert_int_equal(ingest_lander_commit_finish(b, NULL), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "active"));
    assert_int_equal(ingest_lander_commit_prepare(b), INGEST_EBUSY);
    assert_int_equal(put(e, b, &tb, 1), 0);
    assert_int_equal(ingest_lander_commit_prepare(b), 0);
    /* prepared: no more chunks */
    assert_int_equal(put(e, b, &tb, 1), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "prepared"));
    uint8_t id0[INGEST_ID_BYTES];
    uint32_t l0 = 0;
    assert_int_equal(ingest_lander_chunk_expect(b, 0, id0, &l0), 0);
    assert_int_equal(ingest_lander_put_verified(b, 0, a, CH, CH, id0), INGEST_EINVAL);
    assert_int_equal(ingest_lander_advance(b), INGEST_EINVAL);
    assert_int_equal(ingest_lander_commit_prepare(b), 0);
    const ingest_lander_lock half = {NULL, rec_lock, NULL};
    assert_int_equal(ingest_lander_commit_finish(b, &half), INGEST_EINVAL);
    /* none of that hurt it */
    assert_int_equal(count_files(e), 1);
    assert_int_equal(ingest_lander_commit_finish(b, NULL), 0);
    assert_int_equal(ingest_lander_commit_finish(b, NULL), INGEST_EINVAL);
    assert_int_equal(ingest_lander_commit(b), INGEST_EINVAL);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/a", a, 2 * CH, T2024, 0644);
    assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", "b1"), 1);
    /* destroying a prepared batch removes its temporary files */
    free(tb.manifest);
    make_batch(e, "dev1", "b2", (const tfile[]){{"c", a, 2 * CH, T2024, 0644}}, 1, &tb);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tb.manifest, tb.mlen, &b), 0);
    assert_int_equal(ingest_lander_commit_prepare(b), 0); /* all known */
    assert_int_equal(count_files(e), 2);
    ingest_lander_batch_destroy(b);
    assert_int_equal(count_files(e), 1);
    assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", "b2"), 0);
    free(tb.manifest);
    free(a);
}

/* Two landers on one store: X prepared on the first while Y is landed and prepared on the second. */
static void test_two_landers(void **state)
{
    env *e = *state;
    ingest_ctx *ctx2 = ingest_ctx_create(NULL);
    assert_non_null(ctx2);
    ingest_lander *l2 = NULL;
    assert_int_equal(ingest_lander_create(ctx2, e->st, e->idx, e->bronze, NULL, e->key, e->codec, &l2), 0);
    uint8_t *x = pattern(3 * CH + 7, 101), *y = pattern(2 * CH, 102), *z = pattern(CH, 103);
    const tfile fx[] = {{"x/one", x, 3 * CH + 7, T2024, 0644}, {"x/two", z, CH, T2024, 0644}};
    const tfile fy[] = {{"y/one", y, 2 * CH, T2024, 0644}, {"y/two", z, CH, T2024, 0644}};
    tbatch tx, ty, t3;
    make_batch(e, "dev1", "bx", fx, 2, &tx);
    make_batch(e, "dev1", "by", fy, 2, &ty);
    ingest_lander_batch *bx = NULL, *by = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tx.manifest, tx.mlen, &bx), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(bx, &w, &n);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(put(e, bx, &tx, w[k]), 0);
    assert_int_equal(ingest_lander_commit_prepare(bx), 0);
    /* the first lander is busy with X: the next batch goes to the second */
    assert_int_equal(ingest_lander_begin(e->l, "dev1", ty.manifest, ty.mlen, &by), INGEST_EBUSY);
    assert_int_equal(ingest_lander_begin(l2, "dev1", ty.manifest, ty.mlen, &by), 0);
    ingest_lander_wants(by, &w, &n);
    assert_int_equal(n, 3); /* z is in X too, but X is not landed yet */
    for (size_t k = 0; k < n; k++)
        assert_int_equal(put(e, by, &ty, w[k]), 0);
    assert_int_equal(ingest_lander_commit_prepare(by), 0);
    lockrec r = {.e = e, .locked = true};
    const ingest_lander_lock lk = {rec_unlock, rec_lock, &r};
    assert_int_equal(ingest_lander_commit_finish(bx, &lk), 0);
    assert_true(r.locked && r.misuse == 0 && r.unlocks == r.locks && r.unlocks >= 1);
    assert_int_equal(ingest_lander_commit_finish(by, &lk), 0);
    assert_true(r.locked && r.misuse == 0 && r.unlocks == r.locks);
    ingest_lander_batch_destroy(bx);
    ingest_lander_batch_destroy(by);
    assert_file(e, "dev1/2024/02/29/x/one", x, 3 * CH + 7, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/x/two", z, CH, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/y/one", y, 2 * CH, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/y/two", z, CH, T2024, 0644);
    for (int k = 0; k < 2; k++) {
        char mp[256];
        snprintf(mp, sizeof mp, "%s/_manifests/dev1/%s.jsonl", e->bronze, k ? "by" : "bx");
        struct stat sb;
        assert_int_equal(stat(mp, &sb), 0);
        assert_true(sb.st_size > 0);
        assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", k ? "by" : "bx"), 1);
    }
    for (uint32_t i = 0; i < tx.nchunks; i++)
        assert_indexed(e, &tx, i);
    for (uint32_t i = 0; i < ty.nchunks; i++)
        assert_indexed(e, &ty, i);
    /* a third batch repeating X's content: all known */
    const tfile f3[] = {{"again/one", x, 3 * CH + 7, T2024, 0644}, {"again/two", z, CH, T2024, 0644}};
    make_batch(e, "dev1", "b3", f3, 2, &t3);
    ingest_lander_batch *b3 = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t3.manifest, t3.mlen, &b3), 0);
    ingest_lander_wants(b3, &w, &n);
    assert_int_equal(n, 0);
    assert_int_equal(ingest_lander_commit(b3), 0);
    ingest_lander_stats s;
    ingest_lander_batch_stats(b3, &s);
    assert_int_equal(s.chunks_known, t3.nchunks);
    assert_int_equal(s.chunks_new, 0);
    ingest_lander_batch_destroy(b3);
    assert_file(e, "dev1/2024/02/29/again/one", x, 3 * CH + 7, T2024, 0644);
    ingest_lander_destroy(l2);
    ingest_ctx_destroy(ctx2);
    free(tx.manifest);
    free(ty.manifest);
    free(t3.manifest);
    free(x);
    free(y);
    free(z);
}

/* Another lander lands the same path while X's finish has the lock released. */
typedef struct same_path {
    ingest_lander *l2;
    const tbatch *ty;
    int window; /* the unlocked window to land Y in */
    int landed;
} same_path;

static void land_y_hook(lockrec *r, int window)
{
    same_path *sp = r->hook_ud;
    if (window != sp->window)
        return;
    ingest_lander_batch *by = NULL;
    if (ingest_lander_begin(sp->l2, "dev1", sp->ty->manifest, sp->ty->mlen, &by) != 0)
        return;
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(by, &w, &n);
    for (size_t k = 0; k < n; k++)
        if (put(r->e, by, sp->ty, w[k]) != 0)
            goto out;
    sp->landed = ingest_lander_commit(by) == 0;
out:
    ingest_lander_batch_destroy(by);
}

static uint64_t landed_version(const env *e, const char *batch, const char *landed)
{
    char mp[256];
    snprintf(mp, sizeof mp, "%s/_manifests/dev1/%s.jsonl", e->bronze, batch);
    ingest_manifest_reader *r = NULL;
    assert_int_equal(ingest_manifest_reader_open(e->ctx, mp, &r), 0);
    ingest_manifest_rec rec;
    uint64_t v = 0;
    while (ingest_manifest_reader_next(r, &rec) == 1)
        if (rec.type == INGEST_MREC_FILE && strcmp(rec.landed, landed) == 0)
            v = rec.version;
    ingest_manifest_reader_close(r);
    return v;
}

static uint64_t device_version(const env *e, const char *device, const char *batch, const char *landed)
{
    char mp[256];
    snprintf(mp, sizeof mp, "%s/_manifests/%s/%s.jsonl", e->bronze, device, batch);
    ingest_manifest_reader *r = NULL;
    assert_int_equal(ingest_manifest_reader_open(e->ctx, mp, &r), 0);
    ingest_manifest_rec rec;
    uint64_t v = 0;
    while (ingest_manifest_reader_next(r, &rec) == 1)
        if (rec.type == INGEST_MREC_FILE && strcmp(rec.landed, landed) == 0)
            v = rec.version;
    ingest_manifest_reader_close(r);
    return v;
}

static void mutex_unlock_cb(void *ud) { pthread_mutex_unlock(ud); }
static void mutex_lock_cb(void *ud) { pthread_mutex_lock(ud); }

/*
 * Two devices land the same path at once under the same batch id (a
 * layout without {device}), each on its own lander with its own lock, their
 * chunks interleaved: each keeps its own temporary file, they get versions
 * 1 and 2 in the order they finish, and the newest is the one in place.
 */
static void test_shared_layout_interleaved(void **state)
{
    env *e = *state;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    const ingest_lander_lock lk = {mutex_unlock_cb, mutex_lock_cb, &mu};
    ingest_ctx *c[2];
    ingest_lander *l[2];
    for (int i = 0; i < 2; i++) {
        assert_non_null(c[i] = ingest_ctx_create(NULL));
        assert_int_equal(ingest_lander_create(c[i], e->st, e->idx, e->bronze, "{path}", e->key, e->codec, &l[i]), 0);
        assert_int_equal(ingest_lander_set_lock(l[i], &lk), 0);
    }
    uint8_t *d[2] = {pattern(2 * CH + 5, 801), pattern(2 * CH + 5, 802)};
    tbatch t[2];
    ingest_lander_batch *b[2];
    for (int i = 0; i < 2; i++) {
        const tfile f[] = {{"p/x.bin", d[i], 2 * CH + 5, T2024, 0644}};
        make_batch(e, i ? "dev2" : "dev1", "b1", f, 1, &t[i]);
        assert_int_equal(ingest_lander_parse(l[i], i ? "dev2" : "dev1", t[i].manifest, t[i].mlen, &b[i]), 0);
        assert_int_equal(ingest_lander_lookup(b[i]), 0);
    }
    for (uint32_t k = 0; k < t[0].nchunks; k++)
        for (int i = 0; i < 2; i++)
            assert_int_equal(put(e, b[i], &t[i], k), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(ingest_lander_commit_prepare(b[i]), 0);
    assert_int_equal(ingest_lander_commit_finish(b[1], NULL), 0); /* dev2 first */
    assert_int_equal(ingest_lander_commit_finish(b[0], NULL), 0);
    assert_int_equal(device_version(e, "dev2", "b1", "p/x.bin"), 1);
    assert_int_equal(device_version(e, "dev1", "b1", "p/x.bin"), 2);
    assert_file(e, "p/x.bin", d[0], 2 * CH + 5, T2024, 0644); /* the newest, dev1's */
    assert_int_equal(count_files(e), 1);
    for (int i = 0; i < 2; i++) {
        ingest_lander_batch_destroy(b[i]);
        ingest_lander_destroy(l[i]);
        ingest_ctx_destroy(c[i]);
        free(t[i].manifest);
        free(d[i]);
    }
}

static void same_path_case(env *e, int window)
{
    uint8_t *px = pattern(2 * CH, 111), *py = pattern(CH + 3, 112), *q = pattern(CH, 113);
    const tfile fx[] = {{"p", px, 2 * CH, T2024, 0644}, {"q", q, CH, T2024, 0644}};
    const tfile fy[] = {{"p", py, CH + 3, T2024, 0644}};
    tbatch tx, ty;
    make_batch(e, "dev1", "bx", fx, 2, &tx);
    make_batch(e, "dev1", "by", fy, 1, &ty);
    ingest_lander *l2 = NULL;
    assert_int_equal(ingest_lander_create(e->ctx, e->st, e->idx, e->bronze, NULL, e->key, e->codec, &l2), 0);
    ingest_lander_batch *bx = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", tx.manifest, tx.mlen, &bx), 0);
    same_path sp = {l2, &ty, window, 0};
    lockrec r = {.e = e, .locked = true, .hook = land_y_hook, .hook_ud = &sp};
    const ingest_lander_lock lk = {rec_unlock, rec_lock, &r};
    land_two_phase(e, bx, &tx, &lk);
    ingest_lander_batch_destroy(bx);
    assert_int_equal(sp.landed, 1);
    assert_true(r.locked && r.misuse == 0 && r.unlocks == r.locks);
    assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", "bx"), 1);
    assert_int_equal(ingest_index_batch_landed(e->idx, "dev1", "by"), 1);
    assert_file(e, "dev1/2024/02/29/q", q, CH, T2024, 0644);
    assert_indexed(e, &tx, 2); /* q */
    if (window == 1) {
        /* Y took the path first: version 1; X renamed over it later with version 2 */
        assert_int_equal(landed_version(e, "by", "dev1/2024/02/29/p"), 1);
        assert_int_equal(landed_version(e, "bx", "dev1/2024/02/29/p"), 2);
        assert_file(e, "dev1/2024/02/29/p", px, 2 * CH, T2024, 0644);
        assert_indexed(e, &tx, 0);
        assert_indexed(e, &tx, 1);
    } else {
        /* X renamed p (version 1) before unlocking; Y landed version 2 over it and is what the
         * index points at: X did not index the file it no longer has */
        assert_int_equal(landed_version(e, "bx", "dev1/2024/02/29/p"), 1);
        assert_int_equal(landed_version(e, "by", "dev1/2024/02/29/p"), 2);
        assert_file(e, "dev1/2024/02/29/p", py, CH + 3, T2024, 0644);
        assert_indexed(e, &ty, 0);
        assert_indexed(e, &ty, 1);
        uint8_t id[INGEST_ID_BYTES];
        ingest_chunk_loc loc;
        ingest_chunk_id(e->key, px, CH, id);
        assert_int_equal(ingest_index_find(e->idx, id, &loc), INGEST_ENOTFOUND);
    }
    assert_int_equal(count_files(e), 2);
    ingest_lander_destroy(l2);
    free(tx.manifest);
    free(ty.manifest);
    free(px);
    free(py);
    free(q);
}

static void test_same_path_before_versions(void **state) { same_path_case(*state, 1); }
static void test_same_path_after_rename(void **state) { same_path_case(*state, 2); }

/*
 * The pipeline on real threads: X is finished on a second thread with a
 * mutex as the caller's lock while this thread lands Y on a second lander
 * under the same mutex.  The finisher waits in its first unlocked window
 * while this thread puts Y's first chunk, which finds a stale known chunk
 * (a store write, on this thread); then X's finish runs to its end before
 * Y goes on.  A store write transaction left open when the mutex is
 * released, then committed by the other thread, would leave LMDB's writer
 * lock owned by the wrong thread: the next write hangs and the alarm fails
 * the test.
 */
typedef struct finisher {
    ingest_lander_batch *b;
    pthread_mutex_t *mu;
    pthread_mutex_t gate;
    pthread_cond_t cv;
    int stage; /* 1: the finisher is in its first unlocked window; 2: it may go on */
    int rc;
} finisher;

static void mu_unlock(void *ud) { pthread_mutex_unlock(ud); }
static void mu_lock(void *ud) { pthread_mutex_lock(ud); }

static void fin_unlock(void *ud)
{
    finisher *f = ud;
    pthread_mutex_unlock(f->mu);
    pthread_mutex_lock(&f->gate);
    if (f->stage == 0) {
        f->stage = 1;
        pthread_cond_broadcast(&f->cv);
        while (f->stage != 2)
            pthread_cond_wait(&f->cv, &f->gate);
    }
    pthread_mutex_unlock(&f->gate);
}

static void fin_lock(void *ud)
{
    finisher *f = ud;
    pthread_mutex_lock(f->mu);
}

static void fin_stage(finisher *f, int from, int to)
{
    pthread_mutex_lock(&f->gate);
    while (f->stage != from)
        pthread_cond_wait(&f->cv, &f->gate);
    f->stage = to;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->gate);
}

static void *finish_main(void *ud)
{
    finisher *f = ud;
    const ingest_lander_lock lk = {fin_unlock, fin_lock, f};
    pthread_mutex_lock(f->mu);
    f->rc = ingest_lander_commit_finish(f->b, &lk);
    pthread_mutex_unlock(f->mu);
    return NULL;
}

static void test_finish_on_thread(void **state)
{
    env *e = *state;
    alarm(20);
    ingest_ctx *c1 = ingest_ctx_create(NULL), *c2 = ingest_ctx_create(NULL);
    assert_non_null(c1);
    assert_non_null(c2);
    ingest_lander *l1 = NULL, *l2 = NULL;
    assert_int_equal(ingest_lander_create(c1, e->st, e->idx, e->bronze, NULL, e->key, e->codec, &l1), 0);
    assert_int_equal(ingest_lander_create(c2, e->st, e->idx, e->bronze, NULL, e->key, e->codec, &l2), 0);
    enum { NX = 6 };
    uint8_t *dx[NX], *old = pattern(2 * CH, 120), *yn = pattern(3 * CH, 121);
    tfile fx[NX];
    char names[NX][16];
    for (int i = 0; i < NX; i++) {
        dx[i] = pattern(4 * CH, 130 + (uint32_t)i);
        snprintf(names[i], sizeof names[i], "x%d", i);
        fx[i] = (tfile){names[i], dx[i], 4 * CH, T2024, 0644};
    }
    const tfile fo[] = {{"old", old, 2 * CH, T2024, 0644}};
    const tfile fy[] = {{"y/old", old, 2 * CH, T2024, 0644}, {"y/new", yn, 3 * CH, T2024, 0644}};
    tbatch to, tx, ty;
    make_batch(e, "dev1", "bo", fo, 1, &to);
    make_batch(e, "dev1", "bx", fx, NX, &tx);
    make_batch(e, "dev1", "by", fy, 2, &ty);
    ingest_lander_batch *b = NULL, *bx = NULL, *by = NULL;
    assert_int_equal(ingest_lander_begin(l1, "dev1", to.manifest, to.mlen, &b), 0);
    land_all(e, b, &to);
    ingest_lander_batch_destroy(b);
    assert_int_equal(ingest_lander_begin(l1, "dev1", tx.manifest, tx.mlen, &bx), 0);
    const uint32_t *w;
    size_t n;
    ingest_lander_wants(bx, &w, &n);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(put(e, bx, &tx, w[k]), 0);
    assert_int_equal(ingest_lander_commit_prepare(bx), 0);

    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    finisher fin = {.b = bx, .mu = &mu, .rc = -1};
    assert_int_equal(pthread_mutex_init(&fin.gate, NULL), 0);
    assert_int_equal(pthread_cond_init(&fin.cv, NULL), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, finish_main, &fin), 0);
    /* meanwhile, Y on the second lander; its known chunks' file goes away after begin */
    pthread_mutex_lock(&mu);
    const int rb = ingest_lander_begin(l2, "dev1", ty.manifest, ty.mlen, &by);
    pthread_mutex_unlock(&mu);
    assert_int_equal(rb, 0);
    char p[512];
    snprintf(p, sizeof p, "%s/dev1/2024/02/29/old", e->bronze);
    assert_int_equal(unlink(p), 0);
    fin_stage(&fin, 1, 1); /* X's finish is in its first unlocked window */
    ingest_lander_wants(by, &w, &n);
    assert_int_equal(n, 3); /* y/new */
    uint32_t todo[MAXCH];
    size_t ntodo = 0;
    for (size_t k = 1; k < n; k++)
        todo[ntodo++] = w[k];
    pthread_mutex_lock(&mu);
    int rc = put(e, by, &ty, w[0]); /* the cursor meets the stale chunks first: re-wanted */
    pthread_mutex_unlock(&mu);
    assert_int_equal(rc, 0);
    assert_int_equal(ingest_lander_awaited(by), 4);
    fin_stage(&fin, 1, 2); /* X's finish goes on, to its end */
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(fin.rc, 0);
    ingest_lander_rewants(by, &w, &n);
    assert_int_equal(n, 2);
    for (size_t k = 0; k < n; k++)
        todo[ntodo++] = w[k];
    for (;;) {
        for (size_t k = 0; k < ntodo && rc == 0; k++) {
            pthread_mutex_lock(&mu);
            rc = put(e, by, &ty, todo[k]);
            pthread_mutex_unlock(&mu);
        }
        assert_int_equal(rc, 0);
        pthread_mutex_lock(&mu);
        rc = ingest_lander_commit_prepare(by);
        ingest_lander_rewants(by, &w, &n);
        ntodo = 0;
        for (size_t k = 0; k < n; k++)
            todo[ntodo++] = w[k];
        pthread_mutex_unlock(&mu);
        if (rc == 0)
            break;
        assert_int_equal(rc, INGEST_EBUSY);
        rc = 0;
    }
    const ingest_lander_lock lk = {mu_unlock, mu_lock, &mu};
    pthread_mutex_lock(&mu);
    rc = ingest_lander_commit_finish(by, &lk);
    pthread_mutex_unlock(&mu);
    assert_int_equal(rc, 0);
    pthread_mutex_destroy(&fin.gate);
    pthread_cond_destroy(&fin.cv);
    ingest_lander_stats s;
    ingest_lander_batch_stats(by, &s);
    assert_int_equal(s.chunks_rewanted, 2);
    ingest_lander_batch_destroy(bx);
    ingest_lander_batch_destroy(by);
    /* the store still takes writes from this thread and from another process */
    assert_int_equal(ingest_index_batch_mark(e->idx, "dev1", "probe"), 0);
    assert_int_equal(ingest_store_commit(e->st), 0);
    assert_true(probe_store(e, "dev1/2024/02/29/y/old", "by") == 3);
    alarm(0);
    for (int i = 0; i < NX; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "dev1/2024/02/29/%s", names[i]);
        assert_file(e, rel, dx[i], 4 * CH, T2024, 0644);
    }
    assert_file(e, "dev1/2024/02/29/y/old", old, 2 * CH, T2024, 0644);
    assert_file(e, "dev1/2024/02/29/y/new", yn, 3 * CH, T2024, 0644);
    for (uint32_t i = 0; i < tx.nchunks; i++)
        assert_indexed(e, &tx, i);
    for (uint32_t i = 0; i < ty.nchunks; i++)
        assert_indexed(e, &ty, i);
    for (int i = 0; i < NX; i++)
        free(dx[i]);
    ingest_lander_destroy(l1);
    ingest_lander_destroy(l2);
    ingest_ctx_destroy(c1);
    ingest_ctx_destroy(c2);
    free(to.manifest);
    free(tx.manifest);
    free(ty.manifest);
    free(old);
    free(yn);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* INGEST_TEST_FULL=1: a figure, 64 files of 252 KiB all new, then the same content copied. */
static void test_bench(void **state)
{
    env *e = *state;
    const char *full = getenv("INGEST_TEST_FULL");
    if (!full || strcmp(full, "1") != 0)
        skip();
    enum { NF = 64, FS = 63 * CH };
    uint8_t *data[NF];
    char names[NF][16];
    for (int i = 0; i < NF; i++) {
        data[i] = pattern(FS, 100 + (uint32_t)i);
        snprintf(names[i], sizeof names[i], "f%03d", i);
    }
    for (int round = 0; round < 2; round++) {
        /* manifest in pieces of one file: MAXCH chunks per tbatch */
        ingest_lander_batch *b = NULL;
        ingest_manifest_writer *w = NULL;
        assert_int_equal(ingest_manifest_writer_create(e->ctx, &w), 0);
        ingest_manifest_rec rec;
        memset(&rec, 0, sizeof rec);
        rec.type = INGEST_MREC_HEADER;
        rec.device = "dev1";
        rec.batch = round ? "r1" : "r0";
        rec.nfiles = NF;
        rec.total_bytes = (uint64_t)NF * FS;
        assert_int_equal(ingest_manifest_writer_add(w, &rec), 0);
        for (int i = 0; i < NF; i++) {
            char nm[64] = "copy/";
            memcpy(nm + (round ? 5 : 0), names[i], strlen(names[i]) + 1);
            ingest_manifest_chunk ch[MAXCH];
            uint32_t nc = 0;
            for (size_t off = 0; off < FS; off += CH, nc++) {
                ingest_chunk_id(e->key, data[i] + off, CH, ch[nc].id);
                ch[nc].len = CH;
            }
            memset(&rec, 0, sizeof rec);
            rec.type = INGEST_MREC_FILE;
            rec.path = nm;
            rec.size = FS;
            rec.mtime_ns = T2024;
            rec.mode = 0644;
            ingest_filehash fh;
            ingest_filehash_init(&fh, e->key);
            for (uint32_t k = 0; k < nc; k++)
                ingest_filehash_update(&fh, ch[k].id, INGEST_ID_BYTES);
            ingest_filehash_final(&fh, rec.hash);
            rec.chunks = ch;
            rec.nchunks = rec.nchunks_total = nc;
            assert_int_equal(ingest_manifest_writer_add(w, &rec), 0);
        }
        size_t ml;
        const void *m = ingest_manifest_writer_data(w, &ml);
        const double t0 = now_s();
        assert_int_equal(ingest_lander_begin(e->l, "dev1", m, ml, &b), 0);
        const uint32_t *wl;
        size_t n;
        ingest_lander_wants(b, &wl, &n);
        assert_int_equal(n, round ? 0 : (size_t)NF * (FS / CH));
        for (size_t k = 0; k < n; k++) {
            const uint32_t fi = wl[k] / (FS / CH), ci = wl[k] % (FS / CH);
            uint8_t enc[CH + 64];
            size_t el;
            assert_int_equal(ingest_codec_encode(e->codec, data[fi] + (size_t)ci * CH, CH, enc, sizeof enc, &el), 0);
            assert_int_equal(ingest_lander_put_chunk(b, wl[k], enc, el), 0);
        }
        const double t1 = now_s();
        assert_int_equal(ingest_lander_commit(b), 0);
        const double dt = now_s() - t0;
        print_message("  (begin + chunks %.3f s, commit %.3f s)\n", t1 - t0, dt - (t1 - t0));
        ingest_lander_stats s;
        ingest_lander_batch_stats(b, &s);
        print_message("lander bench %s: %d files, %.1f MB in %.3f s = %.0f MB/s, %llu syncs, %llu copies\n",
                      round ? "all known (copies)" : "all new", NF, (double)s.bytes / 1e6, dt,
                      (double)s.bytes / 1e6 / dt, (unsigned long long)s.syncs, (unsigned long long)s.copies);
        ingest_lander_batch_destroy(b);
        ingest_manifest_writer_destroy(w);
    }
    for (int i = 0; i < NF; i++)
        free(data[i]);
}

/*
 * A file appended in place cannot be withdrawn (FILE_WITHDRAWN): its bytes
 * go into its landed version, so the withdrawal is refused (INGEST_EBUSY)
 * and the batch fails the old way, undone: the landed file is exactly its
 * earlier version, whether nothing was appended yet, a chunk was, or it is
 * the batch's last file; no intent is left, and the next file of the batch
 * never writes into it.
 */
static void test_withdraw_appended(void **state)
{
    env *e = *state;
    assert_int_equal(ingest_lander_set_append(e->l, 1), 0);
    for (int mode = 0; mode < 3; mode++) { /* 0: nothing appended yet; 1: a chunk appended; 2: it is the last file */
        const size_t n1 = 3 * CH, n2 = 6 * CH;
        uint8_t *v = pattern(n2, 91 + (uint32_t)mode), *o = pattern(2 * CH, 95 + (uint32_t)mode);
        char name[16], b1[16], b2[16], rel[64];
        snprintf(name, sizeof name, "log%d", mode);
        snprintf(b1, sizeof b1, "wa%d-1", mode);
        snprintf(b2, sizeof b2, "wa%d-2", mode);
        snprintf(rel, sizeof rel, "dev1/2024/02/29/%s", name);
        const tfile f1[] = { { name, v, n1, T2024, 0644 } };
        const tfile f2[] = { { name, v, n2, T2024 + 1, 0644 }, { "other", o, 2 * CH, T2024, 0644 } };
        tbatch t1, t2;
        make_batch(e, "dev1", b1, f1, 1, &t1);
        make_batch(e, "dev1", b2, f2, mode == 2 ? 1 : 2, &t2);
        ingest_lander_batch *b = NULL;
        assert_int_equal(ingest_lander_begin(e->l, "dev1", t1.manifest, t1.mlen, &b), 0);
        land_all(e, b, &t1);
        ingest_lander_batch_destroy(b);
        assert_int_equal(ingest_lander_begin(e->l, "dev1", t2.manifest, t2.mlen, &b), 0);
        if (mode == 0)
            (void)ingest_lander_advance(b);
        else
            assert_int_equal(put(e, b, &t2, 3), 0); /* appended to the landed file */
        assert_int_equal(ingest_lander_withdraw(b, 0, INGEST_ENOTFOUND, "vanished"), INGEST_EBUSY);
        assert_non_null(strstr(ingest_ctx_errmsg(e->ctx), "appended in place"));
        ingest_lander_batch_destroy(b); /* the batch fails: undone */
        assert_file(e, rel, v, n1, T2024, 0644); /* its earlier version, exactly */
        assert_int_equal(count_intents(e), 0);
        assert_false(exists(e, "dev1/2024/02/29/other"));
        free(t1.manifest);
        free(t2.manifest);
        free(v);
        free(o);
    }
}

/*
 * Withdrawing the file the cursor is in while a run of its unchanged chunks
 * waits to be cloned (here: the cursor blocked on a known chunk whose landed
 * copy no longer matches its id, so it is asked for): the run goes with the
 * file, and the next file lands with its own bytes alone.
 */
static void test_withdraw_pending_run(void **state)
{
    env *e = *state;
    const size_t n1 = 4 * CH;
    uint8_t *v = pattern(n1, 71), *o = pattern(2 * CH, 72);
    const tfile f1[] = { { "a", v, n1, T2024, 0644 } };
    const tfile f2[] = { { "a", v, n1, T2024, 0644 }, { "b", o, 2 * CH, T2024, 0644 } };
    tbatch t1, t2;
    make_batch(e, "dev1", "pr1", f1, 1, &t1);
    make_batch(e, "dev1", "pr2", f2, 2, &t2);
    ingest_lander_batch *b = NULL;
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t1.manifest, t1.mlen, &b), 0);
    land_all(e, b, &t1);
    ingest_lander_batch_destroy(b);
    /* chunk 2 of the landed file no longer matches its id; size and mtime kept */
    char p[512];
    snprintf(p, sizeof p, "%s/dev1/2024/02/29/a", e->bronze);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    const int fd = open(p, O_WRONLY);
    assert_true(fd >= 0);
    const uint8_t junk[16] = { 1, 2, 3 };
    assert_int_equal(pwrite(fd, junk, sizeof junk, 2 * CH + 5), (ssize_t)sizeof junk);
    const struct timespec ts[2] = { sb.st_atim, sb.st_mtim };
    assert_int_equal(futimens(fd, ts), 0);
    close(fd);
    assert_int_equal(ingest_lander_begin(e->l, "dev1", t2.manifest, t2.mlen, &b), 0);
    (void)ingest_lander_advance(b);
    assert_int_equal(ingest_lander_withdraw(b, 0, INGEST_ENOTFOUND, "vanished"), 0);
    const uint32_t *w;
    size_t nw;
    ingest_lander_wants(b, &w, &nw);
    for (size_t k = 0; k < nw; k++)
        if (w[k] >= 4)
            assert_int_equal(put(e, b, &t2, w[k]), 0);
    assert_int_equal(ingest_lander_commit(b), 0);
    ingest_lander_batch_destroy(b);
    assert_file(e, "dev1/2024/02/29/b", o, 2 * CH, T2024, 0644);
    free(t1.manifest);
    free(t2.manifest);
    free(v);
    free(o);
}

/*
 * The set of directories known durable (core/lander_syncs.h): marks found again, a mark of a looker who
 * looked before a removal not taken, and a removal taking out that one directory only, the others found
 * again however their probes chained (760 of the 1,024 slots marked, with a fixed key whose chains wrap).
 */
static void test_durable_dirs_set(void **state)
{
    (void)state;
    ingest__syncs sy;
    char d[64];
    uint64_t g = 0;
    /* a fixed key (the same slots every run) under which a chain wraps past the last slot to the first */
    int wraps = 0;
    for (uint8_t key = 1; key < 64 && !wraps; key++) {
        ingest__syncs_init(&sy);
        memset(sy.dir_key, key, sizeof sy.dir_key);
        g = ingest__syncs_dir_gen(&sy);
        for (unsigned i = 0; i < 760; i++) {
            snprintf(d, sizeof d, "dev1/d%u", i);
            ingest__syncs_dir_mark(&sy, d, g);
        }
        wraps = sy.dirs[INGEST__DURABLE_DIRS - 1] != 0 && sy.dirs[0] != 0 && sy.dirs[0] % INGEST__DURABLE_DIRS > 0;
        if (!wraps)
            ingest__syncs_destroy(&sy);
    }
    assert_true(wraps);
    for (unsigned i = 0; i < 760; i++) {
        snprintf(d, sizeof d, "dev1/d%u", i);
        assert_true(ingest__syncs_dir_durable(&sy, d));
    }

    assert_false(ingest__syncs_dir_durable(&sy, "dev1/other"));
    /* remove every third: exactly those go */
    for (unsigned i = 0; i < 760; i += 3) {
        snprintf(d, sizeof d, "dev1/d%u", i);
        ingest__syncs_dir_forget(&sy, d);
    }
    for (unsigned i = 0; i < 760; i++) {
        snprintf(d, sizeof d, "dev1/d%u", i);
        if (ingest__syncs_dir_durable(&sy, d) != (i % 3 != 0))
            fail_msg("%s: durable %d after the removals of every third", d, !(i % 3 != 0));
    }
    /* a mark made with the count from before a removal is void; one from after it is taken */
    ingest__syncs_dir_mark(&sy, "dev1/d0", g);
    assert_false(ingest__syncs_dir_durable(&sy, "dev1/d0"));
    g = ingest__syncs_dir_gen(&sy);
    ingest__syncs_dir_mark(&sy, "dev1/d0", g);
    assert_true(ingest__syncs_dir_durable(&sy, "dev1/d0"));
    /* removing what is not there voids earlier looks too, and harms nothing */
    ingest__syncs_dir_forget(&sy, "dev1/never");
    ingest__syncs_dir_mark(&sy, "dev1/d3", g);
    assert_false(ingest__syncs_dir_durable(&sy, "dev1/d3"));
    assert_true(ingest__syncs_dir_durable(&sy, "dev1/d1"));
    ingest__syncs_destroy(&sy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_land_new, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stage_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stage_merge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stage_taken, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stage_blocked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sweep_staged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stage_withdraw, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stage_long_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_land_modes_under_umask, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_files_helper, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_files_many, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_removed_before_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_removed_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_swept_with_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stage_files_removed, setup, teardown),
        cmocka_unit_test(test_durable_dirs_set),
        cmocka_unit_test_setup_teardown(test_small_files_helper_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_files_helper_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dedup_copies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dedup_scope_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_direct_io_repeats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_in_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_file_removed_at_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_undo_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_holes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rewant_deleted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rewant_overwritten, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_protocol_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_verified, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pushed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sweep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rename_blocked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rename_name_taken_meanwhile, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_claims_bounded_by_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_traversal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlink_in_bronze, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_chain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlink_entry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_misc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_abort, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_withdraw, setup, teardown),
        cmocka_unit_test_setup_teardown(test_withdraw_appended, setup, teardown),
        cmocka_unit_test_setup_teardown(test_withdraw_pending_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunk_base, setup, teardown),
        cmocka_unit_test_setup_teardown(test_layout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hash_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_syncfs_shared, setup, teardown),
        cmocka_unit_test_setup_teardown(test_direct_write_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_phase_equals_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_finish_lock_fsync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_finish_lock_syncfs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_crash_fsync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_crash_syncfs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_fail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_land, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_bad_intents, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_live_left_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_earlier_try, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_orphans, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_later_stays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_sweep_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_live_left_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_between_steps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_fail_after_manifest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_earlier_try, setup, teardown),
        cmocka_unit_test_setup_teardown(test_own_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_layout_interleaved, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prepare_rewants, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prepared_refuses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_landers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_path_before_versions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_path_after_rename, setup, teardown),
        cmocka_unit_test_setup_teardown(test_finish_on_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bench, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
