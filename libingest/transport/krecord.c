/* Sealed records of the Kafka transport: include/ingest/krecord.h. */
#include "../internal.h"
#include "ingest/krecord.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

static const uint8_t MAGIC[4] = { 'I', 'K', 'R', '1' };
/* Domain separation: record keys are never the static pair's raw kx keys. */
static const char LABEL[] = "ingest kafka record key v1";

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}



/* Each kx key becomes a record key through a keyed BLAKE2b of the label. */
static int derive(const uint8_t rx[crypto_kx_SESSIONKEYBYTES], const uint8_t tx[crypto_kx_SESSIONKEYBYTES],
                  ingest_krec_keys *out)
{
    if (crypto_generichash(out->open, INGEST_KREC_KEY_BYTES, (const uint8_t *)LABEL, sizeof(LABEL) - 1, rx,
                           crypto_kx_SESSIONKEYBYTES) != 0 ||
        crypto_generichash(out->seal, INGEST_KREC_KEY_BYTES, (const uint8_t *)LABEL, sizeof(LABEL) - 1, tx,
                           crypto_kx_SESSIONKEYBYTES) != 0)
        return INGEST_ECRYPTO;
    return 0;
}

int ingest_krec_keys_device(const ingest_secret_key *device, const uint8_t core_pk[INGEST_PUBKEY_BYTES],
                            ingest_krec_keys *out)
{
    uint8_t rx[crypto_kx_SESSIONKEYBYTES], tx[crypto_kx_SESSIONKEYBYTES];
    int rc = crypto_kx_client_session_keys(rx, tx, device->pk, device->sk, core_pk) != 0 ? INGEST_ECRYPTO
                                                                                       : derive(rx, tx, out);
    sodium_memzero(rx, sizeof(rx));
    sodium_memzero(tx, sizeof(tx));
    return rc;
}

int ingest_krec_keys_core(const ingest_secret_key *core, const uint8_t device_pk[INGEST_PUBKEY_BYTES],
                          ingest_krec_keys *out)
{
    uint8_t rx[crypto_kx_SESSIONKEYBYTES], tx[crypto_kx_SESSIONKEYBYTES];
    int rc = crypto_kx_server_session_keys(rx, tx, core->pk, core->sk, device_pk) != 0 ? INGEST_ECRYPTO
                                                                                     : derive(rx, tx, out);
    sodium_memzero(rx, sizeof(rx));
    sodium_memzero(tx, sizeof(tx));
    return rc;
}

void ingest_krec_keys_wipe(ingest_krec_keys *k)
{
    sodium_memzero(k, sizeof(*k));
}

/* Bytes of h's header (through the record number), 0 when an id is invalid. */
static size_t head_size(const ingest_krec_hdr *h)
{
    const size_t d = strnlen(h->device, sizeof(h->device)), b = strnlen(h->batch, sizeof(h->batch));
    if (d == 0 || d > INGEST_DEVICE_ID_MAX || !ingest_wire_id_valid(h->device, d) || b == 0 ||
        b > INGEST_WIRE_BATCH_ID_MAX || !ingest_wire_id_valid(h->batch, b))
        return 0;
    return 12 + d + b;
}

size_t ingest_krec_sealed_size(const ingest_krec_hdr *h, size_t len)
{
    const size_t hs = head_size(h);
    return hs == 0 ? 0 : hs + INGEST_KREC_NONCE_BYTES + len + INGEST_KREC_TAG_BYTES;
}

int ingest_krec_seal(ingest_ctx *ctx, const uint8_t key[INGEST_KREC_KEY_BYTES], const ingest_krec_hdr *h,
                     const void *payload, size_t len, uint8_t *out, size_t cap, size_t *out_len)
{
    *out_len = 0;
    const size_t hs = head_size(h);
    if (hs == 0 || h->type == 0 || h->type > INGEST_KREC_TYPE_LAST)
        return ingest__fail(ctx, INGEST_EINVAL, "record: bad type %u or device or batch id", h->type);
    if (len > INGEST_KREC_MAX - hs - INGEST_KREC_NONCE_BYTES - INGEST_KREC_TAG_BYTES)
        return ingest__fail(ctx, INGEST_ETOOBIG, "record: %zu bytes of payload, more than a record of %u holds", len,
                            INGEST_KREC_MAX);
    const size_t total = hs + INGEST_KREC_NONCE_BYTES + len + INGEST_KREC_TAG_BYTES;
    if (total > cap)
        return ingest__fail(ctx, INGEST_ETOOBIG, "record: %zu bytes, the buffer holds %zu", total, cap);
    const size_t d = strlen(h->device), b = strlen(h->batch);
    uint8_t *p = out;
    memcpy(p, MAGIC, 4);
    p[4] = (uint8_t)h->type;
    p[5] = 0;
    p[6] = (uint8_t)d;
    memcpy(p + 7, h->device, d);
    p[7 + d] = (uint8_t)b;
    memcpy(p + 8 + d, h->batch, b);
    put32(p + 8 + d + b, h->seq);
    uint8_t *nonce = out + hs;
    randombytes_buf(nonce, INGEST_KREC_NONCE_BYTES);
    unsigned long long clen = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt(nonce + INGEST_KREC_NONCE_BYTES, &clen, payload, len, out, hs, NULL,
                                               nonce, key);
    *out_len = total;
    return 0;
}

int ingest_krec_peek(ingest_ctx *ctx, const uint8_t *rec, size_t len, ingest_krec_hdr *h)
{
    memset(h, 0, sizeof(*h));
    if (len > INGEST_KREC_MAX)
        return ingest__fail(ctx, INGEST_ECORRUPT, "record: %zu bytes, more than %u", len, INGEST_KREC_MAX);
    if (len < 8 || memcmp(rec, MAGIC, 4) != 0)
        return ingest__fail(ctx, INGEST_ECORRUPT, "record: no \"IKR1\" magic at offset 0");
    if (rec[4] == 0 || rec[4] > INGEST_KREC_TYPE_LAST)
        return ingest__fail(ctx, INGEST_ECORRUPT, "record: unknown type %u at offset 4", rec[4]);
    if (rec[5] != 0)
        return ingest__fail(ctx, INGEST_ECORRUPT, "record: flags 0x%02x at offset 5 (0 expected)", rec[5]);
    const size_t d = rec[6];
    if (d == 0 || d > INGEST_DEVICE_ID_MAX || 7 + d + 1 > len || !ingest_wire_id_valid((const char *)rec + 7, d))
        return ingest__fail(ctx, INGEST_ECORRUPT, "record: bad device id (length %zu) at offset 6", d);
    const size_t b = rec[7 + d];
    if (b == 0 || b > INGEST_WIRE_BATCH_ID_MAX || 8 + d + b > len ||
        !ingest_wire_id_valid((const char *)rec + 8 + d, b))
        return ingest__fail(ctx, INGEST_ECORRUPT, "record: bad batch id (length %zu) at offset %zu", b, 7 + d);
    const size_t hs = 12 + d + b;
    if (len < hs + INGEST_KREC_NONCE_BYTES + INGEST_KREC_TAG_BYTES)
        return ingest__fail(ctx, INGEST_ECORRUPT, "record: %zu bytes, shorter than its header, nonce and tag (%zu)",
                            len, hs + INGEST_KREC_NONCE_BYTES + INGEST_KREC_TAG_BYTES);
    h->type = rec[4];
    memcpy(h->device, rec + 7, d);
    memcpy(h->batch, rec + 8 + d, b);
    h->seq = get32(rec + 8 + d + b);
    return 0;
}

int ingest_krec_open(ingest_ctx *ctx, const uint8_t key[INGEST_KREC_KEY_BYTES], const uint8_t *rec, size_t len,
                     ingest_krec_hdr *h, uint8_t *payload, size_t cap, size_t *plen)
{
    *plen = 0;
    INGEST__FORWARD(ingest_krec_peek(ctx, rec, len, h));
    const size_t hs = 12 + strlen(h->device) + strlen(h->batch);
    const size_t clen = len - hs - INGEST_KREC_NONCE_BYTES, mlen = clen - INGEST_KREC_TAG_BYTES;
    if (mlen > cap)
        return ingest__fail(ctx, INGEST_ETOOBIG, "record: %zu bytes of payload, the buffer holds %zu", mlen, cap);
    unsigned long long got = 0;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(payload, &got, NULL, rec + hs + INGEST_KREC_NONCE_BYTES, clen, rec,
                                                   hs, rec + hs, key) != 0) {
        memset(h, 0, sizeof(*h));
        return ingest__fail(ctx, INGEST_ECRYPTO, "record: does not open (forged, altered, or another device's key)");
    }
    *plen = (size_t)got;
    return 0;
}

/* ---- payloads ------------------------------------------------------------------ */

static const char *krec_type_name(unsigned type)
{
    static const char *const names[] = { "?", "MANIFEST", "CHUNK", "END", "LANDED", "NEEDED" };
    return type <= INGEST_KREC_TYPE_LAST ? names[type] : "?";
}

/* The protocol messages a device-to-core record of type may carry. */
static int krec_msg_allowed(unsigned type, unsigned wtype)
{
    switch (type) {
    case INGEST_KREC_MANIFEST:
        return wtype == INGEST_MSG_BATCH_BEGIN || wtype == INGEST_MSG_MANIFEST_PART || wtype == INGEST_MSG_MANIFEST_END;
    case INGEST_KREC_CHUNK:
        return wtype == INGEST_MSG_CHUNK || wtype == INGEST_MSG_CHUNK_GROUP;
    case INGEST_KREC_END:
        return wtype == INGEST_MSG_BATCH_COMMIT || wtype == INGEST_MSG_ERROR;
    default:
        return 0;
    }
}

int ingest_krec_msg_type(unsigned wtype)
{
    for (unsigned t = INGEST_KREC_MANIFEST; t <= INGEST_KREC_END; t++)
        if (krec_msg_allowed(t, wtype))
            return (int)t;
    return 0;
}

int ingest_krec_body_encode(ingest_ctx *ctx, const ingest_krec_body *b, const uint32_t *needed_idx, uint8_t *out,
                            size_t cap, size_t *len)
{
    *len = 0;
    size_t need;
    switch (b->type) {
    case INGEST_KREC_MANIFEST:
    case INGEST_KREC_CHUNK:
    case INGEST_KREC_END:
        if (!krec_msg_allowed(b->type, b->u.msg.wtype) || b->u.msg.total > INGEST_WIRE_MAX_PAYLOAD_HIGHEST ||
            b->u.msg.offset > b->u.msg.total || b->u.msg.len > b->u.msg.total - b->u.msg.offset ||
            (b->u.msg.len == 0 && b->u.msg.total != 0))
            return ingest__fail(ctx, INGEST_EINVAL, "%s record: %s piece of %zu bytes at %u of %u",
                                krec_type_name(b->type), ingest_wire_type_name(b->u.msg.wtype), b->u.msg.len,
                                b->u.msg.offset, b->u.msg.total);
        need = 12 + b->u.msg.len;
        if (need > cap)
            break;
        out[0] = (uint8_t)b->u.msg.wtype;
        out[1] = 0;
        out[2] = 0;
        out[3] = 0;
        put32(out + 4, b->u.msg.offset);
        put32(out + 8, b->u.msg.total);
        if (b->u.msg.len > 0)
            memcpy(out + 12, b->u.msg.data, b->u.msg.len);
        *len = need;
        return 0;
    case INGEST_KREC_LANDED: {
        const size_t n = strnlen(b->u.landed.message, sizeof(b->u.landed.message));
        if (n > INGEST_WIRE_MESSAGE_MAX)
            return ingest__fail(ctx, INGEST_EINVAL, "LANDED record: message of more than %u bytes",
                                INGEST_WIRE_MESSAGE_MAX);
        need = 6 + n;
        if (need > cap)
            break;
        put32(out, (uint32_t)b->u.landed.status);
        out[4] = (uint8_t)n;
        out[5] = (uint8_t)(n >> 8);
        memcpy(out + 6, b->u.landed.message, n);
        *len = need;
        return 0;
    }
    case INGEST_KREC_NEEDED:
        if (b->u.needed.count == 0 || b->u.needed.count > (INGEST_KREC_PAYLOAD_MAX - 8) / 4)
            return ingest__fail(ctx, INGEST_EINVAL, "NEEDED record: %u indexes (1..%u)", b->u.needed.count,
                                (INGEST_KREC_PAYLOAD_MAX - 8) / 4);
        for (uint32_t i = 1; i < b->u.needed.count; i++)
            if (needed_idx[i] <= needed_idx[i - 1])
                return ingest__fail(ctx, INGEST_EINVAL, "NEEDED record: indexes not ascending at %u", i);
        need = 8 + (size_t)b->u.needed.count * 4;
        if (need > cap)
            break;
        put32(out, b->u.needed.round);
        put32(out + 4, b->u.needed.count);
        for (uint32_t i = 0; i < b->u.needed.count; i++)
            put32(out + 8 + (size_t)i * 4, needed_idx[i]);
        *len = need;
        return 0;
    default:
        return ingest__fail(ctx, INGEST_EINVAL, "record: unknown type %u", b->type);
    }
    return ingest__fail(ctx, INGEST_ETOOBIG, "record: payload of %zu bytes, the buffer holds %zu", need, cap);
}

int ingest_krec_body_decode(ingest_ctx *ctx, unsigned type, const uint8_t *p, size_t len, ingest_krec_body *b)
{
    memset(b, 0, sizeof(*b));
    b->type = type;
    switch (type) {
    case INGEST_KREC_MANIFEST:
    case INGEST_KREC_CHUNK:
    case INGEST_KREC_END: {
        const char *tn = krec_type_name(type);
        if (len < 12)
            return ingest__fail(ctx, INGEST_ECORRUPT, "%s record: %zu bytes, shorter than its 12-byte head", tn, len);
        b->u.msg.wtype = p[0];
        if (!krec_msg_allowed(type, p[0]))
            return ingest__fail(ctx, INGEST_ECORRUPT, "%s record: message type %u at offset 0 does not belong in it",
                                tn, (unsigned)p[0]);
        if (p[1] != 0 || p[2] != 0 || p[3] != 0)
            return ingest__fail(ctx, INGEST_ECORRUPT, "%s record: reserved bytes at offset 1 are not zero", tn);
        b->u.msg.offset = get32(p + 4);
        b->u.msg.total = get32(p + 8);
        b->u.msg.data = p + 12;
        b->u.msg.len = len - 12;
        if (b->u.msg.total > INGEST_WIRE_MAX_PAYLOAD_HIGHEST)
            return ingest__fail(ctx, INGEST_ECORRUPT, "%s record: message of %u bytes at offset 8 (at most %u)", tn,
                                b->u.msg.total, INGEST_WIRE_MAX_PAYLOAD_HIGHEST);
        if (b->u.msg.offset > b->u.msg.total || b->u.msg.len > b->u.msg.total - b->u.msg.offset ||
            (b->u.msg.len == 0 && b->u.msg.total != 0))
            return ingest__fail(ctx, INGEST_ECORRUPT,
                                "%s record: a piece of %zu bytes at %u (offset 4) does not fit its message of %u", tn,
                                b->u.msg.len, b->u.msg.offset, b->u.msg.total);
        return 0;
    }
    case INGEST_KREC_LANDED: {
        if (len < 6)
            return ingest__fail(ctx, INGEST_ECORRUPT, "LANDED record: %zu bytes, shorter than its 6-byte head", len);
        const size_t n = (size_t)p[4] | (size_t)p[5] << 8;
        if (n > INGEST_WIRE_MESSAGE_MAX || 6 + n != len)
            return ingest__fail(ctx, INGEST_ECORRUPT, "LANDED record: message length %zu at offset 4 in %zu bytes", n,
                                len);
        if (memchr(p + 6, '\0', n) != NULL)
            return ingest__fail(ctx, INGEST_ECORRUPT, "LANDED record: a NUL byte in its message");
        b->u.landed.status = (int32_t)get32(p);
        memcpy(b->u.landed.message, p + 6, n);
        b->u.landed.message[n] = '\0';
        return 0;
    }
    case INGEST_KREC_NEEDED: {
        if (len < 8)
            return ingest__fail(ctx, INGEST_ECORRUPT, "NEEDED record: %zu bytes, shorter than its 8-byte head", len);
        const uint32_t n = get32(p + 4);
        if (n == 0 || (size_t)n > (len - 8) / 4 || 8 + (size_t)n * 4 != len)
            return ingest__fail(ctx, INGEST_ECORRUPT, "NEEDED record: count %u at offset 4 in %zu bytes", n, len);
        b->u.needed.round = get32(p);
        b->u.needed.count = n;
        b->u.needed.idx = p + 8;
        for (uint32_t i = 1; i < n; i++)
            if (get32(p + 8 + (size_t)i * 4) <= get32(p + 8 + (size_t)(i - 1) * 4))
                return ingest__fail(ctx, INGEST_ECORRUPT, "NEEDED record: indexes not ascending at offset %zu",
                                    8 + (size_t)i * 4);
        return 0;
    }
    default:
        return ingest__fail(ctx, INGEST_ECORRUPT, "record: unknown type %u", type);
    }
}

uint32_t ingest_krec_needed_index(const ingest_krec_body *b, uint32_t i)
{
    return get32(b->u.needed.idx + (size_t)i * 4);
}
