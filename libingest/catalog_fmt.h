/*
 * Internal: the catalog's record encodings (docs/catalog.md), apart from
 * LMDB so that they can be fuzzed and tested alone.
 *
 * A block (a value of table "files") holds the records of a run of landed
 * paths in (landed path, version) order, each landed path front-coded
 * against the record before it in the block.  A feed value (table "feed")
 * holds one batch: its device, name, landing time, and its files'
 * (landed path, version), front-coded the same way.  Every decoder checks
 * each length against what is left and against its bound before using it,
 * and fails with INGEST_ECORRUPT, a static message and the byte offset.
 */
#ifndef INGEST_CATALOG_FMT_H
#define INGEST_CATALOG_FMT_H

#include "internal.h"
#include "ingest/hash.h"

#define INGEST__CAT_BLOCK_VERSION 1
#define INGEST__CAT_FEED_VERSION 1
#define INGEST__CAT_PATH_MAX 4096   /* bytes of a path (as INGEST_MANIFEST_PATH_MAX) */
#define INGEST__CAT_NAME_MAX 128    /* device and batch names */
#define INGEST__CAT_BLOCK_RECS_MAX (1u << 24)
/* LMDB keys: a landed key is cut to this many bytes (Debian's LMDB takes 511). */
#define INGEST__CAT_KEY_MAX 480
#define INGEST__CAT_FEED_HEAD 24    /* version, 0, u16 dl, u16 bl, i64 landed_ns, u64 nfiles */

/* One file record, decoded (strings NUL-terminated, valid as documented). */
typedef struct ingest__catrec {
    const char *landed;
    size_t landed_len;
    const char *path;
    size_t path_len;
    uint64_t version, batch_no, size;
    int64_t mtime_ns;
    uint32_t mode;
    uint8_t hash[INGEST_ID_BYTES];
} ingest__catrec;

/* Varints: LEB128, at most 10 bytes, no bits past 64. */
size_t ingest__varint_put(uint8_t out[10], uint64_t v);
/* 0 and *v, or -1 when p[0..end) does not hold a valid varint. */
int ingest__varint_get(const uint8_t **p, const uint8_t *end, uint64_t *v);

/*
 * The LMDB key of a landed key (landed path, a 0 byte, version big-endian),
 * cut at INGEST__CAT_KEY_MAX bytes.  out holds INGEST__CAT_KEY_MAX bytes;
 * returns the length.
 */
size_t ingest__cat_key(const char *landed, size_t len, uint64_t version, uint8_t *out);
/* Order of two (landed, version) pairs: < 0, 0, > 0. */
int ingest__cat_cmp(const char *a, size_t alen, uint64_t av, const char *b, size_t blen, uint64_t bv);

/*
 * Block writer: records in strictly increasing (landed, version) order.
 * The caller appends with _add and takes the value with _finish, which
 * writes the header (u8 version, u32 LE count) in front.
 */
typedef struct ingest__catblock_w {
    ingest__buf out;  /* header placeholder, then records */
    uint32_t count;
    const char *prev; /* previous record's landed path (caller keeps it alive) */
    size_t prev_len;
    int64_t prev_mtime;
} ingest__catblock_w;

void ingest__catblock_w_init(ingest__catblock_w *w, ingest_ctx *ctx);
void ingest__catblock_w_reset(ingest__catblock_w *w);
void ingest__catblock_w_free(ingest__catblock_w *w);
int ingest__catblock_w_add(ingest__catblock_w *w, const ingest__catrec *r);
/* The value (header filled in); valid until the next reset. */
const uint8_t *ingest__catblock_w_finish(ingest__catblock_w *w, size_t *len);

/*
 * Block reader.  Records are decoded into two alternating slots, so the
 * record returned by one call stays valid through the next call, even
 * across blocks (ingest__catblock_r_reset keeps the slots): a listing
 * decides whether a record was replaced by looking at the one after it.
 */
typedef struct ingest__catblock_r {
    const uint8_t *base, *p, *end;
    uint32_t left, index;
    int slot;
    size_t len[2];
    int64_t prev_mtime;
    uint64_t prev_version;
    bool have_prev;
    char landed[2][INGEST__CAT_PATH_MAX + 1];
    char path[2][INGEST__CAT_PATH_MAX + 1];
    /* after INGEST_ECORRUPT */
    const char *err;
    size_t err_off;
} ingest__catblock_r;

/* Start reading block v[0..len): 0, or INGEST_ECORRUPT (err set). */
int ingest__catblock_r_reset(ingest__catblock_r *r, const uint8_t *v, size_t len);
/* Next record: 1 with *rec, 0 at the end (all bytes used), INGEST_ECORRUPT. */
int ingest__catblock_r_next(ingest__catblock_r *r, ingest__catrec *rec);

/* Feed value writer: header, then (landed, version) in increasing order. */
int ingest__catfeed_w_begin(ingest__buf *out, const char *device, const char *batch, int64_t landed_ns,
                            uint64_t nfiles);
int ingest__catfeed_w_add(ingest__buf *out, const char *prev, size_t prev_len, const char *landed,
                          size_t len, uint64_t version);

typedef struct ingest__catfeed_r {
    char device[INGEST__CAT_NAME_MAX + 1];
    char batch[INGEST__CAT_NAME_MAX + 1];
    int64_t landed_ns;
    uint64_t nfiles, index;
    const uint8_t *base, *p, *end;
    char landed[INGEST__CAT_PATH_MAX + 1];
    size_t landed_len;
    uint64_t version;
    const char *err;
    size_t err_off;
} ingest__catfeed_r;

/* Read a feed value's header: 0 or INGEST_ECORRUPT. */
int ingest__catfeed_r_begin(ingest__catfeed_r *r, const uint8_t *v, size_t len);
/* Next (landed, version) into r->landed/r->version: 1, 0 at the end, INGEST_ECORRUPT. */
int ingest__catfeed_r_next(ingest__catfeed_r *r);

/* A cursor string for (catalog id, batch number); out holds INGEST_CATALOG_CURSOR_MAX bytes. */
void ingest__cat_cursor_format(uint64_t id, uint64_t batch_no, char *out, size_t cap);

#endif
