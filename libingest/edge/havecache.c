/*
 * The edge's have-cache: chunk ids the core is known to hold, bounded to
 * max_entries, oldest (lowest sequence number) pruned first.  Two tables:
 * have_ids (id -> version byte, seq u64 LE) and have_seq (seq u64 BE ->
 * id), so the oldest entry is the first key of have_seq.
 */
#include "../store.h"

#include <string.h>

#define HAVE_VAL_LEN 9 /* version, seq u64 LE */
#define HAVE_VERSION 1

struct ingest_havecache_s {
    ingest_store *st;
    ingest_ctx *ctx;
    ingest__dbi ids, seqs;
    uint64_t max;
    uint64_t next_seq;
};

static int last_seq_cb(void *ud, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    (void)val;
    (void)vlen;
    if (klen != 8)
        return INGEST_ECORRUPT;
    *(uint64_t *)ud = ingest__get_be64(key);
    return 1;
}

typedef struct first_entry {
    bool found;
    uint8_t key[8];
    uint8_t id[INGEST_ID_BYTES];
} first_entry;

static int first_cb(void *ud, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    first_entry *const fe = ud;
    if (klen != 8 || vlen != INGEST_ID_BYTES)
        return INGEST_ECORRUPT;
    memcpy(fe->key, key, 8);
    memcpy(fe->id, val, INGEST_ID_BYTES);
    fe->found = true;
    return 1;
}

int ingest_havecache_open(ingest_store *st, uint64_t max_entries, ingest_havecache **out)
{
    if (out == NULL)
        return INGEST_EINVAL;
    *out = NULL;
    if (st == NULL)
        return INGEST_EINVAL;
    ingest_ctx *const ctx = ingest__store_ctx(st);
    if (max_entries == 0)
        return ingest__fail(ctx, INGEST_EINVAL, "havecache: max_entries must be at least 1");
    int ret;
    uint64_t last = 0;
    ingest_havecache *hc = ingest__calloc(ctx, 1, sizeof(*hc));
    if (hc == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "havecache: out of memory");
    hc->st = st;
    hc->ctx = ctx;
    hc->max = max_entries;
    if ((ret = ingest__store_db(st, "have_ids", &hc->ids)) < 0 || (ret = ingest__store_db(st, "have_seq", &hc->seqs)) < 0)
        goto fail;
    ret = ingest__store_iter(st, hc->seqs, NULL, 0, true, last_seq_cb, &last);
    if (ret == INGEST_ECORRUPT)
        ret = ingest__fail(ctx, INGEST_ECORRUPT, "havecache: have_seq: malformed key");
    if (ret < 0)
        goto fail;
    hc->next_seq = last + 1;
    *out = hc;
    return 0;
fail:
    ingest_havecache_close(hc);
    return ret;
}

void ingest_havecache_close(ingest_havecache *hc)
{
    if (hc == NULL)
        return;
    ingest__free(hc->ctx, hc);
}

/* 0 absent, 1 present with *seq set, < 0 error. */
static int lookup(ingest_havecache *hc, const uint8_t id[INGEST_ID_BYTES], uint64_t *seq)
{
    uint8_t v[HAVE_VAL_LEN + 1];
    size_t len = 0;
    const int rc = ingest__store_get(hc->st, hc->ids, id, INGEST_ID_BYTES, v, sizeof(v), &len);
    if (rc == INGEST_ENOTFOUND)
        return 0;
    INGEST__FORWARD(rc);
    if (len != HAVE_VAL_LEN || v[0] != HAVE_VERSION) {
        char hex[2 * INGEST_ID_BYTES + 1];
        ingest_to_hex(id, INGEST_ID_BYTES, hex);
        return ingest__fail(hc->ctx, INGEST_ECORRUPT, "havecache: %s: malformed value (%zu bytes)", hex, len);
    }
    *seq = ingest__get_u64(v + 1);
    return 1;
}

int ingest_havecache_has(ingest_havecache *hc, const uint8_t id[INGEST_ID_BYTES])
{
    if (hc == NULL || id == NULL)
        return INGEST_EINVAL;
    uint64_t seq;
    return lookup(hc, id, &seq);
}

int ingest_havecache_del(ingest_havecache *hc, const uint8_t id[INGEST_ID_BYTES])
{
    if (hc == NULL || id == NULL)
        return INGEST_EINVAL;
    uint64_t old = 0;
    INGEST__FORWARD(ingest__store_write_begin(hc->st, 2));
    const int found = lookup(hc, id, &old);
    if (found <= 0)
        return found;
    uint8_t skey[8];
    ingest__put_be64(skey, old);
    int rc = ingest__store_del(hc->st, hc->seqs, skey, 8);
    if (rc < 0 && rc != INGEST_ENOTFOUND)
        return rc;
    rc = ingest__store_del(hc->st, hc->ids, id, INGEST_ID_BYTES);
    return rc < 0 && rc != INGEST_ENOTFOUND ? rc : 1;
}

int ingest_havecache_add(ingest_havecache *hc, const uint8_t id[INGEST_ID_BYTES])
{
    if (hc == NULL || id == NULL)
        return INGEST_EINVAL;
    uint64_t old = 0, n = 0;
    uint8_t skey[8], v[HAVE_VAL_LEN];
    INGEST__FORWARD(ingest__store_write_begin(hc->st, 3));
    const int found = lookup(hc, id, &old);
    INGEST__FORWARD(found);
    if (found) {
        ingest__put_be64(skey, old);
        const int rc = ingest__store_del(hc->st, hc->seqs, skey, 8);
        if (rc < 0 && rc != INGEST_ENOTFOUND)
            return rc;
    }
    const uint64_t seq = hc->next_seq++;
    ingest__put_be64(skey, seq);
    v[0] = HAVE_VERSION;
    ingest__put_u64(v + 1, seq);
    INGEST__FORWARD(ingest__store_put(hc->st, hc->ids, id, INGEST_ID_BYTES, v, sizeof(v)));
    INGEST__FORWARD(ingest__store_put(hc->st, hc->seqs, skey, 8, id, INGEST_ID_BYTES));
    INGEST__FORWARD(ingest__store_count(hc->st, hc->ids, &n));
    while (n > hc->max) {
        first_entry fe = { 0 };
        INGEST__FORWARD(ingest__store_write_begin(hc->st, 2));
        int rc = ingest__store_iter(hc->st, hc->seqs, NULL, 0, false, first_cb, &fe);
        if (rc == INGEST_ECORRUPT)
            return ingest__fail(hc->ctx, INGEST_ECORRUPT, "havecache: have_seq: malformed entry");
        INGEST__FORWARD(rc);
        if (!fe.found)
            break;
        rc = ingest__store_del(hc->st, hc->seqs, fe.key, 8);
        if (rc < 0 && rc != INGEST_ENOTFOUND)
            return rc;
        /* Drop the id only when this is its current sequence number (an
         * orphan sequence entry is just dropped). */
        uint64_t cur = 0;
        const int f = lookup(hc, fe.id, &cur);
        INGEST__FORWARD(f);
        if (f == 1 && cur == ingest__get_be64(fe.key)) {
            rc = ingest__store_del(hc->st, hc->ids, fe.id, INGEST_ID_BYTES);
            if (rc < 0 && rc != INGEST_ENOTFOUND)
                return rc;
        }
        INGEST__FORWARD(ingest__store_count(hc->st, hc->ids, &n));
    }
    return 0;
}

uint64_t ingest_havecache_count(ingest_havecache *hc)
{
    uint64_t n = 0;
    if (hc == NULL || ingest__store_count(hc->st, hc->ids, &n) < 0)
        return 0;
    return n;
}
