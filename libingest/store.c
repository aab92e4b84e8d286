/* The LMDB state store: environment, meta record, transactions. */
#include "store.h"
#include "ingest/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <unistd.h>
#include <lmdb.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define STORE_DEFAULT_MAP (64ull << 30)
#define STORE_MIN_MAP (256ull << 20) /* the least map tried where the address space is short */
#define STORE_DEFAULT_TXN 1000u
#define STORE_MAX_DBS 32
#define STORE_PATH_MAX 4096
/* Deferred writes: arena block size, and writes per flush transaction
 * (bounds the dirty pages LMDB holds in memory while a flush runs). */
#define DEFER_BLOCK (1u << 20)
#define DEFER_TXN_WRITES 16384u
#define DEFER_KEY_MAX 511u
/* Flush once the arena holds this much (rewrites of one key add records). */
#define DEFER_BYTES_MAX (64u << 20)
#define DEFER_VAL_MAX (1u << 16)

/*
 * A deferred write: key and value follow the header in an arena block.
 * The latest write of a key wins; del marks a deletion.
 */
typedef struct drec {
    uint32_t vlen;
    uint16_t klen;
    uint8_t slot; /* index in defer.dbis: the table */
    uint8_t del;
    /* key bytes, then value bytes */
} drec;

typedef struct dblock {
    struct dblock *next;
    size_t used;
    uint8_t data[];
} dblock;

typedef struct dslot {
    uint64_t h;
    drec *r;
} dslot;

typedef struct defer_set {
    MDB_dbi dbis[STORE_MAX_DBS]; /* deferred tables, in flush order */
    unsigned ndbis;
    dslot *tab;       /* open addressing, power of two, at most half full */
    size_t cap, n;    /* slots, keys held */
    dblock *blocks;   /* newest first */
    size_t bytes;     /* arena bytes in use */
    size_t max;       /* flush past this many keys (opts.defer_max_writes) */
    size_t next_try;  /* keys at which an automatic flush is tried (after a failure: twice as many) */
    struct timespec since; /* the oldest unflushed write */
} defer_set;

struct ingest_store_s {
    ingest_ctx *ctx;
    char *dir;
    MDB_env *env;
    MDB_txn *wtxn;   /* the open write transaction, or NULL */
    MDB_txn *rtxn;   /* reusable read transaction (reset when idle), or NULL */
    int rdepth;      /* > 0 while rtxn is live (iteration in progress) */
    unsigned writes; /* writes in wtxn */
    unsigned reserved;
    unsigned txn_max;
    unsigned flags;
    bool created;
    MDB_dbi meta;
    defer_set df;
};

static int map_mdb(ingest_ctx *ctx, int rc, const char *dir, const char *what)
{
    int code;
    switch (rc) {
    case MDB_NOTFOUND: code = INGEST_ENOTFOUND; break;
    case MDB_MAP_FULL:
    case MDB_TXN_FULL:
    case MDB_DBS_FULL: code = INGEST_ENOSPC; break;
    case MDB_INVALID:
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_BAD_VALSIZE:
    case MDB_INCOMPATIBLE: code = INGEST_ECORRUPT; break;
    case MDB_VERSION_MISMATCH: code = INGEST_EVERSION; break;
    case MDB_READERS_FULL:
    case MDB_MAP_RESIZED: code = INGEST_EBUSY; break;
    case MDB_BAD_TXN:
    case MDB_BAD_RSLOT:
    case MDB_BAD_DBI: code = INGEST_EINVAL; break;
    case EACCES:
    case EROFS: code = INGEST_EIO; break;
    default: code = rc > 0 ? ingest__errno(rc) : INGEST_EIO; break;
    }
    return ingest__fail(ctx, code, "store %s: %s: %s", dir, what, mdb_strerror(rc));
}

/*
 * A commit that failed.  LMDB says EIO for a short write, which is how a
 * full filesystem (or quota) shows when a write gets part of its pages
 * out: with less than NEARLY_FULL left free to the store's user, that is
 * out of space (INGEST_ENOSPC), which callers treat as backpressure rather
 * than a broken disk.
 */
#define NEARLY_FULL (1u << 20)
static int map_commit(ingest_store *st, int rc, const char *what)
{
    struct statvfs v;
    if (rc == EIO && statvfs(st->dir, &v) == 0 &&
        (uint64_t)v.f_bavail * (v.f_frsize ? v.f_frsize : v.f_bsize) < NEARLY_FULL)
        return ingest__fail(st->ctx, INGEST_ENOSPC, "store %s: %s: a short write with the filesystem full", st->dir,
                            what);
    return map_mdb(st->ctx, rc, st->dir, what);
}

/* ---- deferred tables ---------------------------------------------------
 *
 * Writes to a deferred table are kept in memory (one record per key, the
 * latest write wins) and reach LMDB only when the set is flushed: in key
 * order, a few thousand writes per transaction.  Random keys (chunk ids)
 * then share leaf pages across many batches instead of rewriting most of
 * the tree at every commit.  Reads look in the set first.
 */

static uint64_t dhash(unsigned slot, const uint8_t *key, size_t klen)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)slot << 56) ^ klen;
    size_t i = 0;
    for (; i + 8 <= klen; i += 8) {
        uint64_t w;
        memcpy(&w, key + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    uint64_t t = 0;
    for (size_t j = 0; i < klen; i++, j++)
        t |= (uint64_t)key[i] << (8 * j);
    h = (h ^ t) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
}

static int dslot_of(const ingest_store *st, MDB_dbi db)
{
    for (unsigned i = 0; i < st->df.ndbis; i++)
        if (st->df.dbis[i] == db)
            return (int)i;
    return -1;
}

static const uint8_t *drec_key(const drec *r) { return (const uint8_t *)(r + 1); }
static const uint8_t *drec_val(const drec *r) { return drec_key(r) + r->klen; }

/* The slot holding (slot, key), or the empty slot where it goes. */
static size_t dprobe(const defer_set *d, unsigned slot, const uint8_t *key, size_t klen, uint64_t h)
{
    size_t i = (size_t)h & (d->cap - 1);
    for (;;) {
        const dslot *e = &d->tab[i];
        if (e->r == NULL)
            return i;
        if (e->h == h && e->r->slot == slot && e->r->klen == klen && memcmp(drec_key(e->r), key, klen) == 0)
            return i;
        i = (i + 1) & (d->cap - 1);
    }
}

static const drec *dfind(const ingest_store *st, int slot, const void *key, size_t klen)
{
    const defer_set *d = &st->df;
    if (d->n == 0 || klen > DEFER_KEY_MAX)
        return NULL;
    const uint64_t h = dhash((unsigned)slot, key, klen);
    return d->tab[dprobe(d, (unsigned)slot, key, klen, h)].r;
}

static void dreset(ingest_store *st)
{
    defer_set *d = &st->df;
    while (d->blocks != NULL) {
        dblock *nx = d->blocks->next;
        ingest__free(st->ctx, d->blocks);
        d->blocks = nx;
    }
    if (d->tab != NULL)
        memset(d->tab, 0, d->cap * sizeof(*d->tab));
    d->n = 0;
    d->bytes = 0;
}

static int dgrow(ingest_store *st)
{
    defer_set *d = &st->df;
    const size_t ncap = d->cap ? d->cap * 2 : 1024;
    dslot *nt = ingest__calloc(st->ctx, ncap, sizeof(*nt));
    if (nt == NULL)
        return ingest__fail(st->ctx, INGEST_ENOMEM, "store %s: out of memory (deferred writes)", st->dir);
    for (size_t i = 0; i < d->cap; i++) {
        const dslot *e = &d->tab[i];
        if (e->r == NULL)
            continue;
        size_t j = (size_t)e->h & (ncap - 1);
        while (nt[j].r != NULL)
            j = (j + 1) & (ncap - 1);
        nt[j] = *e;
    }
    ingest__free(st->ctx, d->tab);
    d->tab = nt;
    d->cap = ncap;
    return 0;
}

static int dput(ingest_store *st, int slot, const void *key, size_t klen, const void *val, size_t vlen, bool del)
{
    defer_set *d = &st->df;
    if (st->flags & INGEST_STORE_RDONLY)
        return ingest__fail(st->ctx, INGEST_EINVAL, "store %s: opened read-only", st->dir);
    if (klen == 0 || klen > DEFER_KEY_MAX || vlen > DEFER_VAL_MAX)
        return ingest__fail(st->ctx, INGEST_EINVAL, "store %s: deferred write: key of %zu or value of %zu bytes",
                            st->dir, klen, vlen);
    /* flushes keep failing (a full disk): refuse more rather than grow without bound */
    if (d->n >= 4 * d->max || d->bytes >= 4 * (size_t)DEFER_BYTES_MAX)
        return ingest__fail(st->ctx, INGEST_ENOSPC,
                            "store %s: %zu deferred writes (%zu bytes) wait and could not be flushed", st->dir, d->n,
                            d->bytes);
    if ((d->n + 1) * 2 > d->cap)
        INGEST__FORWARD(dgrow(st));
    const size_t need = (sizeof(drec) + klen + vlen + 7) & ~(size_t)7;
    if (d->blocks == NULL || d->blocks->used + need > DEFER_BLOCK) {
        dblock *b = ingest__malloc(st->ctx, sizeof(dblock) + DEFER_BLOCK);
        if (b == NULL)
            return ingest__fail(st->ctx, INGEST_ENOMEM, "store %s: out of memory (deferred writes)", st->dir);
        b->next = d->blocks;
        b->used = 0;
        d->blocks = b;
    }
    drec *r = (drec *)(void *)(d->blocks->data + d->blocks->used);
    d->blocks->used += need;
    d->bytes += need;
    r->vlen = (uint32_t)vlen;
    r->klen = (uint16_t)klen;
    r->slot = (uint8_t)slot;
    r->del = del;
    memcpy(r + 1, key, klen);
    if (vlen > 0)
        memcpy((uint8_t *)(r + 1) + klen, val, vlen);
    const uint64_t h = dhash((unsigned)slot, key, klen);
    const size_t i = dprobe(d, (unsigned)slot, key, klen, h);
    if (d->tab[i].r == NULL) {
        if (d->n == 0)
            clock_gettime(CLOCK_MONOTONIC, &d->since);
        d->n++;
        d->tab[i].h = h;
    }
    d->tab[i].r = r; /* a replaced record stays in the arena until the flush */
    if (d->n >= d->next_try || d->bytes >= DEFER_BYTES_MAX) {
        const int rc = ingest_store_flush(st);
        if (rc < 0) /* the write is kept; the next automatic try waits for twice as many keys */
            d->next_try = 2 * d->n;
        return rc;
    }
    return 0;
}

int ingest__store_defer(ingest_store *st, ingest__dbi db)
{
    if (st->df.max == 0 || (st->flags & INGEST_STORE_RDONLY) || dslot_of(st, db) >= 0)
        return 0;
    if (st->df.n > 0)
        return ingest__fail(st->ctx, INGEST_EINVAL, "store %s: table deferred while writes are pending", st->dir);
    if (st->df.ndbis >= STORE_MAX_DBS)
        return ingest__fail(st->ctx, INGEST_EINVAL, "store %s: too many deferred tables", st->dir);
    st->df.dbis[st->df.ndbis++] = db;
    return 0;
}

size_t ingest_store_deferred(const ingest_store *st, double *age_seconds)
{
    if (age_seconds != NULL)
        *age_seconds = 0;
    if (st == NULL || st->df.n == 0)
        return 0;
    if (age_seconds != NULL) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        *age_seconds = (double)(now.tv_sec - st->df.since.tv_sec) + (now.tv_nsec - st->df.since.tv_nsec) / 1e9;
    }
    return st->df.n;
}

/* LMDB's default key order (memcmp, then the shorter first), table by table. */
static int drec_cmp(const drec *x, const drec *y)
{
    if (x->slot != y->slot)
        return x->slot < y->slot ? -1 : 1;
    const size_t m = x->klen < y->klen ? x->klen : y->klen;
    const int c = memcmp(drec_key(x), drec_key(y), m);
    if (c != 0)
        return c;
    return x->klen < y->klen ? -1 : x->klen > y->klen;
}

/*
 * A record to sort, with a 64-bit prefix of its order: the table's slot in
 * the top byte, then 7 key bytes big-endian (zeros past the key's end),
 * taken after the bytes all keys of the table share (a device's path
 * prefix, for instance).  Unequal prefixes order records as their keys do;
 * equal ones are compared in full.  Most comparisons then read no record.
 */
typedef struct dsort {
    uint64_t pre;
    const drec *r;
} dsort;

static int dsort_cmp(const void *a, const void *b)
{
    const dsort *x = a, *y = b;
    if (x->pre != y->pre)
        return x->pre < y->pre ? -1 : 1;
    return drec_cmp(x->r, y->r);
}

/* Fill v (room for n) from the set, each with its prefix (dsort); returns how many. */
static size_t dsort_fill(const defer_set *d, dsort *v, size_t n)
{
    const drec *first[STORE_MAX_DBS] = { NULL };
    size_t common[STORE_MAX_DBS] = { 0 };
    size_t k = 0;
    for (size_t i = 0; i < d->cap && k < n; i++) {
        const drec *r = d->tab[i].r;
        if (r == NULL)
            continue;
        v[k++].r = r;
        const drec *f = first[r->slot];
        if (f == NULL) {
            first[r->slot] = r;
            common[r->slot] = r->klen;
            continue;
        }
        size_t c = common[r->slot] < r->klen ? common[r->slot] : r->klen;
        const uint8_t *p = drec_key(r), *q = drec_key(f);
        size_t j = 0;
        while (j < c && p[j] == q[j])
            j++;
        common[r->slot] = j;
    }
    for (size_t i = 0; i < k; i++) {
        const drec *r = v[i].r;
        const size_t at = common[r->slot];
        const uint8_t *p = drec_key(r) + at;
        const size_t len = r->klen - at;
        uint64_t pre = (uint64_t)r->slot << 56;
        for (size_t j = 0; j < 7; j++)
            pre |= (uint64_t)(j < len ? p[j] : 0) << (8 * (6 - j));
        v[i].pre = pre;
    }
    return k;
}

static int commit_txn(ingest_store *st);

int ingest_store_flush(ingest_store *st)
{
    if (st == NULL)
        return INGEST_EINVAL;
    INGEST__FORWARD(commit_txn(st));
    defer_set *d = &st->df;
    if (d->n == 0)
        return 0;
    if (st->rdepth > 0)
        return ingest__fail(st->ctx, INGEST_EINVAL, "store %s: flush during iteration", st->dir);
    dsort *v = ingest__malloc(st->ctx, d->n * sizeof(*v));
    if (v == NULL)
        return ingest__fail(st->ctx, INGEST_ENOMEM, "store %s: out of memory (flush)", st->dir);
    const size_t n = dsort_fill(d, v, d->n);
    qsort(v, n, sizeof(*v), dsort_cmp);
    /* On failure the set stays whole: a later flush writes it again (puts
     * of the same values, deletions of absent keys are harmless). */
    int ret = 0;
    for (size_t i = 0; i < n && ret == 0;) {
        MDB_txn *txn = NULL;
        int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
        if (rc != 0) {
            ret = map_mdb(st->ctx, rc, st->dir, "begin flush transaction");
            break;
        }
        for (unsigned k = 0; k < DEFER_TXN_WRITES && i < n && rc == 0; k++, i++) {
            const drec *r = v[i].r;
            MDB_val key = { r->klen, (void *)drec_key(r) }, val = { r->vlen, (void *)drec_val(r) };
            const MDB_dbi db = d->dbis[r->slot];
            rc = r->del ? mdb_del(txn, db, &key, NULL) : mdb_put(txn, db, &key, &val, 0);
            if (rc == MDB_NOTFOUND && r->del)
                rc = 0;
        }
        if (rc != 0) {
            mdb_txn_abort(txn);
            ret = map_mdb(st->ctx, rc, st->dir, "flush");
        } else if ((rc = mdb_txn_commit(txn)) != 0) {
            ret = map_commit(st, rc, "flush commit");
        }
    }
    ingest__free(st->ctx, v);
    if (ret == 0) {
        dreset(st);
        d->next_try = d->max;
    }
    return ret;
}

ingest_ctx *ingest__store_ctx(const ingest_store *st) { return st->ctx; }
bool ingest__store_readonly(const ingest_store *st) { return (st->flags & INGEST_STORE_RDONLY) != 0; }
bool ingest__store_created(const ingest_store *st) { return st->created; }

/* Begin the read transaction for one operation (or join the live one). */
static int read_begin(ingest_store *st, MDB_txn **txn)
{
    if (st->wtxn != NULL) {
        *txn = st->wtxn;
        return 0;
    }
    if (st->rdepth > 0) {
        *txn = st->rtxn;
        return 0;
    }
    int rc;
    if (st->rtxn == NULL)
        rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &st->rtxn);
    else
        rc = mdb_txn_renew(st->rtxn);
    if (rc != 0) {
        if (st->rtxn != NULL) {
            mdb_txn_abort(st->rtxn);
            st->rtxn = NULL;
        }
        return map_mdb(st->ctx, rc, st->dir, "begin read transaction");
    }
    *txn = st->rtxn;
    return 0;
}

static void read_end(ingest_store *st, MDB_txn *txn)
{
    if (txn == st->rtxn && st->rdepth == 0)
        mdb_txn_reset(st->rtxn);
}

static int txn_open(ingest_store *st)
{
    if (st->flags & INGEST_STORE_RDONLY)
        return ingest__fail(st->ctx, INGEST_EINVAL, "store %s: opened read-only", st->dir);
    if (st->rdepth > 0)
        return ingest__fail(st->ctx, INGEST_EINVAL, "store %s: write during iteration", st->dir);
    if (st->wtxn != NULL)
        return 0;
    const int rc = mdb_txn_begin(st->env, NULL, 0, &st->wtxn);
    if (rc != 0) {
        st->wtxn = NULL;
        return map_mdb(st->ctx, rc, st->dir, "begin write transaction");
    }
    st->writes = 0;
    st->reserved = 0;
    return 0;
}

void ingest__store_abort(ingest_store *st)
{
    if (st->wtxn != NULL)
        mdb_txn_abort(st->wtxn);
    st->wtxn = NULL;
    st->writes = 0;
    st->reserved = 0;
}

static int commit_txn(ingest_store *st)
{
    if (st->wtxn == NULL)
        return 0;
    const int rc = mdb_txn_commit(st->wtxn);
    st->wtxn = NULL;
    st->writes = 0;
    st->reserved = 0;
    if (rc != 0)
        return map_commit(st, rc, "commit");
    return 0;
}

int ingest_store_commit(ingest_store *st)
{
    if (st == NULL)
        return INGEST_EINVAL;
    return commit_txn(st);
}

int ingest__store_set_sync(ingest_store *st, bool sync)
{
    if (st->flags & (INGEST_STORE_NOSYNC | INGEST_STORE_RDONLY))
        return 0;
    int rc = mdb_env_set_flags(st->env, MDB_NOSYNC, sync ? 0 : 1);
    if (rc == 0 && sync)
        rc = mdb_env_sync(st->env, 1);
    if (rc != 0)
        return map_mdb(st->ctx, rc, st->dir, "sync");
    return 0;
}

int ingest__store_write_begin(ingest_store *st, unsigned n)
{
    if (st->wtxn != NULL && st->writes > 0 && st->writes + n > st->txn_max)
        INGEST__FORWARD(ingest_store_commit(st));
    INGEST__FORWARD(txn_open(st));
    st->reserved = n;
    return 0;
}

/* Account for one write: inside a reserved group, or on its own. */
static int write_one(ingest_store *st)
{
    if (st->reserved > 0 && st->wtxn != NULL) {
        st->reserved--;
    } else {
        INGEST__FORWARD(ingest__store_write_begin(st, 1));
        st->reserved = 0;
    }
    st->writes++;
    return 0;
}

int ingest__store_put(ingest_store *st, ingest__dbi db, const void *key, size_t klen, const void *val,
                      size_t vlen)
{
    const int slot = dslot_of(st, db);
    if (slot >= 0)
        return dput(st, slot, key, klen, val, vlen, false);
    INGEST__FORWARD(write_one(st));
    MDB_val k = { klen, (void *)key }, v = { vlen, (void *)val };
    const int rc = mdb_put(st->wtxn, db, &k, &v, 0);
    if (rc != 0) {
        ingest__store_abort(st);
        return map_mdb(st->ctx, rc, st->dir, "put");
    }
    return 0;
}

int ingest__store_del(ingest_store *st, ingest__dbi db, const void *key, size_t klen)
{
    const int slot = dslot_of(st, db);
    if (slot >= 0) {
        const drec *r = dfind(st, slot, key, klen);
        if (r == NULL) {
            uint8_t one;
            size_t vl = 0;
            INGEST__FORWARD(ingest__store_get(st, db, key, klen, &one, 0, &vl)); /* ENOTFOUND: nothing to delete */
        } else if (r->del) {
            return INGEST_ENOTFOUND;
        }
        return dput(st, slot, key, klen, NULL, 0, true);
    }
    INGEST__FORWARD(write_one(st));
    MDB_val k = { klen, (void *)key };
    const int rc = mdb_del(st->wtxn, db, &k, NULL);
    if (rc == MDB_NOTFOUND)
        return INGEST_ENOTFOUND;
    if (rc != 0) {
        ingest__store_abort(st);
        return map_mdb(st->ctx, rc, st->dir, "del");
    }
    return 0;
}

int ingest__store_drop(ingest_store *st, ingest__dbi db)
{
    if (dslot_of(st, db) >= 0 && st->df.n > 0)
        INGEST__FORWARD(ingest_store_flush(st));
    INGEST__FORWARD(write_one(st));
    const int rc = mdb_drop(st->wtxn, db, 0);
    if (rc != 0) {
        ingest__store_abort(st);
        return map_mdb(st->ctx, rc, st->dir, "drop");
    }
    return 0;
}

int ingest__store_get(ingest_store *st, ingest__dbi db, const void *key, size_t klen, void *buf, size_t cap,
                      size_t *vlen)
{
    const int slot = dslot_of(st, db);
    if (slot >= 0) {
        const drec *r = dfind(st, slot, key, klen);
        if (r != NULL) {
            if (r->del)
                return INGEST_ENOTFOUND;
            memcpy(buf, drec_val(r), r->vlen < cap ? r->vlen : cap);
            *vlen = r->vlen;
            return 0;
        }
    }
    MDB_txn *txn;
    INGEST__FORWARD(read_begin(st, &txn));
    MDB_val k = { klen, (void *)key }, v = { 0, NULL };
    const int rc = mdb_get(txn, db, &k, &v);
    int ret = 0;
    if (rc == MDB_NOTFOUND) {
        ret = INGEST_ENOTFOUND;
    } else if (rc != 0) {
        ret = map_mdb(st->ctx, rc, st->dir, "get");
    } else {
        memcpy(buf, v.mv_data, v.mv_size < cap ? v.mv_size : cap);
        *vlen = v.mv_size;
    }
    read_end(st, txn);
    return ret;
}

int ingest__store_count(ingest_store *st, ingest__dbi db, uint64_t *n)
{
    if (dslot_of(st, db) >= 0 && st->df.n > 0)
        INGEST__FORWARD(ingest_store_flush(st));
    MDB_txn *txn;
    INGEST__FORWARD(read_begin(st, &txn));
    MDB_stat ms;
    const int rc = mdb_stat(txn, db, &ms);
    read_end(st, txn);
    if (rc != 0)
        return map_mdb(st->ctx, rc, st->dir, "stat");
    *n = ms.ms_entries;
    return 0;
}

int ingest__store_iter(ingest_store *st, ingest__dbi db, const void *from, size_t fromlen, bool reverse,
                       ingest__store_iter_fn fn, void *ud)
{
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    int ret = 0;
    if (dslot_of(st, db) >= 0 && st->df.n > 0)
        INGEST__FORWARD(ingest_store_flush(st));
    INGEST__FORWARD(read_begin(st, &txn));
    if (txn == st->rtxn)
        st->rdepth++;
    int rc = mdb_cursor_open(txn, db, &cur);
    if (rc != 0) {
        ret = map_mdb(st->ctx, rc, st->dir, "cursor");
        cur = NULL;
        goto out;
    }
    MDB_val k = { fromlen, (void *)from }, v = { 0, NULL };
    if (from == NULL) {
        rc = mdb_cursor_get(cur, &k, &v, reverse ? MDB_LAST : MDB_FIRST);
    } else {
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        if (reverse) {
            if (rc == MDB_NOTFOUND) {
                rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
            } else if (rc == 0) {
                const size_t m = k.mv_size < fromlen ? k.mv_size : fromlen;
                const int c = memcmp(k.mv_data, from, m);
                if (c > 0 || (c == 0 && k.mv_size > fromlen))
                    rc = mdb_cursor_get(cur, &k, &v, MDB_PREV);
            }
        }
    }
    while (rc == 0) {
        const int r = fn(ud, k.mv_data, k.mv_size, v.mv_data, v.mv_size);
        if (r < 0) {
            ret = r;
            goto out;
        }
        if (r > 0)
            goto out;
        rc = mdb_cursor_get(cur, &k, &v, reverse ? MDB_PREV : MDB_NEXT);
    }
    if (rc != MDB_NOTFOUND)
        ret = map_mdb(st->ctx, rc, st->dir, "cursor get");
out:
    if (cur != NULL)
        mdb_cursor_close(cur);
    if (txn == st->rtxn) {
        st->rdepth--;
        read_end(st, txn);
    }
    return ret;
}

int ingest__store_db(ingest_store *st, const char *name, ingest__dbi *out)
{
    const bool ro = (st->flags & INGEST_STORE_RDONLY) != 0;
    MDB_txn *txn = NULL;
    int rc;
    /* A table is opened in a transaction of its own, committed so that the
     * handle is valid for every later transaction. */
    if (!ro)
        INGEST__FORWARD(ingest_store_commit(st));
    if (st->rdepth > 0)
        return ingest__fail(st->ctx, INGEST_EINVAL, "store %s: open table during iteration", st->dir);
    rc = mdb_txn_begin(st->env, NULL, ro ? MDB_RDONLY : 0, &txn);
    if (rc != 0)
        return map_mdb(st->ctx, rc, st->dir, "begin transaction");
    MDB_dbi dbi;
    rc = mdb_dbi_open(txn, name, ro ? 0 : MDB_CREATE, &dbi);
    if (rc != 0) {
        mdb_txn_abort(txn);
        if (rc == MDB_NOTFOUND)
            return ingest__fail(st->ctx, INGEST_ECORRUPT, "store %s: table %s missing", st->dir, name);
        return map_mdb(st->ctx, rc, st->dir, name);
    }
    rc = mdb_txn_commit(txn);
    if (rc != 0)
        return map_mdb(st->ctx, rc, st->dir, name);
    *out = dbi;
    return 0;
}

/*
 * 1 when the environment holds the meta table and nothing else, all
 * empty: a store whose creation was cut short (killed between the meta
 * table's commit and the format record's).
 */
static int store_blank(ingest_store *st)
{
    MDB_txn *txn = NULL;
    MDB_dbi main_dbi;
    MDB_stat ms, mm;
    if (mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn) != 0)
        return 0;
    const int blank = mdb_dbi_open(txn, NULL, 0, &main_dbi) == 0 && mdb_stat(txn, main_dbi, &ms) == 0 &&
                      mdb_stat(txn, st->meta, &mm) == 0 && ms.ms_entries == 1 && mm.ms_entries == 0;
    mdb_txn_abort(txn);
    return blank;
}

static int check_meta(ingest_store *st)
{
    uint8_t buf[8];
    size_t len = 0;
    if (st->created) {
        ingest__put_u32(buf, INGEST_STORE_FORMAT);
        INGEST__FORWARD(ingest__store_put(st, st->meta, INGEST__META_FORMAT, strlen(INGEST__META_FORMAT), buf, 4));
        return ingest_store_commit(st);
    }
    const int rc = ingest__store_get(st, st->meta, INGEST__META_FORMAT, strlen(INGEST__META_FORMAT), buf,
                                     sizeof(buf), &len);
    if (rc == INGEST_ENOTFOUND && store_blank(st)) {
        /* Its creation was interrupted before the format record: nothing to lose, finish it. */
        ingest__put_u32(buf, INGEST_STORE_FORMAT);
        INGEST__FORWARD(ingest__store_put(st, st->meta, INGEST__META_FORMAT, strlen(INGEST__META_FORMAT), buf, 4));
        return ingest_store_commit(st);
    }
    if (rc == INGEST_ENOTFOUND)
        return ingest__fail(st->ctx, INGEST_ECORRUPT, "store %s: meta: format record missing", st->dir);
    INGEST__FORWARD(rc);
    if (len != 4)
        return ingest__fail(st->ctx, INGEST_ECORRUPT, "store %s: meta: format record of %zu bytes, want 4",
                            st->dir, len);
    const uint32_t v = ingest__get_u32(buf);
    if (v != INGEST_STORE_FORMAT)
        return ingest__fail(st->ctx, INGEST_EVERSION, "store %s: format %u, this library reads %u", st->dir,
                            (unsigned)v, (unsigned)INGEST_STORE_FORMAT);
    return 0;
}


/*
 * A new store's names durable: LMDB fsyncs data.mdb's contents at each
 * commit but never the directory that names it, nor the directory above
 * (which names the store's directory, perhaps made just now).  Without
 * this a power cut after the first commits could take the whole store.
 */
static int sync_new_dir(ingest_ctx *ctx, const char *dir)
{
    char parent[PATH_MAX];
    snprintf(parent, sizeof(parent), "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash == parent)
        slash[1] = '\0';
    else if (slash != NULL)
        *slash = '\0';
    else
        snprintf(parent, sizeof(parent), ".");
    const char *both[2] = { dir, parent };
    for (int i = 0; i < 2; i++) {
        const int fd = open(both[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || fsync(fd) != 0) {
            const int e = errno;
            if (fd >= 0)
                close(fd);
            return ingest__fail(ctx, ingest__errno(e), "store %s: fsync of %s: %s", dir, both[i], strerror(e));
        }
        close(fd);
    }
    return 0;
}

int ingest_store_open(ingest_ctx *ctx, const char *dir, const ingest_store_opts *opts, ingest_store **out)
{
    ingest_store *st = NULL;
    char path[STORE_PATH_MAX];
    int ret, rc;
    struct stat sb;

    if (out == NULL)
        return INGEST_EINVAL;
    *out = NULL;
    if (ctx == NULL || dir == NULL || dir[0] == '\0')
        return ingest__fail(ctx, INGEST_EINVAL, "store: no directory");
    if ((size_t)snprintf(path, sizeof(path), "%s/data.mdb", dir) >= sizeof(path))
        return ingest__fail(ctx, INGEST_ETOOBIG, "store: directory name too long");

    st = ingest__calloc(ctx, 1, sizeof(*st));
    if (st == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "store: out of memory");
    st->ctx = ctx;
    st->txn_max = opts != NULL && opts->txn_max_writes > 0 ? opts->txn_max_writes : STORE_DEFAULT_TXN;
    st->flags = opts != NULL ? opts->flags : 0;
    st->df.max = opts != NULL ? opts->defer_max_writes : 0;
    st->df.next_try = st->df.max;
    if (st->flags & INGEST_STORE_RDONLY)
        st->flags |= INGEST_STORE_NOCREATE;
    const uint64_t map = opts != NULL && opts->map_size > 0 ? opts->map_size : STORE_DEFAULT_MAP;
    st->dir = ingest__strdup(ctx, dir);
    if (st->dir == NULL) {
        ret = ingest__fail(ctx, INGEST_ENOMEM, "store: out of memory");
        goto fail;
    }

    if (stat(path, &sb) != 0) {
        const int e = errno;
        if (e != ENOENT) {
            ret = ingest__fail(ctx, ingest__errno(e), "store %s: stat data.mdb: %s", dir, strerror(e));
            goto fail;
        }
        st->created = true;
    } else {
        st->created = sb.st_size == 0;
    }
    if (st->created && (st->flags & INGEST_STORE_NOCREATE)) {
        ret = ingest__fail(ctx, INGEST_ENOTFOUND, "store %s: no store there", dir);
        goto fail;
    }
    if (st->created && mkdir(dir, 0700) != 0 && errno != EEXIST) {
        const int e = errno;
        ret = ingest__fail(ctx, ingest__errno(e), "store %s: mkdir: %s", dir, strerror(e));
        goto fail;
    }

    /* The map is address space, not memory; where less is allowed (ulimit -v, valgrind) mmap fails, and the
     * map is halved down to STORE_MIN_MAP (LMDB keeps it at least the file's size) */
    uint64_t m = map;
    for (;;) {
        rc = mdb_env_create(&st->env);
        if (rc != 0) {
            st->env = NULL;
            ret = map_mdb(ctx, rc, dir, "env create");
            goto fail;
        }
        if ((rc = mdb_env_set_mapsize(st->env, (size_t)m)) != 0 ||
            (rc = mdb_env_set_maxdbs(st->env, STORE_MAX_DBS)) != 0) {
            ret = map_mdb(ctx, rc, dir, "env setup");
            goto fail;
        }
        rc = mdb_env_open(st->env, dir,
                          MDB_NOTLS | ((st->flags & INGEST_STORE_RDONLY) ? MDB_RDONLY : 0) |
                              ((st->flags & INGEST_STORE_NOSYNC) ? MDB_NOSYNC : 0),
                          0600);
        if (rc == 0 || (rc != ENOMEM && rc != EINVAL) || m / 2 < STORE_MIN_MAP)
            break;
        mdb_env_close(st->env);
        st->env = NULL;
        m /= 2;
    }
    if (rc == 0 && m < map)
        ingest__log(ctx, INGEST_LOG_WARN, "store %s: the address space allows a map of %llu MiB, not %llu (ulimit -v?): "
                    "the store can grow to that", dir, (unsigned long long)(m >> 20), (unsigned long long)(map >> 20));
    if (rc != 0) {
        ret = map_mdb(ctx, rc, dir, "open environment");
        /* LMDB says EINVAL for files it cannot make sense of. */
        if (ret == INGEST_EINVAL)
            ret = ingest__fail(ctx, INGEST_ECORRUPT, "store %s: open environment: %s", dir, mdb_strerror(rc));
        goto fail;
    }
    if (st->created && !(st->flags & (INGEST_STORE_RDONLY | INGEST_STORE_NOSYNC)) &&
        (ret = sync_new_dir(ctx, dir)) < 0)
        goto fail;
    if (!st->created) {
        /* An existing environment must have the meta table: without it,
         * this is not a store of ours or it was damaged. */
        MDB_txn *txn = NULL;
        rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
        if (rc == 0) {
            rc = mdb_dbi_open(txn, "meta", 0, &st->meta);
            mdb_txn_abort(txn);
            if (rc == MDB_NOTFOUND) {
                ret = ingest__fail(ctx, INGEST_ECORRUPT, "store %s: meta table missing", dir);
                goto fail;
            }
        }
        if (rc != 0) {
            ret = map_mdb(ctx, rc, dir, "meta table");
            goto fail;
        }
    }
    if ((ret = ingest__store_db(st, "meta", &st->meta)) < 0)
        goto fail;
    if ((ret = check_meta(st)) < 0)
        goto fail;
    *out = st;
    return 0;
fail:
    ingest_store_close(st);
    return ret;
}

void ingest_store_close(ingest_store *st)
{
    if (st == NULL)
        return;
    ingest_ctx *const ctx = st->ctx;
    if (st->env != NULL) {
        if (st->wtxn != NULL || st->df.n > 0)
            (void)ingest_store_flush(st);
        if (st->rtxn != NULL)
            mdb_txn_abort(st->rtxn);
        mdb_env_close(st->env);
    }
    dreset(st);
    ingest__free(ctx, st->df.tab);
    ingest__free(ctx, st->dir);
    ingest__free(ctx, st);
}

int ingest_store_wipe(ingest_ctx *ctx, const char *dir)
{
    static const char *const names[] = { "data.mdb", "lock.mdb" };
    char path[STORE_PATH_MAX];
    if (dir == NULL || dir[0] == '\0')
        return ingest__fail(ctx, INGEST_EINVAL, "store: no directory");
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, names[i]) >= sizeof(path))
            return ingest__fail(ctx, INGEST_ETOOBIG, "store: directory name too long");
        if (unlink(path) != 0 && errno != ENOENT) {
            const int e = errno;
            return ingest__fail(ctx, ingest__errno(e), "store %s: unlink %s: %s", dir, names[i], strerror(e));
        }
    }
    return 0;
}

static size_t hashed_key(const char *path, size_t n, uint8_t key[INGEST__PATH_KEY_MAX])
{
    memcpy(key, path, 400);
    key[400] = 0xff;
    /* Keyed BLAKE2b-256 with the all-zero key (chunk id format 1): part of the store format, not a chunk id. */
    static const uint8_t zero_key[INGEST_KEY_BYTES] = { 0 };
    crypto_generichash(key + 401, INGEST_ID_BYTES, (const unsigned char *)path, n, zero_key, sizeof(zero_key));
    return 401 + INGEST_ID_BYTES;
}

size_t ingest__path_key(const char *path, uint8_t key[INGEST__PATH_KEY_MAX])
{
    const size_t n = strlen(path);
    if (n <= 440) {
        memcpy(key, path, n);
        return n;
    }
    return hashed_key(path, n, key);
}

size_t ingest__landed_key(const char *path, uint8_t key[INGEST__PATH_KEY_MAX])
{
    const size_t n = strlen(path);
    if (n <= 511) {
        memcpy(key, path, n);
        return n;
    }
    return hashed_key(path, n, key);
}

/* ---- pruning path-keyed tables ------------------------------------------ */

#define PRUNE_ROUND 256

typedef struct prune_ud {
    int (*gone)(void *ud, const char *path);
    void *ud;
    uint8_t *keys;        /* PRUNE_ROUND keys of INGEST__PATH_KEY_MAX bytes */
    size_t klen[PRUNE_ROUND];
    size_t n;
    uint8_t last[INGEST__PATH_KEY_MAX]; /* the last key looked at: the next round starts after it */
    size_t lastlen;
    int have_last, full;
    int err;
} prune_ud;

static int prune_cb(void *ud, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    (void)val;
    (void)vlen;
    prune_ud *p = ud;
    if (p->have_last && klen == p->lastlen && memcmp(key, p->last, klen) == 0)
        return 0; /* where the previous round stopped */
    if (p->n == PRUNE_ROUND) {
        p->full = 1;
        return 1;
    }
    memcpy(p->last, key, klen);
    p->lastlen = klen;
    p->have_last = 1;
    /* a hashed key (ingest__path_key) or one that is no path: kept */
    if (klen == 0 || klen > 440 || (klen == 401 + INGEST_ID_BYTES && key[400] == 0xff) || memchr(key, 0, klen))
        return 0;
    char path[INGEST__PATH_KEY_MAX + 1];
    memcpy(path, key, klen);
    path[klen] = '\0';
    const int g = p->gone(p->ud, path);
    if (g < 0) {
        p->err = g;
        return g;
    }
    if (g > 0) {
        memcpy(p->keys + p->n * INGEST__PATH_KEY_MAX, key, klen);
        p->klen[p->n++] = klen;
    }
    return 0;
}

int ingest__store_prune_paths(ingest_store *st, ingest__dbi db, int (*gone)(void *ud, const char *path), void *ud,
                              uint64_t *removed)
{
    if (removed != NULL)
        *removed = 0;
    prune_ud *p = ingest__calloc(st->ctx, 1, sizeof(*p));
    uint8_t *keys = ingest__malloc(st->ctx, (size_t)PRUNE_ROUND * INGEST__PATH_KEY_MAX);
    int rc = 0;
    if (p == NULL || keys == NULL) {
        rc = ingest__fail(st->ctx, INGEST_ENOMEM, "store: out of memory");
        goto out;
    }
    p->gone = gone;
    p->ud = ud;
    p->keys = keys;
    for (;;) {
        p->n = 0;
        p->full = 0;
        rc = ingest__store_iter(st, db, p->have_last ? p->last : NULL, p->have_last ? p->lastlen : 0, false,
                                prune_cb, p);
        if (rc < 0 || p->err < 0) {
            rc = rc < 0 ? rc : p->err;
            break;
        }
        if (p->n > 0) {
            rc = ingest__store_write_begin(st, (unsigned)p->n);
            for (size_t i = 0; i < p->n && rc == 0; i++) {
                rc = ingest__store_del(st, db, keys + i * INGEST__PATH_KEY_MAX, p->klen[i]);
                if (rc == INGEST_ENOTFOUND)
                    rc = 0;
            }
            if (rc == 0)
                rc = ingest_store_commit(st);
            if (rc < 0)
                break;
            if (removed != NULL)
                *removed += p->n;
        }
        if (!p->full)
            break;
    }
out:
    ingest__free(st->ctx, keys);
    ingest__free(st->ctx, p);
    return rc;
}
