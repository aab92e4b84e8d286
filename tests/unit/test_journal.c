/* The edge's batch journal: states, in-flight marks, file table on ack, stability, reopen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store.h"
#include "ingest/journal.h"

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

typedef struct fixture {
    char dir[64];
    ingest_ctx *ctx;
    ingest_store *st;
    ingest_filetable *ft;
    ingest_journal *j;
} fixture;

static void open_all(fixture *f)
{
    const ingest_store_opts o = { .map_size = 64u << 20, .flags = INGEST_STORE_NOSYNC };
    assert_int_equal(ingest_store_open(f->ctx, f->dir, &o, &f->st), 0);
    assert_int_equal(ingest_filetable_open(f->st, &f->ft), 0);
    assert_int_equal(ingest_journal_open(f->st, f->ft, &f->j), 0);
}

static void close_all(fixture *f)
{
    ingest_journal_close(f->j);
    ingest_filetable_close(f->ft);
    ingest_store_close(f->st);
    f->j = NULL;
    f->ft = NULL;
    f->st = NULL;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/test_journal.XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    f->ctx = ingest_ctx_create(NULL);
    if (f->ctx == NULL)
        return -1;
    open_all(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    close_all(f);
    nftw(f->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    ingest_ctx_destroy(f->ctx);
    free(f);
    return 0;
}

static const ingest_journal_file files3[] = {
    { "src/a", 10, 100, 1000, 11 },
    { "src/d/b", 20, 200, 2000, 22 },
    { "src/d/c", 30, 300, 3000, 33 },
};

static void test_lifecycle(void **state)
{
    fixture *f = *state;
    assert_int_equal(ingest_journal_add(f->j, 7, "inst-000007", files3, 3), 0);
    uint64_t seq = 0;
    assert_int_equal(ingest_journal_inflight(f->j, "src/d/b", &seq), 1);
    assert_int_equal(seq, 7);
    assert_int_equal(ingest_journal_inflight(f->j, "src/zzz", NULL), 0);
    uint64_t nb = 0, nf = 0, by = 0;
    assert_int_equal(ingest_journal_queued(f->j, &nb, &nf, &by), 0);
    assert_int_equal(nb, 1);
    assert_int_equal(nf, 3);
    assert_int_equal(by, 60);

    /* survives a reopen (as after kill -9: every change is committed) */
    close_all(f);
    open_all(f);
    ingest_journal_batch *b = NULL;
    assert_int_equal(ingest_journal_get(f->j, 7, &b), 0);
    assert_int_equal(b->state, INGEST_JOURNAL_PENDING);
    assert_string_equal(b->id, "inst-000007");
    assert_int_equal(b->nfiles, 3);
    assert_string_equal(b->files[2].path, "src/d/c");
    assert_int_equal(b->files[2].size, 30);
    assert_int_equal(b->files[1].mtime_ns, 200);
    assert_int_equal(b->files[0].ctime_ns, 1000);
    assert_int_equal(b->files[1].ino, 22);
    ingest_journal_batch_free(f->j, b);

    assert_int_equal(ingest_journal_set_state(f->j, 7, INGEST_JOURNAL_SENT, NULL, 0), 0);
    /* a sent batch cannot be re-chosen, and states never go back */
    assert_int_equal(ingest_journal_add(f->j, 7, "inst-000007", files3, 2), INGEST_EEXIST);
    ingest_file_state fs;
    assert_int_equal(ingest_filetable_get(f->ft, "src/a", &fs), INGEST_ENOTFOUND);

    /* ack with what really went (the third file had changed) */
    ingest_journal_file got[2] = { files3[0], files3[1] };
    got[1].size = 21;
    assert_int_equal(ingest_journal_set_state(f->j, 7, INGEST_JOURNAL_ACKED, got, 2), 0);
    assert_int_equal(ingest_journal_set_state(f->j, 7, INGEST_JOURNAL_SENT, NULL, 0), INGEST_EINVAL);
    close_all(f);
    open_all(f);
    assert_int_equal(ingest_filetable_get(f->ft, "src/d/b", &fs), 0);
    assert_int_equal(fs.size, 21);
    assert_int_equal(fs.mtime_ns, 200);
    assert_int_equal(ingest_filetable_get(f->ft, "src/d/c", &fs), INGEST_ENOTFOUND);
    assert_int_equal(ingest_journal_inflight(f->j, "src/a", NULL), 0);
    assert_int_equal(ingest_journal_inflight(f->j, "src/d/c", NULL), 0);
    assert_int_equal(ingest_journal_queued(f->j, &nb, &nf, &by), 0);
    assert_int_equal(nb, 0);
    assert_int_equal(ingest_journal_next(f->j, 0, &seq), 1);
    assert_int_equal(seq, 7);
    assert_int_equal(ingest_journal_remove(f->j, 7), 0);
    assert_int_equal(ingest_journal_next(f->j, 0, &seq), 0);
    assert_int_equal(ingest_journal_get(f->j, 7, &b), INGEST_ENOTFOUND);
}

/* ingest_journal_add_sent: the record SENT at once, files in flight, then as any SENT batch. */
static void test_add_sent(void **state)
{
    fixture *f = *state;
    assert_int_equal(ingest_journal_add_sent(f->j, 9, "inst-000009", files3, 3), 0);
    close_all(f);
    open_all(f);
    ingest_journal_batch *b = NULL;
    assert_int_equal(ingest_journal_get(f->j, 9, &b), 0);
    assert_int_equal(b->state, INGEST_JOURNAL_SENT);
    assert_string_equal(b->id, "inst-000009");
    assert_int_equal(b->nfiles, 3);
    assert_string_equal(b->files[1].path, "src/d/b");
    assert_int_equal(b->files[1].size, 20);
    ingest_journal_batch_free(f->j, b);
    uint64_t seq = 0;
    assert_int_equal(ingest_journal_inflight(f->j, "src/d/c", &seq), 1);
    assert_int_equal(seq, 9);
    assert_int_equal(ingest_journal_add(f->j, 9, "inst-000009", files3, 1), INGEST_EEXIST);
    assert_int_equal(ingest_journal_add_sent(f->j, 9, "inst-000009", files3, 1), INGEST_EEXIST);
    assert_int_equal(ingest_journal_add_sent(f->j, 10, "inst-000010", files3, 0), INGEST_EINVAL);
    /* renewed (the core answered its id as used before): PENDING under the new id, files and marks kept */
    assert_int_equal(ingest_journal_renew(f->j, 9, "next-000009"), 0);
    assert_int_equal(ingest_journal_get(f->j, 9, &b), 0);
    assert_int_equal(b->state, INGEST_JOURNAL_PENDING);
    assert_string_equal(b->id, "next-000009");
    assert_int_equal(b->nfiles, 3);
    assert_string_equal(b->files[2].path, "src/d/c");
    assert_int_equal(b->files[1].size, 20);
    ingest_journal_batch_free(f->j, b);
    assert_int_equal(ingest_journal_inflight(f->j, "src/d/c", &seq), 1);
    assert_int_equal(seq, 9);
    assert_int_equal(ingest_journal_renew(f->j, 9, ""), INGEST_EINVAL);
    assert_int_equal(ingest_journal_renew(f->j, 77, "next-000077"), INGEST_ENOTFOUND);
    assert_int_equal(ingest_journal_set_state(f->j, 9, INGEST_JOURNAL_SENT, NULL, 0), 0);
    assert_int_equal(ingest_journal_remove(f->j, 9), 0);
    assert_int_equal(ingest_journal_inflight(f->j, "src/d/c", &seq), 0);
    assert_int_equal(ingest_journal_get(f->j, 9, &b), INGEST_ENOTFOUND);
}

static void test_replace_and_remove(void **state)
{
    fixture *f = *state;
    assert_int_equal(ingest_journal_add(f->j, 3, "x-000003", files3, 3), 0);
    /* a pending batch is chosen again: the old marks go */
    assert_int_equal(ingest_journal_add(f->j, 3, "x-000003", files3 + 1, 1), 0);
    assert_int_equal(ingest_journal_inflight(f->j, "src/a", NULL), 0);
    assert_int_equal(ingest_journal_inflight(f->j, "src/d/b", NULL), 1);
    assert_int_equal(ingest_journal_add(f->j, 4, "x-000004", files3 + 2, 1), 0);
    uint64_t seq = 0;
    assert_int_equal(ingest_journal_next(f->j, 3, &seq), 1);
    assert_int_equal(seq, 4);
    assert_int_equal(ingest_journal_remove(f->j, 3), 0);
    assert_int_equal(ingest_journal_inflight(f->j, "src/d/b", NULL), 0);
    assert_int_equal(ingest_journal_inflight(f->j, "src/d/c", NULL), 1);
    /* bad input */
    assert_int_equal(ingest_journal_add(f->j, 5, "", files3, 1), INGEST_EINVAL);
    assert_int_equal(ingest_journal_add(f->j, 5, "x", files3, 0), INGEST_EINVAL);
    assert_int_equal(ingest_journal_set_state(f->j, 99, INGEST_JOURNAL_SENT, NULL, 0), INGEST_ENOTFOUND);
}

static void test_stability(void **state)
{
    fixture *f = *state;
    const int64_t s = 1000000000; /* 1 s */
    int64_t wait = 0;
    assert_int_equal(ingest_journal_stable(f->j, "src/a", 10, 5, 100 * s, 2 * s, &wait), 0);
    assert_int_equal(wait, 2 * s);
    assert_int_equal(ingest_journal_stable(f->j, "src/a", 10, 5, 101 * s, 2 * s, &wait), 0);
    assert_int_equal(wait, s);
    /* it grew: the clock restarts */
    assert_int_equal(ingest_journal_stable(f->j, "src/a", 11, 6, 102 * s, 2 * s, &wait), 0);
    assert_int_equal(ingest_journal_stable(f->j, "src/a", 11, 6, 103 * s, 2 * s, &wait), 0);
    assert_int_equal(ingest_journal_stable(f->j, "src/a", 11, 6, 104 * s, 2 * s, &wait), 1);
    /* the clock went back an hour while src/c settled: its settle time starts again */
    assert_int_equal(ingest_journal_stable(f->j, "src/c", 3, 4, 5000 * s, 2 * s, &wait), 0);
    assert_int_equal(ingest_journal_stable(f->j, "src/c", 3, 4, 1400 * s, 2 * s, &wait), 0);
    assert_int_equal(wait, 2 * s);
    assert_int_equal(ingest_journal_stable(f->j, "src/c", 3, 4, 1401 * s, 2 * s, &wait), 0);
    assert_int_equal(wait, s);
    assert_int_equal(ingest_journal_stable(f->j, "src/c", 3, 4, 1402 * s, 2 * s, &wait), 1);
    /* renamed in: stable at once, while size and mtime hold */
    assert_int_equal(ingest_journal_mark_renamed(f->j, "src/r", 7, 8, 50 * s), 0);
    assert_int_equal(ingest_journal_stable(f->j, "src/r", 7, 8, 50 * s, 2 * s, &wait), 1);
    assert_int_equal(ingest_journal_stable(f->j, "src/r", 9, 8, 50 * s, 2 * s, &wait), 0);
    /* skipped versions */
    assert_int_equal(ingest_journal_mark_skipped(f->j, "src/k", 1, 2, 3, 77, 6, 50 * s), 0);
    assert_int_equal(ingest_journal_skipped(f->j, "src/k", 1, 2, 3, 77), 6);
    assert_int_equal(ingest_journal_skipped(f->j, "src/k", 1, 3, 3, 77), 0);
    assert_int_equal(ingest_journal_skipped(f->j, "src/k", 1, 2, 4, 77), 0); /* rewritten, its mtime put back */
    assert_int_equal(ingest_journal_skipped(f->j, "src/k", 1, 2, 3, 78), 0); /* under other filter settings */
    assert_int_equal(ingest_journal_mark_skipped(f->j, "src/k", 1, 2, 3, 0, 6, 50 * s), INGEST_EINVAL);
    assert_int_equal(ingest_journal_mark_skipped(f->j, "src/k", 1, 2, 3, 77, 0, 50 * s), INGEST_EINVAL);
    /* an ack clears the record */
    const ingest_journal_file fa = { "src/a", 11, 6, 9, 0 };
    assert_int_equal(ingest_journal_add(f->j, 1, "y-000001", &fa, 1), 0);
    assert_int_equal(ingest_journal_set_state(f->j, 1, INGEST_JOURNAL_ACKED, NULL, 0), 0);
    assert_int_equal(ingest_journal_stable(f->j, "src/a", 11, 6, 200 * s, 2 * s, &wait), 0);
    assert_int_equal(ingest_journal_flush(f->j), 0);
}

/* Prune callback: the paths whose last character is an odd digit are gone; "src/fail" fails. */
static int odd_gone(void *ud, const char *path)
{
    (*(int *)ud)++;
    if (strcmp(path, "src/fail") == 0)
        return INGEST_EIO;
    const char c = path[strlen(path) - 1];
    return c >= '0' && c <= '9' && (c - '0') % 2 == 1;
}

/* Records of files gone are dropped (in rounds: more than one of 256 here); a hashed key is kept. */
static void test_prune(void **state)
{
    fixture *f = *state;
    const int64_t s = 1000000000;
    char p[600];
    for (int i = 0; i < 700; i++) {
        snprintf(p, sizeof(p), "src/d%03d/f%d", i / 10, i);
        assert_true(ingest_journal_stable(f->j, p, 1, 2, 100 * s, 2 * s, NULL) >= 0);
        if (i % 3 == 0)
            assert_int_equal(ingest_journal_mark_skipped(f->j, p, 1, 2, 3, 77, 2, 100 * s), 0);
        const ingest_file_state fs = { 1, 2, 3, 0, 0 };
        assert_int_equal(ingest_filetable_put(f->ft, p, &fs), 0);
    }
    /* a path over 440 bytes (hashed key) ending in an odd digit: kept, its key cannot be read back */
    memset(p, 'x', 500);
    memcpy(p, "src/", 4);
    p[500] = '1';
    p[501] = '\0';
    assert_int_equal(ingest_journal_mark_renamed(f->j, p, 1, 2, 100 * s), 0);
    assert_int_equal(ingest_journal_flush(f->j), 0);
    assert_int_equal(ingest_journal_seen_count(f->j), 701);
    assert_int_equal(ingest_filetable_count(f->ft), 700);
    int asked = 0;
    uint64_t removed = 0;
    assert_int_equal(ingest_journal_prune_seen(f->j, odd_gone, &asked, &removed), 0);
    assert_int_equal(asked, 700);
    assert_int_equal(removed, 350);
    assert_int_equal(ingest_journal_seen_count(f->j), 351);
    assert_int_equal(ingest_journal_stable(f->j, p, 1, 2, 200 * s, 2 * s, NULL), 1); /* renamed: still there */
    assert_int_equal(ingest_journal_skipped(f->j, "src/d000/f0", 1, 2, 3, 77), 2);
    assert_int_equal(ingest_journal_skipped(f->j, "src/d000/f3", 1, 2, 3, 77), 0);
    asked = 0;
    assert_int_equal(ingest_filetable_prune(f->ft, odd_gone, &asked, &removed), 0);
    assert_int_equal(removed, 350);
    assert_int_equal(ingest_filetable_count(f->ft), 350);
    ingest_file_state got;
    assert_int_equal(ingest_filetable_get(f->ft, "src/d000/f2", &got), 0);
    assert_int_equal(ingest_filetable_get(f->ft, "src/d000/f1", &got), INGEST_ENOTFOUND);
    /* nothing more to drop; a failing callback stops the prune with its code */
    assert_int_equal(ingest_journal_prune_seen(f->j, odd_gone, &asked, &removed), 0);
    assert_int_equal(removed, 0);
    assert_int_equal(ingest_journal_mark_skipped(f->j, "src/fail", 1, 2, 3, 77, 2, 100 * s), 0);
    assert_int_equal(ingest_journal_prune_seen(f->j, odd_gone, &asked, &removed), INGEST_EIO);
}

/* The whole-file hash of a file table record: set, read, dropped by a new put; version 1 records read. */
static void test_filetable_hash(void **state)
{
    fixture *f = *state;
    uint8_t h[INGEST_ID_BYTES], got[INGEST_ID_BYTES];
    memset(h, 0xab, sizeof(h));
    assert_int_equal(ingest_filetable_set_hash(f->ft, "src/none", h), INGEST_ENOTFOUND);
    const ingest_file_state fs = { 10, 20, 30, 0, 0 };
    assert_int_equal(ingest_filetable_put(f->ft, "src/a", &fs), 0);
    assert_int_equal(ingest_filetable_get_hash(f->ft, "src/a", got), INGEST_ENOTFOUND);
    assert_int_equal(ingest_filetable_set_hash(f->ft, "src/a", h), 0);
    assert_int_equal(ingest_filetable_get_hash(f->ft, "src/a", got), 0);
    assert_memory_equal(got, h, sizeof(h));
    ingest_file_state out;
    assert_int_equal(ingest_filetable_get(f->ft, "src/a", &out), 0);
    assert_int_equal(out.size, 10);
    assert_int_equal(out.mtime_ns, 20);
    assert_int_equal(out.ctime_ns, 30);
    close_all(f);
    open_all(f); /* committed at close, read back */
    assert_int_equal(ingest_filetable_get_hash(f->ft, "src/a", got), 0);
    assert_memory_equal(got, h, sizeof(h));
    assert_int_equal(ingest_filetable_put(f->ft, "src/a", &fs), 0);
    assert_int_equal(ingest_filetable_get_hash(f->ft, "src/a", got), INGEST_ENOTFOUND);
}

/* A batch record of format 1 (no inodes, 26-byte file heads), as journaled before: read with ino 0. */
static void test_format1_record(void **state)
{
    fixture *f = *state;
    uint8_t v[24 + 3 + 26 + 5];
    memset(v, 0, sizeof(v));
    v[0] = 1;                        /* version */
    v[1] = INGEST_JOURNAL_SENT;
    ingest__put_u16(v + 2, 3);       /* id length */
    ingest__put_u32(v + 4, 1);       /* files */
    ingest__put_u64(v + 8, 10);      /* bytes */
    ingest__put_u64(v + 16, 12345);  /* created_ns */
    memcpy(v + 24, "b-1", 3);
    ingest__put_u16(v + 27, 5);      /* path length */
    ingest__put_u64(v + 29, 10);
    ingest__put_u64(v + 37, 100);
    ingest__put_u64(v + 45, 1000);
    memcpy(v + 53, "src/a", 5);
    ingest__dbi db;
    uint8_t key[8];
    ingest__put_be64(key, 9);
    assert_int_equal(ingest__store_db(f->st, "journal_batches", &db), 0);
    assert_int_equal(ingest__store_write_begin(f->st, 1), 0);
    assert_int_equal(ingest__store_put(f->st, db, key, 8, v, sizeof(v)), 0);
    assert_int_equal(ingest_store_commit(f->st), 0);
    ingest_journal_batch *b = NULL;
    assert_int_equal(ingest_journal_get(f->j, 9, &b), 0);
    assert_string_equal(b->id, "b-1");
    assert_int_equal(b->state, INGEST_JOURNAL_SENT);
    assert_int_equal(b->nfiles, 1);
    assert_string_equal(b->files[0].path, "src/a");
    assert_int_equal(b->files[0].size, 10);
    assert_int_equal(b->files[0].mtime_ns, 100);
    assert_int_equal(b->files[0].ctime_ns, 1000);
    assert_int_equal(b->files[0].ino, 0);
    ingest_journal_batch_free(f->j, b);
    /* it moves on as any record */
    assert_int_equal(ingest_journal_set_state(f->j, 9, INGEST_JOURNAL_ACKED, NULL, 0), 0);
    assert_int_equal(ingest_journal_get(f->j, 9, &b), 0);
    assert_int_equal(b->state, INGEST_JOURNAL_ACKED);
    ingest_journal_batch_free(f->j, b);
    /* a truncated one is refused */
    assert_int_equal(ingest__store_write_begin(f->st, 1), 0);
    assert_int_equal(ingest__store_put(f->st, db, key, 8, v, sizeof(v) - 1), 0);
    assert_int_equal(ingest_store_commit(f->st), 0);
    assert_int_equal(ingest_journal_get(f->j, 9, &b), INGEST_ECORRUPT);
}

/*
 * kill -9 in the middle of the journal's work, not after a clean close: a
 * child process journals batches (add, SENT, ACKED) as the daemon does and
 * reports each step once it returned (committed) on a pipe; the parent
 * kills it after a varying number of steps, at whatever it is doing then,
 * and reopens the store.  Every reported step must be there (the state
 * reached or a later one; an acknowledged batch's files in the file table
 * and no longer in flight; a batch not yet acknowledged keeps its files in
 * flight), the step the kill interrupted is there whole or not at all, and
 * the store always opens.  Rounds go on in the same store.
 */
#define KILL_FILES 3

static void kill_files(uint64_t seq, char paths[KILL_FILES][48], ingest_journal_file *files)
{
    for (int k = 0; k < KILL_FILES; k++) {
        snprintf(paths[k], sizeof(paths[k]), "src/b%llu/f%d", (unsigned long long)seq, k);
        files[k] = (ingest_journal_file){ paths[k], seq * 10 + (uint64_t)k, (int64_t)seq, (int64_t)seq + 1, 0 };
    }
}

/* The child: journal batches from seq on, reporting "seq state" after each committed step. */
static void kill_child(const char *dir, uint64_t seq, int out)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_store *st = NULL;
    ingest_filetable *ft = NULL;
    ingest_journal *j = NULL;
    const ingest_store_opts o = { .map_size = 64u << 20, .flags = INGEST_STORE_NOSYNC };
    if (ctx == NULL || ingest_store_open(ctx, dir, &o, &st) != 0 || ingest_filetable_open(st, &ft) != 0 ||
        ingest_journal_open(st, ft, &j) != 0)
        _exit(3);
    for (;; seq++) {
        char paths[KILL_FILES][48], id[32];
        ingest_journal_file files[KILL_FILES];
        kill_files(seq, paths, files);
        snprintf(id, sizeof id, "kill-%06llu", (unsigned long long)seq);
        for (int state = INGEST_JOURNAL_PENDING; state <= INGEST_JOURNAL_ACKED; state++) {
            const int rc = state == INGEST_JOURNAL_PENDING ? ingest_journal_add(j, seq, id, files, KILL_FILES)
                                                           : ingest_journal_set_state(j, seq, state, NULL, 0);
            if (rc != 0) {
                fprintf(stderr, "child: batch %llu state %d: %s\n", (unsigned long long)seq, state, ingest_ctx_errmsg(ctx));
                _exit(4);
            }
            char line[64];
            const int n = snprintf(line, sizeof line, "%llu %d\n", (unsigned long long)seq, state);
            if (write(out, line, (size_t)n) != n)
                _exit(5);
        }
    }
}

static void test_kill_mid_work(void **state)
{
    (void)state;
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/test_journal_kill.XXXXXX");
    assert_non_null(mkdtemp(dir));
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    assert_non_null(ctx);
    const int rounds = getenv("INGEST_TEST_QUICK") ? 4 : 25;
    uint64_t next = 1;
    unsigned seed = 7;
    for (int round = 0; round < rounds; round++) {
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        const pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            kill_child(dir, next, fds[1]);
        }
        close(fds[1]);
        /* let it report 1..120 steps, then kill it wherever it is */
        const int steps = 1 + (int)(rand_r(&seed) % 120);
        uint64_t last_seq = 0;
        int last_state = 0, got = 0;
        FILE *in = fdopen(fds[0], "r");
        assert_non_null(in);
        unsigned long long sq;
        int stt;
        while (got < steps && fscanf(in, "%llu %d", &sq, &stt) == 2) {
            last_seq = sq;
            last_state = stt;
            got++;
        }
        kill(pid, SIGKILL);
        int ws = 0;
        assert_int_equal(waitpid(pid, &ws, 0), pid);
        fclose(in);
        if (!(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL)) /* not an exit of its own (a failed step) */
            fail_msg("round %d: the child exited %d by itself after %d steps", round, WIFEXITED(ws) ? WEXITSTATUS(ws) : -1, got);
        assert_int_equal(got, steps);

        ingest_store *st = NULL;
        ingest_filetable *ft = NULL;
        ingest_journal *j = NULL;
        const ingest_store_opts o = { .map_size = 64u << 20, .flags = INGEST_STORE_NOSYNC };
        assert_int_equal(ingest_store_open(ctx, dir, &o, &st), 0);
        assert_int_equal(ingest_filetable_open(st, &ft), 0);
        assert_int_equal(ingest_journal_open(st, ft, &j), 0);
        /* every reported batch (last_seq is the newest reported; the child ran on meanwhile, so
         * later ones may be there too, each whole), up to the first missing one */
        uint64_t first_open = 0;
        for (uint64_t q = next;; q++) {
            ingest_journal_batch *b = NULL;
            const int rc = ingest_journal_get(j, q, &b);
            const int want = q < last_seq ? INGEST_JOURNAL_ACKED : q == last_seq ? last_state : 0;
            if (rc == INGEST_ENOTFOUND) {
                assert_int_equal(want, 0); /* a reported step is never lost */
                if (first_open == 0)
                    first_open = q;
                break;
            }
            assert_int_equal(rc, 0);
            assert_true(b->state >= want);
            assert_int_equal(b->nfiles, KILL_FILES);
            char paths[KILL_FILES][48];
            ingest_journal_file files[KILL_FILES];
            kill_files(q, paths, files);
            for (int k = 0; k < KILL_FILES; k++) {
                assert_string_equal(b->files[k].path, paths[k]);
                assert_int_equal(b->files[k].size, files[k].size);
                ingest_file_state fs;
                const int inft = ingest_journal_inflight(j, paths[k], NULL);
                const int intable = ingest_filetable_get(ft, paths[k], &fs) == 0;
                if (b->state == INGEST_JOURNAL_ACKED) {
                    assert_true(intable);
                    assert_int_equal(fs.size, files[k].size);
                    assert_int_equal(inft, 0);
                } else {
                    assert_false(intable);
                    assert_int_equal(inft, 1);
                }
            }
            /* only the newest batch may be short of ACKED: the child journals one at a time */
            if (b->state != INGEST_JOURNAL_ACKED) {
                assert_int_equal(first_open, 0);
                first_open = q;
                /* forget it, as a daemon that replays it would journal it again */
                assert_int_equal(ingest_journal_remove(j, q), 0);
            }
            ingest_journal_batch_free(j, b);
        }
        ingest_journal_close(j);
        ingest_filetable_close(ft);
        ingest_store_close(st);
        next = first_open; /* the child of the next round goes on from here */
    }
    assert_true(next > 1);
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    ingest_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lifecycle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_add_sent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace_and_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stability, setup, teardown),
        cmocka_unit_test_setup_teardown(test_format1_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prune, setup, teardown),
        cmocka_unit_test_setup_teardown(test_filetable_hash, setup, teardown),
        cmocka_unit_test(test_kill_mid_work),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
