/*
 * Delta chunks, the core's side (docs/compression.md, "Delta chunks";
 * docs/protocol.md): before the WANT of a batch, a DELTA_BASE for each
 * wanted chunk whose file has a landed previous version reaching its
 * offset (the block hashes of its predecessor); then each CHUNK_DELTA the
 * device answers with is rebuilt from the predecessor and its literal
 * blocks and verified against the chunk's id before it lands.  A rebuilt
 * chunk that does not match (the landed file changed downstream since, or
 * a hash collision) is asked for whole, never landed.
 */
#include "core_int.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

_Static_assert(crypto_shorthash_BYTES == INGEST_WIRE_DELTA_HASH_BYTES, "a block hash is a SipHash-2-4");
_Static_assert(crypto_shorthash_KEYBYTES == INGEST_WIRE_DELTA_KEY_BYTES, "the batch key is a SipHash key");

/* Grow *p (holding *cap bytes) to at least n bytes. */
/* *p holds at least n bytes (growing by half again at least: one base at a time costs no realloc each). */
static int grow(ingest_ctx *ctx, void **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    const size_t want = n > *cap + *cap / 2 ? n : *cap + *cap / 2;
    void *q = ingest__realloc(ctx, *p, *cap, want);
    if (q == NULL)
        return -1;
    *p = q;
    *cap = want;
    return 0;
}

/* Read blen bytes of the predecessor of chunk i into out (at least the chunk's length): 0, or 1 when they are not there any more. */
static int read_base(ingest_lander_batch *b, uint32_t i, uint32_t blen, uint8_t *out, size_t cap)
{
    uint32_t now = 0;
    return ingest_lander_chunk_base(b, i, out, cap, &now) != 0 || now < blen;
}

void core_delta_free(core_delta *d)
{
    ingest__free(d->ctx, d->idx);
    ingest__free(d->ctx, d->blen);
    ingest__free(d->ctx, d->buf);
    ingest__free(d->ctx, d->lit);
    ingest__free(d->ctx, d->hashes);
    memset(d, 0, sizeof(*d));
}

int core_delta_bases(core_delta *d, ingest_link *lk, ingest_lander_batch *b, const uint32_t *wants, size_t n,
                     char *why, size_t cap)
{
    d->n = 0;
    d->sent = d->rebuilt = d->stale = 0;
    randombytes_buf(d->key, sizeof(d->key));
    size_t hashed = 0; /* bytes of block hashes sent for this batch: at most INGEST_CORE_DELTA_HASH_BUDGET */
    for (size_t k = 0; k < n; k++) {
        const uint32_t i = wants[k];
        uint8_t id[INGEST_ID_BYTES];
        uint32_t len = 0, blen = 0;
        if (ingest_lander_chunk_expect(b, i, id, &len) != 0 || len < INGEST_CORE_DELTA_MIN_BASE ||
            ingest_lander_chunk_pushed(b, i))
            continue; /* (too small for a delta: its predecessor is not even read; pushed: its id is not known yet) */
        if (hashed + INGEST_WIRE_DELTA_BLOCKS(len) * INGEST_WIRE_DELTA_HASH_BYTES > INGEST_CORE_DELTA_HASH_BUDGET)
            break; /* the rest is asked for whole: the hashes of a huge rewrite would cost more than they save */
        if (grow(d->ctx, (void **)&d->buf, &d->bufcap, len) != 0) {
            snprintf(why, cap, "out of memory for the predecessor of chunk %u", i);
            return INGEST_ENOMEM;
        }
        if (ingest_lander_chunk_base(b, i, d->buf, d->bufcap, &blen) != 0 || blen < INGEST_CORE_DELTA_MIN_BASE)
            continue;
        const size_t nb = INGEST_WIRE_DELTA_BLOCKS(blen);
        if (24 + nb * INGEST_WIRE_DELTA_HASH_BYTES > lk->peer_max_payload)
            continue;
        if (grow(d->ctx, (void **)&d->hashes, &d->hcap, nb * INGEST_WIRE_DELTA_HASH_BYTES) != 0 ||
            grow(d->ctx, (void **)&d->idx, &d->icap, (d->n + 1) * sizeof(uint32_t)) != 0 ||
            grow(d->ctx, (void **)&d->blen, &d->bcap, (d->n + 1) * sizeof(uint32_t)) != 0) {
            snprintf(why, cap, "out of memory for the predecessor of chunk %u", i);
            return INGEST_ENOMEM;
        }
        for (size_t j = 0; j < nb; j++) {
            const size_t at = j * INGEST_WIRE_DELTA_BLOCK;
            const size_t bl = blen - at < INGEST_WIRE_DELTA_BLOCK ? blen - at : INGEST_WIRE_DELTA_BLOCK;
            crypto_shorthash(d->hashes + j * INGEST_WIRE_DELTA_HASH_BYTES, d->buf + at, bl, d->key);
        }
        ingest_wire_msg m;
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_DELTA_BASE;
        m.u.delta_base.index = i;
        m.u.delta_base.base_len = blen;
        memcpy(m.u.delta_base.key, d->key, sizeof(d->key));
        m.u.delta_base.hashes = d->hashes;
        const int rc = ingest_link_send(lk, &m);
        if (rc < 0) {
            snprintf(why, cap, "%s", ingest_link_send_errmsg(lk));
            return rc;
        }
        hashed += nb * INGEST_WIRE_DELTA_HASH_BYTES;
        d->idx[d->n] = i | 0x80000000u; /* the high bit: not answered yet (chunk indexes stay below it) */
        d->blen[d->n] = blen;
        d->n++;
        d->sent++;
    }
    return 0;
}

/* The position of chunk i among the bases (ascending), or d->n. */
static size_t find(const core_delta *d, uint32_t i)
{
    size_t lo = 0, hi = d->n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const uint32_t v = d->idx[mid] & 0x7fffffffu;
        if (v == i)
            return mid;
        if (v < i)
            lo = mid + 1;
        else
            hi = mid;
    }
    return d->n;
}

int core_delta_land(core_delta *d, ingest_lander_batch *b, ingest_codec *codec, const uint8_t key[INGEST_KEY_BYTES],
                    const ingest_wire_chunk_delta *x, size_t received, char *why, size_t cap)
{
    const size_t k = find(d, x->index);
    if (k == d->n || !(d->idx[k] & 0x80000000u)) {
        snprintf(why, cap, "CHUNK_DELTA of chunk %u, which was given no DELTA_BASE or came already", x->index);
        return INGEST_EPROTO;
    }
    d->idx[k] &= 0x7fffffffu;
    uint8_t id[INGEST_ID_BYTES];
    uint32_t len = 0;
    if (ingest_lander_chunk_expect(b, x->index, id, &len) != 0 || INGEST_WIRE_DELTA_BLOCKS(len) != x->nblocks) {
        snprintf(why, cap, "CHUNK_DELTA of chunk %u: %u blocks, its %u bytes have %u", x->index, x->nblocks, len,
                 (unsigned)INGEST_WIRE_DELTA_BLOCKS(len));
        return INGEST_ECORRUPT;
    }
    const uint32_t blen = d->blen[k];
    size_t lit = 0;
    for (uint32_t j = 0; j < x->nblocks; j++) {
        const size_t at = (size_t)j * INGEST_WIRE_DELTA_BLOCK;
        const size_t bl = len - at < INGEST_WIRE_DELTA_BLOCK ? len - at : INGEST_WIRE_DELTA_BLOCK;
        if (!(x->map[j / 8] & (1u << (j % 8))))
            lit += bl;
        else if (at + bl > blen) {
            snprintf(why, cap, "CHUNK_DELTA of chunk %u: block %u is copied from past its predecessor's %u bytes",
                     x->index, j, blen);
            return INGEST_ECORRUPT;
        }
    }
    if (grow(d->ctx, (void **)&d->buf, &d->bufcap, len) != 0 || grow(d->ctx, (void **)&d->lit, &d->lcap, lit + 1) != 0) {
        snprintf(why, cap, "out of memory for delta chunk %u", x->index);
        return INGEST_ENOMEM;
    }
    size_t got = 0;
    int rc = 0;
    if (x->len > 0 && (rc = ingest_codec_decode(codec, x->data, x->len, d->lit, lit, &got, NULL, NULL)) < 0) {
        snprintf(why, cap, "CHUNK_DELTA of chunk %u: literal blocks: %s", x->index, ingest_strerror(rc));
        return INGEST_ECORRUPT;
    }
    if (got != lit) {
        snprintf(why, cap, "CHUNK_DELTA of chunk %u: literal blocks of %zu bytes, %zu expected", x->index, got, lit);
        return INGEST_ECORRUPT;
    }
    /* the predecessor in place (it is never longer than the chunk), the literal blocks over it */
    if (read_base(b, x->index, blen, d->buf, d->bufcap) != 0) {
        d->stale++;
        snprintf(why, cap, "its predecessor is no longer what it was");
        return 1;
    }
    size_t from = 0;
    for (uint32_t j = 0; j < x->nblocks; j++) {
        const size_t at = (size_t)j * INGEST_WIRE_DELTA_BLOCK;
        const size_t bl = len - at < INGEST_WIRE_DELTA_BLOCK ? len - at : INGEST_WIRE_DELTA_BLOCK;
        if (!(x->map[j / 8] & (1u << (j % 8)))) {
            memcpy(d->buf + at, d->lit + from, bl);
            from += bl;
        }
    }
    /* This id check is the only guard on the rebuilt bytes: the whole-file hash covers chunk ids, not bytes,
     * and put_verified believes its caller.  A predecessor changed downstream since its hashes were sent
     * (or a hash collision) is caught here, and the chunk is asked for whole. */
    uint8_t got_id[INGEST_ID_BYTES];
    ingest_chunk_id(key, d->buf, len, got_id);
    if (memcmp(got_id, id, INGEST_ID_BYTES) != 0) {
        d->stale++;
        snprintf(why, cap, "rebuilt from its predecessor, it does not match its id");
        return 1;
    }
    d->rebuilt++;
    return ingest_lander_put_verified(b, x->index, d->buf, len, received, id);
}
