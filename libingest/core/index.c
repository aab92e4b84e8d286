/*
 * The core's chunk index, landed-file table and landed batches, kept in the
 * LMDB store; rebuilt from the manifests.  Encodings: docs/storage.md.
 */
#include "ingest/manifest.h"
#include "../store.h"
#include "inflight.h"

#include <dirent.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/*
 * The index format names the layout of the `chunks` keys, that is the
 * dedup scope: 1 (fleet) keys an entry by the chunk id alone, 2 (device) by
 * the landing device's name, a 0 byte and the id.  A format-1 reader never
 * opens a device-scoped index (it would miss every entry and add fleet
 * keys beside them): it refuses format 2 as another version.
 */
#define INDEX_FORMAT_FLEET 1
#define INDEX_FORMAT_DEVICE 2
#define VAL_VERSION 1
#define CHUNK_VAL_LEN 21 /* ver, file_no u64, offset u64, length u32 */
#define FILE_VAL_HDR 35  /* ver, dev, ino, size, mtime_ns, path length u16 */
#define PATH_VAL_LEN 9   /* ver, file_no u64 */
#define BATCH_VAL_LEN 9  /* ver, landed_ns i64 */
#define RELPATH_MAX INGEST_MANIFEST_PATH_MAX
#define NAME_MAX_LEN INGEST_MANIFEST_NAME_MAX
#define ABSPATH_MAX (2 * RELPATH_MAX + 2)
#define CHUNK_KEY_MAX (NAME_MAX_LEN + 1 + INGEST_ID_BYTES)
#define WALK_DEPTH_MAX 16
#define WALK_ENTRIES_MAX 1000000u

#define META_INDEX_FORMAT "index.format"
#define META_NEXT_FILE "index.next_file"
#define META_STATE "index.state"
enum { STATE_BUILDING = 1, STATE_READY = 2 };

struct ingest_index_s {
    ingest_store *st;
    ingest_ctx *ctx;
    char *bronze;
    ingest__dbi meta, chunks, files, paths, batches;
    ingest__dbi versions; /* the lander's table (landed path -> last version), kept with the index */
    int scope;            /* INGEST_DEDUP_*, from the index format */
    struct inflight *inf; /* chunks being received (inflight.h), made on first use */
};

/* ---- chunks in flight (inflight.h) ---- */

/* Linear probing, deletion by backward shift; an empty slot has owner NULL. */
struct inflight_slot {
    uint8_t id[INGEST_ID_BYTES];
    uint64_t dev; /* the device's tag with scope device, else 0 */
    const void *owner;
};

struct inflight {
    struct inflight_slot *slots;
    size_t cap, n; /* cap a power of two, n <= cap / 2 */
};

static uint64_t inflight_dev(const ingest_index *idx, const char *device)
{
    if (idx->scope != INGEST_DEDUP_DEVICE || device == NULL)
        return 0;
    uint64_t h = 1469598103934665603ull; /* FNV-1a: the id is the hash, this only separates devices */
    for (const char *p = device; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return h | 1;
}

static size_t inflight_home(const struct inflight *f, const uint8_t *id, uint64_t dev)
{
    uint64_t v; /* chunk ids are keyed hashes: their bytes are uniform */
    memcpy(&v, id, sizeof(v));
    return (size_t)((v ^ dev) & (f->cap - 1));
}

static struct inflight_slot *inflight_find(const struct inflight *f, const uint8_t *id, uint64_t dev)
{
    if (f == NULL || f->n == 0)
        return NULL;
    for (size_t s = inflight_home(f, id, dev);; s = (s + 1) & (f->cap - 1)) {
        struct inflight_slot *e = &f->slots[s];
        if (e->owner == NULL)
            return NULL;
        if (e->dev == dev && memcmp(e->id, id, INGEST_ID_BYTES) == 0)
            return e;
    }
}

static int inflight_grow(ingest_index *idx)
{
    struct inflight *f = idx->inf;
    const size_t nc = f->cap ? f->cap * 2 : 1024;
    struct inflight_slot *ns = ingest__calloc(idx->ctx, nc, sizeof(*ns));
    if (ns == NULL)
        return ingest__fail(idx->ctx, INGEST_ENOMEM, "index: out of memory for chunks in flight");
    struct inflight_slot *old = f->slots;
    const size_t oc = f->cap;
    f->slots = ns;
    f->cap = nc;
    for (size_t i = 0; i < oc; i++) {
        if (old[i].owner == NULL)
            continue;
        size_t s = inflight_home(f, old[i].id, old[i].dev);
        while (ns[s].owner != NULL)
            s = (s + 1) & (nc - 1);
        ns[s] = old[i];
    }
    ingest__free(idx->ctx, old);
    return 0;
}

const void *ingest__inflight_owner(ingest_index *idx, const char *device, const uint8_t id[INGEST_ID_BYTES])
{
    const struct inflight_slot *e = idx != NULL ? inflight_find(idx->inf, id, inflight_dev(idx, device)) : NULL;
    return e != NULL ? e->owner : NULL;
}

int ingest__inflight_add(ingest_index *idx, const char *device, const uint8_t id[INGEST_ID_BYTES], const void *owner)
{
    if (idx == NULL || owner == NULL)
        return INGEST_EINVAL;
    if (idx->inf == NULL && (idx->inf = ingest__calloc(idx->ctx, 1, sizeof(*idx->inf))) == NULL)
        return ingest__fail(idx->ctx, INGEST_ENOMEM, "index: out of memory for chunks in flight");
    struct inflight *f = idx->inf;
    const uint64_t dev = inflight_dev(idx, device);
    if (inflight_find(f, id, dev) != NULL || f->n >= INGEST__INFLIGHT_MAX)
        return 0;
    if ((f->n + 1) * 2 > f->cap)
        INGEST__FORWARD(inflight_grow(idx));
    size_t s = inflight_home(f, id, dev);
    while (f->slots[s].owner != NULL)
        s = (s + 1) & (f->cap - 1);
    memcpy(f->slots[s].id, id, INGEST_ID_BYTES);
    f->slots[s].dev = dev;
    f->slots[s].owner = owner;
    f->n++;
    return 1;
}

void ingest__inflight_del(ingest_index *idx, const char *device, const uint8_t id[INGEST_ID_BYTES], const void *owner)
{
    if (idx == NULL)
        return;
    struct inflight *f = idx->inf;
    struct inflight_slot *e = inflight_find(f, id, inflight_dev(idx, device));
    if (e == NULL || e->owner != owner)
        return;
    /* backward shift: pull later entries of the run into the gap so every lookup still finds them */
    size_t hole = (size_t)(e - f->slots);
    for (size_t s = (hole + 1) & (f->cap - 1); f->slots[s].owner != NULL; s = (s + 1) & (f->cap - 1)) {
        const size_t home = inflight_home(f, f->slots[s].id, f->slots[s].dev);
        /* the entry at s may fill the hole when its home is not cyclically within (hole, s] */
        const int movable = hole <= s ? (home <= hole || home > s) : (home <= hole && home > s);
        if (movable) {
            f->slots[hole] = f->slots[s];
            hole = s;
        }
    }
    memset(&f->slots[hole], 0, sizeof(f->slots[hole]));
    f->n--;
}

size_t ingest__inflight_count(const ingest_index *idx)
{
    return idx != NULL && idx->inf != NULL ? idx->inf->n : 0;
}

/* ---- encodings ---- */

/* A relative path below the bronze root: no empty, "." or ".." component. */
static bool relpath_ok(const char *p, size_t len)
{
    if (len == 0 || len > RELPATH_MAX || p[0] == '/')
        return false;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && p[i] == '\0')
            return false;
        if (i == len || p[i] == '/') {
            const size_t n = i - start;
            if (n == 0 || (n == 1 && p[start] == '.') || (n == 2 && p[start] == '.' && p[start + 1] == '.'))
                return false;
            start = i + 1;
        }
    }
    return true;
}

static void path_key(const char *relpath, size_t len, uint8_t key[32])
{
    crypto_generichash(key, 32, (const unsigned char *)relpath, len, NULL, 0);
}

static void enc_chunk(uint8_t v[CHUNK_VAL_LEN], const ingest_chunk_loc *loc)
{
    v[0] = VAL_VERSION;
    ingest__put_u64(v + 1, loc->file_no);
    ingest__put_u64(v + 9, loc->offset);
    ingest__put_u32(v + 17, loc->length);
}

static bool dec_chunk(const uint8_t *v, size_t len, ingest_chunk_loc *loc)
{
    if (len != CHUNK_VAL_LEN || v[0] != VAL_VERSION)
        return false;
    loc->file_no = ingest__get_u64(v + 1);
    loc->offset = ingest__get_u64(v + 9);
    loc->length = ingest__get_u32(v + 17);
    return loc->file_no != 0 && loc->length != 0 && loc->offset <= UINT64_MAX - loc->length;
}

typedef struct file_rec {
    ingest_file_identity id;
    const char *path; /* not terminated */
    size_t pathlen;
} file_rec;

static bool dec_file(const uint8_t *v, size_t len, file_rec *f)
{
    if (len < FILE_VAL_HDR || v[0] != VAL_VERSION)
        return false;
    f->id.dev = ingest__get_u64(v + 1);
    f->id.ino = ingest__get_u64(v + 9);
    f->id.size = ingest__get_u64(v + 17);
    f->id.mtime_ns = (int64_t)ingest__get_u64(v + 25);
    f->pathlen = ingest__get_u16(v + 33);
    f->path = (const char *)v + FILE_VAL_HDR;
    return f->pathlen == len - FILE_VAL_HDR && relpath_ok(f->path, f->pathlen);
}

static void id_hex(const uint8_t id[INGEST_ID_BYTES], char out[2 * INGEST_ID_BYTES + 1])
{
    ingest_to_hex(id, INGEST_ID_BYTES, out);
}

/*
 * The `chunks` key of id as seen by device: the id (fleet scope), or the
 * device's name, a 0 byte and the id (device scope, where a device finds
 * only the chunks it landed itself).
 */
static int chunk_key(ingest_index *idx, const char *device, const uint8_t id[INGEST_ID_BYTES],
                     uint8_t key[CHUNK_KEY_MAX], size_t *klen)
{
    if (idx->scope == INGEST_DEDUP_FLEET) {
        memcpy(key, id, INGEST_ID_BYTES);
        *klen = INGEST_ID_BYTES;
        return 0;
    }
    const size_t dl = device != NULL ? strlen(device) : 0;
    if (dl == 0 || dl > NAME_MAX_LEN)
        return ingest__fail(idx->ctx, INGEST_EINVAL,
                            "index: dedup scope device: a chunk entry needs the device name (1 to %d bytes)",
                            NAME_MAX_LEN);
    memcpy(key, device, dl);
    key[dl] = 0;
    memcpy(key + dl + 1, id, INGEST_ID_BYTES);
    *klen = dl + 1 + INGEST_ID_BYTES;
    return 0;
}

/* Is key a well-formed `chunks` key of the index's scope?  Its id in *id. */
static bool chunk_key_ok(const ingest_index *idx, const uint8_t *key, size_t klen, const uint8_t **id)
{
    if (idx->scope == INGEST_DEDUP_FLEET) {
        *id = key;
        return klen == INGEST_ID_BYTES;
    }
    if (klen < INGEST_ID_BYTES + 2 || klen > CHUNK_KEY_MAX)
        return false;
    *id = key + klen - INGEST_ID_BYTES;
    return memchr(key, 0, klen - INGEST_ID_BYTES) == key + klen - INGEST_ID_BYTES - 1;
}

/* ---- meta records ---- */

static int meta_get_u64(ingest_index *idx, const char *key, uint64_t *v, bool *present)
{
    uint8_t buf[8];
    size_t len = 0;
    const int rc = ingest__store_get(idx->st, idx->meta, key, strlen(key), buf, sizeof(buf), &len);
    *present = false;
    if (rc == INGEST_ENOTFOUND)
        return 0;
    INGEST__FORWARD(rc);
    if (len != 8)
        return ingest__fail(idx->ctx, INGEST_ECORRUPT, "index: meta %s: %zu bytes, want 8", key, len);
    *v = ingest__get_u64(buf);
    *present = true;
    return 0;
}

static int meta_put_u64(ingest_index *idx, const char *key, uint64_t v)
{
    uint8_t buf[8];
    ingest__put_u64(buf, v);
    return ingest__store_put(idx->st, idx->meta, key, strlen(key), buf, 8);
}

int ingest_index_rebuild_needed(ingest_index *idx)
{
    uint64_t v = 0;
    bool present;
    INGEST__FORWARD(meta_get_u64(idx, META_STATE, &v, &present));
    if (!present)
        return 1;
    if (v != STATE_BUILDING && v != STATE_READY)
        return ingest__fail(idx->ctx, INGEST_ECORRUPT, "index: meta %s: bad value %llu", META_STATE,
                            (unsigned long long)v);
    return v == STATE_READY ? 0 : 1;
}

/* ---- open/close ---- */

int ingest_index_open(ingest_store *st, const char *bronze_root, ingest_index **out)
{
    if (out == NULL)
        return INGEST_EINVAL;
    *out = NULL;
    if (st == NULL)
        return INGEST_EINVAL;
    ingest_ctx *const ctx = ingest__store_ctx(st);
    int ret;
    ingest_index *idx = ingest__calloc(ctx, 1, sizeof(*idx));
    if (idx == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "index: out of memory");
    idx->st = st;
    idx->ctx = ctx;
    if (bronze_root != NULL) {
        if (strlen(bronze_root) > RELPATH_MAX) {
            ret = ingest__fail(ctx, INGEST_ETOOBIG, "index: bronze root path too long");
            goto fail;
        }
        idx->bronze = ingest__strdup(ctx, bronze_root);
        if (idx->bronze == NULL) {
            ret = ingest__fail(ctx, INGEST_ENOMEM, "index: out of memory");
            goto fail;
        }
    }
    if ((ret = ingest__store_db(st, "meta", &idx->meta)) < 0 || (ret = ingest__store_db(st, "chunks", &idx->chunks)) < 0 ||
        (ret = ingest__store_db(st, "files", &idx->files)) < 0 || (ret = ingest__store_db(st, "paths", &idx->paths)) < 0 ||
        (ret = ingest__store_db(st, "batches", &idx->batches)) < 0)
        goto fail;
    /* read-only users (ingestctl) never write versions; an older store may lack the table */
    if (!ingest__store_readonly(st) && (ret = ingest__store_db(st, INGEST__VERSIONS_TABLE, &idx->versions)) < 0)
        goto fail;
    /* Deferred in a store opened so (the receiver): a flush writes the
     * tables in this order, batch marks last, so a crash in the middle of
     * one leaves the batches it did not finish unmarked (caught up). */
    if ((ret = ingest__store_defer(st, idx->meta)) < 0 || (ret = ingest__store_defer(st, idx->files)) < 0 ||
        (ret = ingest__store_defer(st, idx->paths)) < 0 || (ret = ingest__store_defer(st, idx->chunks)) < 0 ||
        (!ingest__store_readonly(st) && (ret = ingest__store_defer(st, idx->versions)) < 0) ||
        (ret = ingest__store_defer(st, idx->batches)) < 0)
        goto fail;

    uint64_t fmt = 0, next = 0, nchunks = 0, nfiles = 0;
    bool has_fmt, has_next;
    uint8_t b4[8];
    size_t len = 0;
    ret = ingest__store_get(st, idx->meta, META_INDEX_FORMAT, strlen(META_INDEX_FORMAT), b4, sizeof(b4), &len);
    has_fmt = ret == 0;
    if (ret < 0 && ret != INGEST_ENOTFOUND)
        goto fail;
    if (has_fmt) {
        if (len != 4) {
            ret = ingest__fail(ctx, INGEST_ECORRUPT, "index: meta %s: %zu bytes, want 4", META_INDEX_FORMAT, len);
            goto fail;
        }
        fmt = ingest__get_u32(b4);
        if (fmt != INDEX_FORMAT_FLEET && fmt != INDEX_FORMAT_DEVICE) {
            ret = ingest__fail(ctx, INGEST_EVERSION,
                               "index: format %llu, this library reads %d (dedup scope fleet) and %d (device)",
                               (unsigned long long)fmt, INDEX_FORMAT_FLEET, INDEX_FORMAT_DEVICE);
            goto fail;
        }
        idx->scope = fmt == INDEX_FORMAT_DEVICE ? INGEST_DEDUP_DEVICE : INGEST_DEDUP_FLEET;
    }
    if ((ret = meta_get_u64(idx, META_NEXT_FILE, &next, &has_next)) < 0)
        goto fail;
    if (has_fmt && !has_next) {
        ret = ingest__fail(ctx, INGEST_ECORRUPT, "index: meta %s missing", META_NEXT_FILE);
        goto fail;
    }
    if (has_next && next == 0) {
        ret = ingest__fail(ctx, INGEST_ECORRUPT, "index: meta %s is 0", META_NEXT_FILE);
        goto fail;
    }
    if (!has_fmt) {
        if ((ret = ingest__store_count(st, idx->chunks, &nchunks)) < 0 ||
            (ret = ingest__store_count(st, idx->files, &nfiles)) < 0)
            goto fail;
        if (nchunks != 0 || nfiles != 0 || has_next) {
            ret = ingest__fail(ctx, INGEST_ECORRUPT, "index: meta %s missing in a non-empty index",
                               META_INDEX_FORMAT);
            goto fail;
        }
        if (ingest__store_readonly(st)) {
            ret = ingest__fail(ctx, INGEST_ECORRUPT, "index: store holds no index");
            goto fail;
        }
        ingest__put_u32(b4, INDEX_FORMAT_FLEET); /* a new index: fleet scope until set_scope */
        if ((ret = ingest__store_write_begin(st, 2)) < 0 ||
            (ret = ingest__store_put(st, idx->meta, META_INDEX_FORMAT, strlen(META_INDEX_FORMAT), b4, 4)) < 0 ||
            (ret = meta_put_u64(idx, META_NEXT_FILE, 1)) < 0 || (ret = ingest_store_flush(st)) < 0)
            goto fail;
    }
    if ((ret = ingest_index_rebuild_needed(idx)) < 0)
        goto fail;
    *out = idx;
    return 0;
fail:
    ingest_index_close(idx);
    return ret;
}

void ingest_index_close(ingest_index *idx)
{
    if (idx == NULL)
        return;
    if (idx->inf != NULL) {
        ingest__free(idx->ctx, idx->inf->slots);
        ingest__free(idx->ctx, idx->inf);
    }
    ingest__free(idx->ctx, idx->bronze);
    ingest__free(idx->ctx, idx);
}

int ingest_index_scope(const ingest_index *idx)
{
    return idx != NULL ? idx->scope : INGEST_EINVAL;
}

int ingest_index_set_scope(ingest_index *idx, int scope)
{
    if (idx == NULL || (scope != INGEST_DEDUP_FLEET && scope != INGEST_DEDUP_DEVICE))
        return INGEST_EINVAL;
    if (scope == idx->scope)
        return 0;
    if (ingest__store_readonly(idx->st))
        return ingest__fail(idx->ctx, INGEST_EINVAL, "index: read-only store: cannot change the dedup scope");
    /* The rebuild mark first, then the old scope's chunk entries dropped
     * and the new format: one transaction, or (deferred store) three
     * synced ones in this order.  A crash anywhere from here to the end
     * of the rebuild leaves the mark, and the rebuild empties the table
     * and refills it in the scope the format then says: an index marked
     * complete never holds keys of the other scope. */
    uint8_t b4[4];
    ingest__put_u32(b4, scope == INGEST_DEDUP_DEVICE ? INDEX_FORMAT_DEVICE : INDEX_FORMAT_FLEET);
    INGEST__FORWARD(ingest_store_flush(idx->st));
    INGEST__FORWARD(ingest__store_write_begin(idx->st, 3));
    INGEST__FORWARD(meta_put_u64(idx, META_STATE, STATE_BUILDING));
    INGEST__FORWARD(ingest__store_drop(idx->st, idx->chunks));
    INGEST__FORWARD(ingest__store_put(idx->st, idx->meta, META_INDEX_FORMAT, strlen(META_INDEX_FORMAT), b4, 4));
    INGEST__FORWARD(ingest_store_flush(idx->st));
    idx->scope = scope;
    return 1;
}

/* ---- files ---- */

static int get_file(ingest_index *idx, uint64_t file_no, uint8_t *buf, size_t cap, file_rec *f)
{
    uint8_t key[8];
    size_t len = 0;
    ingest__put_be64(key, file_no);
    INGEST__FORWARD(ingest__store_get(idx->st, idx->files, key, 8, buf, cap, &len));
    if (len > cap || !dec_file(buf, len, f))
        return ingest__fail(idx->ctx, INGEST_ECORRUPT, "index: file %llu: malformed value (%zu bytes)",
                            (unsigned long long)file_no, len);
    return 0;
}

int ingest_index_add_file(ingest_index *idx, const char *relpath, const ingest_file_identity *ident,
                          uint64_t *file_no)
{
    if (idx == NULL || relpath == NULL || ident == NULL)
        return INGEST_EINVAL;
    const size_t plen = strlen(relpath);
    if (!relpath_ok(relpath, plen))
        return ingest__fail(idx->ctx, INGEST_EINVAL, "index: add file: bad relative path '%.200s'", relpath);
    uint8_t pkey[32], pval[PATH_VAL_LEN], fkey[8];
    uint64_t next = 0;
    bool present;
    size_t len = 0;
    path_key(relpath, plen, pkey);
    INGEST__FORWARD(ingest__store_write_begin(idx->st, 4));
    INGEST__FORWARD(meta_get_u64(idx, META_NEXT_FILE, &next, &present));
    if (!present || next == 0)
        return ingest__fail(idx->ctx, INGEST_ECORRUPT, "index: meta %s missing", META_NEXT_FILE);
    /* The same landed path added again replaces the old record; chunks
     * still pointing at the old number are then stale. */
    int rc = ingest__store_get(idx->st, idx->paths, pkey, 32, pval, sizeof(pval), &len);
    if (rc == 0 && len == PATH_VAL_LEN && pval[0] == VAL_VERSION) {
        ingest__put_be64(fkey, ingest__get_u64(pval + 1));
        rc = ingest__store_del(idx->st, idx->files, fkey, 8);
        if (rc < 0 && rc != INGEST_ENOTFOUND)
            return rc;
    } else if (rc < 0 && rc != INGEST_ENOTFOUND) {
        return rc;
    }

    uint8_t *const v = ingest__malloc(idx->ctx, FILE_VAL_HDR + plen);
    if (v == NULL)
        return ingest__fail(idx->ctx, INGEST_ENOMEM, "index: out of memory");
    v[0] = VAL_VERSION;
    ingest__put_u64(v + 1, ident->dev);
    ingest__put_u64(v + 9, ident->ino);
    ingest__put_u64(v + 17, ident->size);
    ingest__put_u64(v + 25, (uint64_t)ident->mtime_ns);
    ingest__put_u16(v + 33, (uint16_t)plen);
    memcpy(v + FILE_VAL_HDR, relpath, plen);
    ingest__put_be64(fkey, next);
    pval[0] = VAL_VERSION;
    ingest__put_u64(pval + 1, next);
    rc = ingest__store_put(idx->st, idx->files, fkey, 8, v, FILE_VAL_HDR + plen);
    ingest__free(idx->ctx, v);
    INGEST__FORWARD(rc);
    INGEST__FORWARD(ingest__store_put(idx->st, idx->paths, pkey, 32, pval, PATH_VAL_LEN));
    INGEST__FORWARD(meta_put_u64(idx, META_NEXT_FILE, next + 1));
    if (file_no != NULL)
        *file_no = next;
    return 0;
}

/* Is the file on disk still the one recorded?  0, or ESTALE with detail. */
static int check_identity(ingest_index *idx, uint64_t file_no, const file_rec *f, char *path, size_t cap)
{
    if (idx->bronze == NULL)
        return ingest__fail(idx->ctx, INGEST_EINVAL, "index: no bronze root");
    const int n = snprintf(path, cap, "%s/%.*s", idx->bronze, (int)f->pathlen, f->path);
    if (n < 0 || (size_t)n >= cap)
        return ingest__fail(idx->ctx, INGEST_ETOOBIG, "index: file %llu: path does not fit",
                            (unsigned long long)file_no);
    struct stat sb;
    /* never through a symlink: one landed at this path since (a newer version), or on its way */
    char rel[RELPATH_MAX + 1];
    snprintf(rel, sizeof(rel), "%.*s", (int)f->pathlen, f->path);
    if (ingest__lstat_beneath(idx->bronze, rel, &sb) != 0) {
        const int e = errno;
        if (e == ENOENT || e == ENOTDIR || e == ELOOP || e == EXDEV)
            return ingest__fail(idx->ctx, INGEST_ESTALE, "index: file %llu (%s): missing%s", (unsigned long long)file_no,
                                path, e == ELOOP ? " (a symlink on its way)" : "");
        return ingest__fail(idx->ctx, ingest__errno(e), "index: stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode))
        return ingest__fail(idx->ctx, INGEST_ESTALE, "index: file %llu (%s): no longer a regular file",
                            (unsigned long long)file_no, path);
    const int64_t mt = ingest_time_ns(&sb.st_mtim);
    if ((uint64_t)sb.st_size != f->id.size || mt != f->id.mtime_ns)
        return ingest__fail(idx->ctx, INGEST_ESTALE,
                            "index: file %llu (%s): changed (size %llu, recorded %llu; mtime %lld, recorded %lld)",
                            (unsigned long long)file_no, path, (unsigned long long)sb.st_size,
                            (unsigned long long)f->id.size, (long long)mt, (long long)f->id.mtime_ns);
    if ((uint64_t)sb.st_dev != f->id.dev || (uint64_t)sb.st_ino != f->id.ino)
        /* same size and mtime, another file: copied (cp -a, a restore), or this index is of another tree */
        return ingest__fail(idx->ctx, INGEST_ESTALE,
                            "index: file %llu (%s): another file than the one landed (device %llu inode %llu, recorded "
                            "device %llu inode %llu; size and mtime as recorded): copied or restored since, or the "
                            "index is of another bronze tree",
                            (unsigned long long)file_no, path, (unsigned long long)sb.st_dev,
                            (unsigned long long)sb.st_ino, (unsigned long long)f->id.dev,
                            (unsigned long long)f->id.ino);
    return 0;
}

int ingest_index_file_path(ingest_index *idx, uint64_t file_no, char *path, size_t cap)
{
    if (idx == NULL || path == NULL || cap == 0)
        return INGEST_EINVAL;
    path[0] = '\0';
    uint8_t buf[FILE_VAL_HDR + RELPATH_MAX];
    file_rec f;
    const int rc = get_file(idx, file_no, buf, sizeof(buf), &f);
    if (rc == INGEST_ENOTFOUND) {
        uint64_t next = 0;
        bool present;
        INGEST__FORWARD(meta_get_u64(idx, META_NEXT_FILE, &next, &present));
        /* A number handed out before whose record is gone was replaced. */
        if (present && file_no != 0 && file_no < next)
            return ingest__fail(idx->ctx, INGEST_ESTALE, "index: file %llu: replaced", (unsigned long long)file_no);
        return ingest__fail(idx->ctx, INGEST_ENOTFOUND, "index: file %llu: no such file", (unsigned long long)file_no);
    }
    INGEST__FORWARD(rc);
    const int r = check_identity(idx, file_no, &f, path, cap);
    if (r < 0)
        path[0] = '\0';
    return r;
}

/* ---- chunks ---- */

int ingest_index_add_chunk_for(ingest_index *idx, const char *device, const uint8_t id[INGEST_ID_BYTES],
                               const ingest_chunk_loc *loc)
{
    if (idx == NULL || id == NULL || loc == NULL)
        return INGEST_EINVAL;
    if (loc->file_no == 0 || loc->length == 0 || loc->offset > UINT64_MAX - loc->length)
        return ingest__fail(idx->ctx, INGEST_EINVAL, "index: add chunk: bad location");
    uint8_t key[CHUNK_KEY_MAX], v[CHUNK_VAL_LEN];
    size_t klen = 0;
    INGEST__FORWARD(chunk_key(idx, device, id, key, &klen));
    enc_chunk(v, loc);
    INGEST__FORWARD(ingest__store_write_begin(idx->st, 1));
    return ingest__store_put(idx->st, idx->chunks, key, klen, v, sizeof(v));
}

int ingest_index_add_chunk(ingest_index *idx, const uint8_t id[INGEST_ID_BYTES], const ingest_chunk_loc *loc)
{
    return ingest_index_add_chunk_for(idx, NULL, id, loc);
}

int ingest_index_find_for(ingest_index *idx, const char *device, const uint8_t id[INGEST_ID_BYTES],
                          ingest_chunk_loc *loc)
{
    if (idx == NULL || id == NULL || loc == NULL)
        return INGEST_EINVAL;
    uint8_t key[CHUNK_KEY_MAX], v[CHUNK_VAL_LEN + 1];
    size_t klen = 0, len = 0;
    INGEST__FORWARD(chunk_key(idx, device, id, key, &klen));
    INGEST__FORWARD(ingest__store_get(idx->st, idx->chunks, key, klen, v, sizeof(v), &len));
    if (!dec_chunk(v, len, loc)) {
        char hex[2 * INGEST_ID_BYTES + 1];
        id_hex(id, hex);
        memset(loc, 0, sizeof(*loc));
        return ingest__fail(idx->ctx, INGEST_ECORRUPT, "index: chunk %s: malformed value (%zu bytes)", hex, len);
    }
    return 0;
}

int ingest_index_find(ingest_index *idx, const uint8_t id[INGEST_ID_BYTES], ingest_chunk_loc *loc)
{
    return ingest_index_find_for(idx, NULL, id, loc);
}

int ingest_index_forget_chunk_for(ingest_index *idx, const char *device, const uint8_t id[INGEST_ID_BYTES])
{
    if (idx == NULL || id == NULL)
        return INGEST_EINVAL;
    uint8_t key[CHUNK_KEY_MAX];
    size_t klen = 0;
    INGEST__FORWARD(chunk_key(idx, device, id, key, &klen));
    INGEST__FORWARD(ingest__store_write_begin(idx->st, 1));
    return ingest__store_del(idx->st, idx->chunks, key, klen);
}

int ingest_index_forget_chunk(ingest_index *idx, const uint8_t id[INGEST_ID_BYTES])
{
    return ingest_index_forget_chunk_for(idx, NULL, id);
}

/* ---- batches ---- */

static int batch_key(ingest_index *idx, const char *device, const char *batch, uint8_t *key, size_t *klen)
{
    if (device == NULL || batch == NULL)
        return INGEST_EINVAL;
    const size_t dl = strlen(device), bl = strlen(batch);
    if (dl == 0 || bl == 0 || dl > NAME_MAX_LEN || bl > NAME_MAX_LEN)
        return ingest__fail(idx->ctx, INGEST_EINVAL, "index: batch: device or batch name empty or too long");
    memcpy(key, device, dl);
    key[dl] = 0;
    memcpy(key + dl + 1, batch, bl);
    *klen = dl + 1 + bl;
    return 0;
}

int ingest_index_batch_landed(ingest_index *idx, const char *device, const char *batch)
{
    if (idx == NULL)
        return INGEST_EINVAL;
    uint8_t key[2 * NAME_MAX_LEN + 1], v[BATCH_VAL_LEN];
    size_t klen = 0, len = 0;
    INGEST__FORWARD(batch_key(idx, device, batch, key, &klen));
    const int rc = ingest__store_get(idx->st, idx->batches, key, klen, v, sizeof(v), &len);
    if (rc == INGEST_ENOTFOUND)
        return 0;
    INGEST__FORWARD(rc);
    if (len != BATCH_VAL_LEN || v[0] != VAL_VERSION)
        return ingest__fail(idx->ctx, INGEST_ECORRUPT, "index: batch %s/%s: malformed value (%zu bytes)", device,
                            batch, len);
    return 1;
}

static int batch_mark_at(ingest_index *idx, const char *device, const char *batch, int64_t when_ns)
{
    uint8_t key[2 * NAME_MAX_LEN + 1], v[BATCH_VAL_LEN];
    size_t klen = 0;
    INGEST__FORWARD(batch_key(idx, device, batch, key, &klen));
    v[0] = VAL_VERSION;
    ingest__put_u64(v + 1, (uint64_t)when_ns);
    INGEST__FORWARD(ingest__store_write_begin(idx->st, 1));
    return ingest__store_put(idx->st, idx->batches, key, klen, v, sizeof(v));
}

int ingest_index_batch_mark(ingest_index *idx, const char *device, const char *batch)
{
    if (idx == NULL)
        return INGEST_EINVAL;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return batch_mark_at(idx, device, batch, ingest_time_ns(&ts));
}

/* ---- check ---- */

#define FCACHE_SLOTS 4096
enum { FS_OK = 1, FS_STALE = 2, FS_BAD = 3, FS_MISSING = 4 };

typedef struct fcache_slot {
    uint64_t file_no;
    uint64_t size;
    int status;
} fcache_slot;

typedef struct check_state {
    ingest_index *idx;
    void (*cb)(void *ud, const char *problem);
    void *ud;
    ingest_index_stats *stats;
    fcache_slot *cache;
    uint8_t fbuf[FILE_VAL_HDR + RELPATH_MAX];
    char path[ABSPATH_MAX];
    char msg[INGEST__ERRMSG_MAX + 128];
} check_state;

INGEST__PRINTF(2, 3) static void report(check_state *cs, const char *fmt, ...)
{
    if (cs->cb == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cs->msg, sizeof(cs->msg), fmt, ap);
    va_end(ap);
    cs->cb(cs->ud, cs->msg);
}

/* Status of file_no: record present and well formed, file unchanged. */
static int file_status(check_state *cs, uint64_t file_no, uint64_t *size, bool quiet)
{
    fcache_slot *const slot = &cs->cache[file_no % FCACHE_SLOTS];
    if (slot->file_no == file_no && slot->status != 0) {
        *size = slot->size;
        return slot->status;
    }
    file_rec f;
    int status;
    *size = 0;
    const int rc = get_file(cs->idx, file_no, cs->fbuf, sizeof(cs->fbuf), &f);
    if (rc == INGEST_ENOTFOUND) {
        status = FS_MISSING;
    } else if (rc == INGEST_ECORRUPT) {
        status = FS_BAD;
    } else if (rc < 0) {
        return rc;
    } else {
        *size = f.id.size;
        status = FS_OK;
        if (cs->idx->bronze != NULL) {
            const int r = check_identity(cs->idx, file_no, &f, cs->path, sizeof(cs->path));
            if (r == INGEST_ESTALE || r == INGEST_ETOOBIG) {
                status = FS_STALE;
                if (!quiet)
                    report(cs, "stale file %llu: %s", (unsigned long long)file_no, ingest_ctx_errmsg(cs->idx->ctx));
            } else if (r < 0) {
                return r;
            }
        }
    }
    slot->file_no = file_no;
    slot->size = *size;
    slot->status = status;
    return status;
}

static int check_file_cb(void *ud, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    check_state *const cs = ud;
    file_rec f;
    cs->stats->files++;
    if (klen != 8 || !dec_file(val, vlen, &f)) {
        cs->stats->bad++;
        report(cs, "bad file entry: key of %zu bytes, value of %zu bytes malformed", klen, vlen);
        return 0;
    }
    const uint64_t file_no = ingest__get_be64(key);
    uint64_t size;
    const int st = file_status(cs, file_no, &size, false);
    if (st < 0)
        return st;
    if (st == FS_STALE)
        cs->stats->stale++;
    return 0;
}

static int check_chunk_cb(void *ud, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    check_state *const cs = ud;
    ingest_chunk_loc loc;
    char hex[2 * INGEST_ID_BYTES + 1];
    const uint8_t *id = NULL;
    cs->stats->chunks++;
    if (!chunk_key_ok(cs->idx, key, klen, &id)) {
        cs->stats->bad++;
        report(cs, "bad chunk entry: key of %zu bytes (dedup scope %s)", klen,
               cs->idx->scope == INGEST_DEDUP_DEVICE ? "device" : "fleet");
        return 0;
    }
    id_hex(id, hex);
    if (!dec_chunk(val, vlen, &loc)) {
        cs->stats->bad++;
        report(cs, "bad chunk %s: malformed value (%zu bytes)", hex, vlen);
        return 0;
    }
    uint64_t size = 0;
    const int st = file_status(cs, loc.file_no, &size, true);
    if (st < 0)
        return st;
    switch (st) {
    case FS_MISSING:
        cs->stats->stale++;
        report(cs, "stale chunk %s: file %llu has no record (replaced or never recorded)", hex, (unsigned long long)loc.file_no);
        break;
    case FS_BAD:
        cs->stats->stale++;
        report(cs, "stale chunk %s: file %llu record is malformed", hex, (unsigned long long)loc.file_no);
        break;
    case FS_STALE:
        cs->stats->stale++;
        report(cs, "stale chunk %s: file %llu missing or changed", hex, (unsigned long long)loc.file_no);
        break;
    default:
        if (loc.offset + loc.length > size) {
            cs->stats->bad++;
            report(cs, "bad chunk %s: [%llu, +%u) past the end of file %llu (%llu bytes)", hex,
                   (unsigned long long)loc.offset, (unsigned)loc.length, (unsigned long long)loc.file_no,
                   (unsigned long long)size);
        }
        break;
    }
    return 0;
}

static int check_path_cb(void *ud, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    check_state *const cs = ud;
    (void)key;
    if (klen != 32 || vlen != PATH_VAL_LEN || val[0] != VAL_VERSION || ingest__get_u64(val + 1) == 0) {
        cs->stats->bad++;
        report(cs, "bad path entry: key of %zu bytes, value of %zu bytes malformed", klen, vlen);
    }
    return 0;
}

static int check_batch_cb(void *ud, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    check_state *const cs = ud;
    cs->stats->batches++;
    const uint8_t *const z = memchr(key, 0, klen);
    if (z == NULL || z == key || (size_t)(z - key) == klen - 1 || vlen != BATCH_VAL_LEN || val[0] != VAL_VERSION) {
        cs->stats->bad++;
        report(cs, "bad batch entry: key of %zu bytes, value of %zu bytes malformed", klen, vlen);
    }
    return 0;
}

int ingest_index_check(ingest_index *idx, void (*cb)(void *ud, const char *problem), void *ud,
                       ingest_index_stats *stats)
{
    if (idx == NULL)
        return INGEST_EINVAL;
    ingest_index_stats local;
    if (stats == NULL)
        stats = &local;
    memset(stats, 0, sizeof(*stats));
    check_state *const cs = ingest__calloc(idx->ctx, 1, sizeof(*cs));
    if (cs == NULL)
        return ingest__fail(idx->ctx, INGEST_ENOMEM, "index: out of memory");
    int ret;
    cs->idx = idx;
    cs->cb = cb;
    cs->ud = ud;
    cs->stats = stats;
    cs->cache = ingest__calloc(idx->ctx, FCACHE_SLOTS, sizeof(*cs->cache));
    if (cs->cache == NULL) {
        ret = ingest__fail(idx->ctx, INGEST_ENOMEM, "index: out of memory");
        goto out;
    }
    if ((ret = ingest__store_iter(idx->st, idx->files, NULL, 0, false, check_file_cb, cs)) < 0 ||
        (ret = ingest__store_iter(idx->st, idx->chunks, NULL, 0, false, check_chunk_cb, cs)) < 0 ||
        (ret = ingest__store_iter(idx->st, idx->paths, NULL, 0, false, check_path_cb, cs)) < 0 ||
        (ret = ingest__store_iter(idx->st, idx->batches, NULL, 0, false, check_batch_cb, cs)) < 0)
        goto out;
    ret = 0;
out:
    if (cs->cache != NULL)
        ingest__free(idx->ctx, cs->cache);
    ingest__free(idx->ctx, cs);
    return ret;
}

/* ---- rebuild ---- */

typedef struct rebuild_state {
    ingest_index *idx;
    ingest_index_stats *stats;
    bool catch_up;  /* only manifests of batches not marked; count what is added */
    char path[ABSPATH_MAX];  /* the directory walk */
    char fpath[ABSPATH_MAX]; /* a landed file */
} rebuild_state;

static bool has_suffix(const char *s, const char *suf)
{
    const size_t n = strlen(s), m = strlen(suf);
    return n >= m && memcmp(s + n - m, suf, m) == 0;
}

/* Read a manifest through; 0 when well formed, < 0 (detail in ctx) if not. */
static int manifest_validate(ingest_index *idx, const char *mpath)
{
    ingest_manifest_reader *r = NULL;
    ingest_manifest_rec rec;
    int rc = ingest_manifest_reader_open(idx->ctx, mpath, &r);
    if (rc < 0)
        return rc;
    while ((rc = ingest_manifest_reader_next(r, &rec)) > 0)
        ;
    ingest_manifest_reader_close(r);
    return rc;
}

/*
 * The lander's counter of a landed path to at least version (catch-up: a
 * crash lost the counters of batches whose index writes were not flushed).
 */
static int version_at_least(ingest_index *idx, const char *landed, uint64_t version)
{
    uint8_t key[INGEST__PATH_KEY_MAX];
    const size_t n = ingest__landed_key(landed, key);
    uint8_t v[8];
    size_t vl = 0;
    const int rc = ingest__store_get(idx->st, idx->versions, key, n, v, sizeof v, &vl);
    if (rc < 0 && rc != INGEST_ENOTFOUND)
        return rc;
    if (rc == 0 && vl == 8 && ingest__get_u64(v) >= version)
        return 0;
    ingest__put_u64(v, version);
    return ingest__store_put(idx->st, idx->versions, key, n, v, sizeof v);
}

/* Add one manifest's landed files and chunks; returns < 0 only for store errors. */
static int manifest_apply(rebuild_state *rs, const char *mpath)
{
    ingest_index *const idx = rs->idx;
    ingest_manifest_reader *r = NULL;
    ingest_manifest_rec rec;
    char device[NAME_MAX_LEN + 1] = "", batch[NAME_MAX_LEN + 1] = "";
    int64_t created = 0;
    bool active = false; /* adding the current file's chunks */
    uint64_t file_no = 0, offset = 0, fsize = 0;
    int rc = ingest_manifest_reader_open(idx->ctx, mpath, &r);
    if (rc < 0)
        goto malformed;
    while ((rc = ingest_manifest_reader_next(r, &rec)) > 0) {
        if (rec.type == INGEST_MREC_HEADER) {
            snprintf(device, sizeof(device), "%s", rec.device);
            snprintf(batch, sizeof(batch), "%s", rec.batch);
            created = rec.created_ns;
            continue;
        }
        if (rec.type == INGEST_MREC_FILE) {
            active = false;
            if (rec.landed == NULL || rec.landed[0] == '\0')
                continue;
            if (S_ISLNK(rec.mode)) {
                /* landed as a symlink: no source of chunks (reading it would follow it); its version
                 * still counts */
                if (rec.version > 0 && !ingest__store_readonly(idx->st) && relpath_ok(rec.landed, strlen(rec.landed)) &&
                    (rc = version_at_least(idx, rec.landed, rec.version)) < 0)
                    goto out;
                continue;
            }
            if (!relpath_ok(rec.landed, strlen(rec.landed))) {
                rs->stats->bad++;
                ingest__log(idx->ctx, INGEST_LOG_WARN, "index rebuild: %s: landed path '%.200s' rejected", mpath,
                            rec.landed);
                continue;
            }
            if (rec.version > 0 && !ingest__store_readonly(idx->st) &&
                (rc = version_at_least(idx, rec.landed, rec.version)) < 0)
                goto out;
            struct stat sb;
            if (ingest__lstat_beneath(idx->bronze, rec.landed, &sb) != 0 || !S_ISREG(sb.st_mode) ||
                (uint64_t)sb.st_size != rec.size ||
                ingest_time_ns(&sb.st_mtim) != rec.mtime_ns) {
                rs->stats->stale++;
                ingest__log(idx->ctx, INGEST_LOG_INFO, "index rebuild: %s: %s missing or changed, left out", mpath,
                            rec.landed);
                continue;
            }
            const ingest_file_identity ident = { (uint64_t)sb.st_dev, (uint64_t)sb.st_ino, (uint64_t)sb.st_size,
                                                 rec.mtime_ns };
            rc = ingest_index_add_file(idx, rec.landed, &ident, &file_no);
            if (rc < 0)
                goto out;
            if (rs->catch_up)
                rs->stats->files++;
            active = true;
            offset = 0;
            fsize = rec.size;
        } else if (rec.type != INGEST_MREC_CHUNKS) {
            continue;
        }
        for (uint32_t i = 0; active && i < rec.nchunks; i++) {
            const ingest_manifest_chunk *const c = &rec.chunks[i];
            if (c->len == 0 || offset + c->len > fsize) {
                rs->stats->bad++;
                ingest__log(idx->ctx, INGEST_LOG_WARN, "index rebuild: %s: chunks of %s exceed its size", mpath,
                            rec.path);
                active = false;
                break;
            }
            const ingest_chunk_loc loc = { file_no, offset, c->len };
            rc = ingest_index_add_chunk_for(idx, device, c->id, &loc);
            if (rc == INGEST_EINVAL) { /* device scope, and no device name in the header */
                rs->stats->bad++;
                ingest__log(idx->ctx, INGEST_LOG_WARN, "index rebuild: %s: %s", mpath, ingest_ctx_errmsg(idx->ctx));
                active = false;
                rc = 0;
                break;
            }
            if (rc < 0)
                goto out;
            if (rs->catch_up)
                rs->stats->chunks++;
            offset += c->len;
        }
    }
    if (rc < 0)
        goto malformed;
    if (device[0] != '\0' && batch[0] != '\0') {
        rc = batch_mark_at(idx, device, batch, created);
        if (rc < 0 && rc != INGEST_EINVAL)
            goto out;
    }
    rc = 0;
    goto out;
malformed:
    if (rc == INGEST_ENOMEM)
        goto out;
    /* Changed under us between the check and now: count and go on. */
    rs->stats->bad++;
    ingest__log(idx->ctx, INGEST_LOG_WARN, "index rebuild: %s: %s", mpath, ingest_ctx_errmsg(idx->ctx));
    rc = 0;
out:
    ingest_manifest_reader_close(r);
    return rc;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Walk directory rs->path (of length len) in name order. */
static int walk(rebuild_state *rs, size_t len, int depth)
{
    ingest_ctx *const ctx = rs->idx->ctx;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int ret = 0;
    DIR *d = opendir(rs->path);
    if (d == NULL) {
        const int e = errno;
        if (e == ENOENT && depth == 0)
            return 0; /* no manifests yet */
        return ingest__fail(ctx, ingest__errno(e), "index rebuild: opendir %s: %s", rs->path, strerror(e));
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue; /* ., .., and temporary files */
        if (n == cap) {
            if (cap >= WALK_ENTRIES_MAX) {
                ret = ingest__fail(ctx, INGEST_ETOOBIG, "index rebuild: %s: too many entries", rs->path);
                goto out;
            }
            const size_t ncap = cap ? cap * 2 : 64;
            char **nn = ingest__malloc(ctx, ncap * sizeof(*nn));
            if (nn == NULL) {
                ret = ingest__fail(ctx, INGEST_ENOMEM, "index rebuild: out of memory");
                goto out;
            }
            if (n > 0)
                memcpy(nn, names, n * sizeof(*nn));
            ingest__free(ctx, names);
            names = nn;
            cap = ncap;
        }
        names[n] = ingest__strdup(ctx, de->d_name);
        if (names[n] == NULL) {
            ret = ingest__fail(ctx, INGEST_ENOMEM, "index rebuild: out of memory");
            goto out;
        }
        n++;
    }
    closedir(d);
    d = NULL;
    if (n > 1)
        qsort(names, n, sizeof(*names), cmp_names);
    for (size_t i = 0; i < n; i++) {
        const size_t nl = strlen(names[i]);
        if (len + 1 + nl >= sizeof(rs->path))
            continue;
        rs->path[len] = '/';
        memcpy(rs->path + len + 1, names[i], nl + 1);
        struct stat sb;
        if (lstat(rs->path, &sb) != 0)
            continue;
        if (S_ISDIR(sb.st_mode)) {
            if (depth + 1 < WALK_DEPTH_MAX && (ret = walk(rs, len + 1 + nl, depth + 1)) < 0)
                goto out;
        } else if (S_ISREG(sb.st_mode) && has_suffix(names[i], ".jsonl")) {
            if (rs->catch_up) {
                /* _manifests/{device}/{batch}.jsonl: skip the batches marked */
                const char *dev = rs->path + len;
                while (dev > rs->path && dev[-1] != '/')
                    dev--;
                char device[NAME_MAX_LEN + 1], batch[NAME_MAX_LEN + 1];
                const size_t dl = (size_t)(rs->path + len - dev), bl = nl - 6;
                if (depth == 1 && dl > 0 && dl <= NAME_MAX_LEN && bl > 0 && bl <= NAME_MAX_LEN) {
                    memcpy(device, dev, dl);
                    device[dl] = '\0';
                    memcpy(batch, names[i], bl);
                    batch[bl] = '\0';
                    const int m = ingest_index_batch_landed(rs->idx, device, batch);
                    /* a malformed mark counts as none: the manifest is applied again */
                    if (m < 0 && m != INGEST_EINVAL && m != INGEST_ECORRUPT) {
                        ret = m;
                        goto out;
                    }
                    if (m == 1) {
                        rs->path[len] = '\0';
                        continue;
                    }
                }
            }
            const int v = manifest_validate(rs->idx, rs->path);
            if (v == INGEST_ENOMEM) {
                ret = v;
                goto out;
            }
            if (v < 0) {
                rs->stats->bad++;
                ingest__log(ctx, INGEST_LOG_WARN, "index rebuild: %s skipped: %s", rs->path, ingest_ctx_errmsg(ctx));
            } else if ((ret = manifest_apply(rs, rs->path)) < 0) {
                goto out;
            } else if (rs->catch_up) {
                rs->stats->batches++;
                ingest__log(ctx, INGEST_LOG_INFO, "index catch-up: %s", rs->path);
            }
        }
        rs->path[len] = '\0';
    }
out:
    if (d != NULL)
        closedir(d);
    for (size_t i = 0; i < n; i++)
        ingest__free(ctx, names[i]);
    ingest__free(ctx, names);
    rs->path[len] = '\0';
    return ret;
}

/*
 * The walk's state for rebuild or catch-up, its path at the manifests
 * directory (*len its length; 0 when the bronze root is too long).  NULL
 * (detail in ctx) when out of memory.
 */
static rebuild_state *walk_state(ingest_index *idx, ingest_index_stats *stats, bool catch_up, size_t *len)
{
    rebuild_state *const rs = ingest__calloc(idx->ctx, 1, sizeof(*rs));
    if (rs == NULL) {
        ingest__fail(idx->ctx, INGEST_ENOMEM, "index %s: out of memory", catch_up ? "catch-up" : "rebuild");
        return NULL;
    }
    rs->idx = idx;
    rs->stats = stats;
    rs->catch_up = catch_up;
    const int n = snprintf(rs->path, sizeof(rs->path), "%s/_manifests", idx->bronze);
    *len = n < 0 || (size_t)n >= sizeof(rs->path) ? 0 : (size_t)n;
    return rs;
}

int ingest_index_rebuild(ingest_index *idx, ingest_index_stats *stats)
{
    if (idx == NULL)
        return INGEST_EINVAL;
    ingest_index_stats local;
    if (stats == NULL)
        stats = &local;
    memset(stats, 0, sizeof(*stats));
    if (idx->bronze == NULL)
        return ingest__fail(idx->ctx, INGEST_EINVAL, "index rebuild: no bronze root");
    ingest_store *const st = idx->st;
    int ret;
    /* Mark the rebuild under way and empty the tables in one transaction:
     * a crash from here until the end leaves rebuild_needed() true. */
    INGEST__FORWARD(ingest_store_flush(st));
    if ((ret = ingest__store_write_begin(st, 6)) < 0 || (ret = meta_put_u64(idx, META_STATE, STATE_BUILDING)) < 0 ||
        (ret = ingest__store_drop(st, idx->chunks)) < 0 || (ret = ingest__store_drop(st, idx->files)) < 0 ||
        (ret = ingest__store_drop(st, idx->paths)) < 0 || (ret = ingest__store_drop(st, idx->batches)) < 0 ||
        (ret = meta_put_u64(idx, META_NEXT_FILE, 1)) < 0 || (ret = ingest_store_flush(st)) < 0)
        return ret;

    size_t n = 0;
    rebuild_state *const rs = walk_state(idx, stats, false, &n);
    if (rs == NULL)
        return INGEST_ENOMEM;
    /* The rebuild is redone from the start after a crash, so its commits
     * need not be synced one by one: one sync at the end. */
    if ((ret = ingest__store_set_sync(st, false)) < 0)
        goto out;
    ret = n == 0 ? ingest__fail(idx->ctx, INGEST_ETOOBIG, "index rebuild: bronze root too long") : walk(rs, n, 0);
    if (ret == 0)
        ret = ingest_store_flush(st);
    const int sret = ingest__store_set_sync(st, true);
    if (ret == 0)
        ret = sret;
    if (ret < 0)
        goto out;
    if ((ret = ingest__store_write_begin(st, 1)) < 0 || (ret = meta_put_u64(idx, META_STATE, STATE_READY)) < 0 ||
        (ret = ingest_store_flush(st)) < 0)
        goto out;
    if ((ret = ingest__store_count(st, idx->chunks, &stats->chunks)) < 0 ||
        (ret = ingest__store_count(st, idx->files, &stats->files)) < 0 ||
        (ret = ingest__store_count(st, idx->batches, &stats->batches)) < 0)
        goto out;
    ingest__log(idx->ctx, INGEST_LOG_INFO,
                "index rebuilt: %llu chunks, %llu files, %llu batches, %llu bad, %llu stale",
                (unsigned long long)stats->chunks, (unsigned long long)stats->files,
                (unsigned long long)stats->batches, (unsigned long long)stats->bad, (unsigned long long)stats->stale);
    ret = 0;
out:
    ingest__free(idx->ctx, rs);
    return ret;
}

int ingest_index_catch_up(ingest_index *idx, ingest_index_stats *stats)
{
    if (idx == NULL)
        return INGEST_EINVAL;
    ingest_index_stats local;
    if (stats == NULL)
        stats = &local;
    memset(stats, 0, sizeof(*stats));
    if (idx->bronze == NULL)
        return ingest__fail(idx->ctx, INGEST_EINVAL, "index catch-up: no bronze root");
    size_t n = 0;
    rebuild_state *const rs = walk_state(idx, stats, true, &n);
    if (rs == NULL)
        return INGEST_ENOMEM;
    int ret;
    if (n == 0)
        ret = ingest__fail(idx->ctx, INGEST_ETOOBIG, "index catch-up: bronze root too long");
    else if ((ret = walk(rs, n, 0)) == 0)
        ret = ingest_store_flush(idx->st);
    ingest__free(idx->ctx, rs);
    return ret;
}
