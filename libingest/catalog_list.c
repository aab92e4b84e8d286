/* The catalog's readers: listing and the feed (include/ingest/catalog.h). */
#include "catalog_int.h"

#include <stdio.h>
#include <string.h>

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

/* The batch record of batch_no (cached): 0, or INGEST_ECORRUPT when absent or malformed. */
int ingest__cat_batch_get(ingest_catalog *cat, MDB_txn *txn, uint64_t batch_no, const ingest__cat_batch **out)
{
    ingest__cat_batch *const b = &cat->bcache[batch_no % INGEST__CAT_BCACHE];
    if (b->batch_no == batch_no) {
        *out = b;
        return 0;
    }
    uint8_t kb[8];
    put_be64(kb, batch_no);
    MDB_val k = { 8, kb }, v;
    const int rc = mdb_get(txn, cat->feed, &k, &v);
    if (rc == MDB_NOTFOUND)
        return ingest__fail(cat->ctx, INGEST_ECORRUPT, "catalog %s: a file names batch %llu, which has no record",
                            cat->dir, (unsigned long long)batch_no);
    if (rc != 0)
        return ingest__cat_mdb(cat, rc, "read batch record");
    ingest__catfeed_r *const fr = cat->fr;
    if (ingest__catfeed_r_begin(fr, v.mv_data, v.mv_size) < 0)
        return ingest__cat_feed_bad(cat, batch_no, fr);
    memcpy(b->device, fr->device, sizeof(b->device));
    memcpy(b->batch, fr->batch, sizeof(b->batch));
    b->landed_ns = fr->landed_ns;
    b->batch_no = batch_no;
    *out = b;
    return 0;
}

static bool same_path(const ingest__catrec *a, const ingest__catrec *b)
{
    return a->landed_len == b->landed_len && memcmp(a->landed, b->landed, a->landed_len) == 0;
}

static void fill_entry(ingest_catalog_entry *e, const ingest__catrec *r)
{
    e->path = r->path;
    e->path_len = r->path_len;
    e->landed = r->landed;
    e->landed_len = r->landed_len;
    e->size = r->size;
    e->mtime_ns = r->mtime_ns;
    e->mode = r->mode;
    e->version = r->version;
    memcpy(e->hash, r->hash, INGEST_ID_BYTES);
    e->batch_no = r->batch_no;
    e->device = e->batch = NULL;
    e->landed_ns = 0;
}

/* Whether batch b passes f's device and time bounds. */
static bool batch_passes(const ingest_catalog_filter *f, const char *device, int64_t landed_ns)
{
    if (f == NULL)
        return true;
    if (f->device != NULL && strcmp(f->device, device) != 0)
        return false;
    if (f->since_ns != 0 && landed_ns < f->since_ns)
        return false;
    if (f->until_ns != 0 && landed_ns >= f->until_ns)
        return false;
    return true;
}

typedef struct list_state {
    ingest_catalog *cat;
    MDB_txn *txn;
    const ingest_catalog_filter *f;
    bool need_batch, all_versions;
    ingest_catalog_fn fn;
    void *ud;
} list_state;

/* Pass r on (or not); 0 go on, 1 stop, < 0 fail. */
static int emit(list_state *ls, const ingest__catrec *r, bool replaced)
{
    if (replaced && !ls->all_versions)
        return 0;
    ingest_catalog_entry e;
    fill_entry(&e, r);
    e.replaced = replaced;
    if (ls->need_batch) {
        const ingest__cat_batch *b;
        INGEST__FORWARD(ingest__cat_batch_get(ls->cat, ls->txn, r->batch_no, &b));
        if (!batch_passes(ls->f, b->device, b->landed_ns))
            return 0;
        e.device = b->device;
        e.batch = b->batch;
        e.landed_ns = b->landed_ns;
    }
    const int rc = ls->fn(ls->ud, &e);
    return rc < 0 ? rc : rc > 0 ? 1 : 0;
}

/*
 * Position cur on the block where key tk belongs: the last block whose key
 * is <= tk, else the first.  0 with *k, *v; INGEST_ENOTFOUND when there are
 * no blocks.
 */
static int seek_block(ingest_catalog *cat, MDB_cursor *cur, const uint8_t *tk, size_t tl, MDB_val *k, MDB_val *v)
{
    int rc;
    if (tl == 0) {
        rc = mdb_cursor_get(cur, k, v, MDB_FIRST);
    } else {
        k->mv_size = tl;
        k->mv_data = (void *)tk;
        rc = mdb_cursor_get(cur, k, v, MDB_SET_RANGE);
        if (rc == 0 && !(k->mv_size == tl && memcmp(k->mv_data, tk, tl) == 0)) {
            rc = mdb_cursor_get(cur, k, v, MDB_PREV);
            if (rc == MDB_NOTFOUND)
                rc = mdb_cursor_get(cur, k, v, MDB_FIRST);
        } else if (rc == MDB_NOTFOUND) {
            rc = mdb_cursor_get(cur, k, v, MDB_LAST);
        }
    }
    if (rc == MDB_NOTFOUND)
        return INGEST_ENOTFOUND;
    return rc ? ingest__cat_mdb(cat, rc, "seek block") : 0;
}

static int list_locked(ingest_catalog *cat, const ingest_catalog_filter *f, ingest_catalog_fn fn, void *ud)
{
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    int rc = mdb_txn_begin(cat->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0)
        return ingest__cat_mdb(cat, rc, "begin");
    list_state ls = { cat, txn, f, false, false, fn, ud };
    if (f != NULL) {
        ls.all_versions = (f->flags & INGEST_CATALOG_ALL_VERSIONS) != 0;
        ls.need_batch = !(f->flags & INGEST_CATALOG_NO_BATCH) || f->device != NULL || f->since_ns != 0 ||
                        f->until_ns != 0;
    } else {
        ls.need_batch = true;
    }
    const char *prefix = f != NULL && f->prefix != NULL ? f->prefix : "";
    const size_t plen = strlen(prefix);
    int ret = 0;
    if ((rc = mdb_cursor_open(txn, cat->files, &cur)) != 0) {
        ret = ingest__cat_mdb(cat, rc, "cursor");
        goto out;
    }
    MDB_val k, v;
    ret = seek_block(cat, cur, (const uint8_t *)prefix, plen < INGEST__CAT_KEY_MAX ? plen : INGEST__CAT_KEY_MAX,
                     &k, &v);
    if (ret == INGEST_ENOTFOUND) {
        ret = 0;
        goto out;
    }
    if (ret < 0)
        goto out;
    ingest__catblock_r *const br = cat->br;
    ingest__catrec pend, r;
    bool have = false, stop = false;
    for (;;) {
        if (ingest__catblock_r_reset(br, v.mv_data, v.mv_size) < 0) {
            ret = ingest__cat_block_corrupt(cat, br, &k);
            goto out;
        }
        while ((rc = ingest__catblock_r_next(br, &r)) > 0) {
            if (plen > 0 && (r.landed_len < plen || memcmp(r.landed, prefix, plen) != 0)) {
                /* before the prefix's run: skip; after it: done */
                const size_t m = r.landed_len < plen ? r.landed_len : plen;
                const int c = memcmp(r.landed, prefix, m);
                if (c < 0 || (c == 0 && r.landed_len < plen))
                    continue;
                stop = true;
                break;
            }
            if (have && (ret = emit(&ls, &pend, same_path(&pend, &r))) != 0)
                goto out;
            pend = r;
            have = true;
        }
        if (rc < 0) {
            ret = ingest__cat_block_corrupt(cat, br, &k);
            goto out;
        }
        if (stop)
            break;
        rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        if (rc == MDB_NOTFOUND)
            break;
        if (rc != 0) {
            ret = ingest__cat_mdb(cat, rc, "next block");
            goto out;
        }
    }
    if (have)
        ret = emit(&ls, &pend, false);
out:
    if (cur != NULL)
        mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    return ret > 0 ? 0 : ret;
}

int ingest_catalog_list(ingest_catalog *cat, const ingest_catalog_filter *f, ingest_catalog_fn fn, void *ud)
{
    if (cat == NULL || fn == NULL)
        return INGEST_EINVAL;
    pthread_mutex_lock(&cat->lock);
    const int rc = list_locked(cat, f, fn, ud);
    pthread_mutex_unlock(&cat->lock);
    return rc;
}

/*
 * Find (landed, version): 1 with *r (valid until the next use of cat->br)
 * and *replaced, 0 when the catalog does not hold it.
 */
int ingest__cat_find(ingest_catalog *cat, MDB_txn *txn, const char *landed, size_t len, uint64_t version,
                     ingest__catrec *r, bool *replaced)
{
    MDB_cursor *cur = NULL;
    int rc = mdb_cursor_open(txn, cat->files, &cur);
    if (rc != 0)
        return ingest__cat_mdb(cat, rc, "cursor");
    uint8_t tk[INGEST__CAT_KEY_MAX];
    const size_t tl = ingest__cat_key(landed, len, version, tk);
    MDB_val k, v;
    int ret = seek_block(cat, cur, tk, tl, &k, &v);
    ingest__catblock_r *const br = cat->br;
    if (ret == INGEST_ENOTFOUND) {
        ret = 0;
        goto out;
    }
    if (ret < 0)
        goto out;
    if (ingest__catblock_r_reset(br, v.mv_data, v.mv_size) < 0) {
        ret = ingest__cat_block_corrupt(cat, br, &k);
        goto out;
    }
    ret = 0;
    while ((rc = ingest__catblock_r_next(br, r)) > 0) {
        const int c = ingest__cat_cmp(r->landed, r->landed_len, r->version, landed, len, version);
        if (c < 0)
            continue;
        if (c == 0)
            ret = 1;
        break;
    }
    if (rc < 0) {
        ret = ingest__cat_block_corrupt(cat, br, &k);
        goto out;
    }
    if (ret != 1)
        goto out;
    /* replaced: the record after it (in this block or the next) is of the same path */
    ingest__catrec nx;
    rc = ingest__catblock_r_next(br, &nx);
    if (rc == 0) {
        rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        if (rc == MDB_NOTFOUND) {
            *replaced = false;
            goto out;
        }
        if (rc != 0) {
            ret = ingest__cat_mdb(cat, rc, "next block");
            goto out;
        }
        if (ingest__catblock_r_reset(br, v.mv_data, v.mv_size) < 0 || (rc = ingest__catblock_r_next(br, &nx)) <= 0) {
            ret = ingest__cat_block_corrupt(cat, br, &k);
            goto out;
        }
    } else if (rc < 0) {
        ret = ingest__cat_block_corrupt(cat, br, &k);
        goto out;
    }
    *replaced = same_path(r, &nx);
out:
    mdb_cursor_close(cur);
    return ret;
}

int ingest__catfeed_next_held(ingest_catalog *cat, MDB_txn *txn, ingest__catfeed_r *fr, uint64_t bno,
                              const char *prefix, size_t plen, ingest__catrec *r, bool *replaced)
{
    int rc;
    while ((rc = ingest__catfeed_r_next(fr)) > 0) {
        if (plen > 0 && (fr->landed_len < plen || memcmp(fr->landed, prefix, plen) != 0))
            continue;
        *replaced = false;
        const int found = ingest__cat_find(cat, txn, fr->landed, fr->landed_len, fr->version, r, replaced);
        if (found < 0)
            return found;
        if (found > 0 && r->batch_no == bno)
            return 1; /* (else a later manifest named the same version: logged when it was added) */
    }
    return rc < 0 ? ingest__cat_feed_bad(cat, bno, fr) : 0;
}

static int feed_locked(ingest_catalog *cat, uint64_t last, uint64_t max_batches, const ingest_catalog_filter *f,
                       ingest_catalog_fn fn, void *ud, uint64_t *out_last)
{
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    ingest__catfeed_r *fr = NULL;
    int rc = mdb_txn_begin(cat->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0)
        return ingest__cat_mdb(cat, rc, "begin");
    int ret = 0;
    uint64_t next_no = 0;
    if ((ret = ingest__cat_next_batch(cat, txn, &next_no)) < 0)
        goto out;
    if (last >= next_no) {
        /* a cursor past every batch this catalog numbered: the catalog (or bronze) was put back from an
         * older copy since, and the batches numbered from here on would never be fed past it */
        ret = ingest__fail(cat->ctx, INGEST_ESTALE,
                           "cursor at batch %llu is past this catalog's last batch (%llu): bronze or its catalog "
                           "was put back from an older copy since; read the feed from the start, or list with "
                           "--since", (unsigned long long)last, (unsigned long long)(next_no - 1));
        goto out;
    }
    if ((rc = mdb_cursor_open(txn, cat->feed, &cur)) != 0) {
        ret = ingest__cat_mdb(cat, rc, "cursor");
        goto out;
    }
    /* the feed record is read while blocks are looked up: a reader of its own */
    fr = ingest__malloc(cat->ctx, sizeof(*fr));
    if (fr == NULL) {
        ret = ingest__fail(cat->ctx, INGEST_ENOMEM, "catalog: out of memory");
        goto out;
    }
    const char *prefix = f != NULL && f->prefix != NULL ? f->prefix : "";
    const size_t plen = strlen(prefix);
    uint8_t kb[8];
    put_be64(kb, last + 1);
    MDB_val k = { 8, kb }, v;
    uint64_t n = 0;
    bool stopped = false;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0 && !stopped;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (max_batches != 0 && n == max_batches)
            break;
        if (k.mv_size != 8) {
            ret = ingest__fail(cat->ctx, INGEST_ECORRUPT, "catalog %s: feed key of %zu bytes", cat->dir, k.mv_size);
            goto out;
        }
        const uint64_t bno = get_be64(k.mv_data);
        if (ingest__catfeed_r_begin(fr, v.mv_data, v.mv_size) < 0) {
            ret = ingest__cat_feed_bad(cat, bno, fr);
            goto out;
        }
        n++;
        if (batch_passes(f, fr->device, fr->landed_ns)) {
            ingest__catrec r;
            bool replaced = false;
            while ((rc = ingest__catfeed_next_held(cat, txn, fr, bno, prefix, plen, &r, &replaced)) > 0) {
                ingest_catalog_entry e;
                fill_entry(&e, &r);
                e.replaced = replaced;
                e.device = fr->device;
                e.batch = fr->batch;
                e.landed_ns = fr->landed_ns;
                const int cr = fn(ud, &e);
                if (cr < 0) {
                    ret = cr;
                    goto out;
                }
                if (cr > 0) {
                    stopped = true; /* the batch counts as read only when all of it was passed */
                    break;
                }
            }
            if (rc < 0) {
                ret = rc;
                goto out;
            }
        }
        if (!stopped)
            last = bno;
    }
    if (rc != 0 && rc != MDB_NOTFOUND && !stopped) {
        ret = ingest__cat_mdb(cat, rc, "next batch");
        goto out;
    }
    *out_last = last;
out:
    ingest__free(cat->ctx, fr);
    if (cur != NULL)
        mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    return ret;
}

int ingest_catalog_feed(ingest_catalog *cat, const char *cursor, uint64_t max_batches, const ingest_catalog_filter *f,
                        ingest_catalog_fn fn, void *ud, char *next, size_t next_cap)
{
    if (cat == NULL || fn == NULL || next == NULL || next_cap < INGEST_CATALOG_CURSOR_MAX)
        return INGEST_EINVAL;
    next[0] = '\0';
    uint64_t id = cat->id, last = 0;
    if (cursor != NULL && cursor[0] != '\0') {
        INGEST__FORWARD(ingest_catalog_cursor_parse(cat->ctx, cursor, &id, &last));
        if (id != cat->id)
            return ingest__fail(cat->ctx, INGEST_ESTALE,
                                "cursor %s is of another catalog (this one is %016llx: it was made again since); "
                                "read the feed from the start, or list with --since",
                                cursor, (unsigned long long)cat->id);
    }
    pthread_mutex_lock(&cat->lock);
    uint64_t out_last = last;
    const int rc = feed_locked(cat, last, max_batches, f, fn, ud, &out_last);
    pthread_mutex_unlock(&cat->lock);
    if (rc < 0)
        return rc;
    ingest__cat_cursor_format(cat->id, out_last, next, next_cap);
    return 0;
}
