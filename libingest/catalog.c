/*
 * The catalog of landed files (include/ingest/catalog.h, docs/catalog.md):
 * an LMDB environment of its own under {bronze}/_manifests/.catalog/,
 * caught up from the manifests.
 *
 * Why LMDB directly rather than the store wrapper (store.c): the wrapper
 * keeps one write transaction open across calls and commits it when it is
 * full, one thread at a time.  The catalog needs the opposite: several
 * processes writing the same environment (the receiver and any ingestctl),
 * each manifest checked ("held already?") and added inside one write
 * transaction, which LMDB serialises across processes, and cursor seeks
 * (a block is found by the last key <= a landed path).
 */
#include "catalog_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

/* Free bytes the bronze filesystem must have for the catalog to be opened for writing. */
#define CATALOG_FREE_MIN (1u << 20)
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "ingest/manifest.h"

#define CATALOG_DIR "_manifests/.catalog"
#define META_FORMAT "format"
#define META_ID "id"
#define META_NEXT "next_batch"
#define META_FILES "files"
/* A directory of manifests is trusted unchanged only when its mtime is at
 * least this old (a change within the same clock tick would not move it). */
#define DIR_SETTLE_NS (2ll * 1000000000)
/* Catch-up: manifests and files per write transaction. */
#define GROUP_MANIFESTS 64
#define GROUP_FILES 200000
#define WALK_ENTRIES_MAX (16u * 1024u * 1024u)
/* Files of one manifest held while it is added (the lander's ceiling). */
#define MANIFEST_FILES_MAX (16u * 1024u * 1024u)

/* ---- errors and small helpers ---------------------------------------------- */

int ingest__cat_mdb(ingest_catalog *cat, int rc, const char *what)
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
    case MDB_INCOMPATIBLE: code = INGEST_ECORRUPT; break;
    case MDB_VERSION_MISMATCH: code = INGEST_EVERSION; break;
    case MDB_READERS_FULL:
    case MDB_MAP_RESIZED: code = INGEST_EBUSY; break;
    case EACCES:
    case EROFS: code = INGEST_EIO; break;
    default: code = rc > 0 ? ingest__errno(rc) : INGEST_EIO; break;
    }
    return ingest__fail(cat->ctx, code, "catalog %s: %s: %s", cat->dir, what, mdb_strerror(rc));
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ingest_time_ns(&ts);
}

static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n > INGEST__CAT_NAME_MAX || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == '/' || c >= 0x7f)
            return false;
    }
    return true;
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static int meta_get_u64(ingest_catalog *cat, MDB_txn *txn, const char *key, uint64_t *v)
{
    MDB_val k = { strlen(key), (void *)key }, d;
    const int rc = mdb_get(txn, cat->meta, &k, &d);
    if (rc == MDB_NOTFOUND)
        return INGEST_ENOTFOUND;
    if (rc != 0)
        return ingest__cat_mdb(cat, rc, "read meta");
    if (d.mv_size != 8)
        return ingest__fail(cat->ctx, INGEST_ECORRUPT, "catalog %s: meta record %s is %zu bytes, not 8", cat->dir,
                            key, d.mv_size);
    *v = ingest__get_u64(d.mv_data);
    return 0;
}

int ingest__cat_feed_bad(ingest_catalog *cat, uint64_t bno, const ingest__catfeed_r *fr)
{
    return ingest__fail(cat->ctx, INGEST_ECORRUPT, "catalog %s: batch record %llu, byte %zu: %s", cat->dir,
                        (unsigned long long)bno, fr->err_off, fr->err);
}

int ingest__cat_next_batch(ingest_catalog *cat, MDB_txn *txn, uint64_t *next)
{
    return meta_get_u64(cat, txn, META_NEXT, next);
}

static int meta_put_u64(ingest_catalog *cat, MDB_txn *txn, const char *key, uint64_t v)
{
    uint8_t b[8];
    ingest__put_u64(b, v);
    MDB_val k = { strlen(key), (void *)key }, d = { 8, b };
    const int rc = mdb_put(txn, cat->meta, &k, &d, 0);
    return rc ? ingest__cat_mdb(cat, rc, "write meta") : 0;
}

/* ---- open and close ----------------------------------------------------------- */

static int env_open(ingest_catalog *cat)
{
    unsigned fl = MDB_NOTLS;
    if (cat->flags & INGEST_CATALOG_RDONLY)
        fl |= MDB_RDONLY;
    if (cat->flags & INGEST_CATALOG_NOSYNC)
        fl |= MDB_NOSYNC;
    /* address space, not memory: halved where less is allowed (ulimit -v, valgrind), as the store's */
    const uint64_t map = sizeof(size_t) >= 8 ? (64ull << 30) : (1ull << 30);
    uint64_t m = map;
    int rc;
    for (;;) {
        if ((rc = mdb_env_create(&cat->env)) != 0) {
            cat->env = NULL;
            return ingest__cat_mdb(cat, rc, "mdb_env_create");
        }
        mdb_env_set_maxdbs(cat->env, 8);
        mdb_env_set_mapsize(cat->env, (size_t)m);
        rc = mdb_env_open(cat->env, cat->dir, fl, 0644);
        if (rc == 0 || (rc != ENOMEM && rc != EINVAL) || m / 2 < (256ull << 20))
            break;
        mdb_env_close(cat->env);
        cat->env = NULL;
        m /= 2;
    }
    if (rc != 0)
        return ingest__cat_mdb(cat, rc, "open");
    if (m < map)
        ingest__log(cat->ctx, INGEST_LOG_WARN, "catalog %s: the address space allows a map of %llu MiB, not %llu "
                    "(ulimit -v?): the catalog can grow to that", cat->dir, (unsigned long long)(m >> 20),
                    (unsigned long long)(map >> 20));
    const bool ro = (cat->flags & INGEST_CATALOG_RDONLY) != 0;
    MDB_txn *txn = NULL;
    if ((rc = mdb_txn_begin(cat->env, NULL, ro ? MDB_RDONLY : 0, &txn)) != 0)
        return ingest__cat_mdb(cat, rc, "begin");
    const unsigned create = ro ? 0 : MDB_CREATE;
    const struct {
        const char *name;
        MDB_dbi *dbi;
    } tabs[] = { { "meta", &cat->meta },   { "batches", &cat->batches }, { "feed", &cat->feed },
                 { "files", &cat->files }, { "dirs", &cat->dirs } };
    for (size_t i = 0; i < sizeof(tabs) / sizeof(tabs[0]); i++)
        if ((rc = mdb_dbi_open(txn, tabs[i].name, create, tabs[i].dbi)) != 0) {
            mdb_txn_abort(txn);
            if (rc == MDB_NOTFOUND && ro)
                return ingest__fail(cat->ctx, INGEST_ENOTFOUND, "catalog %s: not made yet", cat->dir);
            return ingest__cat_mdb(cat, rc, "open table");
        }
    int ret = 0;
    uint64_t format = 0;
    ret = meta_get_u64(cat, txn, META_FORMAT, &format);
    if (ret == INGEST_ENOTFOUND && !ro) {
        randombytes_buf(&cat->id, sizeof(cat->id));
        if ((ret = meta_put_u64(cat, txn, META_FORMAT, INGEST_CATALOG_FORMAT)) < 0 ||
            (ret = meta_put_u64(cat, txn, META_ID, cat->id)) < 0 || (ret = meta_put_u64(cat, txn, META_NEXT, 1)) < 0 ||
            (ret = meta_put_u64(cat, txn, META_FILES, 0)) < 0) {
            mdb_txn_abort(txn);
            return ret;
        }
        if ((rc = mdb_txn_commit(txn)) != 0)
            return ingest__cat_mdb(cat, rc, "commit");
        return 0;
    }
    if (ret == INGEST_ENOTFOUND)
        ret = ingest__fail(cat->ctx, INGEST_ENOTFOUND, "catalog %s: not made yet", cat->dir);
    else if (ret == 0 && format != INGEST_CATALOG_FORMAT)
        ret = ingest__fail(cat->ctx, INGEST_EVERSION, "catalog %s: format %llu, this library reads %d", cat->dir,
                           (unsigned long long)format, INGEST_CATALOG_FORMAT);
    else if (ret == 0)
        ret = meta_get_u64(cat, txn, META_ID, &cat->id);
    if (ret == INGEST_ENOTFOUND && format != 0)
        ret = ingest__fail(cat->ctx, INGEST_ECORRUPT, "catalog %s: no id record", cat->dir);
    if (ret < 0) {
        mdb_txn_abort(txn);
        return ret;
    }
    /* committed even when read-only: the table handles of an aborted transaction are closed */
    if ((rc = mdb_txn_commit(txn)) != 0)
        return ingest__cat_mdb(cat, rc, "commit");
    return 0;
}

static void env_close(ingest_catalog *cat)
{
    if (cat->env != NULL)
        mdb_env_close(cat->env);
    cat->env = NULL;
}

static int wipe(ingest_catalog *cat)
{
    char p[INGEST__CAT_PBUF];
    static const char *const files[] = { "data.mdb", "lock.mdb" };
    for (size_t i = 0; i < 2; i++) {
        snprintf(p, sizeof(p), "%s/%s", cat->dir, files[i]);
        if (unlink(p) != 0 && errno != ENOENT)
            return ingest__fail(cat->ctx, ingest__errno(errno), "catalog: remove %s: %s", p, strerror(errno));
    }
    return 0;
}

void ingest_catalog_close(ingest_catalog *cat)
{
    if (cat == NULL)
        return;
    if (cat->adder_on) { /* it adds what is queued, then ends */
        pthread_mutex_lock(&cat->aq_lock);
        cat->adder_quit = true;
        pthread_cond_broadcast(&cat->aq_cond);
        pthread_mutex_unlock(&cat->aq_lock);
        pthread_join(cat->adder, NULL);
    }
    pthread_cond_destroy(&cat->aq_cond);
    pthread_mutex_destroy(&cat->aq_lock);
    env_close(cat);
    pthread_mutex_destroy(&cat->lock);
    ingest__catblock_w_free(&cat->bw);
    ingest__buf_free(&cat->scratch);
    ingest__free(cat->ctx, cat->br);
    ingest__free(cat->ctx, cat->fr);
    ingest__free(cat->ctx, cat->bcache);
    ingest__free(cat->ctx, cat);
}

int ingest_catalog_open(ingest_ctx *ctx, const char *bronze_root, unsigned flags, ingest_catalog **out)
{
    *out = NULL;
    if (ctx == NULL || bronze_root == NULL || bronze_root[0] == '\0')
        return INGEST_EINVAL;
    ingest_catalog *cat = ingest__calloc(ctx, 1, sizeof(*cat));
    if (cat == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "catalog: out of memory");
    cat->ctx = ctx;
    cat->flags = flags;
    pthread_mutex_init(&cat->lock, NULL);
    pthread_mutex_init(&cat->aq_lock, NULL);
    pthread_cond_init(&cat->aq_cond, NULL);
    ingest__catblock_w_init(&cat->bw, ctx);
    ingest__buf_init(&cat->scratch, ctx, (size_t)1 << 31);
    cat->br = ingest__malloc(ctx, sizeof(*cat->br));
    cat->fr = ingest__malloc(ctx, sizeof(*cat->fr));
    cat->bcache = ingest__calloc(ctx, INGEST__CAT_BCACHE, sizeof(*cat->bcache));
    int ret;
    if (cat->br == NULL || cat->fr == NULL || cat->bcache == NULL) {
        ret = ingest__fail(ctx, INGEST_ENOMEM, "catalog: out of memory");
        goto fail;
    }
    memset(cat->br, 0, sizeof(*cat->br));
    const size_t n = strlen(bronze_root);
    if (n >= sizeof(cat->bronze)) {
        ret = ingest__fail(ctx, INGEST_ETOOBIG, "catalog: bronze root too long");
        goto fail;
    }
    memcpy(cat->bronze, bronze_root, n + 1);
    memcpy(cat->dir, bronze_root, n);
    memcpy(cat->dir + n, "/" CATALOG_DIR, sizeof("/" CATALOG_DIR));
    struct stat sb;
    if (stat(bronze_root, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        ret = ingest__fail(ctx, INGEST_EINVAL, "catalog: bronze root %s: not a directory", bronze_root);
        goto fail;
    }
    if (flags & INGEST_CATALOG_EXISTING) {
        char p[INGEST__CAT_PBUF];
        snprintf(p, sizeof(p), "%s/_manifests", bronze_root);
        if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            ret = ingest__fail(ctx, INGEST_ENOTFOUND,
                               "%s holds no _manifests directory: not a bronze tree a receiver landed into (the "
                               "wrong directory, or a filesystem not mounted?)", bronze_root);
            goto fail;
        }
    }
    if (flags & INGEST_CATALOG_RDONLY) {
        char p[INGEST__CAT_PBUF];
        snprintf(p, sizeof(p), "%s/data.mdb", cat->dir);
        if (stat(p, &sb) != 0) {
            ret = ingest__fail(ctx, INGEST_ENOTFOUND, "catalog %s: not made yet", cat->dir);
            goto fail;
        }
    } else {
        char p[INGEST__CAT_PBUF];
        snprintf(p, sizeof(p), "%s/_manifests", bronze_root);
        if ((mkdir(p, 0755) != 0 && errno != EEXIST) || (mkdir(cat->dir, 0755) != 0 && errno != EEXIST)) {
            ret = ingest__fail(ctx, ingest__errno(errno), "catalog: mkdir %s: %s", cat->dir, strerror(errno));
            goto fail;
        }
        /* Its files are mapped in memory: a page first touched on a full filesystem (the lock file's,
         * or one past a write that failed) kills the process with SIGBUS.  A cache is not worth that. */
        struct statvfs v;
        if (statvfs(cat->dir, &v) == 0) {
            const uint64_t avail = (uint64_t)v.f_bavail * (v.f_frsize ? v.f_frsize : v.f_bsize);
            if (avail < CATALOG_FREE_MIN) {
                ret = ingest__fail(ctx, INGEST_ENOSPC,
                                   "catalog %s: the filesystem has %llu bytes free, less than %u MiB: not opened (a "
                                   "cache of the manifests, made again once there is room)",
                                   cat->dir, (unsigned long long)avail, CATALOG_FREE_MIN >> 20);
                goto fail;
            }
        }
    }
    ret = env_open(cat);
    if ((ret == INGEST_ECORRUPT || ret == INGEST_EVERSION) && !(flags & INGEST_CATALOG_RDONLY)) {
        ingest__log(ctx, INGEST_LOG_WARN, "%s; making the catalog again from the manifests", ingest_ctx_errmsg(ctx));
        env_close(cat);
        if ((ret = wipe(cat)) == 0)
            ret = env_open(cat);
    }
    if (ret < 0)
        goto fail;
    *out = cat;
    return 0;
fail:
    ingest_catalog_close(cat);
    return ret;
}

/* ---- adding a manifest ---------------------------------------------------------- */

/* One file of a manifest being added; strings at offsets in the arena. */
typedef struct mfile {
    size_t loff, llen, poff, plen;
    uint64_t version, size;
    int64_t mtime_ns;
    uint32_t mode;
    uint8_t hash[INGEST_ID_BYTES];
} mfile;

typedef struct mset {
    ingest_ctx *ctx;
    ingest__buf arena;
    mfile *f;
    size_t n, cap;
    int64_t created_ns;
} mset;

static const char *mstr(const mset *m, size_t off) { return (const char *)m->arena.buf + off; }

static int mset_add(mset *m, const ingest_manifest_rec *rec)
{
    if (m->n == m->cap) {
        if (m->cap >= MANIFEST_FILES_MAX)
            return ingest__fail(m->ctx, INGEST_ETOOBIG, "catalog: manifest of more than %u files", MANIFEST_FILES_MAX);
        const size_t nc = m->cap ? m->cap * 2 : 256;
        mfile *nf = ingest__malloc(m->ctx, nc * sizeof(*nf));
        if (nf == NULL)
            return ingest__fail(m->ctx, INGEST_ENOMEM, "catalog: out of memory");
        if (m->n)
            memcpy(nf, m->f, m->n * sizeof(*nf));
        ingest__free(m->ctx, m->f);
        m->f = nf;
        m->cap = nc;
    }
    mfile *f = &m->f[m->n];
    f->llen = strlen(rec->landed);
    f->plen = strlen(rec->path);
    f->loff = m->arena.len;
    INGEST__FORWARD(ingest__buf_append(&m->arena, rec->landed, f->llen + 1));
    f->poff = m->arena.len;
    INGEST__FORWARD(ingest__buf_append(&m->arena, rec->path, f->plen + 1));
    f->version = rec->version;
    f->size = rec->size;
    f->mtime_ns = rec->mtime_ns;
    f->mode = rec->mode;
    memcpy(f->hash, rec->hash, INGEST_ID_BYTES);
    m->n++;
    return 0;
}

static void mset_free(mset *m)
{
    ingest__buf_free(&m->arena);
    ingest__free(m->ctx, m->f);
    memset(m, 0, sizeof(*m));
}

static int cmp_mfile(const void *a, const void *b, void *ud)
{
    const mset *m = ud;
    const mfile *x = a, *y = b;
    return ingest__cat_cmp(mstr(m, x->loff), x->llen, x->version, mstr(m, y->loff), y->llen, y->version);
}

/*
 * Read manifest {bronze}/_manifests/{device}/{batch}.jsonl into m, its files
 * sorted by (landed, version).  INGEST_ECORRUPT (detail) when it is
 * malformed or its header names another device or batch.
 */
static int read_manifest(ingest_catalog *cat, const char *device, const char *batch, mset *m)
{
    char path[INGEST__CAT_PBUF];
    snprintf(path, sizeof(path), "%s/_manifests/%s/%s.jsonl", cat->bronze, device, batch);
    ingest_manifest_reader *r = NULL;
    ingest_manifest_rec rec;
    int rc = ingest_manifest_reader_open(cat->ctx, path, &r);
    if (rc < 0)
        return rc;
    while ((rc = ingest_manifest_reader_next(r, &rec)) > 0) {
        if (rec.type == INGEST_MREC_HEADER) {
            if (strcmp(rec.device, device) != 0 || strcmp(rec.batch, batch) != 0) {
                rc = ingest__fail(cat->ctx, INGEST_ECORRUPT, "manifest %s: header names device %s, batch %s", path,
                                  rec.device, rec.batch);
                break;
            }
            m->created_ns = rec.created_ns;
        } else if (rec.type == INGEST_MREC_FILE && rec.landed != NULL && rec.landed[0] != '\0') {
            if (rec.version == 0) {
                rc = ingest__fail(cat->ctx, INGEST_ECORRUPT, "manifest %s: %s landed without a version", path,
                                  rec.landed);
                break;
            }
            if ((rc = mset_add(m, &rec)) < 0)
                break;
        }
    }
    ingest_manifest_reader_close(r);
    if (rc < 0)
        return rc;
    if (m->n > 1)
        qsort_r(m->f, m->n, sizeof(*m->f), cmp_mfile, m);
    return 0;
}

/* A record of a decoded block, copied out (strings at offsets in an arena). */
typedef struct brec {
    size_t loff, llen, poff, plen;
    uint64_t version, batch_no, size;
    int64_t mtime_ns;
    uint32_t mode;
    uint8_t hash[INGEST_ID_BYTES];
} brec;

typedef struct merge_state {
    ingest_catalog *cat;
    MDB_txn *txn;
    ingest__buf barena; /* block records' strings */
    brec *b;
    size_t nb, capb;
    uint8_t upper[INGEST__CAT_KEY_MAX];
    size_t upper_len;
    bool has_upper;
    uint8_t oldkey[INGEST__CAT_KEY_MAX];
    size_t oldkey_len;
    bool has_old;
} merge_state;

static int brec_push(merge_state *ms, const ingest__catrec *r)
{
    if (ms->nb == ms->capb) {
        const size_t nc = ms->capb ? ms->capb * 2 : 256;
        brec *nb = ingest__malloc(ms->cat->ctx, nc * sizeof(*nb));
        if (nb == NULL)
            return ingest__fail(ms->cat->ctx, INGEST_ENOMEM, "catalog: out of memory");
        if (ms->nb)
            memcpy(nb, ms->b, ms->nb * sizeof(*nb));
        ingest__free(ms->cat->ctx, ms->b);
        ms->b = nb;
        ms->capb = nc;
    }
    brec *b = &ms->b[ms->nb];
    b->loff = ms->barena.len;
    b->llen = r->landed_len;
    INGEST__FORWARD(ingest__buf_append(&ms->barena, r->landed, r->landed_len + 1));
    b->poff = ms->barena.len;
    b->plen = r->path_len;
    INGEST__FORWARD(ingest__buf_append(&ms->barena, r->path, r->path_len + 1));
    b->version = r->version;
    b->batch_no = r->batch_no;
    b->size = r->size;
    b->mtime_ns = r->mtime_ns;
    b->mode = r->mode;
    memcpy(b->hash, r->hash, INGEST_ID_BYTES);
    ms->nb++;
    return 0;
}

int ingest__cat_block_corrupt(ingest_catalog *cat, const ingest__catblock_r *r, const MDB_val *key)
{
    char k[64];
    const size_t n = key->mv_size < 40 ? key->mv_size : 40;
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < sizeof(k); i++) {
        const unsigned char c = ((const unsigned char *)key->mv_data)[i];
        k[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    k[o] = '\0';
    return ingest__fail(cat->ctx, INGEST_ECORRUPT,
                        "catalog %s: block '%s': record %u, byte %zu: %s (remove %s/data.mdb to make it again)",
                        cat->dir, k, r->index + 1, r->err_off, r->err ? r->err : "malformed", cat->dir);
}

/*
 * Find the block where key tk belongs (the last block whose key is <= tk,
 * else the first block), load its records into ms->b and note the key of
 * the block after it.  No block at all: ms->nb = 0, !has_old.
 */
static int load_block(merge_state *ms, const uint8_t *tk, size_t tklen)
{
    ingest_catalog *const cat = ms->cat;
    MDB_cursor *cur = NULL;
    int rc = mdb_cursor_open(ms->txn, cat->files, &cur);
    if (rc != 0)
        return ingest__cat_mdb(cat, rc, "cursor");
    MDB_val k = { tklen, (void *)tk }, v;
    ms->nb = 0;
    ingest__buf_reset(&ms->barena);
    ms->has_old = ms->has_upper = false;
    rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    if (rc == 0 && !(k.mv_size == tklen && memcmp(k.mv_data, tk, tklen) == 0)) {
        rc = mdb_cursor_get(cur, &k, &v, MDB_PREV);
        if (rc == MDB_NOTFOUND)
            rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    } else if (rc == MDB_NOTFOUND) {
        rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
    }
    int ret = 0;
    if (rc == MDB_NOTFOUND)
        goto out;
    if (rc != 0) {
        ret = ingest__cat_mdb(cat, rc, "seek block");
        goto out;
    }
    if (k.mv_size == 0 || k.mv_size > INGEST__CAT_KEY_MAX) {
        ret = ingest__fail(cat->ctx, INGEST_ECORRUPT, "catalog %s: block key of %zu bytes", cat->dir, k.mv_size);
        goto out;
    }
    memcpy(ms->oldkey, k.mv_data, k.mv_size);
    ms->oldkey_len = k.mv_size;
    ms->has_old = true;
    ingest__catblock_r *const br = cat->br;
    if (ingest__catblock_r_reset(br, v.mv_data, v.mv_size) < 0) {
        ret = ingest__cat_block_corrupt(cat, br, &k);
        goto out;
    }
    ingest__catrec r;
    while ((rc = ingest__catblock_r_next(br, &r)) > 0)
        if ((ret = brec_push(ms, &r)) < 0)
            goto out;
    if (rc < 0) {
        ret = ingest__cat_block_corrupt(cat, br, &k);
        goto out;
    }
    rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    if (rc == 0 && k.mv_size > 0 && k.mv_size <= INGEST__CAT_KEY_MAX) {
        memcpy(ms->upper, k.mv_data, k.mv_size);
        ms->upper_len = k.mv_size;
        ms->has_upper = true;
    } else if (rc != 0 && rc != MDB_NOTFOUND) {
        ret = ingest__cat_mdb(cat, rc, "next block");
    }
out:
    mdb_cursor_close(cur);
    return ret;
}

static int keycmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    const int c = memcmp(a, b, al < bl ? al : bl);
    return c != 0 ? c : al < bl ? -1 : al > bl ? 1 : 0;
}

/* Write out the records as blocks of about INGEST__CAT_BLOCK_FILL bytes. */
typedef struct emit_state {
    merge_state *ms;
    ingest__catblock_w *w;
    uint8_t first[INGEST__CAT_KEY_MAX], last[INGEST__CAT_KEY_MAX];
    size_t first_len, last_len;
    bool open;
} emit_state;

static int emit_flush(emit_state *es)
{
    if (!es->open)
        return 0;
    size_t len;
    const uint8_t *v = ingest__catblock_w_finish(es->w, &len);
    MDB_val k = { es->first_len, es->first }, d = { len, (void *)v };
    const int rc = mdb_put(es->ms->txn, es->ms->cat->files, &k, &d, 0);
    ingest__catblock_w_reset(es->w);
    es->open = false;
    return rc ? ingest__cat_mdb(es->ms->cat, rc, "write block") : 0;
}

static int emit_rec(emit_state *es, const ingest__catrec *r)
{
    uint8_t tk[INGEST__CAT_KEY_MAX];
    const size_t tl = ingest__cat_key(r->landed, r->landed_len, r->version, tk);
    /* a block ends only where the cut key changes, so no two blocks share a key */
    if (es->open && es->w->out.len >= INGEST__CAT_BLOCK_FILL && keycmp(tk, tl, es->last, es->last_len) != 0)
        INGEST__FORWARD(emit_flush(es));
    if (!es->open) {
        memcpy(es->first, tk, tl);
        es->first_len = tl;
        es->open = true;
    }
    memcpy(es->last, tk, tl);
    es->last_len = tl;
    return ingest__catblock_w_add(es->w, r);
}

static void brec_view(const merge_state *ms, const brec *b, ingest__catrec *r)
{
    r->landed = (const char *)ms->barena.buf + b->loff;
    r->landed_len = b->llen;
    r->path = (const char *)ms->barena.buf + b->poff;
    r->path_len = b->plen;
    r->version = b->version;
    r->batch_no = b->batch_no;
    r->size = b->size;
    r->mtime_ns = b->mtime_ns;
    r->mode = b->mode;
    memcpy(r->hash, b->hash, INGEST_ID_BYTES);
}

static void mfile_view(const mset *m, const mfile *f, uint64_t batch_no, ingest__catrec *r)
{
    r->landed = mstr(m, f->loff);
    r->landed_len = f->llen;
    r->path = mstr(m, f->poff);
    r->path_len = f->plen;
    r->version = f->version;
    r->batch_no = batch_no;
    r->size = f->size;
    r->mtime_ns = f->mtime_ns;
    r->mode = f->mode;
    memcpy(r->hash, f->hash, INGEST_ID_BYTES);
}

/* Merge the sorted files of m (batch batch_no) into the blocks. */
static int merge_files(ingest_catalog *cat, MDB_txn *txn, const mset *m, uint64_t batch_no, uint64_t *added)
{
    merge_state ms;
    memset(&ms, 0, sizeof(ms));
    ms.cat = cat;
    ms.txn = txn;
    ingest__buf_init(&ms.barena, cat->ctx, BLOCK_ARENA_MAX);
    emit_state es;
    memset(&es, 0, sizeof(es));
    es.ms = &ms;
    es.w = &cat->bw;
    ingest__catblock_w_reset(es.w);
    int ret = 0;
    size_t i = 0;
    *added = 0;
    while (i < m->n) {
        const mfile *f = &m->f[i];
        uint8_t tk[INGEST__CAT_KEY_MAX];
        const size_t tl = ingest__cat_key(mstr(m, f->loff), f->llen, f->version, tk);
        if ((ret = load_block(&ms, tk, tl)) < 0)
            goto out;
        size_t j = i;
        while (j < m->n) {
            if (ms.has_upper) {
                uint8_t jk[INGEST__CAT_KEY_MAX];
                const size_t jl = ingest__cat_key(mstr(m, m->f[j].loff), m->f[j].llen, m->f[j].version, jk);
                if (keycmp(jk, jl, ms.upper, ms.upper_len) >= 0)
                    break;
            }
            j++;
        }
        if (ms.has_old) {
            MDB_val k = { ms.oldkey_len, ms.oldkey };
            const int rc = mdb_del(txn, cat->files, &k, NULL);
            if (rc != 0) {
                ret = ingest__cat_mdb(cat, rc, "replace block");
                goto out;
            }
        }
        /* merge ms.b[0..nb) and m->f[i..j); on an equal key the new record wins */
        size_t a = 0, b = i;
        ingest__catrec ra, rb;
        while (a < ms.nb || b < j) {
            int c;
            if (a == ms.nb)
                c = 1;
            else if (b == j)
                c = -1;
            else {
                brec_view(&ms, &ms.b[a], &ra);
                mfile_view(m, &m->f[b], batch_no, &rb);
                c = ingest__cat_cmp(ra.landed, ra.landed_len, ra.version, rb.landed, rb.landed_len, rb.version);
            }
            if (c < 0) {
                brec_view(&ms, &ms.b[a++], &ra);
                ret = emit_rec(&es, &ra);
            } else {
                if (c == 0) {
                    ingest__log(cat->ctx, INGEST_LOG_WARN,
                                "catalog: %s version %llu is in two manifests; the later one is kept",
                                ra.landed, (unsigned long long)ra.version);
                    a++;
                } else {
                    (*added)++;
                }
                mfile_view(m, &m->f[b++], batch_no, &rb);
                ret = emit_rec(&es, &rb);
            }
            if (ret < 0)
                goto out;
        }
        if ((ret = emit_flush(&es)) < 0)
            goto out;
        i = j;
    }
out:
    ingest__buf_free(&ms.barena);
    ingest__free(cat->ctx, ms.b);
    return ret;
}

static size_t batch_key(const char *device, const char *batch, uint8_t *k)
{
    const size_t dl = strlen(device), bl = strlen(batch);
    memcpy(k, device, dl);
    k[dl] = 0;
    memcpy(k + dl + 1, batch, bl);
    return dl + 1 + bl;
}

/* 1 when (device, batch) is held, 0 when not. */
static int batch_held(ingest_catalog *cat, MDB_txn *txn, const char *device, const char *batch)
{
    uint8_t kb[2 * INGEST__CAT_NAME_MAX + 2];
    MDB_val k = { batch_key(device, batch, kb), kb }, v;
    const int rc = mdb_get(txn, cat->batches, &k, &v);
    if (rc == MDB_NOTFOUND)
        return 0;
    return rc ? ingest__cat_mdb(cat, rc, "read batch mark") : 1;
}

/*
 * In write transaction txn: add the batch whose files m holds (unless it
 * is held already: 0).  1 added.
 */
static int add_in_txn(ingest_catalog *cat, MDB_txn *txn, const char *device, const char *batch, const mset *m,
                      uint64_t *files)
{
    int rc = batch_held(cat, txn, device, batch);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    uint64_t next = 0, nfiles = 0;
    INGEST__FORWARD(meta_get_u64(cat, txn, META_NEXT, &next));
    INGEST__FORWARD(meta_get_u64(cat, txn, META_FILES, &nfiles));
    uint64_t added = 0;
    INGEST__FORWARD(merge_files(cat, txn, m, next, &added));
    /* the feed record: the batch and its files' (landed, version) */
    ingest__buf *fb = &cat->scratch;
    ingest__buf_reset(fb);
    INGEST__FORWARD(ingest__catfeed_w_begin(fb, device, batch, m->created_ns, m->n));
    for (size_t i = 0; i < m->n; i++) {
        const mfile *f = &m->f[i];
        const mfile *p = i ? &m->f[i - 1] : NULL;
        INGEST__FORWARD(ingest__catfeed_w_add(fb, p ? mstr(m, p->loff) : NULL, p ? p->llen : 0, mstr(m, f->loff),
                                              f->llen, f->version));
    }
    uint8_t nk[8], kb[2 * INGEST__CAT_NAME_MAX + 2], mark[9];
    put_be64(nk, next);
    MDB_val k = { 8, nk }, v = { fb->len, fb->buf };
    if ((rc = mdb_put(txn, cat->feed, &k, &v, 0)) != 0)
        return ingest__cat_mdb(cat, rc, "write feed record");
    mark[0] = 1;
    ingest__put_u64(mark + 1, next);
    MDB_val bk = { batch_key(device, batch, kb), kb }, bv = { 9, mark };
    if ((rc = mdb_put(txn, cat->batches, &bk, &bv, 0)) != 0)
        return ingest__cat_mdb(cat, rc, "write batch mark");
    INGEST__FORWARD(meta_put_u64(cat, txn, META_NEXT, next + 1));
    INGEST__FORWARD(meta_put_u64(cat, txn, META_FILES, nfiles + added));
    *files += m->n;
    return 1;
}

int ingest_catalog_add_batch(ingest_catalog *cat, const char *device, const char *batch)
{
    if (cat == NULL || device == NULL || batch == NULL || !name_ok(device, strlen(device)) ||
        !name_ok(batch, strlen(batch)))
        return cat ? ingest__fail(cat->ctx, INGEST_EINVAL, "catalog: bad device or batch name") : INGEST_EINVAL;
    if (cat->flags & INGEST_CATALOG_RDONLY)
        return ingest__fail(cat->ctx, INGEST_EINVAL, "catalog %s: opened read-only", cat->dir);
    pthread_mutex_lock(&cat->lock);
    mset m;
    memset(&m, 0, sizeof(m));
    m.ctx = cat->ctx;
    ingest__buf_init(&m.arena, cat->ctx, (size_t)1 << 32);
    MDB_txn *txn = NULL;
    uint64_t files = 0;
    int ret = read_manifest(cat, device, batch, &m);
    if (ret < 0)
        goto out;
    int rc = mdb_txn_begin(cat->env, NULL, 0, &txn);
    if (rc != 0) {
        ret = ingest__cat_mdb(cat, rc, "begin");
        txn = NULL;
        goto out;
    }
    ret = add_in_txn(cat, txn, device, batch, &m, &files);
    if (ret < 0)
        goto out;
    rc = mdb_txn_commit(txn);
    txn = NULL;
    if (rc != 0)
        ret = ingest__cat_mdb(cat, rc, "commit");
out:
    if (txn != NULL)
        mdb_txn_abort(txn);
    if (ret < 0)
        ingest__log(cat->ctx, INGEST_LOG_WARN, "catalog: batch %s of %s not added (the next catch-up adds it): %s",
                    batch, device, ingest_ctx_errmsg(cat->ctx));
    mset_free(&m);
    pthread_mutex_unlock(&cat->lock);
    return ret;
}

/* ---- the adder ---------------------------------------------------------------------- */

static void *adder_main(void *arg)
{
    (void)pthread_setname_np(pthread_self(), "ingest-catalog"); /* docs/architecture.md "Threads" */
    ingest_catalog *cat = arg;
    char device[INGEST__CAT_NAME_MAX + 1], batch[INGEST__CAT_NAME_MAX + 1];
    pthread_mutex_lock(&cat->aq_lock);
    for (;;) {
        while (cat->aq_n == 0 && !cat->adder_quit)
            pthread_cond_wait(&cat->aq_cond, &cat->aq_lock);
        if (cat->aq_n == 0)
            break;
        memcpy(device, cat->aq[cat->aq_head].device, sizeof(device));
        memcpy(batch, cat->aq[cat->aq_head].batch, sizeof(batch));
        pthread_mutex_unlock(&cat->aq_lock);
        (void)ingest_catalog_add_batch(cat, device, batch); /* a failure is logged; the next catch-up adds it */
        pthread_mutex_lock(&cat->aq_lock);
        cat->aq_head = (cat->aq_head + 1) % INGEST__CAT_ADD_QUEUE;
        cat->aq_n--;
        pthread_cond_broadcast(&cat->aq_cond); /* room, or drained */
    }
    pthread_mutex_unlock(&cat->aq_lock);
    return NULL;
}

int ingest_catalog_start_adder(ingest_catalog *cat)
{
    if (cat == NULL)
        return INGEST_EINVAL;
    if (cat->flags & INGEST_CATALOG_RDONLY)
        return ingest__fail(cat->ctx, INGEST_EINVAL, "catalog %s: opened read-only", cat->dir);
    if (cat->adder_on)
        return 0;
    const int e = pthread_create(&cat->adder, NULL, adder_main, cat);
    if (e != 0)
        return ingest__fail(cat->ctx, INGEST_ENOMEM, "catalog: cannot start its adder thread: %s", strerror(e));
    cat->adder_on = true;
    return 0;
}

int ingest_catalog_add_batch_later(ingest_catalog *cat, const char *device, const char *batch)
{
    if (cat == NULL || device == NULL || batch == NULL || !name_ok(device, strlen(device)) ||
        !name_ok(batch, strlen(batch)))
        return cat ? ingest__fail(cat->ctx, INGEST_EINVAL, "catalog: bad device or batch name") : INGEST_EINVAL;
    if (!cat->adder_on)
        return ingest_catalog_add_batch(cat, device, batch);
    pthread_mutex_lock(&cat->aq_lock);
    while (cat->aq_n == INGEST__CAT_ADD_QUEUE)
        pthread_cond_wait(&cat->aq_cond, &cat->aq_lock);
    const unsigned at = (cat->aq_head + cat->aq_n) % INGEST__CAT_ADD_QUEUE;
    snprintf(cat->aq[at].device, sizeof(cat->aq[at].device), "%s", device);
    snprintf(cat->aq[at].batch, sizeof(cat->aq[at].batch), "%s", batch);
    cat->aq_n++;
    pthread_cond_broadcast(&cat->aq_cond);
    pthread_mutex_unlock(&cat->aq_lock);
    return 2;
}

void ingest_catalog_drain(ingest_catalog *cat)
{
    if (cat == NULL || !cat->adder_on)
        return;
    pthread_mutex_lock(&cat->aq_lock);
    while (cat->aq_n > 0)
        pthread_cond_wait(&cat->aq_cond, &cat->aq_lock);
    pthread_mutex_unlock(&cat->aq_lock);
}

/* ---- catch-up --------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct names {
    char **v;
    size_t n, cap;
} names;

static void names_free(ingest_ctx *ctx, names *ns)
{
    for (size_t i = 0; i < ns->n; i++)
        ingest__free(ctx, ns->v[i]);
    ingest__free(ctx, ns->v);
    memset(ns, 0, sizeof(*ns));
}

/* The names in dir (sorted) that are valid names, with suffix cut (NULL: directories). */
static int list_dir(ingest_catalog *cat, const char *dir, const char *suffix, names *ns)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        if (errno == ENOENT)
            return 0;
        return ingest__fail(cat->ctx, ingest__errno(errno), "catalog: opendir %s: %s", dir, strerror(errno));
    }
    const size_t sl = suffix ? strlen(suffix) : 0;
    int ret = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (suffix != NULL) {
            if (n <= sl || memcmp(de->d_name + n - sl, suffix, sl) != 0)
                continue;
            n -= sl;
        }
        if (!name_ok(de->d_name, n))
            continue;
        if (suffix == NULL && de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
            continue;
        if (ns->n == ns->cap) {
            if (ns->cap >= WALK_ENTRIES_MAX) {
                ret = ingest__fail(cat->ctx, INGEST_ETOOBIG, "catalog: %s: too many entries", dir);
                break;
            }
            const size_t nc = ns->cap ? ns->cap * 2 : 64;
            char **nv = ingest__malloc(cat->ctx, nc * sizeof(*nv));
            if (nv == NULL) {
                ret = ingest__fail(cat->ctx, INGEST_ENOMEM, "catalog: out of memory");
                break;
            }
            if (ns->n)
                memcpy(nv, ns->v, ns->n * sizeof(*nv));
            ingest__free(cat->ctx, ns->v);
            ns->v = nv;
            ns->cap = nc;
        }
        char *s = ingest__malloc(cat->ctx, n + 1);
        if (s == NULL) {
            ret = ingest__fail(cat->ctx, INGEST_ENOMEM, "catalog: out of memory");
            break;
        }
        memcpy(s, de->d_name, n);
        s[n] = '\0';
        ns->v[ns->n++] = s;
    }
    closedir(d);
    if (ret == 0 && ns->n > 1)
        qsort(ns->v, ns->n, sizeof(*ns->v), cmp_str);
    return ret;
}

/* The recorded mtime of a device's manifest directory (0: none). */
static int dir_mark_get(ingest_catalog *cat, const char *device, int64_t *mt)
{
    *mt = 0;
    MDB_txn *txn = NULL;
    int rc = mdb_txn_begin(cat->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0)
        return ingest__cat_mdb(cat, rc, "begin");
    MDB_val k = { strlen(device), (void *)device }, v;
    rc = mdb_get(txn, cat->dirs, &k, &v);
    if (rc == 0 && v.mv_size == 9 && ((const uint8_t *)v.mv_data)[0] == 1)
        *mt = (int64_t)ingest__get_u64((const uint8_t *)v.mv_data + 1);
    mdb_txn_abort(txn);
    return rc == 0 || rc == MDB_NOTFOUND ? 0 : ingest__cat_mdb(cat, rc, "read directory mark");
}

/* Add a device's manifests not held; a group of them per write transaction. */
static int catch_up_device(ingest_catalog *cat, const char *device, const char *dpath, ingest_catalog_stats *st,
                           bool *clean)
{
    names bn = { NULL, 0, 0 };
    mset m;
    memset(&m, 0, sizeof(m));
    m.ctx = cat->ctx;
    ingest__buf_init(&m.arena, cat->ctx, (size_t)1 << 32);
    MDB_txn *txn = NULL;
    unsigned in_txn = 0;
    uint64_t files_in_txn = 0;
    int ret = list_dir(cat, dpath, ".jsonl", &bn), rc;
    if (ret < 0)
        goto out;
    for (size_t i = 0; i < bn.n; i++) {
        /* a cheap look first, outside the write lock */
        MDB_txn *rt = NULL;
        if ((rc = mdb_txn_begin(cat->env, NULL, MDB_RDONLY, &rt)) != 0) {
            ret = ingest__cat_mdb(cat, rc, "begin");
            goto out;
        }
        const int held = batch_held(cat, rt, device, bn.v[i]);
        mdb_txn_abort(rt);
        if (held != 0) {
            if (held < 0) {
                ret = held;
                goto out;
            }
            continue;
        }
        ingest__buf_reset(&m.arena);
        m.n = 0;
        m.created_ns = 0;
        ret = read_manifest(cat, device, bn.v[i], &m);
        if (ret == INGEST_ENOMEM)
            goto out;
        if (ret < 0) {
            st->bad++;
            *clean = false;
            ingest__log(cat->ctx, INGEST_LOG_WARN, "catalog: skipped %s/%s.jsonl: %s", dpath, bn.v[i],
                        ingest_ctx_errmsg(cat->ctx));
            ret = 0;
            continue;
        }
        if (txn == NULL && (rc = mdb_txn_begin(cat->env, NULL, 0, &txn)) != 0) {
            txn = NULL;
            ret = ingest__cat_mdb(cat, rc, "begin");
            goto out;
        }
        uint64_t files = 0;
        if ((ret = add_in_txn(cat, txn, device, bn.v[i], &m, &files)) < 0)
            goto out;
        if (ret == 1) {
            st->batches++;
            st->files += files;
            ingest__log(cat->ctx, INGEST_LOG_DEBUG, "catalog: added %s/%s.jsonl (%llu files)", dpath, bn.v[i],
                        (unsigned long long)files);
        }
        ret = 0;
        in_txn++;
        files_in_txn += files;
        if (in_txn >= GROUP_MANIFESTS || files_in_txn >= GROUP_FILES) {
            rc = mdb_txn_commit(txn);
            txn = NULL;
            if (rc != 0) {
                ret = ingest__cat_mdb(cat, rc, "commit");
                goto out;
            }
            in_txn = 0;
            files_in_txn = 0;
        }
    }
    if (txn != NULL) {
        rc = mdb_txn_commit(txn);
        txn = NULL;
        if (rc != 0)
            ret = ingest__cat_mdb(cat, rc, "commit");
    }
out:
    if (txn != NULL)
        mdb_txn_abort(txn);
    mset_free(&m);
    names_free(cat->ctx, &bn);
    return ret;
}

int ingest_catalog_catch_up(ingest_catalog *cat, ingest_catalog_stats *stats)
{
    ingest_catalog_stats local;
    if (stats == NULL)
        stats = &local;
    memset(stats, 0, sizeof(*stats));
    if (cat == NULL)
        return INGEST_EINVAL;
    if (cat->flags & INGEST_CATALOG_RDONLY)
        return ingest__fail(cat->ctx, INGEST_EINVAL, "catalog %s: opened read-only", cat->dir);
    pthread_mutex_lock(&cat->lock);
    char top[INGEST__CAT_DIR_MAX + 16], dpath[INGEST__CAT_PBUF];
    snprintf(top, sizeof(top), "%s/_manifests", cat->bronze);
    names dn = { NULL, 0, 0 };
    int ret = list_dir(cat, top, NULL, &dn);
    for (size_t i = 0; ret == 0 && i < dn.n; i++) {
        snprintf(dpath, sizeof(dpath), "%s/%s", top, dn.v[i]);
        struct stat sb;
        if (lstat(dpath, &sb) != 0 || !S_ISDIR(sb.st_mode))
            continue;
        const int64_t mt = ingest_time_ns(&sb.st_mtim);
        const int64_t t0 = now_ns();
        int64_t seen = 0;
        if ((ret = dir_mark_get(cat, dn.v[i], &seen)) < 0)
            break;
        if (seen != 0 && seen == mt)
            continue; /* nothing was added or renamed there since it was read through */
        stats->dirs_read++;
        bool clean = true;
        if ((ret = catch_up_device(cat, dn.v[i], dpath, stats, &clean)) < 0)
            break;
        /* Trust the mtime next time only when it is old enough that any
         * later change must move it, and every manifest there was added. */
        const int64_t keep = clean && t0 - mt >= DIR_SETTLE_NS ? mt : 0;
        if (keep != seen) {
            MDB_txn *txn = NULL;
            int rc = mdb_txn_begin(cat->env, NULL, 0, &txn);
            if (rc == 0) {
                uint8_t v9[9];
                v9[0] = 1;
                ingest__put_u64(v9 + 1, (uint64_t)keep);
                MDB_val k = { strlen(dn.v[i]), dn.v[i] }, v = { 9, v9 };
                rc = mdb_put(txn, cat->dirs, &k, &v, 0);
                if (rc == 0) {
                    rc = mdb_txn_commit(txn);
                } else {
                    mdb_txn_abort(txn);
                }
            }
            if (rc != 0)
                ret = ingest__cat_mdb(cat, rc, "write directory mark");
        }
    }
    names_free(cat->ctx, &dn);
    pthread_mutex_unlock(&cat->lock);
    if (ret == 0 && (stats->batches > 0 || stats->bad > 0))
        ingest__log(cat->ctx, INGEST_LOG_INFO, "catalog: caught up %llu batches (%llu files), %llu bad",
                    (unsigned long long)stats->batches, (unsigned long long)stats->files,
                    (unsigned long long)stats->bad);
    return ret;
}

int ingest_catalog_info(ingest_catalog *cat, ingest_catalog_stats *stats)
{
    memset(stats, 0, sizeof(*stats));
    if (cat == NULL)
        return INGEST_EINVAL;
    pthread_mutex_lock(&cat->lock);
    MDB_txn *txn = NULL;
    int ret = 0, rc = mdb_txn_begin(cat->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0) {
        ret = ingest__cat_mdb(cat, rc, "begin");
    } else {
        MDB_stat ms;
        uint64_t files = 0;
        if ((rc = mdb_stat(txn, cat->feed, &ms)) != 0)
            ret = ingest__cat_mdb(cat, rc, "stat");
        else
            stats->batches = ms.ms_entries;
        if (ret == 0 && (ret = meta_get_u64(cat, txn, META_FILES, &files)) == 0)
            stats->files = files;
        mdb_txn_abort(txn);
    }
    char p[INGEST__CAT_PBUF];
    snprintf(p, sizeof(p), "%s/data.mdb", cat->dir);
    struct stat sb;
    if (stat(p, &sb) == 0)
        stats->bytes = (uint64_t)sb.st_blocks * 512;
    pthread_mutex_unlock(&cat->lock);
    return ret;
}
