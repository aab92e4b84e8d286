/* Internal: the catalog handle, shared by catalog.c, catalog_list.c and catalog_verify.c. */
#ifndef INGEST_CATALOG_INT_H
#define INGEST_CATALOG_INT_H

#include <lmdb.h>
#include <pthread.h>
#include <stdbool.h>

#include "catalog_fmt.h"
#include "ingest/catalog.h"

#define INGEST__CAT_DIR_MAX 4096
/* A path under the bronze root built from it and two names. */
#define INGEST__CAT_PBUF (INGEST__CAT_DIR_MAX + 2 * INGEST__CAT_NAME_MAX + 96)
/* A block is closed once it holds this many bytes (4 LMDB overflow pages hold 16,368). */
#define INGEST__CAT_BLOCK_FILL 15600
#define BLOCK_ARENA_MAX ((size_t)1 << 32)
/* Batch records cached by a listing (direct-mapped by batch number). */
#define INGEST__CAT_BCACHE 1024
/* Batches queued for the adder thread (ingest_catalog_add_batch_later) at most; past it the caller waits. */
#define INGEST__CAT_ADD_QUEUE 64

typedef struct ingest__cat_batch {
    uint64_t batch_no; /* 0: empty slot */
    int64_t landed_ns;
    char device[INGEST__CAT_NAME_MAX + 1];
    char batch[INGEST__CAT_NAME_MAX + 1];
} ingest__cat_batch;

struct ingest_catalog_s {
    ingest_ctx *ctx;
    unsigned flags;
    char bronze[INGEST__CAT_DIR_MAX];
    char dir[INGEST__CAT_DIR_MAX + 32];
    MDB_env *env;
    MDB_dbi meta, batches, feed, files, dirs;
    uint64_t id;
    pthread_mutex_t lock;
    ingest__catblock_w bw;
    ingest__buf scratch;
    ingest__catblock_r *br; /* a block reader (large: two path slots) */
    ingest__catfeed_r *fr;
    ingest__cat_batch *bcache;
    /* the adder (ingest_catalog_start_adder): batches queued, added in order by its thread */
    pthread_mutex_t aq_lock;
    pthread_cond_t aq_cond;
    pthread_t adder;
    bool adder_on, adder_quit;
    unsigned aq_head, aq_n;
    struct {
        char device[INGEST__CAT_NAME_MAX + 1];
        char batch[INGEST__CAT_NAME_MAX + 1];
    } aq[INGEST__CAT_ADD_QUEUE];
};

int ingest__cat_mdb(ingest_catalog *cat, int rc, const char *what);
/* INGEST_ECORRUPT for batch record bno that fr could not read (where and why, from fr). */
int ingest__cat_feed_bad(ingest_catalog *cat, uint64_t bno, const ingest__catfeed_r *fr);
/*
 * The next file of batch record bno (in fr, begun) whose landed path
 * starts with prefix (plen bytes) and that the catalog holds in that
 * batch: 1 with *r (valid until cat->br is used again) and *replaced, 0
 * at the record's end, < 0 (a malformed record: INGEST_ECORRUPT).
 */
int ingest__catfeed_next_held(ingest_catalog *cat, MDB_txn *txn, ingest__catfeed_r *fr, uint64_t bno,
                              const char *prefix, size_t plen, ingest__catrec *r, bool *replaced);
/* The number the next batch added will get (batches are numbered from 1), read in txn. */
int ingest__cat_next_batch(ingest_catalog *cat, MDB_txn *txn, uint64_t *next);
int ingest__cat_block_corrupt(ingest_catalog *cat, const ingest__catblock_r *r, const MDB_val *key);
/* The record of batch batch_no (cached in cat->bcache): 0, or INGEST_ECORRUPT when absent or malformed. */
int ingest__cat_batch_get(ingest_catalog *cat, MDB_txn *txn, uint64_t batch_no, const ingest__cat_batch **out);
/*
 * Find (landed, version) in read transaction txn: 1 with *r (valid until
 * cat->br is used again) and *replaced, 0 when the catalog does not hold it.
 */
int ingest__cat_find(ingest_catalog *cat, MDB_txn *txn, const char *landed, size_t len, uint64_t version,
                     ingest__catrec *r, bool *replaced);

#endif
