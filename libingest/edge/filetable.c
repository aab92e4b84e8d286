/*
 * The edge's file table: manifest path -> the file's state when its batch
 * was acknowledged.  Table "files_edge" in the agent's store; value format
 * (docs/storage.md): u8 version (1), 7 zero bytes, then u64 size, i64
 * mtime_ns, i64 ctime_ns, u64 dev, u64 ino, all little-endian: 48 bytes.
 * Version 2 (80 bytes) adds the whole-file hash of the version shipped
 * (ingest_filetable_set_hash).
 */
#include "../store.h"

#include <string.h>

#define FT_VERSION 1
#define FT_VALUE_BYTES 48
#define FT_VERSION_HASH 2
#define FT_VALUE_HASH_BYTES (FT_VALUE_BYTES + INGEST_ID_BYTES)
#define FT_KEY_MAX 4096 /* LMDB keys are bounded too (511 by default): long paths are hashed below */

struct ingest_filetable_s {
    ingest_store *st;
    ingest_ctx *ctx;
    ingest__dbi db;
};

int ingest_filetable_open(ingest_store *st, ingest_filetable **out)
{
    *out = NULL;
    ingest_ctx *ctx = ingest__store_ctx(st);
    ingest_filetable *ft = ingest__calloc(ctx, 1, sizeof(*ft));
    if (ft == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "filetable: out of memory");
    ft->st = st;
    ft->ctx = ctx;
    const int rc = ingest__store_db(st, "files_edge", &ft->db);
    if (rc < 0) {
        ingest__free(ctx, ft);
        return rc;
    }
    *out = ft;
    return INGEST_OK;
}

void ingest_filetable_close(ingest_filetable *ft)
{
    if (ft != NULL)
        ingest__free(ft->ctx, ft);
}

/* Path's record into v (FT_VALUE_HASH_BYTES): 0 with *has_hash, ENOTFOUND or ECORRUPT. */
static int get_raw(ingest_filetable *ft, const char *path, uint8_t *v, int *has_hash)
{
    uint8_t key[INGEST__PATH_KEY_MAX];
    const size_t kl = ingest__path_key(path, key);
    size_t vl = 0;
    const int rc = ingest__store_get(ft->st, ft->db, key, kl, v, FT_VALUE_HASH_BYTES, &vl);
    if (rc < 0)
        return rc;
    if (!(vl == FT_VALUE_BYTES && v[0] == FT_VERSION) && !(vl == FT_VALUE_HASH_BYTES && v[0] == FT_VERSION_HASH))
        return ingest__fail(ft->ctx, INGEST_ECORRUPT, "filetable: malformed record for %s (%zu bytes, version %u)",
                            path, vl, vl ? v[0] : 0);
    *has_hash = v[0] == FT_VERSION_HASH;
    return 0;
}

int ingest_filetable_get(ingest_filetable *ft, const char *path, ingest_file_state *out)
{
    uint8_t v[FT_VALUE_HASH_BYTES];
    int has_hash = 0;
    const int rc = get_raw(ft, path, v, &has_hash);
    if (rc < 0)
        return rc;
    out->size = ingest__get_u64(v + 8);
    out->mtime_ns = (int64_t)ingest__get_u64(v + 16);
    out->ctime_ns = (int64_t)ingest__get_u64(v + 24);
    out->dev = ingest__get_u64(v + 32);
    out->ino = ingest__get_u64(v + 40);
    return INGEST_OK;
}

int ingest_filetable_put(ingest_filetable *ft, const char *path, const ingest_file_state *s)
{
    uint8_t key[INGEST__PATH_KEY_MAX], v[FT_VALUE_BYTES];
    const size_t kl = ingest__path_key(path, key);
    memset(v, 0, sizeof(v));
    v[0] = FT_VERSION;
    ingest__put_u64(v + 8, s->size);
    ingest__put_u64(v + 16, (uint64_t)s->mtime_ns);
    ingest__put_u64(v + 24, (uint64_t)s->ctime_ns);
    ingest__put_u64(v + 32, s->dev);
    ingest__put_u64(v + 40, s->ino);
    return ingest__store_put(ft->st, ft->db, key, kl, v, sizeof(v));
}

int ingest_filetable_del(ingest_filetable *ft, const char *path)
{
    uint8_t key[INGEST__PATH_KEY_MAX];
    const size_t kl = ingest__path_key(path, key);
    return ingest__store_del(ft->st, ft->db, key, kl);
}

uint64_t ingest_filetable_count(ingest_filetable *ft)
{
    uint64_t n = 0;
    return ingest__store_count(ft->st, ft->db, &n) == 0 ? n : 0;
}

int ingest_filetable_prune(ingest_filetable *ft, int (*gone)(void *ud, const char *path), void *ud, uint64_t *removed)
{
    INGEST__FORWARD(ingest_store_commit(ft->st));
    return ingest__store_prune_paths(ft->st, ft->db, gone, ud, removed);
}

int ingest_filetable_set_hash(ingest_filetable *ft, const char *path, const uint8_t hash[INGEST_ID_BYTES])
{
    uint8_t v[FT_VALUE_HASH_BYTES], key[INGEST__PATH_KEY_MAX];
    int has_hash = 0;
    INGEST__FORWARD(get_raw(ft, path, v, &has_hash));
    v[0] = FT_VERSION_HASH;
    memcpy(v + FT_VALUE_BYTES, hash, INGEST_ID_BYTES);
    const size_t kl = ingest__path_key(path, key);
    return ingest__store_put(ft->st, ft->db, key, kl, v, sizeof(v));
}

int ingest_filetable_get_hash(ingest_filetable *ft, const char *path, uint8_t hash[INGEST_ID_BYTES])
{
    uint8_t v[FT_VALUE_HASH_BYTES];
    int has_hash = 0;
    INGEST__FORWARD(get_raw(ft, path, v, &has_hash));
    if (!has_hash)
        return INGEST_ENOTFOUND;
    memcpy(hash, v + FT_VALUE_BYTES, INGEST_ID_BYTES);
    return 0;
}
