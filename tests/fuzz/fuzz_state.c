/*
 * Fuzz target: stored state.  The records the agent and the receiver read
 * back from their LMDB stores, and the receiver's stored dictionaries, are
 * input too: a disk error, a crash of another version, a hand edit.  Each
 * input is put, as raw bytes, where one kind of record lives, then read
 * through the public API that reads it; that must refuse it (ECORRUPT with a
 * message) or give back values within their bounds.
 *
 * Byte 0 modulo 9 selects the record; the rest is its value:
 *   0 a journal batch record (ingest_journal_get, _next, _queued)
 *   1 a file table record (ingest_filetable_get, _get_hash)
 *   2 an index file record (ingest_index_file_path, ingest_index_check; its path
 *     names no file here, so a well-formed one is stale)
 *   3 an index chunk record (ingest_index_find, ingest_index_check)
 *   4 an index batch record (ingest_index_batch_landed)
 *   5 a have-cache record (ingest_havecache_has)
 *   6 a stored dictionary file, named by its own hash (ingest_dictstore_open)
 *   7 a journal_seen record (ingest_journal_stable, _skipped: one not
 *     understood is taken as none, and made again)
 *   8 a journal_inflight record (ingest_journal_inflight)
 * The record is removed again after each input.
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ingest.h"
#include "ingest/codec.h"
#include "ingest/core.h"
#include "ingest/index.h"
#include "ingest/journal.h"
#include "internal.h"
#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ingest_ctx *ctx;
static ingest_store *edge_st, *core_st;
static ingest_filetable *ft;
static ingest_journal *jr;
static ingest_havecache *hc;
static ingest_index *idx;
static char root[512], dict_dir[600];

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    char p[1200];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (unlink(p) != 0)
            rm_tree(p);
    }
    closedir(d);
    rmdir(dir);
}

static void teardown(void)
{
    ingest_index_close(idx);
    ingest_havecache_close(hc);
    ingest_journal_close(jr);
    ingest_filetable_close(ft);
    ingest_store_close(core_st);
    ingest_store_close(edge_st);
    ingest_ctx_destroy(ctx);
    rm_tree(root);
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof(root), "%s/fuzz_state.XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(root) == NULL || (ctx = ingest_ctx_create(NULL)) == NULL)
        __builtin_trap();
    char p[700];
    const ingest_store_opts o = { .map_size = 64u << 20, .flags = INGEST_STORE_NOSYNC };
    snprintf(p, sizeof(p), "%s/edge", root);
    if (ingest_store_open(ctx, p, &o, &edge_st) != 0 || ingest_filetable_open(edge_st, &ft) != 0 ||
        ingest_journal_open(edge_st, ft, &jr) != 0 || ingest_havecache_open(edge_st, 1000, &hc) != 0)
        __builtin_trap();
    snprintf(p, sizeof(p), "%s/core", root);
    char bronze[700];
    snprintf(bronze, sizeof(bronze), "%s/bronze", root);
    if (mkdir(bronze, 0700) != 0 || ingest_store_open(ctx, p, &o, &core_st) != 0 ||
        ingest_index_open(core_st, bronze, &idx) != 0)
        __builtin_trap();
    snprintf(dict_dir, sizeof(dict_dir), "%s/dicts", root);
    atexit(teardown);
}

/* v[0, n) as the record under key in table name of st, committed; 0 or -1 (nothing put). */
static int put_raw(ingest_store *st, const char *name, const void *key, size_t klen, const uint8_t *v, size_t n)
{
    ingest__dbi db;
    if (ingest__store_db(st, name, &db) != 0)
        __builtin_trap();
    /* LMDB takes values of any size but keys of at most 511 bytes; an empty value is a value */
    if (ingest__store_write_begin(st, 1) != 0 || ingest__store_put(st, db, key, klen, v, n) != 0 ||
        ingest_store_commit(st) != 0)
        return -1;
    return 0;
}

static void del_raw(ingest_store *st, const char *name, const void *key, size_t klen)
{
    ingest__dbi db;
    if (ingest__store_db(st, name, &db) != 0 || ingest__store_write_begin(st, 1) != 0)
        __builtin_trap();
    (void)ingest__store_del(st, db, key, klen);
    if (ingest_store_commit(st) != 0)
        __builtin_trap();
}

static void check_problem(void *ud, const char *problem)
{
    (void)ud;
    if (problem == NULL || problem[0] == '\0')
        __builtin_trap();
}

static void fuzz_journal(const uint8_t *v, size_t n)
{
    uint8_t key[8];
    ingest__put_be64(key, 7);
    if (put_raw(edge_st, "journal_batches", key, 8, v, n) != 0)
        return;
    ingest_journal_batch *b = NULL;
    const int rc = ingest_journal_get(jr, 7, &b);
    if (rc == 0) {
        if (b == NULL || b->seq != 7 || b->nfiles == 0 || b->nfiles > INGEST_JOURNAL_MAX_FILES || b->id == NULL ||
            strlen(b->id) == 0 || strlen(b->id) > INGEST_JOURNAL_ID_MAX || b->state < INGEST_JOURNAL_PENDING ||
            b->state > INGEST_JOURNAL_ACKED)
            __builtin_trap();
        for (uint32_t i = 0; i < b->nfiles; i++) {
            const size_t pl = strlen(b->files[i].path);
            if (pl == 0 || pl > INGEST_MANIFEST_PATH_MAX)
                __builtin_trap();
        }
        ingest_journal_batch_free(jr, b);
    } else if (rc != INGEST_ECORRUPT || b != NULL || ingest_ctx_errmsg(ctx)[0] == '\0') {
        __builtin_trap();
    }
    uint64_t seq = 0, nb = 0, nf = 0, bytes = 0;
    (void)ingest_journal_next(jr, 0, &seq);
    (void)ingest_journal_queued(jr, &nb, &nf, &bytes);
    del_raw(edge_st, "journal_batches", key, 8);
}

static void fuzz_journal_path(unsigned kind, const uint8_t *v, size_t n)
{
    const char *table = kind == 7 ? "journal_seen" : "journal_inflight";
    uint8_t key[INGEST__PATH_KEY_MAX];
    const size_t kl = ingest__path_key("src/a.log", key);
    if (put_raw(edge_st, table, key, kl, v, n) != 0)
        return;
    int rc;
    if (kind == 7) {
        int64_t wait = 0;
        rc = ingest_journal_skipped(jr, "src/a.log", 100, 5, 6, 77);
        if (rc < 0 || rc > 15)
            __builtin_trap();
        rc = ingest_journal_stable(jr, "src/a.log", 100, 5, 1700000000000000000, 1000000000, &wait);
        if ((rc != 0 && rc != 1) || wait < 0 || wait > 1000000000)
            __builtin_trap();
    } else {
        uint64_t seq = 0;
        rc = ingest_journal_inflight(jr, "src/a.log", &seq);
        if (rc != 0 && rc != 1 && rc != INGEST_ECORRUPT)
            __builtin_trap();
    }
    del_raw(edge_st, table, key, kl);
}

static void fuzz_filetable(const uint8_t *v, size_t n)
{
    uint8_t key[INGEST__PATH_KEY_MAX];
    const size_t kl = ingest__path_key("src/a.log", key);
    if (put_raw(edge_st, "files_edge", key, kl, v, n) != 0)
        return;
    ingest_file_state s;
    uint8_t h[INGEST_ID_BYTES];
    int rc = ingest_filetable_get(ft, "src/a.log", &s);
    if (rc != 0 && rc != INGEST_ECORRUPT)
        __builtin_trap();
    rc = ingest_filetable_get_hash(ft, "src/a.log", h);
    if (rc != 0 && rc != INGEST_ECORRUPT && rc != INGEST_ENOTFOUND)
        __builtin_trap();
    del_raw(edge_st, "files_edge", key, kl);
}

static void fuzz_index(unsigned kind, const uint8_t *v, size_t n)
{
    uint8_t key[INGEST_ID_BYTES + 64];
    size_t kl;
    const char *table;
    uint8_t id[INGEST_ID_BYTES];
    memset(id, 0x5a, sizeof(id));
    if (kind == 2) {
        table = "files";
        ingest__put_be64(key, 1);
        kl = 8;
    } else if (kind == 3) {
        table = "chunks";
        memcpy(key, id, INGEST_ID_BYTES);
        kl = INGEST_ID_BYTES;
    } else {
        table = "batches";
        memcpy(key, "dev1\0b-1", 8);
        kl = 8;
    }
    if (put_raw(core_st, table, key, kl, v, n) != 0)
        return;
    int rc;
    if (kind == 2) {
        char path[8192];
        /* (its path names no landed file: ESTALE when the record is well formed) */
        rc = ingest_index_file_path(idx, 1, path, sizeof(path));
        if (rc == 0 || rc == INGEST_ESTALE)
            rc = 0;
    } else if (kind == 3) {
        ingest_chunk_loc loc;
        rc = ingest_index_find(idx, id, &loc);
    } else {
        rc = ingest_index_batch_landed(idx, "dev1", "b-1");
        if (rc == 1)
            rc = 0;
    }
    if (rc != 0 && rc != INGEST_ECORRUPT && rc != INGEST_ETOOBIG)
        __builtin_trap();
    if (kind != 4)
        (void)ingest_index_check(idx, check_problem, NULL, NULL);
    del_raw(core_st, table, key, kl);
}

static void fuzz_havecache(const uint8_t *v, size_t n)
{
    uint8_t id[INGEST_ID_BYTES];
    memset(id, 0xa5, sizeof(id));
    if (put_raw(edge_st, "have_ids", id, sizeof(id), v, n) != 0)
        return;
    const int rc = ingest_havecache_has(hc, id);
    if (rc != 0 && rc != 1 && rc != INGEST_ECORRUPT)
        __builtin_trap();
    del_raw(edge_st, "have_ids", id, sizeof(id));
}

static void fuzz_dictfile(const uint8_t *v, size_t n)
{
    uint8_t h[INGEST_DICT_HASH_BYTES];
    char hex[2 * INGEST_DICT_HASH_BYTES + 1], path[900];
    ingest_dict_hash(v, n, h);
    ingest_to_hex(h, sizeof(h), hex);
    (void)mkdir(dict_dir, 0700);
    snprintf(path, sizeof(path), "%s/%s.zdict", dict_dir, hex);
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (n > 0 && write(fd, v, n) != (ssize_t)n))
        __builtin_trap();
    close(fd);
    ingest_dictstore *ds = NULL;
    if (ingest_dictstore_open(ctx, dict_dir, &ds) != 0)
        __builtin_trap(); /* a bad file is skipped (and said), never a failed start */
    const unsigned c = ingest_dictstore_count(ds);
    if (c > 1)
        __builtin_trap();
    if (c == 1) {
        const uint8_t *d = ingest_dictstore_find(ds, "dev1", h, n);
        if (d == NULL || memcmp(d, v, n) != 0)
            __builtin_trap();
        ingest_dictstore_release(ds, d);
    }
    ingest_dictstore_close(ds);
    rm_tree(dict_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ctx == NULL)
        setup();
    if (size == 0)
        return 0;
    const unsigned kind = data[0] % 9u;
    const uint8_t *v = data + 1;
    const size_t n = size - 1;
    switch (kind) {
    case 0: fuzz_journal(v, n); break;
    case 1: fuzz_filetable(v, n); break;
    case 2:
    case 3:
    case 4: fuzz_index(kind, v, n); break;
    case 5: fuzz_havecache(v, n); break;
    case 6: fuzz_dictfile(v, n); break;
    default: fuzz_journal_path(kind, v, n); break;
    }
    return 0;
}
