/* Unit tests for the batch builder: walk order, skips, limits, manifest,
 * chunk re-reading and encoding, change detection, bounded memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ingest.h"
#include "support/testkit.h"
#include "ingest/sender.h"

/* ---- helpers ----------------------------------------------------------- */

static int quick(void)
{
    const char *q = getenv("INGEST_TEST_QUICK");
    return q != NULL && q[0] == '1';
}

static char *mk_tmpdir(void)
{
    char tmpl[] = "/tmp/ingest-sender-XXXXXX";
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    assert_int_equal(chmod(d, 0755), 0);
    return strdup(d);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_DP)
        return rmdir(p);
    return unlink(p);
}

static void rm_tree(char *d)
{
    nftw(d, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(d);
}

static void join(char *out, size_t cap, const char *dir, const char *rel)
{
    const int n = snprintf(out, cap, "%s/%s", dir, rel);
    assert_true(n > 0 && (size_t)n < cap);
}

static void mkdirs(const char *dir, const char *rel)
{
    char p[4096];
    join(p, sizeof(p), dir, rel);
    for (char *q = p + strlen(dir) + 1; *q; q++) {
        if (*q == '/') {
            *q = '\0';
            mkdir(p, 0755);
            *q = '/';
        }
    }
    mkdir(p, 0755);
}

static void put_file(const char *dir, const char *rel, const void *data, size_t len)
{
    char p[4096];
    join(p, sizeof(p), dir, rel);
    const int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

static void put_random(const char *dir, const char *rel, size_t len, uint64_t seed)
{
    uint8_t *buf = malloc(len ? len : 1);
    assert_non_null(buf);
    gen_random(buf, len, seed);
    put_file(dir, rel, buf, len);
    free(buf);
}

/* Whole contents of dir/rel (malloc'd). */
static uint8_t *slurp(const char *dir, const char *rel, size_t *len)
{
    char p[4096];
    join(p, sizeof(p), dir, rel);
    const int fd = open(p, O_RDONLY);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    assert_non_null(buf);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        const ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        assert_true(n > 0);
        got += (size_t)n;
    }
    close(fd);
    *len = got;
    return buf;
}

/* Records of on_skip / on_read. */
struct rec {
    char skips[4096];
    int nskips;
    /* on_read hook: append to this file once when it is being read */
    const char *grow_path;  /* manifest path to watch */
    const char *grow_file;  /* filesystem path to append to */
    int grown;
    long rss_peak_kb;
    int sample_rss;
};

static void on_skip(void *ud, const char *path, int reason)
{
    struct rec *r = ud;
    const size_t n = strlen(r->skips);
    snprintf(r->skips + n, sizeof(r->skips) - n, "%d:%s\n", reason, path);
    r->nskips++;
}

static long rss_anon_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "RssAnon: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static void on_read(void *ud, const char *path, uint64_t done)
{
    struct rec *r = ud;
    (void)done;
    if (r->grow_path && !r->grown && strcmp(path, r->grow_path) == 0) {
        const int fd = open(r->grow_file, O_WRONLY | O_APPEND);
        if (fd >= 0) {
            const char more[100] = "more";
            if (write(fd, more, sizeof(more)) == (ssize_t)sizeof(more))
                r->grown = 1;
            close(fd);
        }
    }
    if (r->sample_rss) {
        const long kb = rss_anon_kb();
        if (kb > r->rss_peak_kb)
            r->rss_peak_kb = kb;
    }
}

static int g_threads = 0; /* opts.threads of the tests that do not loop over both */

static ingest_sender_opts base_opts(const ingest_sender_source *src, size_t n, struct rec *r)
{
    ingest_sender_opts o;
    memset(&o, 0, sizeof(o));
    o.device = "dev-1";
    o.dedup_key = ingest_default_dedup_key();
    o.sources = src;
    o.nsources = n;
    o.batch_prefix = "t-";
    o.on_skip = on_skip;
    o.on_read = on_read;
    o.userdata = r;
    o.threads = g_threads;
    return o;
}

/* Walk everything; return the manifest paths of all batches joined by
 * '\n' and per-batch file counts joined by ','. */
static void walk_all(ingest_ctx *ctx, const ingest_sender_opts *o, char *paths, size_t pcap, char *counts,
                     size_t ccap, ingest_sender_stats *st)
{
    ingest_sender *s = NULL;
    assert_int_equal(ingest_sender_create(ctx, o, &s), 0);
    assert_int_equal(ingest_sender_scan(s), 0);
    paths[0] = counts[0] = '\0';
    ingest_sender_batch *b = NULL;
    int rc;
    while ((rc = ingest_sender_next_batch(s, &b)) == 1) {
        ingest_sender_batch_stats bs;
        ingest_sender_batch_stats_get(b, &bs);
        size_t n = strlen(counts);
        snprintf(counts + n, ccap - n, "%s%llu", n ? "," : "", (unsigned long long)bs.files);
        for (uint64_t i = 0; i < bs.files; i++) {
            ingest_sender_file_info fi;
            assert_int_equal(ingest_sender_batch_file(b, i, &fi), 0);
            n = strlen(paths);
            snprintf(paths + n, pcap - n, "%s\n", fi.path);
        }
        ingest_sender_batch_destroy(b);
    }
    assert_int_equal(rc, 0);
    assert_null(b);
    /* the walk is done: more calls keep returning 0 */
    assert_int_equal(ingest_sender_next_batch(s, &b), 0);
    if (st)
        ingest_sender_get_stats(s, st);
    ingest_sender_destroy(s);
}

/* ---- tests --------------------------------------------------------------- */

/*
 * List mode (ingest_sender_scan_list, a daemon's journaled files): a path
 * under no configured source (its source taken out of the configuration)
 * is passed over as gone, saying so, and one with '..' as a bad name, not
 * both as "path too long"; the others are batched.
 */
static void test_list_skips(void **state)
{
    (void)state;
    struct failing fa = { 0 };
    ingest_ctx *ctx = make_ctx(&fa);
    char *d = mk_tmpdir();
    mkdirs(d, "src");
    put_file(d, "src/a.txt", "aaaa", 4);
    char p[4096];
    join(p, sizeof(p), d, "src");
    struct rec r;
    memset(&r, 0, sizeof(r));
    const ingest_sender_source src[] = { { "s", p, 0 } };
    const ingest_sender_opts o = base_opts(src, 1, &r);
    ingest_sender *snd = NULL;
    assert_int_equal(ingest_sender_create(ctx, &o, &snd), 0);
    const char *paths[] = { "gone/x.txt", "s/../a.txt", "s/a.txt" };
    assert_int_equal(ingest_sender_scan_list(snd, paths, 3), 0);
    ingest_sender_batch *b = NULL;
    assert_int_equal(ingest_sender_next_batch(snd, &b), 1);
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    assert_int_equal(bs.files, 1);
    char want[256];
    snprintf(want, sizeof want, "%d:gone/x.txt\n%d:s/../a.txt\n", INGEST_SKIP_VANISHED, INGEST_SKIP_NAME);
    assert_string_equal(r.skips, want);
    ingest_sender_batch_destroy(b);
    ingest_sender_destroy(snd);
    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

static void test_walk_order_and_skips(void **state)
{
    (void)state;
    struct failing fa = { 0 };
    ingest_ctx *ctx = make_ctx(&fa);
    char *d = mk_tmpdir();
    mkdirs(d, "src/a/deep/x/y");
    put_file(d, "src/b.txt", "bbbb", 4);
    put_random(d, "src/a/z.bin", 300 * 1024, 1);
    put_file(d, "src/a/empty", "", 0);
    put_file(d, "src/a/deep/x/y/f", "0123456789", 10);
    put_file(d, "src/a.txt", "a", 1);
    put_file(d, "src/c.dat", "c", 1);
    put_file(d, "src/bad\001name", "x", 1); /* a control byte: shipped like any name */
    mkdirs(d, "src/emptydir");
    char p[4096], t[4096];
    join(p, sizeof(p), d, "src/link");
    assert_int_equal(symlink("b.txt", p), 0);
    join(p, sizeof(p), d, "src/dlink");
    assert_int_equal(symlink("a", p), 0);
    join(p, sizeof(p), d, "src/fifo");
    assert_int_equal(mkfifo(p, 0644), 0);
    join(p, sizeof(p), d, "src");

    struct rec r;
    memset(&r, 0, sizeof(r));
    const ingest_sender_source src[] = { { "s", p, 0 } };
    const ingest_sender_opts o = base_opts(src, 1, &r);
    char paths[8192], counts[256];
    ingest_sender_stats st;
    walk_all(ctx, &o, paths, sizeof(paths), counts, sizeof(counts), &st);
    assert_string_equal(paths, "s/a/deep/x/y/f\ns/a/empty\ns/a/z.bin\ns/a.txt\ns/b.txt\ns/bad\001name\ns/c.dat\n");
    assert_string_equal(counts, "7");
    assert_int_equal(st.files_seen, 7);
    assert_int_equal(st.files_batched, 7);
    assert_int_equal(st.bytes_batched, 4 + 300 * 1024 + 10 + 1 + 1 + 1);
    assert_int_equal(st.batches, 1);
    assert_int_equal(st.skipped_special, 3);
    assert_int_equal(st.skipped_symlinks, 2); /* by kind */
    assert_int_equal(st.skipped_fifos, 1);
    assert_int_equal(st.skipped_sockets + st.skipped_devices, 0);
    assert_int_equal(st.skipped_name, 0);
    assert_int_equal(st.skipped_unreadable, 0);
    snprintf(t, sizeof(t), "%d:s/dlink\n%d:s/fifo\n%d:s/link\n", INGEST_SKIP_SPECIAL, INGEST_SKIP_SPECIAL,
             INGEST_SKIP_SPECIAL);
    assert_string_equal(r.skips, t);

    /* The same walk again gives the same order (reproducible batches). */
    char paths2[8192];
    walk_all(ctx, &o, paths2, sizeof(paths2), counts, sizeof(counts), NULL);
    assert_string_equal(paths, paths2);

    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

/* Discovery only: record every path offered, take none. */
struct seen {
    char *buf;
    size_t len, cap, n;
};

static int record_path(void *ud, const char *path, const ingest_sender_stat *st)
{
    (void)st;
    struct seen *v = ud;
    const size_t l = strlen(path);
    if (v->len + l + 2 > v->cap) {
        v->cap = (v->len + l + 2) * 2;
        v->buf = realloc(v->buf, v->cap);
        assert_non_null(v->buf);
    }
    memcpy(v->buf + v->len, path, l);
    v->buf[v->len + l] = '\n';
    v->len += l + 1;
    v->buf[v->len] = '\0';
    v->n++;
    return 0;
}

/*
 * The walk lists the next sibling directory ahead on its helper thread and
 * shares the stats of each block of names with it: whatever the shape of the
 * tree (runs of leaf directories, directories with subdirectories between
 * them, a directory whose names overflow the helper's listing buffer, blocks
 * larger than one stat block), every file is offered once, in the order of
 * a sorted depth-first walk.
 */
static void test_walk_listing_ahead(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    char *d = mk_tmpdir();
    struct seen want = { 0 };
    char rel[1024];
    /* d00..d29: leaves of 40 files, except d07 (a subdirectory, then a file)
     * and d20 (empty); n00: 3 levels deep; zbig: 1,500 names of 200 bytes
     * (300 KB of records: more than the helper reads ahead); zz: 2,100
     * files (three stat blocks). */
    for (int i = 0; i < 30; i++) {
        snprintf(rel, sizeof(rel), "src/d%02d", i);
        mkdirs(d, rel);
        if (i == 20)
            continue;
        if (i == 7) {
            mkdirs(d, "src/d07/a/b");
            put_file(d, "src/d07/a/b/f", "x", 1);
            put_file(d, "src/d07/g", "x", 1);
            continue;
        }
        for (int k = 0; k < 40; k++) {
            snprintf(rel, sizeof(rel), "src/d%02d/f%03d", i, k);
            put_file(d, rel, "", 0);
        }
    }
    mkdirs(d, "src/n00/a/b/c");
    mkdirs(d, "src/n00/b");
    mkdirs(d, "src/zbig");
    mkdirs(d, "src/zz");
    put_file(d, "src/n00/a/b/c/f", "x", 1);
    put_file(d, "src/n00/a/f", "x", 1);
    put_file(d, "src/n00/b/f", "x", 1);
    char longname[201];
    memset(longname, 'q', 200);
    longname[200] = '\0';
    for (int k = 0; k < 1500; k++) {
        snprintf(rel, sizeof(rel), "src/zbig/%04d%s", k, longname + 4);
        put_file(d, rel, "", 0);
    }
    for (int k = 0; k < 2100; k++) {
        snprintf(rel, sizeof(rel), "src/zz/%05d", k);
        put_file(d, rel, "", 0);
    }
    /* the expected order, built the way it must come out */
    for (int i = 0; i < 30; i++) {
        if (i == 20)
            continue;
        if (i == 7) {
            record_path(&want, "s/d07/a/b/f", NULL);
            record_path(&want, "s/d07/g", NULL);
            continue;
        }
        for (int k = 0; k < 40; k++) {
            snprintf(rel, sizeof(rel), "s/d%02d/f%03d", i, k);
            record_path(&want, rel, NULL);
        }
    }
    record_path(&want, "s/n00/a/b/c/f", NULL);
    record_path(&want, "s/n00/a/f", NULL);
    record_path(&want, "s/n00/b/f", NULL);
    for (int k = 0; k < 1500; k++) {
        snprintf(rel, sizeof(rel), "s/zbig/%04d%s", k, longname + 4);
        record_path(&want, rel, NULL);
    }
    for (int k = 0; k < 2100; k++) {
        snprintf(rel, sizeof(rel), "s/zz/%05d", k);
        record_path(&want, rel, NULL);
    }
    assert_int_equal(want.n, 29 * 40 - 40 + 2 + 3 + 1500 + 2100);

    char p[4096];
    join(p, sizeof(p), d, "src");
    const ingest_sender_source src[] = { { "s", p, 0 } };
    for (int round = 0; round < 2; round++) {
        struct seen got = { 0 };
        ingest_sender_opts o;
        memset(&o, 0, sizeof(o));
        o.device = "dev-1";
        o.dedup_key = ingest_default_dedup_key();
        o.sources = src;
        o.nsources = 1;
        o.want_file = record_path;
        o.userdata = &got;
        ingest_sender *s = NULL;
        ingest_sender_batch *b = NULL;
        assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
        assert_int_equal(ingest_sender_scan(s), 0);
        assert_int_equal(ingest_sender_next_batch(s, &b), 0);
        ingest_sender_stats st;
        ingest_sender_get_stats(s, &st);
        assert_int_equal(st.files_seen, want.n);
        assert_int_equal(st.files_unchanged, want.n);
        assert_int_equal(st.skipped_dirs, 0);
        assert_int_equal(got.n, want.n);
        assert_string_equal(got.buf, want.buf);
        ingest_sender_destroy(s);
        free(got.buf);
    }
    /* Abandoned half way, with a listing ahead pending: a new scan starts
     * over and sees everything; destroying it mid-walk leaks nothing. */
    {
        struct rec r;
        memset(&r, 0, sizeof(r));
        ingest_sender_opts o = base_opts(src, 1, &r);
        o.max_files = 1;
        ingest_sender *s = NULL;
        ingest_sender_batch *b = NULL;
        assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
        for (int again = 0; again < 2; again++) {
            assert_int_equal(ingest_sender_scan(s), 0);
            assert_int_equal(ingest_sender_next_batch(s, &b), 1);
            ingest_sender_file_info fi;
            assert_int_equal(ingest_sender_batch_file(b, 0, &fi), 0);
            assert_string_equal(fi.path, "s/d00/f000");
            ingest_sender_batch_destroy(b);
            b = NULL;
        }
        ingest_sender_destroy(s);
    }
    free(want.buf);
    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

/* The check for test_unreadable, run as a user that permissions apply to:
 * returns 0 when it holds, else a line number. */
static int unreadable_check(const char *srcpath)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL)
        return __LINE__;
    struct rec r;
    memset(&r, 0, sizeof(r));
    const ingest_sender_source src[] = { { "s", srcpath, 0 } };
    const ingest_sender_opts o = base_opts(src, 1, &r);
    ingest_sender *s = NULL;
    int ret = 0;
    if (ingest_sender_create(ctx, &o, &s) != 0 || ingest_sender_scan(s) != 0) {
        ret = __LINE__;
        goto out;
    }
    ingest_sender_batch *b = NULL;
    if (ingest_sender_next_batch(s, &b) != 1) {
        ret = __LINE__;
        goto out;
    }
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    ingest_sender_file_info f0, f1;
    if (bs.files != 2 || ingest_sender_batch_file(b, 0, &f0) != 0 || ingest_sender_batch_file(b, 1, &f1) != 0 ||
        strcmp(f0.path, "s/ok1") != 0 || strcmp(f1.path, "s/ok2") != 0)
        ret = __LINE__;
    /* the inode and device of the file chunked */
    char p1[PATH_MAX];
    struct stat st1;
    snprintf(p1, sizeof(p1), "%s/ok1", srcpath);
    if (ret == 0 && (stat(p1, &st1) != 0 || f0.ino != (uint64_t)st1.st_ino || f0.dev != (uint64_t)st1.st_dev))
        ret = __LINE__;
    ingest_sender_batch_destroy(b);
    if (ret == 0 && ingest_sender_next_batch(s, &b) != 0)
        ret = __LINE__;
    ingest_sender_stats st;
    ingest_sender_get_stats(s, &st);
    char want[256];
    snprintf(want, sizeof(want), "%d:s/secret\n%d:s/sub\n", INGEST_SKIP_UNREADABLE, INGEST_SKIP_DIR);
    if (ret == 0 && (st.skipped_unreadable != 1 || st.skipped_dirs != 1 || strcmp(r.skips, want) != 0))
        ret = __LINE__;
out:
    ingest_sender_destroy(s);
    ingest_ctx_destroy(ctx);
    return ret;
}

static void test_unreadable(void **state)
{
    (void)state;
    char *d = mk_tmpdir();
    mkdirs(d, "src/sub");
    put_file(d, "src/ok1", "1", 1);
    put_file(d, "src/ok2", "2", 1);
    put_file(d, "src/secret", "s", 1);
    put_file(d, "src/sub/hidden", "h", 1);
    char p[4096];
    join(p, sizeof(p), d, "src/secret");
    assert_int_equal(chmod(p, 0), 0);
    join(p, sizeof(p), d, "src/sub");
    assert_int_equal(chmod(p, 0), 0);
    join(p, sizeof(p), d, "src");
    if (geteuid() != 0) {
        assert_int_equal(unreadable_check(p), 0);
    } else {
        /* root reads anything: check as an unprivileged user in a child. */
        fflush(NULL);
        const pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            if (setgid(65534) != 0 || setuid(65534) != 0)
                _exit(200);
            const int line = unreadable_check(p);
            free(d); /* the child's copy (leak checkers run in the child too) */
            if (line != 0)
                fprintf(stderr, "unreadable_check failed at line %d\n", line);
            _exit(line == 0 ? 0 : line % 199 + 1);
        }
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        if (WEXITSTATUS(status) == 200) {
            print_message("cannot drop privileges: unreadable check skipped\n");
        } else {
            assert_int_equal(WEXITSTATUS(status), 0);
        }
    }
    join(p, sizeof(p), d, "src/sub");
    chmod(p, 0755);
    rm_tree(d);
}

static void test_batch_limits(void **state)
{
    (void)state;
    struct failing fa = { 0 };
    ingest_ctx *ctx = make_ctx(&fa);
    char *d = mk_tmpdir();
    mkdirs(d, "src");
    char name[64];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof(name), "src/f%02d", i);
        put_random(d, name, 10 * 1024, (uint64_t)i + 100);
    }
    char p[4096];
    join(p, sizeof(p), d, "src");
    struct rec r;
    memset(&r, 0, sizeof(r));
    const ingest_sender_source src[] = { { "s", p, 0 } };
    ingest_sender_opts o = base_opts(src, 1, &r);
    char paths[8192], counts[256];
    const char *all = "s/f00\ns/f01\ns/f02\ns/f03\ns/f04\ns/f05\ns/f06\ns/f07\ns/f08\ns/f09\n";

    o.max_files = 3;
    walk_all(ctx, &o, paths, sizeof(paths), counts, sizeof(counts), NULL);
    assert_string_equal(counts, "3,3,3,1");
    assert_string_equal(paths, all);

    o.max_files = 0;
    o.max_bytes = 25 * 1024;
    walk_all(ctx, &o, paths, sizeof(paths), counts, sizeof(counts), NULL);
    assert_string_equal(counts, "2,2,2,2,2");
    assert_string_equal(paths, all);

    /* A file larger than max_bytes makes a batch of its own. */
    put_random(d, "src/f05", 100 * 1024, 7);
    walk_all(ctx, &o, paths, sizeof(paths), counts, sizeof(counts), NULL);
    assert_string_equal(counts, "2,2,1,1,2,2");
    assert_string_equal(paths, all);

    /* Batch ids: prefix + sequence from batch_seq, and next_seq follows. */
    o.max_bytes = 0;
    o.max_files = 4;
    o.batch_seq = 7;
    ingest_sender *s = NULL;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
    assert_int_equal(ingest_sender_scan(s), 0);
    const char *want[] = { "t-000007", "t-000008", "t-000009" };
    ingest_sender_batch *b = NULL;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ingest_sender_next_batch(s, &b), 1);
        assert_string_equal(ingest_sender_batch_id(b), want[i]);
        ingest_sender_batch_destroy(b);
    }
    assert_int_equal(ingest_sender_next_batch(s, &b), 0);
    assert_int_equal(ingest_sender_next_seq(s), 10);
    /* A new scan walks again and continues the sequence. */
    assert_int_equal(ingest_sender_scan(s), 0);
    assert_int_equal(ingest_sender_next_batch(s, &b), 1);
    assert_string_equal(ingest_sender_batch_id(b), "t-000010");
    ingest_sender_batch_destroy(b);
    ingest_sender_destroy(s);

    /* Default prefix: "{unix seconds}-". */
    o.batch_prefix = NULL;
    o.batch_seq = 0;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
    assert_int_equal(ingest_sender_scan(s), 0);
    assert_int_equal(ingest_sender_next_batch(s, &b), 1);
    long long secs = 0;
    char tail[16];
    assert_int_equal(sscanf(ingest_sender_batch_id(b), "%lld-%15s", &secs, tail), 2);
    assert_string_equal(tail, "000000");
    assert_true(secs > 1600000000);
    ingest_sender_batch_destroy(b);
    ingest_sender_destroy(s);

    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

static void test_multi_source(void **state)
{
    (void)state;
    struct failing fa = { 0 };
    ingest_ctx *ctx = make_ctx(&fa);
    char *d = mk_tmpdir();
    mkdirs(d, "one/x");
    mkdirs(d, "two");
    put_file(d, "one/x/a", "a", 1);
    put_file(d, "two/b", "b", 1);
    char p1[4096], p2[4096], p3[4096];
    join(p1, sizeof(p1), d, "two");
    join(p2, sizeof(p2), d, "missing");
    join(p3, sizeof(p3), d, "one");
    struct rec r;
    memset(&r, 0, sizeof(r));
    const ingest_sender_source src[] = { { "cam", p1, 0 }, { "gone", p2, 0 }, { "lidar", p3, 0 } };
    const ingest_sender_opts o = base_opts(src, 3, &r);
    char paths[4096], counts[64];
    ingest_sender_stats st;
    walk_all(ctx, &o, paths, sizeof(paths), counts, sizeof(counts), &st);
    assert_string_equal(paths, "cam/b\nlidar/x/a\n");
    assert_int_equal(st.skipped_dirs, 1);
    char want[64];
    snprintf(want, sizeof(want), "%d:gone\n", INGEST_SKIP_DIR);
    assert_string_equal(r.skips, want);
    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

/* The depth limit: directories down to INGEST_SENDER_MAX_DEPTH levels are walked, the one below is reported
 * once per walk with INGEST_SKIP_DEPTH (not entered), and a 200-level tree costs nothing more. */
static void test_depth_limit(void **state)
{
    (void)state;
    struct failing fa = { 0 };
    ingest_ctx *ctx = make_ctx(&fa);
    char *d = mk_tmpdir();
    char rel[512] = "src"; /* 3 + 2 * 200 bytes at the end */
    size_t n = 3;
    char deepest[600] = "", toodeep[600] = "";
    for (int level = 1; level <= 200; level++) {
        memcpy(rel + n, "/d", 3);
        n += 2;
        mkdirs(d, rel);
        if (level == INGEST_SENDER_MAX_DEPTH || level == INGEST_SENDER_MAX_DEPTH + 1 || level == 200) {
            char f[600];
            snprintf(f, sizeof(f), "%s/f%d", rel, level);
            put_file(d, f, "x", 1);
        }
        if (level == INGEST_SENDER_MAX_DEPTH)
            snprintf(deepest, sizeof(deepest), "s%s/f%d\n", rel + 3, level);
        if (level == INGEST_SENDER_MAX_DEPTH + 1)
            snprintf(toodeep, sizeof(toodeep), "%d:s%s\n", INGEST_SKIP_DEPTH, rel + 3);
    }
    put_file(d, "src/top", "t", 1);
    char p1[4096];
    join(p1, sizeof(p1), d, "src");
    struct rec r;
    memset(&r, 0, sizeof(r));
    const ingest_sender_source src[] = { { "s", p1, 0 } };
    const ingest_sender_opts o = base_opts(src, 1, &r);
    char paths[8192], counts[64], want[8192];
    ingest_sender_stats st;
    walk_all(ctx, &o, paths, sizeof(paths), counts, sizeof(counts), &st);
    snprintf(want, sizeof(want), "%ss/top\n", deepest);
    assert_string_equal(paths, want);
    assert_int_equal(st.skipped_dirs, 1);
    assert_string_equal(r.skips, toodeep);
    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

static void test_invalid_opts(void **state)
{
    (void)state;
    struct failing fa = { 0 };
    ingest_ctx *ctx = make_ctx(&fa);
    struct rec r;
    memset(&r, 0, sizeof(r));
    const ingest_sender_source good[] = { { "s", "/tmp", 0 } };
    const ingest_sender_source slash[] = { { "a/b", "/tmp", 0 } };
    const ingest_sender_source dots[] = { { "..", "/tmp", 0 } };
    const ingest_sender_source dup[] = { { "s", "/tmp", 0 }, { "s", "/var", 0 } };
    ingest_sender *s = (ingest_sender *)&r;
    ingest_sender_opts o = base_opts(good, 1, &r);
    o.device = NULL;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), INGEST_EINVAL);
    assert_null(s);
    o.device = ".hidden";
    assert_int_equal(ingest_sender_create(ctx, &o, &s), INGEST_EINVAL);
    /* the wire's id rule: the first byte a letter or digit, no ':' */
    o.device = "_gw";
    assert_int_equal(ingest_sender_create(ctx, &o, &s), INGEST_EINVAL);
    o.device = "gw:1";
    assert_int_equal(ingest_sender_create(ctx, &o, &s), INGEST_EINVAL);
    o = base_opts(good, 1, &r);
    o.dedup_key = NULL;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), INGEST_EINVAL);
    o = base_opts(slash, 1, &r);
    assert_int_equal(ingest_sender_create(ctx, &o, &s), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "a/b"));
    o = base_opts(dots, 1, &r);
    assert_int_equal(ingest_sender_create(ctx, &o, &s), INGEST_EINVAL);
    o = base_opts(dup, 2, &r);
    assert_int_equal(ingest_sender_create(ctx, &o, &s), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "duplicate"));
    o = base_opts(good, 0, &r);
    assert_int_equal(ingest_sender_create(ctx, &o, &s), INGEST_EINVAL);
    o = base_opts(good, 1, &r);
    o.batch_prefix = "bad/prefix";
    assert_int_equal(ingest_sender_create(ctx, &o, &s), INGEST_EINVAL);
    o = base_opts(good, 1, &r);
    o.chunking.min = 1000;
    o.chunking.avg = 1000; /* not a power of two */
    o.chunking.max = 5000;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), INGEST_EINVAL);
    o = base_opts(good, 1, &r);
    o.read_buffer = 10;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), INGEST_EINVAL);
    assert_null(s);
    ingest_ctx_destroy(ctx);
}

/* Parse the manifest of b and check it against the files on disk. */
static void check_manifest(ingest_ctx *ctx, ingest_sender_batch *b, const char *srcdir, const char *srcname,
                           uint64_t *nfiles_out)
{
    const void *m = NULL;
    size_t mlen = 0;
    assert_int_equal(ingest_sender_batch_manifest(b, &m, &mlen), 0);
    assert_true(mlen > 0);
    /* asking twice gives the same bytes */
    const void *m2 = NULL;
    size_t mlen2 = 0;
    assert_int_equal(ingest_sender_batch_manifest(b, &m2, &mlen2), 0);
    assert_ptr_equal(m, m2);
    assert_int_equal(mlen, mlen2);

    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    ingest_manifest_reader *rd = NULL;
    assert_int_equal(ingest_manifest_reader_mem(ctx, m, mlen, &rd), 0);
    ingest_manifest_rec rec;
    assert_int_equal(ingest_manifest_reader_next(rd, &rec), 1);
    assert_int_equal(rec.type, INGEST_MREC_HEADER);
    assert_string_equal(rec.device, "dev-1");
    assert_string_equal(rec.batch, ingest_sender_batch_id(b));
    assert_int_equal(rec.nfiles, bs.files);
    assert_int_equal(rec.total_bytes, bs.bytes);
    uint64_t nfiles = 0, chunk_index = 0, total = 0;
    uint8_t *data = NULL;
    size_t dlen = 0, off = 0, left = 0;
    uint64_t fidx = 0;
    int rc;
    while ((rc = ingest_manifest_reader_next(rd, &rec)) == 1) {
        if (rec.type == INGEST_MREC_FILE) {
            assert_int_equal(left, 0); /* previous file complete */
            free(data);
            const size_t pre = strlen(srcname) + 1;
            assert_memory_equal(rec.path, srcname, pre - 1);
            assert_int_equal(rec.path[pre - 1], '/');
            data = slurp(srcdir, rec.path + pre, &dlen);
            char p[4096];
            join(p, sizeof(p), srcdir, rec.path + pre);
            struct stat st;
            assert_int_equal(stat(p, &st), 0);
            assert_string_equal(rec.landed, "");
            assert_int_equal(rec.version, 0);
            assert_int_equal(rec.size, dlen);
            assert_int_equal(rec.mode, st.st_mode);
            assert_int_equal(rec.mtime_ns, (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
            ingest_sender_file_info fi;
            assert_int_equal(ingest_sender_batch_file(b, nfiles, &fi), 0);
            assert_string_equal(fi.path, rec.path);
            assert_int_equal(fi.first_chunk, chunk_index);
            assert_int_equal(fi.nchunks, rec.nchunks_total);
            /* The whole-file hash covers the chunk ids in order (docs/manifest.md). */
            uint8_t h[INGEST_ID_BYTES];
            ingest_filehash fh;
            ingest_filehash_init(&fh, ingest_default_dedup_key());
            for (uint64_t k = 0; k < fi.nchunks; k++) {
                uint8_t cid[INGEST_ID_BYTES];
                uint32_t clen = 0;
                uint64_t coff = 0;
                assert_int_equal(ingest_sender_batch_chunk_info(b, fi.first_chunk + k, cid, &clen, &coff), 0);
                ingest_filehash_update(&fh, cid, sizeof(cid));
            }
            ingest_filehash_final(&fh, h);
            assert_memory_equal(rec.hash, h, INGEST_ID_BYTES);
            fidx = nfiles;
            nfiles++;
            total += rec.size;
            off = 0;
            left = rec.nchunks_total;
        } else {
            assert_int_equal(rec.type, INGEST_MREC_CHUNKS);
        }
        for (uint32_t i = 0; i < rec.nchunks; i++) {
            assert_true(off + rec.chunks[i].len <= dlen);
            uint8_t id[INGEST_ID_BYTES];
            ingest_chunk_id(ingest_default_dedup_key(), data + off, rec.chunks[i].len, id);
            assert_memory_equal(rec.chunks[i].id, id, INGEST_ID_BYTES);
            uint8_t id2[INGEST_ID_BYTES];
            uint32_t len2 = 0;
            uint64_t off2 = 0, fi2 = 0;
            assert_int_equal(ingest_sender_batch_chunk_info(b, chunk_index, id2, &len2, &off2), 0);
            assert_memory_equal(id2, id, INGEST_ID_BYTES);
            assert_int_equal(len2, rec.chunks[i].len);
            assert_int_equal(off2, off);
            assert_int_equal(ingest_sender_batch_chunk_file(b, chunk_index, &fi2), 0);
            assert_int_equal(fi2, fidx);
            off += rec.chunks[i].len;
            chunk_index++;
            left--;
        }
        if (left == 0)
            assert_int_equal(off, dlen); /* chunk lengths sum to the size */
    }
    assert_int_equal(rc, 0);
    assert_int_equal(left, 0);
    assert_int_equal(nfiles, bs.files);
    assert_int_equal(chunk_index, bs.chunks);
    assert_int_equal(total, bs.bytes);
    free(data);
    ingest_manifest_reader_close(rd);
    if (nfiles_out)
        *nfiles_out = nfiles;
}

static void small_chunks(ingest_sender_opts *o)
{
    o->chunking.min = 256;
    o->chunking.avg = 1024;
    o->chunking.max = 4096;
}

static void manifest_mode(int threads, uint8_t **ids_out, size_t *nids_out)
{
    struct failing fa = { 0 };
    ingest_ctx *ctx = make_ctx(&fa);
    char *d = mk_tmpdir();
    mkdirs(d, "src/sub");
    const size_t big = 2u * 1024 * 1024; /* ~2000 chunks: continuation lines */
    put_random(d, "src/big", big, 11);
    put_random(d, "src/sub/copy", big, 11); /* same content */
    put_file(d, "src/empty", "", 0);
    put_file(d, "src/note.txt", "hello, world\n", 13);
    char p[4096];
    join(p, sizeof(p), d, "src");
    struct rec r;
    memset(&r, 0, sizeof(r));
    const ingest_sender_source src[] = { { "s", p, 0 } };
    ingest_sender_opts o = base_opts(src, 1, &r);
    small_chunks(&o);
    o.threads = threads;
    ingest_sender *s = NULL;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
    assert_int_equal(ingest_sender_scan(s), 0);
    ingest_sender_batch *b = NULL;
    assert_int_equal(ingest_sender_next_batch(s, &b), 1);
    assert_string_equal(ingest_sender_batch_id(b), "t-000000");
    uint64_t nfiles = 0;
    check_manifest(ctx, b, p, "s", &nfiles);
    assert_int_equal(nfiles, 4);
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    ingest_sender_file_info fbig, fnote;
    assert_int_equal(ingest_sender_batch_file(b, 0, &fbig), 0);
    assert_string_equal(fbig.path, "s/big");
    assert_true(fbig.nchunks > INGEST_MANIFEST_CHUNKS_PER_LINE);
    assert_int_equal(ingest_sender_batch_file(b, 2, &fnote), 0);
    assert_string_equal(fnote.path, "s/note.txt");
    assert_int_equal(fnote.nchunks, 1);
    assert_int_equal(bs.files, 4);
    assert_int_equal(bs.bytes, 2 * big + 13);
    assert_int_equal(bs.chunks, 2 * fbig.nchunks + 1);
    assert_int_equal(bs.unique_chunks, fbig.nchunks + 1);
    assert_int_equal(bs.dropped, 0);
    ingest_sender_file_info fe;
    assert_int_equal(ingest_sender_batch_file(b, 1, &fe), 0);
    assert_string_equal(fe.path, "s/empty");
    assert_int_equal(fe.nchunks, 0);
    assert_int_equal(ingest_sender_batch_file(b, 4, &fe), INGEST_ENOTFOUND);
    uint64_t fi = 0;
    assert_int_equal(ingest_sender_batch_chunk_file(b, bs.chunks, &fi), INGEST_ENOTFOUND);
    /* chunk right after the empty file belongs to note.txt, not to "empty" */
    assert_int_equal(ingest_sender_batch_chunk_file(b, fbig.nchunks, &fi), 0);
    assert_int_equal(fi, 2);
    *nids_out = bs.chunks;
    *ids_out = malloc(bs.chunks * INGEST_ID_BYTES);
    assert_non_null(*ids_out);
    for (uint64_t i = 0; i < bs.chunks; i++)
        assert_int_equal(ingest_sender_batch_chunk_info(b, i, *ids_out + i * INGEST_ID_BYTES, NULL, NULL), 0);
    ingest_sender_batch_destroy(b);
    assert_int_equal(ingest_sender_next_batch(s, &b), 0);
    ingest_sender_destroy(s);
    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

static void test_manifest(void **state)
{
    (void)state;
    uint8_t *ids1 = NULL, *ids2 = NULL;
    size_t n1 = 0, n2 = 0;
    manifest_mode(1, &ids1, &n1);
    manifest_mode(2, &ids2, &n2);
    /* serial and pipeline give the same chunks */
    assert_int_equal(n1, n2);
    assert_memory_equal(ids1, ids2, n1 * INGEST_ID_BYTES);
    free(ids1);
    free(ids2);
}

/* Encode chunk ci and check it decodes to the file's bytes. */
static void check_chunk(ingest_sender_batch *b, ingest_codec *dec, uint64_t ci, const uint8_t *expect, size_t cap,
                        uint8_t *enc, uint8_t *raw)
{
    size_t n = 0, rn = 0;
    uint8_t id[INGEST_ID_BYTES];
    uint32_t len = 0;
    uint64_t off = 0;
    assert_int_equal(ingest_sender_batch_chunk_info(b, ci, id, &len, &off), 0);
    const int rc = ingest_sender_batch_chunk(b, ci, enc, cap, &n);
    assert_int_equal(rc, 0);
    assert_true(n >= INGEST_CODEC_HEADER);
    assert_int_equal(ingest_codec_decode(dec, enc, n, raw, len, &rn, ingest_default_dedup_key(), id), 0);
    assert_int_equal(rn, len);
    assert_memory_equal(raw, expect + off, len);
}

static void test_chunks_encode(void **state)
{
    (void)state;
    struct failing fa = { 0 };
    ingest_ctx *ctx = make_ctx(&fa);
    char *d = mk_tmpdir();
    mkdirs(d, "src");
    const size_t n1 = 200 * 1024;
    put_random(d, "src/a.bin", n1, 21);
    /* compressible text */
    char *text = malloc(100000);
    assert_non_null(text);
    size_t tl = 0;
    for (int i = 0; tl + 64 < 100000; i++)
        tl += (size_t)snprintf(text + tl, 100000 - tl, "%d,sensor-%d,%d.%03d\n", 1700000000 + i, i % 7, i % 50,
                               (i * 37) % 1000);
    put_file(d, "src/b.csv", text, tl);
    free(text);
    char p[4096];
    join(p, sizeof(p), d, "src");
    struct rec r;
    memset(&r, 0, sizeof(r));
    const ingest_sender_source src[] = { { "s", p, 0 } };
    ingest_sender_opts o = base_opts(src, 1, &r);
    small_chunks(&o);
    ingest_sender *s = NULL;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
    assert_int_equal(ingest_sender_scan(s), 0);
    ingest_sender_batch *b = NULL;
    assert_int_equal(ingest_sender_next_batch(s, &b), 1);
    ingest_codec *dec = NULL;
    assert_int_equal(ingest_codec_create(ctx, 1, &dec), 0);
    const size_t cap = ingest_sender_chunk_bound(s);
    assert_true(cap >= ingest_codec_bound(4096));
    uint8_t *enc = malloc(cap), *raw = malloc(4096);
    assert_non_null(enc);
    assert_non_null(raw);
    size_t la = 0, lb = 0;
    uint8_t *da = slurp(p, "a.bin", &la), *db = slurp(p, "b.csv", &lb);
    ingest_sender_file_info fa0, fb0;
    assert_int_equal(ingest_sender_batch_file(b, 0, &fa0), 0);
    assert_int_equal(ingest_sender_batch_file(b, 1, &fb0), 0);
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    assert_int_equal(bs.chunks, fa0.nchunks + fb0.nchunks);
    /* forward, then backward (switching files both ways) */
    for (uint64_t ci = 0; ci < bs.chunks; ci++)
        check_chunk(b, dec, ci, ci < fb0.first_chunk ? da : db, cap, enc, raw);
    for (uint64_t ci = bs.chunks; ci-- > 0;)
        check_chunk(b, dec, ci, ci < fb0.first_chunk ? da : db, cap, enc, raw);
    /* text chunks are compressed */
    size_t n = 0;
    assert_int_equal(ingest_sender_batch_chunk(b, fb0.first_chunk, enc, cap, &n), 0);
    assert_int_equal(enc[1], INGEST_CODEC_METHOD_ZSTD);
    uint32_t clen = 0;
    assert_int_equal(ingest_sender_batch_chunk_info(b, fb0.first_chunk, NULL, &clen, NULL), 0);
    assert_true(n < clen);
    /* errors: past the end, buffer too small */
    assert_int_equal(ingest_sender_batch_chunk(b, bs.chunks, enc, cap, &n), INGEST_ENOTFOUND);
    assert_int_equal(ingest_sender_batch_chunk(b, 0, enc, 100, &n), INGEST_ETOOBIG);
    assert_int_equal(n, 0);

    /* Sequential reads keep the file open: unlinking a.bin after its
     * first chunk does not stop its next one. */
    check_chunk(b, dec, 0, da, cap, enc, raw);
    char q[4096];
    join(q, sizeof(q), p, "a.bin");
    assert_int_equal(unlink(q), 0);
    check_chunk(b, dec, 1, da, cap, enc, raw);
    /* ... but once another file was read, a.bin must be reopened: gone. */
    check_chunk(b, dec, fb0.first_chunk, db, cap, enc, raw);
    assert_int_equal(ingest_sender_batch_chunk(b, 2, enc, cap, &n), INGEST_ESTALE);

    free(da);
    free(db);
    free(enc);
    free(raw);
    ingest_codec_destroy(dec);
    ingest_sender_batch_destroy(b);
    ingest_sender_destroy(s);
    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

/* ingest_sender_trim: the batch built stays good (its chunks read and verified, small files too);
 * the sender builds no more. */
static void test_trim(void **state)
{
    (void)state;
    struct failing fa = { 0 };
    ingest_ctx *ctx = make_ctx(&fa);
    char *d = mk_tmpdir();
    mkdirs(d, "src");
    put_random(d, "src/a.bin", 200 * 1024, 31);
    put_random(d, "src/b.bin", 3000, 32); /* small: kept in memory as chunked */
    char p[4096];
    join(p, sizeof(p), d, "src");
    struct rec r;
    memset(&r, 0, sizeof(r));
    const ingest_sender_source src[] = { { "s", p, 0 } };
    ingest_sender_opts o = base_opts(src, 1, &r);
    small_chunks(&o);
    ingest_sender *s = NULL;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
    assert_int_equal(ingest_sender_scan(s), 0);
    ingest_sender_batch *b = NULL;
    assert_int_equal(ingest_sender_next_batch(s, &b), 1);
    ingest_sender_trim(s);
    ingest_sender_trim(s); /* twice: nothing more to free */
    ingest_codec *dec = NULL;
    assert_int_equal(ingest_codec_create(ctx, 1, &dec), 0);
    const size_t cap = ingest_sender_chunk_bound(s);
    uint8_t *enc = malloc(cap), *raw = malloc(4096);
    assert_non_null(enc);
    assert_non_null(raw);
    size_t la = 0, lb = 0;
    uint8_t *da = slurp(p, "a.bin", &la), *db = slurp(p, "b.bin", &lb);
    ingest_sender_file_info fb0;
    assert_int_equal(ingest_sender_batch_file(b, 1, &fb0), 0);
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    assert_int_equal(bs.files, 2);
    for (uint64_t ci = 0; ci < bs.chunks; ci++)
        check_chunk(b, dec, ci, ci < fb0.first_chunk ? da : db, cap, enc, raw);
    const void *m = NULL;
    size_t ml = 0;
    assert_int_equal(ingest_sender_batch_manifest(b, &m, &ml), 0);
    assert_true(ml > 0);
    ingest_sender_batch *b2 = NULL;
    assert_int_equal(ingest_sender_scan(s), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "after ingest_sender_trim"));
    assert_int_equal(ingest_sender_next_batch(s, &b2), INGEST_EINVAL);
    assert_null(b2);
    const char *paths[] = { "s/a.bin" };
    assert_int_equal(ingest_sender_scan_list(s, paths, 1), INGEST_EINVAL);
    free(da);
    free(db);
    free(enc);
    free(raw);
    ingest_codec_destroy(dec);
    ingest_sender_batch_destroy(b);
    ingest_sender_destroy(s);
    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

/* Small chunks compressed together (ingest_sender_batch_group). */
static void test_chunk_groups(void **state)
{
    (void)state;
    struct failing fa = { 0 };
    ingest_ctx *ctx = make_ctx(&fa);
    char *d = mk_tmpdir();
    mkdirs(d, "src");
    char name[64], text[2048];
    for (int i = 0; i < 30; i++) {
        size_t tl = 0;
        for (int k = 0; k < 10 + i % 7; k++)
            tl += (size_t)snprintf(text + tl, sizeof(text) - tl, "{\"seq\":%d,\"site\":\"plant-%d\",\"v\":%d.%02d}\n",
                                   i * 100 + k, i % 3, (i * 37 + k) % 90, k);
        snprintf(name, sizeof(name), "src/%s%02d.json", i < 15 ? "f" : "h", i);
        put_file(d, name, text, tl);
    }
    put_random(d, "src/g.bin", 300 * 1024, 5);
    char p[4096];
    join(p, sizeof(p), d, "src");
    struct rec r;
    memset(&r, 0, sizeof(r));
    const ingest_sender_source src[] = { { "s", p, 0 } };
    ingest_sender_opts o = base_opts(src, 1, &r);
    ingest_sender *s = NULL;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
    assert_int_equal(ingest_sender_scan(s), 0);
    ingest_sender_batch *b = NULL;
    assert_int_equal(ingest_sender_next_batch(s, &b), 1);
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    assert_true(bs.chunks > 31 && bs.chunks < 64);
    uint32_t idx[64], lens[64];
    uint64_t offs[64];
    for (uint32_t i = 0; i < bs.chunks; i++) {
        idx[i] = i;
        assert_int_equal(ingest_sender_batch_chunk_info(b, i, NULL, &lens[i], &offs[i]), 0);
    }
    /* The expected raw bytes of the batch's chunks, in order: files in manifest order. */
    uint8_t *all = malloc(bs.bytes), *raw = malloc(bs.bytes), *enc = NULL;
    assert_non_null(all);
    assert_non_null(raw);
    size_t at = 0;
    for (uint64_t fi = 0; fi < bs.files; fi++) {
        ingest_sender_file_info info;
        assert_int_equal(ingest_sender_batch_file(b, fi, &info), 0);
        size_t fl = 0;
        uint8_t *fd = slurp(p, info.path + 2, &fl);
        memcpy(all + at, fd, fl);
        at += fl;
        free(fd);
    }
    assert_int_equal(at, bs.bytes);
    const size_t cap = ingest_sender_chunk_bound(s);
    enc = malloc(cap);
    assert_non_null(enc);
    ingest_codec *dec = NULL;
    assert_int_equal(ingest_codec_create(ctx, 1, &dec), 0);

    /* From chunk 0: the 15 small files, up to the first chunk of g.bin (over 32 KiB). */
    size_t n = 0, taken = 0, rn = 0, sum = 0, alone = 0;
    assert_int_equal(ingest_sender_batch_group(b, idx, bs.chunks, INGEST_WIRE_GROUP_MAX_RAW, enc, cap, &n, &taken), 0);
    assert_int_equal(taken, 15);
    for (size_t i = 0; i < taken; i++) {
        sum += lens[i];
        size_t one = 0;
        uint8_t *e1 = malloc(cap);
        assert_int_equal(ingest_sender_batch_chunk(b, i, e1, cap, &one), 0);
        alone += one;
        free(e1);
    }
    assert_int_equal(ingest_codec_decode(dec, enc, n, raw, sum, &rn, NULL, NULL), 0);
    assert_int_equal(rn, sum);
    assert_memory_equal(raw, all, sum);
    /* compressed together, smaller than the chunks compressed one by one */
    assert_true(n < alone);
    /* A raw_max that holds three of them takes three. */
    const size_t three = lens[0] + lens[1] + lens[2];
    assert_int_equal(ingest_sender_batch_group(b, idx, bs.chunks, three, enc, cap, &n, &taken), 0);
    assert_int_equal(taken, 3);
    /* Starting at a large chunk: it alone, encoded as ingest_sender_batch_chunk does. */
    assert_true(lens[15] > INGEST_SENDER_GROUP_CHUNK_MAX);
    uint8_t *e2 = malloc(cap);
    size_t n2 = 0;
    assert_int_equal(ingest_sender_batch_group(b, idx + 15, bs.chunks - 15, INGEST_WIRE_GROUP_MAX_RAW, enc, cap, &n,
                                               &taken), 0);
    assert_int_equal(taken, 1);
    assert_int_equal(ingest_sender_batch_chunk(b, 15, e2, cap, &n2), 0);
    assert_int_equal(n, n2);
    assert_memory_equal(enc, e2, n);
    free(e2);
    /* The small files after g.bin form the last group. */
    ingest_sender_file_info h15;
    assert_int_equal(ingest_sender_batch_file(b, 16, &h15), 0);
    assert_string_equal(h15.path, "s/h15.json");
    const uint32_t first_h = (uint32_t)h15.first_chunk;
    assert_int_equal(ingest_sender_batch_group(b, idx + first_h, bs.chunks - first_h, INGEST_WIRE_GROUP_MAX_RAW, enc,
                                               cap, &n, &taken), 0);
    assert_int_equal(taken, 15);
    assert_int_equal(first_h + taken, bs.chunks);
    /* Errors: indexes not increasing.  A small file rewritten since it was chunked (same size, new
     * bytes) is sent as it was hashed: the batch kept its bytes (no second read). */
    uint32_t badidx[2] = { 1, 1 };
    assert_int_equal(ingest_sender_batch_group(b, badidx, 2, INGEST_WIRE_GROUP_MAX_RAW, enc, cap, &n, &taken),
                     INGEST_EINVAL);
    char q[4096];
    join(q, sizeof(q), p, "f03.json");
    size_t fl = 0;
    uint8_t *f3 = slurp(p, "f03.json", &fl);
    f3[0] ^= 1;
    put_file(p, "f03.json", f3, fl);
    free(f3);
    assert_int_equal(ingest_sender_batch_group(b, idx, bs.chunks, INGEST_WIRE_GROUP_MAX_RAW, enc, cap, &n, &taken), 0);
    assert_int_equal(taken, 15);
    assert_int_equal(ingest_codec_decode(dec, enc, n, raw, sum, &rn, NULL, NULL), 0);
    assert_memory_equal(raw, all, sum);
    /* A large file is read again, and one changed since is refused (it ships later as a new version). */
    join(q, sizeof(q), p, "g.bin");
    put_random(p, "g.bin", 300 * 1024, 6);
    assert_int_equal(ingest_sender_batch_group(b, idx + 15, bs.chunks - 15, INGEST_WIRE_GROUP_MAX_RAW, enc, cap, &n,
                                               &taken), INGEST_ESTALE);
    assert_int_equal(taken, 0);

    free(all);
    free(raw);
    free(enc);
    ingest_codec_destroy(dec);
    ingest_sender_batch_destroy(b);
    ingest_sender_destroy(s);
    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

static void test_stale_after_chunking(void **state)
{
    (void)state;
    struct failing fa = { 0 };
    ingest_ctx *ctx = make_ctx(&fa);
    char *d = mk_tmpdir();
    mkdirs(d, "src");
    put_random(d, "src/a", 64 * 1024, 31);
    put_random(d, "src/b", 64 * 1024, 32);
    put_random(d, "src/c", 64 * 1024, 33);
    put_random(d, "src/d", 64 * 1024, 34);
    char p[4096];
    join(p, sizeof(p), d, "src");
    struct rec r;
    memset(&r, 0, sizeof(r));
    const ingest_sender_source src[] = { { "s", p, 0 } };
    ingest_sender_opts o = base_opts(src, 1, &r);
    small_chunks(&o);
    ingest_sender *s = NULL;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
    assert_int_equal(ingest_sender_scan(s), 0);
    ingest_sender_batch *b = NULL;
    assert_int_equal(ingest_sender_next_batch(s, &b), 1);
    ingest_sender_file_info f[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(ingest_sender_batch_file(b, (uint64_t)i, &f[i]), 0);
    const size_t cap = ingest_sender_chunk_bound(s);
    uint8_t *enc = malloc(cap);
    assert_non_null(enc);
    size_t n = 0;
    char q[4096];

    /* a: rewritten in place (same size) inside its third chunk */
    uint32_t len = 0;
    uint64_t off = 0;
    assert_int_equal(ingest_sender_batch_chunk_info(b, f[0].first_chunk + 2, NULL, &len, &off), 0);
    join(q, sizeof(q), p, "a");
    int fd = open(q, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "XXXX", 4, (off_t)off + 1), 4);
    close(fd);
    assert_int_equal(ingest_sender_batch_chunk(b, f[0].first_chunk, enc, cap, &n), 0);
    assert_int_equal(ingest_sender_batch_chunk(b, f[0].first_chunk + 2, enc, cap, &n), INGEST_ESTALE);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "s/a"));
    uint64_t which = 99;
    assert_int_equal(ingest_sender_batch_chunk_file(b, f[0].first_chunk + 2, &which), 0);
    assert_int_equal(which, 0);
    assert_int_equal(ingest_sender_batch_chunk(b, f[0].first_chunk + 3, enc, cap, &n), 0);

    /* b: replaced by another file with the same bytes (new inode) */
    uint8_t *same = NULL;
    size_t sl = 0;
    same = slurp(p, "b", &sl);
    put_file(d, "src/b.new", same, sl);
    free(same);
    char q2[4096];
    join(q, sizeof(q), p, "b.new");
    join(q2, sizeof(q2), p, "b");
    assert_int_equal(rename(q, q2), 0);
    assert_int_equal(ingest_sender_batch_chunk(b, f[1].first_chunk, enc, cap, &n), INGEST_ESTALE);

    /* c: truncated */
    join(q, sizeof(q), p, "c");
    assert_int_equal(truncate(q, 1000), 0);
    assert_int_equal(ingest_sender_batch_chunk(b, f[2].first_chunk + f[2].nchunks - 1, enc, cap, &n),
                     INGEST_ESTALE);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "shorter"));

    /* d: unchanged, still fine */
    assert_int_equal(ingest_sender_batch_chunk(b, f[3].first_chunk, enc, cap, &n), 0);

    free(enc);
    ingest_sender_batch_destroy(b);
    ingest_sender_destroy(s);
    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

/*
 * Between the walk (its stat, where want_file runs) and the read: a file
 * that vanished is named (INGEST_SKIP_VANISHED) and left out; one that
 * shrank, and one replaced by another file, ship as they are when read
 * (the file is stat'ed again once open, and the manifest gives that
 * version's size, time and hash); the others ship whole.
 */
struct race {
    struct rec r; /* first: on_skip and on_read take the userdata as a struct rec */
    char dir[4096];
};

static int race_want(void *ud, const char *path, const ingest_sender_stat *st)
{
    struct race *x = ud;
    (void)st;
    char q[4096], q2[4096];
    if (strcmp(path, "s/gone") == 0) {
        join(q, sizeof(q), x->dir, "gone");
        assert_int_equal(unlink(q), 0);
    } else if (strcmp(path, "s/shrink") == 0) {
        join(q, sizeof(q), x->dir, "shrink");
        assert_int_equal(truncate(q, 100), 0);
    } else if (strcmp(path, "s/swap") == 0) {
        join(q, sizeof(q), x->dir, "swap.new");
        join(q2, sizeof(q2), x->dir, "swap");
        const int fd = open(q, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "another file", 12), 12);
        close(fd);
        assert_int_equal(rename(q, q2), 0);
    }
    return 1;
}

static void test_vanish_shrink_replace_before_read(void **state)
{
    (void)state;
    for (int threads = 1; threads <= 2; threads++) {
        struct failing fa = { 0 };
        ingest_ctx *ctx = make_ctx(&fa);
        char *d = mk_tmpdir();
        mkdirs(d, "src");
        put_random(d, "src/a", 10000, 61);
        put_random(d, "src/gone", 20000, 62);
        put_random(d, "src/shrink", 64 * 1024, 63);
        put_random(d, "src/swap", 30000, 64);
        put_random(d, "src/z", 10000, 65);
        struct race x;
        memset(&x, 0, sizeof(x));
        join(x.dir, sizeof(x.dir), d, "src");
        const ingest_sender_source src[] = { { "s", x.dir, 0 } };
        ingest_sender_opts o = base_opts(src, 1, &x.r);
        o.userdata = &x;
        o.want_file = race_want;
        o.threads = threads;
        ingest_sender *s = NULL;
        assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
        assert_int_equal(ingest_sender_scan(s), 0);
        ingest_sender_batch *b = NULL;
        assert_int_equal(ingest_sender_next_batch(s, &b), 1);
        ingest_sender_batch_stats bs;
        ingest_sender_batch_stats_get(b, &bs);
        char got[512] = "";
        for (uint64_t i = 0; i < bs.files; i++) {
            ingest_sender_file_info fi;
            assert_int_equal(ingest_sender_batch_file(b, i, &fi), 0);
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s:%llu ", fi.path, (unsigned long long)fi.size);
        }
        assert_string_equal(got, "s/a:10000 s/shrink:100 s/swap:12 s/z:10000 ");
        char want[256];
        snprintf(want, sizeof(want), "%d:s/gone\n", INGEST_SKIP_VANISHED);
        assert_string_equal(x.r.skips, want);
        ingest_sender_stats st;
        ingest_sender_get_stats(s, &st);
        assert_int_equal(st.skipped_vanished, 1);
        assert_int_equal(st.dropped_changed, 0);
        uint64_t nfiles = 0;
        check_manifest(ctx, b, x.dir, "s", &nfiles); /* every file's chunks and hash are what is on disk now */
        assert_int_equal(nfiles, 4);
        ingest_sender_batch_destroy(b);
        ingest_sender_destroy(s);
        rm_tree(d);
        ingest_ctx_destroy(ctx);
    }
}

static void changed_mode(int threads)
{
    struct failing fa = { 0 };
    ingest_ctx *ctx = make_ctx(&fa);
    char *d = mk_tmpdir();
    mkdirs(d, "src");
    put_random(d, "src/a", 10000, 41);
    put_random(d, "src/grow", 3 * 64 * 1024, 42);
    put_random(d, "src/z", 10000, 43);
    char p[4096], g[4096];
    join(p, sizeof(p), d, "src");
    join(g, sizeof(g), d, "src/grow");
    struct rec r;
    memset(&r, 0, sizeof(r));
    r.grow_path = "s/grow";
    r.grow_file = g;
    const ingest_sender_source src[] = { { "s", p, 0 } };
    ingest_sender_opts o = base_opts(src, 1, &r);
    o.read_buffer = 64 * 1024; /* several reads per file */
    o.threads = threads;
    ingest_sender *s = NULL;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
    assert_int_equal(ingest_sender_scan(s), 0);
    ingest_sender_batch *b = NULL;
    assert_int_equal(ingest_sender_next_batch(s, &b), 1);
    assert_int_equal(r.grown, 1);
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    assert_int_equal(bs.files, 2);
    assert_int_equal(bs.bytes, 20000);
    assert_int_equal(bs.dropped, 1);
    const char *dp = NULL;
    int reason = 0;
    assert_int_equal(ingest_sender_batch_dropped(b, 0, &dp, &reason), 0);
    assert_string_equal(dp, "s/grow");
    assert_int_equal(reason, INGEST_SKIP_CHANGED);
    assert_int_equal(ingest_sender_batch_dropped(b, 1, &dp, &reason), INGEST_ENOTFOUND);
    ingest_sender_file_info f0, f1;
    assert_int_equal(ingest_sender_batch_file(b, 0, &f0), 0);
    assert_int_equal(ingest_sender_batch_file(b, 1, &f1), 0);
    assert_string_equal(f0.path, "s/a");
    assert_string_equal(f1.path, "s/z");
    /* the manifest holds the two stable files only, chunk lists intact */
    uint64_t nfiles = 0;
    check_manifest(ctx, b, p, "s", &nfiles);
    assert_int_equal(nfiles, 2);
    char want[64];
    snprintf(want, sizeof(want), "%d:s/grow\n", INGEST_SKIP_CHANGED);
    assert_string_equal(r.skips, want);
    ingest_sender_stats st;
    ingest_sender_get_stats(s, &st);
    assert_int_equal(st.dropped_changed, 1);
    assert_int_equal(st.files_seen, 3);
    assert_int_equal(st.files_batched, 2);
    ingest_sender_batch_destroy(b);

    /* The next walk takes it (now stable) */
    assert_int_equal(ingest_sender_scan(s), 0);
    assert_int_equal(ingest_sender_next_batch(s, &b), 1);
    ingest_sender_batch_stats_get(b, &bs);
    assert_int_equal(bs.files, 3);
    assert_int_equal(bs.bytes, 20000 + 3 * 64 * 1024 + 100);
    ingest_sender_batch_destroy(b);

    /* A walk whose only file changes: no batch at all. */
    ingest_sender_destroy(s);
    o.sources = src;
    char only[4096];
    mkdirs(d, "only");
    put_random(d, "only/grow", 1000, 44);
    join(only, sizeof(only), d, "only");
    join(g, sizeof(g), d, "only/grow");
    const ingest_sender_source src2[] = { { "s", only, 0 } };
    o.sources = src2;
    memset(r.skips, 0, sizeof(r.skips));
    r.grown = 0;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
    assert_int_equal(ingest_sender_scan(s), 0);
    assert_int_equal(ingest_sender_next_batch(s, &b), 0);
    assert_null(b);
    assert_int_equal(r.grown, 1);
    assert_string_equal(r.skips, want);
    ingest_sender_destroy(s);
    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

static void test_changed_while_chunking(void **state)
{
    (void)state;
    changed_mode(1);
    changed_mode(2);
}

static void memory_mode(int threads)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL); /* plain malloc: measure real RSS */
    assert_non_null(ctx);
    char *d = mk_tmpdir();
    mkdirs(d, "src");
    const size_t mib = 1024 * 1024;
    const size_t total = (quick() ? 8 : 64) * mib;
    char p[4096];
    join(p, sizeof(p), d, "src/big");
    uint8_t *piece = malloc(mib);
    assert_non_null(piece);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    for (size_t i = 0; i < total / mib; i++) {
        gen_random(piece, mib, 1000 + i);
        assert_int_equal(write(fd, piece, mib), (ssize_t)mib);
    }
    close(fd);
    free(piece);
    join(p, sizeof(p), d, "src");

    struct rec r;
    memset(&r, 0, sizeof(r));
    r.sample_rss = 1;
    const long base = rss_anon_kb();
    const ingest_sender_source src[] = { { "s", p, 0 } };
    ingest_sender_opts o = base_opts(src, 1, &r);
    o.threads = threads;
    ingest_sender *s = NULL;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
    assert_int_equal(ingest_sender_scan(s), 0);
    ingest_sender_batch *b = NULL;
    assert_int_equal(ingest_sender_next_batch(s, &b), 1);
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    assert_int_equal(bs.bytes, total);
    assert_true(bs.chunks >= total / (256 * 1024));
    const size_t cap = ingest_sender_chunk_bound(s);
    uint8_t *enc = malloc(cap);
    assert_non_null(enc);
    uint64_t enc_total = 0;
    for (uint64_t ci = 0; ci < bs.chunks; ci++) {
        size_t n = 0;
        assert_int_equal(ingest_sender_batch_chunk(b, ci, enc, cap, &n), 0);
        enc_total += n;
        if ((ci & 63) == 0)
            on_read(&r, "", 0);
    }
    on_read(&r, "", 0);
    assert_true(enc_total >= total); /* random bytes: stored raw, plus headers */
    free(enc);
    const long grew = r.rss_peak_kb - base;
    print_message("memory (threads %d): RssAnon base %ld kB, peak %ld kB (+%ld kB) for a %zu MiB file\n",
                  threads ? threads : 2, base, r.rss_peak_kb, grew, total / mib);
    if (!quick() && base >= 0)
        assert_true(grew < 24 * 1024);
    ingest_sender_batch_destroy(b);
    ingest_sender_destroy(s);
    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

/*
 * symlinks: ship: a symlink is an entry whose content is its target
 * (readlinkat), mode S_IFLNK|0777, re-read with readlinkat when its chunk
 * is encoded (also past the batch's cache of small files' bytes), a changed
 * target is INGEST_ESTALE; what it points at is never opened (inotify on
 * the target sees nothing; a link to a FIFO does not hang).  With skip (the
 * default) the same links are counted and passed over.
 */
static void test_symlinks_shipped(void **state)
{
    (void)state;
    struct failing fa = { 0 };
    ingest_ctx *ctx = make_ctx(&fa);
    char *d = mk_tmpdir();
    mkdirs(d, "src");
    put_file(d, "target.txt", "the target's own bytes\n", 23);
    char p[4096], t[4096], q[4096], f[4096];
    join(p, sizeof(p), d, "src");
    join(t, sizeof(t), d, "target.txt");
    join(f, sizeof(f), d, "fifo");
    assert_int_equal(mkfifo(f, 0600), 0);
    /* "a-rel" sorts first (its 3 bytes are kept with the batch); 64 files (63 of 32 KiB, one 3
     * bytes shorter) then fill that 2 MiB cache exactly, so the "z-" links after them are re-read
     * with readlinkat */
    join(q, sizeof(q), p, "a-rel");
    assert_int_equal(symlink("f00", q), 0);
    for (int i = 0; i < 64; i++) {
        char nm[32];
        snprintf(nm, sizeof(nm), "src/f%02d", i);
        put_random(d, nm, 32 * 1024 - (i == 63 ? 3 : 0), 300 + (uint64_t)i);
    }
    join(q, sizeof(q), p, "z-abs");
    assert_int_equal(symlink(t, q), 0);
    join(q, sizeof(q), p, "z-dangling");
    assert_int_equal(symlink("no/such/file", q), 0);
    join(q, sizeof(q), p, "z-fifo");
    assert_int_equal(symlink(f, q), 0);
    const char *const targets[] = { "f00", t, "no/such/file", f };
    const int ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    assert_true(ino >= 0);
    assert_true(inotify_add_watch(ino, t, IN_OPEN | IN_ACCESS | IN_CLOSE) >= 0);

    /* skip (the default): counted, not taken */
    struct rec r;
    memset(&r, 0, sizeof(r));
    ingest_sender_source src[] = { { "s", p, INGEST_SENDER_SYMLINKS_SKIP } };
    ingest_sender_opts o = base_opts(src, 1, &r);
    char paths[8192], counts[64];
    ingest_sender_stats st;
    walk_all(ctx, &o, paths, sizeof(paths), counts, sizeof(counts), &st);
    assert_string_equal(counts, "64");
    assert_int_equal(st.skipped_symlinks, 4);
    assert_int_equal(st.symlinks_batched, 0);

    /* ship */
    src[0].symlinks = INGEST_SENDER_SYMLINKS_SHIP;
    memset(&r, 0, sizeof(r));
    o = base_opts(src, 1, &r);
    ingest_sender *s = NULL;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
    assert_int_equal(ingest_sender_scan(s), 0);
    ingest_sender_batch *b = NULL;
    assert_int_equal(ingest_sender_next_batch(s, &b), 1);
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    assert_int_equal(bs.files, 68);
    ingest_sender_get_stats(s, &st);
    assert_int_equal(st.skipped_symlinks, 0);
    assert_int_equal(st.symlinks_batched, 4);
    ingest_codec *dec = NULL;
    assert_int_equal(ingest_codec_create(ctx, 1, &dec), 0);
    const size_t cap = ingest_sender_chunk_bound(s);
    uint8_t *enc = malloc(cap), *raw = malloc(256 * 1024);
    assert_non_null(enc);
    assert_non_null(raw);
    const uint64_t link_file[] = { 0, 65, 66, 67 };
    for (size_t k = 0; k < 4; k++) {
        ingest_sender_file_info fi;
        assert_int_equal(ingest_sender_batch_file(b, link_file[k], &fi), 0);
        assert_true(S_ISLNK(fi.mode));
        assert_int_equal(fi.mode & 07777, 0777);
        assert_int_equal(fi.size, strlen(targets[k]));
        assert_int_equal(fi.nchunks, 1);
        check_chunk(b, dec, fi.first_chunk, (const uint8_t *)targets[k], cap, enc, raw);
    }
    const void *m = NULL;
    size_t ml = 0;
    assert_int_equal(ingest_sender_batch_manifest(b, &m, &ml), 0);
    char *mt = strndup(m, ml);
    assert_non_null(mt);
    int nlink = 0;
    for (const char *x = mt; (x = strstr(x, "\"mode\":41471")) != NULL; x++)
        nlink++;
    assert_int_equal(nlink, 4);
    free(mt);
    /* the target was never opened or read */
    char ev[4096];
    assert_int_equal(read(ino, ev, sizeof(ev)), -1);
    assert_int_equal(errno, EAGAIN);
    /* a changed target (a new link in its place) is stale when its chunk is read again */
    join(q, sizeof(q), p, "z-abs");
    assert_int_equal(unlink(q), 0);
    assert_int_equal(symlink("other", q), 0);
    ingest_sender_file_info fi;
    assert_int_equal(ingest_sender_batch_file(b, 65, &fi), 0);
    size_t n = 0;
    assert_int_equal(ingest_sender_batch_chunk(b, fi.first_chunk, enc, cap, &n), INGEST_ESTALE);
    /* the kept one (a-rel) is sent as it was chunked */
    assert_int_equal(ingest_sender_batch_file(b, 0, &fi), 0);
    check_chunk(b, dec, fi.first_chunk, (const uint8_t *)"f00", cap, enc, raw);
    free(enc);
    free(raw);
    ingest_codec_destroy(dec);
    ingest_sender_batch_destroy(b);
    ingest_sender_destroy(s);
    close(ino);
    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

static void test_memory_bounded(void **state)
{
    (void)state;
    memory_mode(1);
    memory_mode(2);
}

/* Every allocation fails in turn: the result is ENOMEM or success, never
 * a leak (cmocka checks) or a crash. */
static void test_alloc_failures(void **state)
{
    (void)state;
    char *d = mk_tmpdir();
    mkdirs(d, "src/sub");
    put_random(d, "src/a", 20000, 51);
    put_random(d, "src/sub/b", 5000, 52);
    put_file(d, "src/c", "", 0);
    char p[4096];
    join(p, sizeof(p), d, "src");
    int successes = 0, failures = 0;
    for (int threads = 1; threads <= 2; threads++)
    for (unsigned k = 2; k < 400; k++) { /* 1 is the context itself */
        struct failing fa = { 0, k, 0 };
        ingest_ctx *ctx = make_ctx(&fa);
        struct rec r;
        memset(&r, 0, sizeof(r));
        const ingest_sender_source src[] = { { "s", p, 0 } };
        ingest_sender_opts o = base_opts(src, 1, &r);
        small_chunks(&o);
        o.max_files = 2;
        o.threads = threads;
        ingest_sender *s = NULL;
        int rc = ingest_sender_create(ctx, &o, &s);
        if (rc == 0)
            rc = ingest_sender_scan(s);
        uint64_t files = 0;
        while (rc == 0) {
            ingest_sender_batch *b = NULL;
            rc = ingest_sender_next_batch(s, &b);
            if (rc != 1)
                break;
            const void *m;
            size_t ml;
            rc = ingest_sender_batch_manifest(b, &m, &ml);
            uint8_t enc[8192];
            size_t n;
            if (rc == 0)
                rc = ingest_sender_batch_chunk(b, 0, enc, sizeof(enc), &n);
            ingest_sender_batch_stats bs;
            ingest_sender_batch_stats_get(b, &bs);
            files += bs.files;
            ingest_sender_batch_destroy(b);
        }
        ingest_sender_destroy(s);
        ingest_ctx_destroy(ctx);
        if (rc == 0) {
            assert_int_equal(files, 3);
            successes++;
        } else {
            assert_int_equal(rc, INGEST_ENOMEM);
            failures++;
        }
        if (fa.failed == 0)
            break; /* every allocation was made: done */
    }
    assert_true(successes >= 1);
    assert_true(failures >= 10);
    rm_tree(d);
}

/* on_refuse: the refused path, the walk's size and the rule, as told. */
struct refusals {
    struct rec r;
    char got[2048];
    int n;
};

static void record_refusal(void *ud, const char *path, const ingest_sender_stat *st, const char *why)
{
    struct refusals *x = ud;
    const size_t n = strlen(x->got);
    snprintf(x->got + n, sizeof(x->got) - n, "%s:%llu:%s\n", path, (unsigned long long)st->size, why);
    x->n++;
}

/*
 * The receiver's landing rules at the edge (ingest_sender_set_landing): a
 * file whose landed path would break them is refused before it is opened
 * (even an unreadable one), told through on_refuse and on_skip, counted,
 * and left out of the batch; the others go as before.  A bad layout or
 * limit is refused with a message; NULL forgets the rules.
 */
static void test_landing_rules(void **state)
{
    (void)state;
    struct failing fa = { 0 };
    ingest_ctx *ctx = make_ctx(&fa);
    char *d = mk_tmpdir();
    mkdirs(d, "src/deep");
    char longname[241];
    memset(longname, 'n', 240);
    longname[240] = '\0';
    char rel[300];
    snprintf(rel, sizeof rel, "src/deep/%s", longname);
    put_random(d, "src/ok", 1000, 71);
    put_random(d, rel, 2000, 72);
    char full[4096];
    join(full, sizeof(full), d, rel);
    assert_int_equal(chmod(full, 0), 0); /* never opened: the rule comes first */
    struct refusals x;
    memset(&x, 0, sizeof(x));
    char srcdir[512];
    join(srcdir, sizeof(srcdir), d, "src");
    const ingest_sender_source src[] = { { "s", srcdir, 0 } };
    ingest_sender_opts o = base_opts(src, 1, &x.r);
    o.userdata = &x;
    o.on_refuse = record_refusal;
    ingest_sender *s = NULL;
    assert_int_equal(ingest_sender_create(ctx, &o, &s), 0);
    /* rules that break the layout rule or the limits are refused, with a message */
    assert_int_equal(ingest_sender_set_landing(s, "{device}/x", 4095, 255), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "must contain {path}"));
    assert_int_equal(ingest_sender_set_landing(s, "{path}", 4096, 255), INGEST_EINVAL);
    assert_int_equal(ingest_sender_set_landing(s, "{path}", 4095, 256), INGEST_EINVAL);
    /* "{path}~{device}": the long name's landed component is 240 + 6 bytes, past a 245-byte limit */
    assert_int_equal(ingest_sender_set_landing(s, "{device}/{path}~{device}", 4095, 245), 0);
    assert_int_equal(ingest_sender_scan(s), 0);
    ingest_sender_batch *b = NULL;
    assert_int_equal(ingest_sender_next_batch(s, &b), 1);
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    assert_int_equal(bs.files, 1);
    ingest_sender_file_info fi;
    assert_int_equal(ingest_sender_batch_file(b, 0, &fi), 0);
    assert_string_equal(fi.path, "s/ok");
    assert_int_equal(x.n, 1);
    assert_non_null(strstr(x.got, ":2000:file s/deep/nnnn"));
    assert_non_null(strstr(x.got, "a component of 246 bytes; the bronze filesystem allows 245"));
    char want[300];
    snprintf(want, sizeof want, "%d:s/deep/%s\n", INGEST_SKIP_REFUSED, longname);
    assert_string_equal(x.r.skips, want);
    ingest_sender_stats st;
    ingest_sender_get_stats(s, &st);
    assert_int_equal(st.refused, 1);
    assert_int_equal(st.skipped_unreadable, 0);
    ingest_sender_batch_destroy(b);
    /* forgotten: the file is taken again (and is then unreadable) */
    assert_int_equal(ingest_sender_set_landing(s, NULL, 0, 0), 0);
    assert_int_equal(ingest_sender_scan(s), 0);
    b = NULL;
    const int rc = ingest_sender_next_batch(s, &b);
    assert_true(rc == 0 || rc == 1);
    ingest_sender_get_stats(s, &st);
    assert_int_equal(st.refused, 1);
    if (geteuid() != 0)
        assert_int_equal(st.skipped_unreadable, 1);
    ingest_sender_batch_destroy(b);
    ingest_sender_destroy(s);
    assert_int_equal(chmod(full, 0600), 0);
    rm_tree(d);
    ingest_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walk_order_and_skips),
        cmocka_unit_test(test_list_skips),
        cmocka_unit_test(test_walk_listing_ahead),
        cmocka_unit_test(test_unreadable),
        cmocka_unit_test(test_batch_limits),
        cmocka_unit_test(test_multi_source),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_invalid_opts),
        cmocka_unit_test(test_manifest),
        cmocka_unit_test(test_chunks_encode),
        cmocka_unit_test(test_chunk_groups),
        cmocka_unit_test(test_stale_after_chunking),
        cmocka_unit_test(test_changed_while_chunking),
        cmocka_unit_test(test_vanish_shrink_replace_before_read),
        cmocka_unit_test(test_symlinks_shipped),
        cmocka_unit_test(test_landing_rules),
        cmocka_unit_test(test_memory_bounded),
        cmocka_unit_test(test_trim),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
