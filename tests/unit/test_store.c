/* The LMDB store wrapper: open/create, format record, transactions, iteration. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store.h"

static const ingest_store_opts small_opts = { .map_size = 256u << 20 };

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

typedef struct fixture {
    char dir[64];
    char sub[96];
    ingest_ctx *ctx;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_store.XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    snprintf(f->sub, sizeof(f->sub), "%s/state", f->dir);
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

static void test_create_put_get_reopen(void **state)
{
    fixture *f = *state;
    ingest_store *st = NULL;
    ingest__dbi db;
    char buf[32];
    size_t len = 0;

    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    assert_true(ingest__store_created(st));
    assert_int_equal(ingest__store_db(st, "t", &db), 0);
    assert_int_equal(ingest__store_put(st, db, "k1", 2, "value-1", 7), 0);
    assert_int_equal(ingest__store_put(st, db, "k2", 2, "v2", 2), 0);
    /* Reads see the open transaction. */
    assert_int_equal(ingest__store_get(st, db, "k1", 2, buf, sizeof(buf), &len), 0);
    assert_int_equal(len, 7);
    assert_memory_equal(buf, "value-1", 7);
    assert_int_equal(ingest_store_commit(st), 0);
    assert_int_equal(ingest__store_get(st, db, "nope", 4, buf, sizeof(buf), &len), INGEST_ENOTFOUND);
    /* A short buffer gets a prefix and the full length. */
    assert_int_equal(ingest__store_get(st, db, "k1", 2, buf, 3, &len), 0);
    assert_int_equal(len, 7);
    assert_memory_equal(buf, "val", 3);
    ingest_store_close(st);

    st = NULL;
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    assert_false(ingest__store_created(st));
    assert_int_equal(ingest__store_db(st, "t", &db), 0);
    assert_int_equal(ingest__store_get(st, db, "k2", 2, buf, sizeof(buf), &len), 0);
    assert_int_equal(len, 2);
    assert_memory_equal(buf, "v2", 2);
    uint64_t n = 0;
    assert_int_equal(ingest__store_count(st, db, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ingest__store_del(st, db, "k1", 2), 0);
    assert_int_equal(ingest__store_del(st, db, "k1", 2), INGEST_ENOTFOUND);
    assert_int_equal(ingest__store_count(st, db, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ingest__store_drop(st, db), 0);
    assert_int_equal(ingest__store_count(st, db, &n), 0);
    assert_int_equal(n, 0);
    ingest_store_close(st);
    ingest_store_close(NULL);
}

static void test_version_mismatch(void **state)
{
    fixture *f = *state;
    ingest_store *st = NULL;
    ingest__dbi meta;
    uint8_t v[4];
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    assert_int_equal(ingest__store_db(st, "meta", &meta), 0);
    ingest__put_u32(v, INGEST_STORE_FORMAT + 1);
    assert_int_equal(ingest__store_put(st, meta, INGEST__META_FORMAT, strlen(INGEST__META_FORMAT), v, 4), 0);
    ingest_store_close(st);
    st = NULL;
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), INGEST_EVERSION);
    assert_null(st);
    assert_non_null(strstr(ingest_ctx_errmsg(f->ctx), "format 2"));
}

static void test_meta_missing_or_bad(void **state)
{
    fixture *f = *state;
    ingest_store *st = NULL;
    ingest__dbi meta;
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    assert_int_equal(ingest__store_db(st, "meta", &meta), 0);
    assert_int_equal(ingest__store_put(st, meta, INGEST__META_FORMAT, strlen(INGEST__META_FORMAT), "xyz", 3), 0);
    ingest_store_close(st);
    st = NULL;
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(f->ctx), "3 bytes"));

    /* No format record in a store that holds something: damaged, refused. */
    assert_int_equal(ingest_store_wipe(f->ctx, f->sub), 0);
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    ingest__dbi files;
    assert_int_equal(ingest__store_db(st, "files", &files), 0);
    assert_int_equal(ingest__store_put(st, files, "k", 1, "v", 1), 0);
    assert_int_equal(ingest__store_db(st, "meta", &meta), 0);
    assert_int_equal(ingest__store_del(st, meta, INGEST__META_FORMAT, strlen(INGEST__META_FORMAT)), 0);
    ingest_store_close(st);
    st = NULL;
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(f->ctx), "format record missing"));
    assert_null(st);

    /* A creation killed between the meta table's commit and the format
     * record's (what a daemon killed at its first start left, found by
     * test_daemon_kill): nothing else is there, so it opens as new. */
    assert_int_equal(ingest_store_wipe(f->ctx, f->sub), 0);
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    assert_int_equal(ingest__store_db(st, "meta", &meta), 0);
    assert_int_equal(ingest__store_del(st, meta, INGEST__META_FORMAT, strlen(INGEST__META_FORMAT)), 0);
    ingest_store_close(st);
    st = NULL;
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    assert_int_equal(ingest__store_db(st, "meta", &meta), 0);
    uint8_t v[8];
    size_t vl = 0;
    assert_int_equal(ingest__store_get(st, meta, INGEST__META_FORMAT, strlen(INGEST__META_FORMAT), v, sizeof v, &vl),
                     0);
    assert_int_equal(vl, 4);
    assert_int_equal(ingest__get_u32(v), INGEST_STORE_FORMAT);
    ingest_store_close(st);
    st = NULL;
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    ingest_store_close(st);
}

static void test_garbage_file_and_wipe(void **state)
{
    fixture *f = *state;
    ingest_store *st = NULL;
    char path[160];
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    ingest_store_close(st);
    st = NULL;
    snprintf(path, sizeof(path), "%s/data.mdb", f->sub);
    const int fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    char junk[16384];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (char)(i * 131 + 7);
    assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    close(fd);
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), INGEST_ECORRUPT);
    assert_null(st);
    assert_int_equal(ingest_store_wipe(f->ctx, f->sub), 0);
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    assert_true(ingest__store_created(st));
    ingest_store_close(st);
}

static void test_nocreate_rdonly(void **state)
{
    fixture *f = *state;
    ingest_store *st = NULL;
    ingest_store_opts o = small_opts;
    ingest__dbi db;
    o.flags = INGEST_STORE_NOCREATE;
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &o, &st), INGEST_ENOTFOUND);
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    assert_int_equal(ingest__store_db(st, "t", &db), 0);
    assert_int_equal(ingest__store_put(st, db, "a", 1, "b", 1), 0);
    ingest_store_close(st);
    o.flags = INGEST_STORE_RDONLY;
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &o, &st), 0);
    assert_int_equal(ingest__store_db(st, "t", &db), 0);
    assert_int_equal(ingest__store_db(st, "absent", &db), INGEST_ECORRUPT);
    char b[4];
    size_t len = 0;
    assert_int_equal(ingest__store_get(st, db, "a", 1, b, sizeof(b), &len), 0);
    assert_int_equal(len, 1);
    assert_int_equal(ingest__store_put(st, db, "c", 1, "d", 1), INGEST_EINVAL);
    ingest_store_close(st);
}

typedef struct collect {
    uint64_t keys[32];
    size_t n;
    size_t stop_after;
} collect;

static int collect_cb(void *ud, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    collect *c = ud;
    (void)val;
    if (klen != 8 || vlen != 1 || c->n >= 32)
        return INGEST_ECORRUPT;
    c->keys[c->n++] = ingest__get_be64(key);
    return c->stop_after != 0 && c->n >= c->stop_after ? 1 : 0;
}

static void test_iterate(void **state)
{
    fixture *f = *state;
    ingest_store *st = NULL;
    ingest__dbi db;
    uint8_t k[8];
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    assert_int_equal(ingest__store_db(st, "seq", &db), 0);
    for (uint64_t i = 10; i <= 100; i += 10) {
        ingest__put_be64(k, i);
        assert_int_equal(ingest__store_put(st, db, k, 8, "x", 1), 0);
    }
    for (int pass = 0; pass < 2; pass++) { /* inside the write txn, then committed */
        collect c = { { 0 }, 0, 0 };
        assert_int_equal(ingest__store_iter(st, db, NULL, 0, false, collect_cb, &c), 0);
        assert_int_equal(c.n, 10);
        assert_int_equal(c.keys[0], 10);
        assert_int_equal(c.keys[9], 100);
        memset(&c, 0, sizeof(c));
        ingest__put_be64(k, 35);
        assert_int_equal(ingest__store_iter(st, db, k, 8, false, collect_cb, &c), 0);
        assert_int_equal(c.n, 7);
        assert_int_equal(c.keys[0], 40);
        memset(&c, 0, sizeof(c));
        c.stop_after = 2;
        assert_int_equal(ingest__store_iter(st, db, k, 8, true, collect_cb, &c), 0);
        assert_int_equal(c.n, 2);
        assert_int_equal(c.keys[0], 30);
        assert_int_equal(c.keys[1], 20);
        memset(&c, 0, sizeof(c));
        c.stop_after = 1;
        assert_int_equal(ingest__store_iter(st, db, NULL, 0, true, collect_cb, &c), 0);
        assert_int_equal(c.keys[0], 100);
        memset(&c, 0, sizeof(c));
        ingest__put_be64(k, 50);
        assert_int_equal(ingest__store_iter(st, db, k, 8, true, collect_cb, &c), 0);
        assert_int_equal(c.n, 5);
        assert_int_equal(c.keys[0], 50);
        ingest__put_be64(k, 1000);
        memset(&c, 0, sizeof(c));
        assert_int_equal(ingest__store_iter(st, db, k, 8, false, collect_cb, &c), 0);
        assert_int_equal(c.n, 0);
        assert_int_equal(ingest_store_commit(st), 0);
    }
    /* A callback error is forwarded. */
    assert_int_equal(ingest__store_put(st, db, "bad", 3, "x", 1), 0);
    collect c = { { 0 }, 0, 0 };
    assert_int_equal(ingest__store_iter(st, db, NULL, 0, false, collect_cb, &c), INGEST_ECORRUPT);
    ingest_store_close(st);
}

/* The child writes 25 single puts with a cap of 10 per transaction, then
 * is killed: the auto-commits at 10 and 20 are durable, the rest lost. */
/*
 * The default map (64 GiB of address space) where the process may have
 * less (ulimit -v; valgrind): the store opens with a smaller map, says so,
 * and works.  In a child under RLIMIT_AS (not with a sanitizer, whose
 * shadow memory needs the address space).
 */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
static void log_to_int(void *ud, int level, const char *msg)
{
    if (level == INGEST_LOG_WARN && strstr(msg, "the address space allows a map of") != NULL)
        *(int *)ud = 1;
}
#endif

static void test_map_shrinks_to_address_space(void **state)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    (void)state;
    skip();
#else
    fixture *f = *state;
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        const struct rlimit rl = { 8ull << 30, 8ull << 30 };
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(3);
        ingest_ctx *ctx = ingest_ctx_create(NULL);
        int warned = 0;
        ingest_ctx_set_log(ctx, log_to_int, &warned, INGEST_LOG_WARN);
        ingest_store *st = NULL;
        ingest__dbi db;
        const int ok = ingest_store_open(ctx, f->sub, NULL, &st) == 0 && ingest__store_db(st, "t", &db) == 0 &&
                       ingest__store_put(st, db, "k", 1, "v", 1) == 0 && ingest_store_commit(st) == 0;
        ingest_store_close(st);
        ingest_ctx_destroy(ctx);
        _exit(!ok ? 1 : !warned ? 2 : 0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
#endif
}

static void test_autocommit_and_kill(void **state)
{
    fixture *f = *state;
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ingest_ctx *ctx = ingest_ctx_create(NULL);
        ingest_store *st = NULL;
        ingest_store_opts o = small_opts;
        ingest__dbi db;
        uint8_t k[8];
        o.txn_max_writes = 10;
        if (ctx == NULL || ingest_store_open(ctx, f->sub, &o, &st) != 0 || ingest__store_db(st, "t", &db) != 0)
            _exit(3);
        for (uint64_t i = 0; i < 25; i++) {
            ingest__put_be64(k, i);
            if (ingest__store_put(st, db, k, 8, "v", 1) != 0)
                _exit(4);
        }
        /* A group of 4 when 5 writes are in the open transaction: commits
         * them first (25 total -> 10+10+5 committed, 4 pending). */
        if (ingest__store_write_begin(st, 6) != 0)
            _exit(5);
        for (uint64_t i = 100; i < 104; i++) {
            ingest__put_be64(k, i);
            if (ingest__store_put(st, db, k, 8, "v", 1) != 0)
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
    ingest__dbi db;
    uint64_t n = 0;
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    assert_int_equal(ingest__store_db(st, "t", &db), 0);
    assert_int_equal(ingest__store_count(st, db, &n), 0);
    assert_int_equal(n, 25);
    uint8_t k[8];
    char b[2];
    size_t len;
    ingest__put_be64(k, 24);
    assert_int_equal(ingest__store_get(st, db, k, 8, b, sizeof(b), &len), 0);
    ingest__put_be64(k, 100);
    assert_int_equal(ingest__store_get(st, db, k, 8, b, sizeof(b), &len), INGEST_ENOTFOUND);
    ingest_store_close(st);
}

/* ---- deferred tables ---- */

typedef struct seen {
    uint64_t n, last;
    bool ordered;
} seen;

static int count_ordered(void *ud, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    seen *sn = ud;
    (void)val;
    (void)vlen;
    assert_int_equal(klen, 8);
    const uint64_t k = ingest__get_be64(key);
    if (sn->n > 0 && k <= sn->last)
        sn->ordered = false;
    sn->last = k;
    sn->n++;
    return 0;
}

static void test_deferred_table(void **state)
{
    fixture *f = *state;
    /* A child writes a deferred table, flushes half way, and is killed:
     * what was flushed is there, the rest is lost; a plain table beside it
     * is durable at commit as always. */
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ingest_ctx *ctx = ingest_ctx_create(NULL);
        ingest_store *st = NULL;
        ingest_store_opts o = small_opts;
        ingest__dbi d, p;
        uint8_t k[8];
        char b[16];
        size_t len = 0;
        o.defer_max_writes = 1000;
        if (ctx == NULL || ingest_store_open(ctx, f->sub, &o, &st) != 0 || ingest__store_db(st, "d", &d) != 0 ||
            ingest__store_db(st, "p", &p) != 0 || ingest__store_defer(st, d) != 0)
            _exit(3);
        /* 300 keys in reverse order, key 7 written twice, key 8 deleted */
        for (uint64_t i = 300; i-- > 0;) {
            ingest__put_be64(k, i);
            if (ingest__store_put(st, d, k, 8, "old", 3) != 0)
                _exit(4);
        }
        ingest__put_be64(k, 7);
        if (ingest__store_put(st, d, k, 8, "newer", 5) != 0 || ingest__store_get(st, d, k, 8, b, sizeof b, &len) != 0 ||
            len != 5 || memcmp(b, "newer", 5) != 0)
            _exit(5);
        ingest__put_be64(k, 8);
        if (ingest__store_del(st, d, k, 8) != 0 || ingest__store_get(st, d, k, 8, b, sizeof b, &len) != INGEST_ENOTFOUND ||
            ingest__store_del(st, d, k, 8) != INGEST_ENOTFOUND)
            _exit(6);
        ingest__put_be64(k, 5000);
        if (ingest__store_del(st, d, k, 8) != INGEST_ENOTFOUND)
            _exit(7);
        if (ingest_store_deferred(st, NULL) != 300 || ingest__store_put(st, p, "plain", 5, "x", 1) != 0 ||
            ingest_store_commit(st) != 0 || ingest_store_deferred(st, NULL) != 300)
            _exit(8);
        if (ingest_store_flush(st) != 0 || ingest_store_deferred(st, NULL) != 0)
            _exit(9);
        /* after the flush: a deletion of a key now in LMDB, and 50 more keys never flushed */
        ingest__put_be64(k, 9);
        if (ingest__store_del(st, d, k, 8) != 0)
            _exit(10);
        for (uint64_t i = 1000; i < 1050; i++) {
            ingest__put_be64(k, i);
            if (ingest__store_put(st, d, k, 8, "lost", 4) != 0)
                _exit(11);
        }
        if (ingest_store_deferred(st, NULL) != 51 || ingest_store_commit(st) != 0)
            _exit(12);
        raise(SIGKILL);
        _exit(13);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status))
        fail_msg("child exited %d", WEXITSTATUS(status));
    ingest_store *st = NULL;
    ingest__dbi d, p;
    uint64_t n = 0;
    uint8_t k[8];
    char b[16];
    size_t len = 0;
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    assert_int_equal(ingest__store_db(st, "d", &d), 0);
    assert_int_equal(ingest__store_db(st, "p", &p), 0);
    assert_int_equal(ingest__store_count(st, d, &n), 0);
    assert_int_equal(n, 299); /* 300 - key 8; key 9's deletion and keys 1000.. were lost */
    ingest__put_be64(k, 7);
    assert_int_equal(ingest__store_get(st, d, k, 8, b, sizeof b, &len), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(b, "newer", 5);
    ingest__put_be64(k, 9);
    assert_int_equal(ingest__store_get(st, d, k, 8, b, sizeof b, &len), 0);
    ingest__put_be64(k, 1000);
    assert_int_equal(ingest__store_get(st, d, k, 8, b, sizeof b, &len), INGEST_ENOTFOUND);
    assert_int_equal(ingest__store_get(st, p, "plain", 5, b, sizeof b, &len), 0);
    ingest_store_close(st);

    /* In one process: the limit flushes by itself; count and iteration
     * flush first and see every key in order; close flushes. */
    ingest_store_opts o = small_opts;
    o.defer_max_writes = 64;
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &o, &st), 0);
    assert_int_equal(ingest__store_db(st, "d", &d), 0);
    assert_int_equal(ingest__store_defer(st, d), 0);
    for (uint64_t i = 2000; i < 2100; i++) {
        ingest__put_be64(k, i ^ 0x55);
        assert_int_equal(ingest__store_put(st, d, k, 8, "v", 1), 0);
    }
    assert_int_equal(ingest_store_deferred(st, NULL), 100 - 64);
    double age = -1;
    assert_int_equal(ingest_store_deferred(st, &age), 36);
    assert_true(age >= 0 && age < 60);
    seen sn = { 0, 0, true };
    assert_int_equal(ingest__store_iter(st, d, NULL, 0, false, count_ordered, &sn), 0);
    assert_int_equal(sn.n, 399);
    assert_true(sn.ordered);
    assert_int_equal(ingest_store_deferred(st, NULL), 0);
    ingest__put_be64(k, 3000);
    assert_int_equal(ingest__store_put(st, d, k, 8, "v", 1), 0);
    assert_int_equal(ingest__store_count(st, d, &n), 0);
    assert_int_equal(n, 400);
    ingest__put_be64(k, 3001);
    assert_int_equal(ingest__store_put(st, d, k, 8, "v", 1), 0);
    /* a table cannot become deferred while writes wait */
    ingest__dbi e;
    assert_int_equal(ingest__store_db(st, "e", &e), 0);
    assert_int_equal(ingest__store_defer(st, e), INGEST_EINVAL);
    ingest_store_close(st);
    assert_int_equal(ingest_store_open(f->ctx, f->sub, &small_opts, &st), 0);
    assert_int_equal(ingest__store_db(st, "d", &d), 0);
    assert_int_equal(ingest__store_count(st, d, &n), 0);
    assert_int_equal(n, 401);
    /* a flush that fails (the map is full): the write is kept and the error returned, the next
     * automatic try waits for twice as many keys, and past 4x the limit writes are refused */
    {
        char sub2[128];
        snprintf(sub2, sizeof sub2, "%s/small", f->dir);
        ingest_store_opts so = { .map_size = 256u << 10, .defer_max_writes = 8 };
        ingest_store *s2 = NULL;
        ingest__dbi d2;
        static uint8_t big[60000];
        memset(big, 0x42, sizeof big);
        assert_int_equal(ingest_store_open(f->ctx, sub2, &so, &s2), 0);
        assert_int_equal(ingest__store_db(s2, "d", &d2), 0);
        assert_int_equal(ingest__store_defer(s2, d2), 0);
        int failed_at = -1, refused_at = -1;
        for (uint64_t i = 0; i < 40; i++) {
            ingest__put_be64(k, i);
            const int rc = ingest__store_put(s2, d2, k, 8, big, sizeof big);
            if (rc == INGEST_ENOSPC && failed_at < 0)
                failed_at = (int)i;
            if (rc == INGEST_ENOSPC && strstr(ingest_ctx_errmsg(f->ctx), "could not be flushed") != NULL) {
                refused_at = (int)i;
                break;
            }
            /* between the failed try at 8 keys and the next at 16, writes are kept without trying */
            if (i > 7 && i < 15)
                assert_int_equal(rc, 0);
        }
        assert_int_equal(failed_at, 7);
        assert_int_equal(refused_at, 32);
        assert_int_equal(ingest_store_deferred(s2, NULL), 32);
        ingest__put_be64(k, 3);
        char b1[4];
        assert_int_equal(ingest__store_get(s2, d2, k, 8, b1, sizeof b1, &len), 0); /* kept in memory */
        assert_int_equal(len, sizeof big);
        ingest_store_close(s2);
    }
    /* without defer_max_writes, defer is a no-op: writes are plain */
    assert_int_equal(ingest__store_defer(st, d), 0);
    assert_int_equal(ingest__store_put(st, d, "zz", 2, "v", 1), 0);
    assert_int_equal(ingest_store_deferred(st, NULL), 0);
    ingest_store_close(st);
}

/* ---- allocation failure ---- */

typedef struct failing {
    long countdown; /* fail when it reaches 0 */
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

static void test_alloc_failure(void **state)
{
    fixture *f = *state;
    int done = 0;
    for (long n = 0; n < 100 && !done; n++) {
        failing fa = { -1 };
        const ingest_allocator a = { fail_alloc, fail_free, &fa };
        ingest_ctx *ctx = ingest_ctx_create(&a);
        assert_non_null(ctx);
        fa.countdown = n;
        ingest_store *st = NULL;
        ingest__dbi db;
        int rc = ingest_store_open(ctx, f->sub, &small_opts, &st);
        if (rc == 0) {
            rc = ingest__store_db(st, "t", &db);
            if (rc == 0)
                rc = ingest__store_put(st, db, "k", 1, "v", 1);
            ingest_store_close(st);
            done = rc == 0;
        } else {
            assert_int_equal(rc, INGEST_ENOMEM);
            assert_null(st);
        }
        ingest_ctx_destroy(ctx);
    }
    assert_true(done);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_create_put_get_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_version_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_meta_missing_or_bad, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_file_and_wipe, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nocreate_rdonly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_iterate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_autocommit_and_kill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_shrinks_to_address_space, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deferred_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alloc_failure, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
