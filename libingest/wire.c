/* Wire protocol message codecs (docs/protocol.md, "Messages"). */
#include "internal.h"
#include "ingest/wire.h"
#include "ingest/codec.h"

#include <string.h>

_Static_assert(INGEST_WIRE_DICT_MAX == INGEST_DICT_MAX_BYTES, "a dictionary on the wire is one the codec loads");

const char *ingest_wire_type_name(unsigned type)
{
    switch (type) {
    case INGEST_MSG_BATCH_BEGIN: return "BATCH_BEGIN";
    case INGEST_MSG_MANIFEST_PART: return "MANIFEST_PART";
    case INGEST_MSG_MANIFEST_END: return "MANIFEST_END";
    case INGEST_MSG_WANT: return "WANT";
    case INGEST_MSG_CHUNK: return "CHUNK";
    case INGEST_MSG_BATCH_COMMIT: return "BATCH_COMMIT";
    case INGEST_MSG_ACK: return "ACK";
    case INGEST_MSG_ERROR: return "ERROR";
    case INGEST_MSG_PING: return "PING";
    case INGEST_MSG_PONG: return "PONG";
    case INGEST_MSG_RECEIVED: return "RECEIVED";
    case INGEST_MSG_CHUNK_GROUP: return "CHUNK_GROUP";
    case INGEST_MSG_DICT_OFFER: return "DICT_OFFER";
    case INGEST_MSG_DICT_WANT: return "DICT_WANT";
    case INGEST_MSG_DICT_DATA: return "DICT_DATA";
    case INGEST_MSG_FILE_REFUSED: return "FILE_REFUSED";
    case INGEST_MSG_LANDING: return "LANDING";
    case INGEST_MSG_FILE_WITHDRAWN: return "FILE_WITHDRAWN";
    case INGEST_MSG_DELTA_BASE: return "DELTA_BASE";
    case INGEST_MSG_CHUNK_DELTA: return "CHUNK_DELTA";
    case INGEST_MSG_CHUNK_RUN: return "CHUNK_RUN";
    default: return "UNKNOWN";
    }
}

void ingest_wire_hdr_encode(const ingest_wire_hdr *h, uint8_t out[INGEST_WIRE_HDR_BYTES])
{
    out[0] = h->type;
    out[1] = h->version;
    ingest__put_u16(out + 2, h->flags);
    ingest__put_u32(out + 4, h->length);
}

int ingest_wire_hdr_decode(ingest_ctx *ctx, const uint8_t in[INGEST_WIRE_HDR_BYTES], size_t max_payload,
                           ingest_wire_hdr *h)
{
    h->type = in[0];
    h->version = in[1];
    h->flags = ingest__get_u16(in + 2);
    h->length = ingest__get_u32(in + 4);
    if (h->version != INGEST_WIRE_VERSION)
        return ingest__fail(ctx, INGEST_EVERSION, "wire: frame version %u (type %u), expected %u",
                            (unsigned)h->version, (unsigned)h->type, INGEST_WIRE_VERSION);
    /* types 1..INGEST_MSG_TYPE_LAST are all defined (no gaps) */
    if (h->type == 0 || h->type > INGEST_MSG_TYPE_LAST)
        return ingest__fail(ctx, INGEST_EPROTO, "wire: unknown message type %u", (unsigned)h->type);
    if (h->flags != 0)
        return ingest__fail(ctx, INGEST_EPROTO, "wire: %s: reserved flags 0x%04x set",
                            ingest_wire_type_name(h->type), (unsigned)h->flags);
    if (h->length > max_payload)
        return ingest__fail(ctx, INGEST_ETOOBIG, "wire: %s: payload length %u exceeds bound %zu",
                            ingest_wire_type_name(h->type), (unsigned)h->length, max_payload);
    return 0;
}

int ingest_wire_id_valid(const char *s, size_t len)
{
    if (len == 0 || len > INGEST_WIRE_BATCH_ID_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)s[i];
        const int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        /* The first byte is alphanumeric so "." and ".." can never be ids.  One rule for
         * device and batch ids everywhere: the wire, authorized_devices, manifests, landing. */
        if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
            return 0;
    }
    return 1;
}

uint32_t ingest_wire_want_index(const ingest_wire_want *w, uint32_t i)
{
    if (w->idx != NULL)
        return w->idx[i];
    return ingest__get_u32(w->raw + 4u * (size_t)i);
}

void ingest_wire_want_run(const ingest_wire_want *w, uint32_t k, uint32_t *first, uint32_t *n)
{
    if (w->idx != NULL) {
        *first = w->idx[2 * (size_t)k];
        *n = w->idx[2 * (size_t)k + 1];
    } else {
        *first = ingest__get_u32(w->raw + 8u * (size_t)k);
        *n = ingest__get_u32(w->raw + 8u * (size_t)k + 4);
    }
}

uint32_t ingest_wire_group_index(const ingest_wire_chunk_group *g, uint32_t i)
{
    if (g->raw == NULL)
        return g->first + i;
    return ingest__get_u32(g->raw + 4u * (size_t)i);
}

/* ---- encoding ---------------------------------------------------------- */

/* A writer over out[0,cap); overflow is sticky and checked once at the end. */
typedef struct wr {
    uint8_t *p;
    size_t cap;
    size_t len;
    int over;
} wr;

static void w_bytes(wr *w, const void *src, size_t n)
{
    if (w->over || n > w->cap - w->len) {
        w->over = 1;
        return;
    }
    if (n > 0)
        memcpy(w->p + w->len, src, n);
    w->len += n;
}

static void w_u8(wr *w, uint8_t v) { w_bytes(w, &v, 1); }
static void w_u16(wr *w, uint16_t v)
{
    uint8_t b[2];
    ingest__put_u16(b, v);
    w_bytes(w, b, 2);
}
static void w_u32(wr *w, uint32_t v)
{
    uint8_t b[4];
    ingest__put_u32(b, v);
    w_bytes(w, b, 4);
}
static void w_u64(wr *w, uint64_t v)
{
    uint8_t b[8];
    ingest__put_u64(b, v);
    w_bytes(w, b, 8);
}
static void w_str(wr *w, const char *s, size_t n)
{
    w_u16(w, (uint16_t)n);
    w_bytes(w, s, n);
}

static int check_id(ingest_ctx *ctx, const char *what, const char *id, size_t *n)
{
    *n = strnlen(id, INGEST_WIRE_BATCH_ID_MAX + 1);
    if (!ingest_wire_id_valid(id, *n))
        return ingest__fail(ctx, INGEST_EINVAL, "wire: %s: invalid batch id (1..%d bytes of [A-Za-z0-9._-])",
                            what, INGEST_WIRE_BATCH_ID_MAX);
    return 0;
}

/* Check and write a batch id field (BATCH_BEGIN, BATCH_COMMIT, RECEIVED). */
static int w_batch_id(ingest_ctx *ctx, wr *w, const char *what, const char *id)
{
    size_t n = 0;
    INGEST__FORWARD(check_id(ctx, what, id, &n));
    w_str(w, id, n);
    return 0;
}

static int check_msg(ingest_ctx *ctx, const char *what, const char *msg, size_t *n)
{
    *n = strnlen(msg, INGEST_WIRE_MESSAGE_MAX + 1);
    if (*n > INGEST_WIRE_MESSAGE_MAX)
        return ingest__fail(ctx, INGEST_EINVAL, "wire: %s: message longer than %d bytes", what,
                            INGEST_WIRE_MESSAGE_MAX);
    return 0;
}

/* Encode into w; with_tail=0 leaves out the trailing bytes of PART/CHUNK. */
static int encode(ingest_ctx *ctx, const ingest_wire_msg *m, wr *w, int with_tail)
{
    const char *name = ingest_wire_type_name(m->type);
    size_t n = 0, n2 = 0;
    switch (m->type) {
    case INGEST_MSG_BATCH_BEGIN:
        INGEST__FORWARD(w_batch_id(ctx, w, name, m->u.begin.batch_id));
        w_u32(w, m->u.begin.file_count);
        w_u32(w, m->u.begin.chunk_count);
        w_u64(w, m->u.begin.total_bytes);
        break;
    case INGEST_MSG_MANIFEST_PART:
        if (m->u.manifest_part.len == 0)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: MANIFEST_PART: empty part");
        if (with_tail)
            w_bytes(w, m->u.manifest_part.data, m->u.manifest_part.len);
        break;
    case INGEST_MSG_MANIFEST_END:
        w_u32(w, m->u.manifest_end.part_count);
        w_u64(w, m->u.manifest_end.manifest_bytes);
        break;
    case INGEST_MSG_WANT: {
        const ingest_wire_want *x = &m->u.want;
        INGEST__FORWARD(check_id(ctx, name, x->batch_id, &n));
        if ((x->flags & ~(INGEST_WANT_MORE | INGEST_WANT_RUNS)) != 0)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: WANT: unknown flags 0x%02x", (unsigned)x->flags);
        if (x->count > 0 && x->idx == NULL && x->raw == NULL)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: WANT: %u indexes but no array", (unsigned)x->count);
        w_str(w, x->batch_id, n);
        w_u8(w, x->flags);
        w_u32(w, x->count);
        if (x->flags & INGEST_WANT_RUNS) {
            uint64_t end = 0; /* past the previous run */
            for (uint32_t k = 0; k < x->count && !w->over; k++) {
                uint32_t first, cnt;
                ingest_wire_want_run(x, k, &first, &cnt);
                if (cnt == 0 || (k > 0 && first < end) || (uint64_t)first + cnt > UINT32_MAX)
                    return ingest__fail(ctx, INGEST_EINVAL, "wire: WANT: run %u (%u, %u) empty, overlapping or past "
                                        "the last index", (unsigned)k, (unsigned)first, (unsigned)cnt);
                end = (uint64_t)first + cnt;
                w_u32(w, first);
                w_u32(w, cnt);
            }
            break;
        }
        for (uint32_t i = 0; i < x->count && !w->over; i++) {
            const uint32_t v = ingest_wire_want_index(x, i);
            if (i > 0 && v <= ingest_wire_want_index(x, i - 1))
                return ingest__fail(ctx, INGEST_EINVAL, "wire: WANT: index %u at position %u not above %u",
                                    (unsigned)v, (unsigned)i, (unsigned)ingest_wire_want_index(x, i - 1));
            w_u32(w, v);
        }
        break;
    }
    case INGEST_MSG_CHUNK:
        if (m->u.chunk.len == 0)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: CHUNK: empty chunk");
        w_u32(w, m->u.chunk.index);
        if (with_tail)
            w_bytes(w, m->u.chunk.data, m->u.chunk.len);
        break;
    case INGEST_MSG_CHUNK_GROUP: {
        const ingest_wire_chunk_group *g = &m->u.group;
        if (g->count == 0 || g->count > INGEST_WIRE_GROUP_MAX_CHUNKS)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: CHUNK_GROUP: %u chunks (1..%u)", (unsigned)g->count,
                                INGEST_WIRE_GROUP_MAX_CHUNKS);
        if (g->raw == NULL || g->data == NULL || g->len == 0)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: CHUNK_GROUP: no indexes or no bytes");
        for (uint32_t i = 1; i < g->count; i++)
            if (ingest_wire_group_index(g, i) <= ingest_wire_group_index(g, i - 1))
                return ingest__fail(ctx, INGEST_EINVAL, "wire: CHUNK_GROUP: index %u at position %u not above %u",
                                    (unsigned)ingest_wire_group_index(g, i), (unsigned)i,
                                    (unsigned)ingest_wire_group_index(g, i - 1));
        w_u32(w, g->count);
        if (with_tail) {
            w_bytes(w, g->raw, 4 * (size_t)g->count);
            w_bytes(w, g->data, g->len);
        }
        break;
    }
    case INGEST_MSG_CHUNK_RUN: {
        const ingest_wire_chunk_group *g = &m->u.group;
        if (g->count == 0 || g->count > INGEST_WIRE_GROUP_MAX_CHUNKS || (uint64_t)g->first + g->count > UINT32_MAX + 1ull)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: CHUNK_RUN: %u chunks from %u (1..%u, within u32)",
                                (unsigned)g->count, (unsigned)g->first, INGEST_WIRE_GROUP_MAX_CHUNKS);
        if (g->data == NULL || g->len == 0)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: CHUNK_RUN: no bytes");
        w_u32(w, g->first);
        w_u32(w, g->count);
        if (with_tail)
            w_bytes(w, g->data, g->len);
        break;
    }
    case INGEST_MSG_BATCH_COMMIT:
        INGEST__FORWARD(w_batch_id(ctx, w, name, m->u.commit.batch_id));
        w_u32(w, m->u.commit.chunks_sent);
        break;
    case INGEST_MSG_ACK:
        INGEST__FORWARD(check_id(ctx, name, m->u.ack.batch_id, &n));
        INGEST__FORWARD(check_msg(ctx, name, m->u.ack.message, &n2));
        w_str(w, m->u.ack.batch_id, n);
        w_u32(w, (uint32_t)m->u.ack.status);
        w_str(w, m->u.ack.message, n2);
        break;
    case INGEST_MSG_RECEIVED:
        INGEST__FORWARD(w_batch_id(ctx, w, name, m->u.received.batch_id));
        break;
    case INGEST_MSG_FILE_REFUSED:
    case INGEST_MSG_FILE_WITHDRAWN: {
        const ingest_wire_file_refused *x = m->type == INGEST_MSG_FILE_REFUSED ? &m->u.refused : &m->u.withdrawn;
        INGEST__FORWARD(check_id(ctx, name, x->batch_id, &n));
        INGEST__FORWARD(check_msg(ctx, name, x->message, &n2));
        if (x->code >= 0 || n2 == 0)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: %s: code %d (must be negative) or empty message", name,
                                (int)x->code);
        w_str(w, x->batch_id, n);
        w_u32(w, x->file_index);
        w_u32(w, (uint32_t)x->code);
        w_str(w, x->message, n2);
        break;
    }
    case INGEST_MSG_LANDING: {
        const ingest_wire_landing *x = &m->u.landing;
        n2 = strnlen(x->layout, INGEST_WIRE_LAYOUT_MAX + 1);
        if (n2 == 0 || n2 > INGEST_WIRE_LAYOUT_MAX || x->path_max == 0 || x->path_max > INGEST_WIRE_LANDING_PATH_MAX ||
            x->name_max == 0 || x->name_max > INGEST_WIRE_LANDING_NAME_MAX)
            return ingest__fail(ctx, INGEST_EINVAL,
                                "wire: LANDING: layout of %zu bytes (1..%d), path max %u (1..%d), name max %u (1..%d)",
                                n2, INGEST_WIRE_LAYOUT_MAX, (unsigned)x->path_max, INGEST_WIRE_LANDING_PATH_MAX,
                                (unsigned)x->name_max, INGEST_WIRE_LANDING_NAME_MAX);
        w_u32(w, x->path_max);
        w_u32(w, x->name_max);
        w_str(w, x->layout, n2);
        break;
    }
    case INGEST_MSG_ERROR:
        INGEST__FORWARD(check_msg(ctx, name, m->u.error.message, &n2));
        if (m->u.error.code >= 0)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: ERROR: code %d is not negative", (int)m->u.error.code);
        w_u32(w, (uint32_t)m->u.error.code);
        w_str(w, m->u.error.message, n2);
        break;
    case INGEST_MSG_PING:
    case INGEST_MSG_PONG:
        w_u64(w, m->u.ping.nonce);
        break;
    case INGEST_MSG_DICT_OFFER: {
        const ingest_wire_dict_offer *x = &m->u.dict_offer;
        if (x->dict_id == 0 || x->size == 0 || x->size > INGEST_WIRE_DICT_MAX)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: DICT_OFFER: dictionary id %u, size %u (1..%u)",
                                (unsigned)x->dict_id, (unsigned)x->size, INGEST_WIRE_DICT_MAX);
        w_u32(w, x->dict_id);
        w_u32(w, x->size);
        w_bytes(w, x->hash, sizeof(x->hash));
        break;
    }
    case INGEST_MSG_DICT_WANT: {
        const ingest_wire_dict_want *x = &m->u.dict_want;
        INGEST__FORWARD(check_msg(ctx, name, x->message, &n2));
        if (x->dict_id == 0 || x->answer > INGEST_DICT_REFUSED)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: DICT_WANT: dictionary id %u, answer %u",
                                (unsigned)x->dict_id, (unsigned)x->answer);
        w_u32(w, x->dict_id);
        w_u8(w, x->answer);
        w_str(w, x->message, n2);
        break;
    }
    case INGEST_MSG_DICT_DATA: {
        const ingest_wire_dict_data *x = &m->u.dict_data;
        if (x->dict_id == 0 || x->len == 0 || x->offset >= INGEST_WIRE_DICT_MAX ||
            x->len > INGEST_WIRE_DICT_MAX - x->offset)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: DICT_DATA: dictionary id %u, %zu bytes at offset %u (past %u)",
                                (unsigned)x->dict_id, x->len, (unsigned)x->offset, INGEST_WIRE_DICT_MAX);
        w_u32(w, x->dict_id);
        w_u32(w, x->offset);
        if (with_tail)
            w_bytes(w, x->data, x->len);
        break;
    }
    case INGEST_MSG_DELTA_BASE: {
        const ingest_wire_delta_base *x = &m->u.delta_base;
        if (x->base_len == 0 || x->base_len > INGEST_WIRE_DELTA_MAX || x->hashes == NULL)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: DELTA_BASE: base of %u bytes (1..%u) or no hashes",
                                (unsigned)x->base_len, INGEST_WIRE_DELTA_MAX);
        w_u32(w, x->index);
        w_u32(w, x->base_len);
        w_bytes(w, x->key, sizeof(x->key));
        if (with_tail)
            w_bytes(w, x->hashes, (size_t)INGEST_WIRE_DELTA_BLOCKS(x->base_len) * INGEST_WIRE_DELTA_HASH_BYTES);
        break;
    }
    case INGEST_MSG_CHUNK_DELTA: {
        const ingest_wire_chunk_delta *x = &m->u.delta;
        if (x->nblocks == 0 || x->nblocks > INGEST_WIRE_DELTA_MAX_BLOCKS || x->map == NULL ||
            (x->len > 0 && x->data == NULL))
            return ingest__fail(ctx, INGEST_EINVAL, "wire: CHUNK_DELTA: %u blocks (1..%u), or no map or bytes",
                                (unsigned)x->nblocks, INGEST_WIRE_DELTA_MAX_BLOCKS);
        const size_t mb = ((size_t)x->nblocks + 7) / 8;
        if ((x->nblocks & 7) != 0 && (x->map[mb - 1] >> (x->nblocks & 7)) != 0)
            return ingest__fail(ctx, INGEST_EINVAL, "wire: CHUNK_DELTA: map bits set past block %u",
                                (unsigned)x->nblocks);
        w_u32(w, x->index);
        w_u32(w, x->nblocks);
        if (with_tail) {
            w_bytes(w, x->map, mb);
            w_bytes(w, x->data, x->len);
        }
        break;
    }
    default:
        return ingest__fail(ctx, INGEST_EINVAL, "wire: cannot encode unknown message type %u", (unsigned)m->type);
    }
    if (w->over)
        return ingest__fail(ctx, INGEST_ETOOBIG, "wire: %s: encoded payload does not fit in %zu bytes", name,
                            w->cap);
    return 0;
}

size_t ingest_wire_encoded_size(const ingest_wire_msg *m)
{
    /* Every head but WANT's fits in this scratch buffer. */
    uint8_t scratch[64 + 2 * INGEST_WIRE_BATCH_ID_MAX + INGEST_WIRE_MESSAGE_MAX];
    wr w = { scratch, sizeof(scratch), 0, 0 };
    size_t tail = 0;
    if (m->type == INGEST_MSG_WANT) {
        size_t n = strnlen(m->u.want.batch_id, INGEST_WIRE_BATCH_ID_MAX + 1);
        if (!ingest_wire_id_valid(m->u.want.batch_id, n))
            return 0;
        return 2 + n + 1 + 4 + ((m->u.want.flags & INGEST_WANT_RUNS) ? 8 : 4) * (size_t)m->u.want.count;
    }
    if (encode(NULL, m, &w, 0) != 0)
        return 0;
    if (m->type == INGEST_MSG_MANIFEST_PART)
        tail = m->u.manifest_part.len;
    else if (m->type == INGEST_MSG_CHUNK)
        tail = m->u.chunk.len;
    else if (m->type == INGEST_MSG_CHUNK_GROUP)
        tail = 4 * (size_t)m->u.group.count + m->u.group.len;
    else if (m->type == INGEST_MSG_CHUNK_RUN)
        tail = m->u.group.len;
    else if (m->type == INGEST_MSG_DICT_DATA)
        tail = m->u.dict_data.len;
    else if (m->type == INGEST_MSG_DELTA_BASE)
        tail = (size_t)INGEST_WIRE_DELTA_BLOCKS(m->u.delta_base.base_len) * INGEST_WIRE_DELTA_HASH_BYTES;
    else if (m->type == INGEST_MSG_CHUNK_DELTA)
        tail = ((size_t)m->u.delta.nblocks + 7) / 8 + m->u.delta.len;
    if (tail > INGEST_WIRE_MAX_PAYLOAD_HIGHEST)
        return 0;
    return w.len + tail;
}

int ingest_wire_encode(ingest_ctx *ctx, const ingest_wire_msg *m, uint8_t *out, size_t cap, size_t *len)
{
    wr w = { out, cap, 0, 0 };
    *len = 0;
    INGEST__FORWARD(encode(ctx, m, &w, 1));
    *len = w.len;
    return 0;
}

int ingest_wire_encode_head(ingest_ctx *ctx, const ingest_wire_msg *m, uint8_t *out, size_t cap, size_t *len)
{
    wr w = { out, cap, 0, 0 };
    *len = 0;
    INGEST__FORWARD(encode(ctx, m, &w, 0));
    *len = w.len;
    return 0;
}

/* ---- decoding ---------------------------------------------------------- */

typedef struct rd {
    ingest_ctx *ctx;
    const char *what;
    const uint8_t *p;
    size_t len;
    size_t pos;
} rd;

static int r_need(rd *r, size_t n, const char *field)
{
    if (n > r->len - r->pos)
        return ingest__fail(r->ctx, INGEST_ECORRUPT, "wire: %s: truncated at %s (offset %zu, need %zu, have %zu)",
                            r->what, field, r->pos, n, r->len - r->pos);
    return 0;
}

static int r_u8(rd *r, const char *field, uint8_t *v)
{
    INGEST__FORWARD(r_need(r, 1, field));
    *v = r->p[r->pos++];
    return 0;
}

static int r_u32(rd *r, const char *field, uint32_t *v)
{
    INGEST__FORWARD(r_need(r, 4, field));
    *v = ingest__get_u32(r->p + r->pos);
    r->pos += 4;
    return 0;
}

static int r_u64(rd *r, const char *field, uint64_t *v)
{
    INGEST__FORWARD(r_need(r, 8, field));
    *v = ingest__get_u64(r->p + r->pos);
    r->pos += 8;
    return 0;
}

/* A u32 field that must be within lo..hi. */
static int r_u32_in(rd *r, const char *field, uint32_t *v, uint32_t lo, uint32_t hi)
{
    const size_t at = r->pos;
    INGEST__FORWARD(r_u32(r, field, v));
    if (*v < lo || *v > hi)
        return ingest__fail(r->ctx, INGEST_ECORRUPT, "wire: %s: %s %u outside %u..%u (offset %zu)", r->what, field,
                            (unsigned)*v, (unsigned)lo, (unsigned)hi, at);
    return 0;
}

/* A u16-prefixed string of at most max bytes, copied NUL-terminated to out. */
static int r_str(rd *r, const char *field, char *out, size_t max, int is_id)
{
    INGEST__FORWARD(r_need(r, 2, field));
    const size_t at = r->pos;
    const size_t n = ingest__get_u16(r->p + r->pos);
    r->pos += 2;
    if (n > max)
        return ingest__fail(r->ctx, INGEST_ECORRUPT, "wire: %s: %s length %zu exceeds %zu (offset %zu)", r->what,
                            field, n, max, at);
    INGEST__FORWARD(r_need(r, n, field));
    const char *s = (const char *)r->p + r->pos;
    if (is_id && !ingest_wire_id_valid(s, n))
        return ingest__fail(r->ctx, INGEST_ECORRUPT,
                            "wire: %s: %s at offset %zu is not 1..%d bytes of [A-Za-z0-9._-]", r->what, field,
                            at, INGEST_WIRE_BATCH_ID_MAX);
    if (!is_id && memchr(s, 0, n) != NULL)
        return ingest__fail(r->ctx, INGEST_ECORRUPT, "wire: %s: %s at offset %zu contains a NUL byte", r->what,
                            field, at);
    memcpy(out, s, n);
    out[n] = '\0';
    r->pos += n;
    return 0;
}

/* A batch id field, as in BATCH_BEGIN, WANT, BATCH_COMMIT, ACK and RECEIVED. */
static int r_batch_id(rd *r, char out[INGEST_WIRE_BATCH_ID_MAX + 1])
{
    return r_str(r, "batch id", out, INGEST_WIRE_BATCH_ID_MAX, 1);
}

/* A dictionary id (DICT_*): non-zero. */
static int r_dict_id(rd *r, uint32_t *id)
{
    INGEST__FORWARD(r_u32(r, "dictionary id", id));
    if (*id == 0)
        return ingest__fail(r->ctx, INGEST_ECORRUPT, "wire: %s: dictionary id 0 (offset %zu)", r->what, r->pos - 4);
    return 0;
}

static int r_end(rd *r)
{
    if (r->pos != r->len)
        return ingest__fail(r->ctx, INGEST_ECORRUPT, "wire: %s: %zu trailing bytes at offset %zu", r->what,
                            r->len - r->pos, r->pos);
    return 0;
}

int ingest_wire_decode(ingest_ctx *ctx, unsigned type, const uint8_t *payload, size_t len, ingest_wire_msg *m)
{
    rd r = { ctx, ingest_wire_type_name(type), payload, len, 0 };
    memset(m, 0, sizeof(*m));
    if (payload == NULL && len != 0)
        return ingest__fail(ctx, INGEST_EINVAL, "wire: NULL payload");
    if (len > INGEST_WIRE_MAX_PAYLOAD_HIGHEST)
        return ingest__fail(ctx, INGEST_ETOOBIG, "wire: %s: payload of %zu bytes exceeds %u", r.what, len,
                            INGEST_WIRE_MAX_PAYLOAD_HIGHEST);
    m->type = (uint8_t)type;
    switch (type) {
    case INGEST_MSG_BATCH_BEGIN: {
        ingest_wire_batch_begin *x = &m->u.begin;
        INGEST__FORWARD(r_batch_id(&r, x->batch_id));
        INGEST__FORWARD(r_u32(&r, "file count", &x->file_count));
        INGEST__FORWARD(r_u32(&r, "chunk count", &x->chunk_count));
        INGEST__FORWARD(r_u64(&r, "total bytes", &x->total_bytes));
        return r_end(&r);
    }
    case INGEST_MSG_MANIFEST_PART:
        if (len == 0)
            return ingest__fail(ctx, INGEST_ECORRUPT, "wire: MANIFEST_PART: empty part");
        m->u.manifest_part.data = payload;
        m->u.manifest_part.len = len;
        return 0;
    case INGEST_MSG_MANIFEST_END:
        INGEST__FORWARD(r_u32(&r, "part count", &m->u.manifest_end.part_count));
        INGEST__FORWARD(r_u64(&r, "manifest bytes", &m->u.manifest_end.manifest_bytes));
        return r_end(&r);
    case INGEST_MSG_WANT: {
        ingest_wire_want *x = &m->u.want;
        INGEST__FORWARD(r_batch_id(&r, x->batch_id));
        INGEST__FORWARD(r_u8(&r, "flags", &x->flags));
        if ((x->flags & ~(INGEST_WANT_MORE | INGEST_WANT_RUNS)) != 0)
            return ingest__fail(ctx, INGEST_ECORRUPT, "wire: WANT: unknown flags 0x%02x at offset %zu",
                                (unsigned)x->flags, r.pos - 1);
        if (x->flags & INGEST_WANT_RUNS) {
            INGEST__FORWARD(r_u32(&r, "run count", &x->count));
            if (x->count > (len - r.pos) / 8)
                return ingest__fail(ctx, INGEST_ECORRUPT,
                                    "wire: WANT: run count %u needs %zu bytes, %zu present (offset %zu)",
                                    (unsigned)x->count, 8 * (size_t)x->count, len - r.pos, r.pos - 4);
            x->raw = payload + r.pos;
            uint64_t end = 0;
            for (uint32_t k = 0; k < x->count; k++) {
                uint32_t first, cnt;
                ingest_wire_want_run(x, k, &first, &cnt);
                if (cnt == 0 || (k > 0 && first < end) || (uint64_t)first + cnt > UINT32_MAX)
                    return ingest__fail(ctx, INGEST_ECORRUPT,
                                        "wire: WANT: run %u (first %u, %u indexes) is empty, overlaps the one before "
                                        "or passes the last index (offset %zu)",
                                        (unsigned)k, (unsigned)first, (unsigned)cnt, r.pos + 8 * (size_t)k);
                end = (uint64_t)first + cnt;
            }
            r.pos += 8 * (size_t)x->count;
            return r_end(&r);
        }
        INGEST__FORWARD(r_u32(&r, "index count", &x->count));
        /* Bound the count by the bytes present before touching the array. */
        if (x->count > (len - r.pos) / 4)
            return ingest__fail(ctx, INGEST_ECORRUPT,
                                "wire: WANT: index count %u needs %zu bytes, %zu present (offset %zu)",
                                (unsigned)x->count, 4 * (size_t)x->count, len - r.pos, r.pos - 4);
        x->raw = payload + r.pos;
        for (uint32_t i = 1; i < x->count; i++) {
            const uint32_t a = ingest__get_u32(x->raw + 4 * (size_t)(i - 1));
            const uint32_t b = ingest__get_u32(x->raw + 4 * (size_t)i);
            if (b <= a)
                return ingest__fail(ctx, INGEST_ECORRUPT,
                                    "wire: WANT: index %u at position %u is not above %u (offset %zu)",
                                    (unsigned)b, (unsigned)i, (unsigned)a, r.pos + 4 * (size_t)i);
        }
        r.pos += 4 * (size_t)x->count;
        return r_end(&r);
    }
    case INGEST_MSG_CHUNK:
        INGEST__FORWARD(r_u32(&r, "chunk index", &m->u.chunk.index));
        if (r.pos == len)
            return ingest__fail(ctx, INGEST_ECORRUPT, "wire: CHUNK: no chunk bytes after the index");
        m->u.chunk.data = payload + r.pos;
        m->u.chunk.len = len - r.pos;
        return 0;
    case INGEST_MSG_CHUNK_GROUP: {
        ingest_wire_chunk_group *g = &m->u.group;
        INGEST__FORWARD(r_u32(&r, "chunk count", &g->count));
        if (g->count == 0 || g->count > INGEST_WIRE_GROUP_MAX_CHUNKS)
            return ingest__fail(ctx, INGEST_ECORRUPT, "wire: CHUNK_GROUP: chunk count %u at offset 0 is not 1..%u",
                                (unsigned)g->count, INGEST_WIRE_GROUP_MAX_CHUNKS);
        if (4 * (size_t)g->count >= len - r.pos)
            return ingest__fail(ctx, INGEST_ECORRUPT,
                                "wire: CHUNK_GROUP: %u indexes need %zu bytes and chunk bytes after them, %zu present "
                                "(offset %zu)", (unsigned)g->count, 4 * (size_t)g->count, len - r.pos, r.pos);
        g->raw = payload + r.pos;
        for (uint32_t i = 1; i < g->count; i++) {
            const uint32_t a = ingest_wire_group_index(g, i - 1), b = ingest_wire_group_index(g, i);
            if (b <= a)
                return ingest__fail(ctx, INGEST_ECORRUPT,
                                    "wire: CHUNK_GROUP: index %u at position %u is not above %u (offset %zu)",
                                    (unsigned)b, (unsigned)i, (unsigned)a, r.pos + 4 * (size_t)i);
        }
        r.pos += 4 * (size_t)g->count;
        g->data = payload + r.pos;
        g->len = len - r.pos;
        return 0;
    }
    case INGEST_MSG_CHUNK_RUN: {
        ingest_wire_chunk_group *g = &m->u.group;
        INGEST__FORWARD(r_u32(&r, "first index", &g->first));
        INGEST__FORWARD(r_u32(&r, "chunk count", &g->count));
        if (g->count == 0 || g->count > INGEST_WIRE_GROUP_MAX_CHUNKS || (uint64_t)g->first + g->count > UINT32_MAX + 1ull)
            return ingest__fail(ctx, INGEST_ECORRUPT,
                                "wire: CHUNK_RUN: chunk count %u at offset 4 is not 1..%u, or runs past index %u",
                                (unsigned)g->count, INGEST_WIRE_GROUP_MAX_CHUNKS, UINT32_MAX);
        if (r.pos == len)
            return ingest__fail(ctx, INGEST_ECORRUPT, "wire: CHUNK_RUN: no chunk bytes after the indexes");
        g->raw = NULL;
        g->data = payload + r.pos;
        g->len = len - r.pos;
        return 0;
    }
    case INGEST_MSG_BATCH_COMMIT:
        INGEST__FORWARD(r_batch_id(&r, m->u.commit.batch_id));
        INGEST__FORWARD(r_u32(&r, "chunks sent", &m->u.commit.chunks_sent));
        return r_end(&r);
    case INGEST_MSG_ACK: {
        uint32_t st;
        INGEST__FORWARD(r_batch_id(&r, m->u.ack.batch_id));
        INGEST__FORWARD(r_u32(&r, "status", &st));
        m->u.ack.status = (int32_t)st;
        INGEST__FORWARD(r_str(&r, "message", m->u.ack.message, INGEST_WIRE_MESSAGE_MAX, 0));
        return r_end(&r);
    }
    case INGEST_MSG_RECEIVED:
        INGEST__FORWARD(r_batch_id(&r, m->u.received.batch_id));
        return r_end(&r);
    case INGEST_MSG_FILE_REFUSED:
    case INGEST_MSG_FILE_WITHDRAWN: {
        ingest_wire_file_refused *x = m->type == INGEST_MSG_FILE_REFUSED ? &m->u.refused : &m->u.withdrawn;
        const char *tn = ingest_wire_type_name(m->type);
        uint32_t code;
        INGEST__FORWARD(r_batch_id(&r, x->batch_id));
        INGEST__FORWARD(r_u32(&r, "file index", &x->file_index));
        const size_t at = r.pos;
        INGEST__FORWARD(r_u32(&r, "code", &code));
        x->code = (int32_t)code;
        if (x->code >= 0)
            return ingest__fail(ctx, INGEST_ECORRUPT, "wire: %s: code %d is not negative (offset %zu)", tn,
                                (int)x->code, at);
        const size_t mat = r.pos;
        INGEST__FORWARD(r_str(&r, "message", x->message, INGEST_WIRE_MESSAGE_MAX, 0));
        if (x->message[0] == '\0')
            return ingest__fail(ctx, INGEST_ECORRUPT, "wire: %s: empty message (offset %zu)", tn, mat);
        return r_end(&r);
    }
    case INGEST_MSG_LANDING: {
        ingest_wire_landing *x = &m->u.landing;
        INGEST__FORWARD(r_u32_in(&r, "path max", &x->path_max, 1, INGEST_WIRE_LANDING_PATH_MAX));
        INGEST__FORWARD(r_u32_in(&r, "name max", &x->name_max, 1, INGEST_WIRE_LANDING_NAME_MAX));
        INGEST__FORWARD(r_str(&r, "layout", x->layout, INGEST_WIRE_LAYOUT_MAX, 0));
        if (x->layout[0] == '\0')
            return ingest__fail(ctx, INGEST_ECORRUPT, "wire: LANDING: empty layout (offset 8)");
        return r_end(&r);
    }
    case INGEST_MSG_ERROR: {
        uint32_t code;
        INGEST__FORWARD(r_u32(&r, "code", &code));
        m->u.error.code = (int32_t)code;
        if (m->u.error.code >= 0)
            return ingest__fail(ctx, INGEST_ECORRUPT, "wire: ERROR: code %d is not negative (offset 0)",
                                (int)m->u.error.code);
        INGEST__FORWARD(r_str(&r, "message", m->u.error.message, INGEST_WIRE_MESSAGE_MAX, 0));
        return r_end(&r);
    }
    case INGEST_MSG_PING:
    case INGEST_MSG_PONG:
        INGEST__FORWARD(r_u64(&r, "nonce", &m->u.ping.nonce));
        return r_end(&r);
    case INGEST_MSG_DICT_OFFER: {
        ingest_wire_dict_offer *x = &m->u.dict_offer;
        INGEST__FORWARD(r_dict_id(&r, &x->dict_id));
        INGEST__FORWARD(r_u32(&r, "size", &x->size));
        if (x->size == 0 || x->size > INGEST_WIRE_DICT_MAX)
            return ingest__fail(ctx, INGEST_ECORRUPT, "wire: DICT_OFFER: size %u outside 1..%u (offset 4)",
                                (unsigned)x->size, INGEST_WIRE_DICT_MAX);
        INGEST__FORWARD(r_need(&r, sizeof(x->hash), "hash"));
        memcpy(x->hash, payload + r.pos, sizeof(x->hash));
        r.pos += sizeof(x->hash);
        return r_end(&r);
    }
    case INGEST_MSG_DICT_WANT: {
        ingest_wire_dict_want *x = &m->u.dict_want;
        INGEST__FORWARD(r_dict_id(&r, &x->dict_id));
        INGEST__FORWARD(r_u8(&r, "answer", &x->answer));
        if (x->answer > INGEST_DICT_REFUSED)
            return ingest__fail(ctx, INGEST_ECORRUPT, "wire: DICT_WANT: unknown answer %u (offset 4)",
                                (unsigned)x->answer);
        INGEST__FORWARD(r_str(&r, "message", x->message, INGEST_WIRE_MESSAGE_MAX, 0));
        return r_end(&r);
    }
    case INGEST_MSG_DICT_DATA: {
        ingest_wire_dict_data *x = &m->u.dict_data;
        INGEST__FORWARD(r_dict_id(&r, &x->dict_id));
        INGEST__FORWARD(r_u32(&r, "offset", &x->offset));
        if (r.pos == len)
            return ingest__fail(ctx, INGEST_ECORRUPT, "wire: DICT_DATA: no dictionary bytes after the offset (offset 8)");
        if (x->offset >= INGEST_WIRE_DICT_MAX || len - r.pos > INGEST_WIRE_DICT_MAX - x->offset)
            return ingest__fail(ctx, INGEST_ECORRUPT,
                                "wire: DICT_DATA: %zu bytes at dictionary offset %u end past %u (offset 4)",
                                len - r.pos, (unsigned)x->offset, INGEST_WIRE_DICT_MAX);
        x->data = payload + r.pos;
        x->len = len - r.pos;
        return 0;
    }
    case INGEST_MSG_DELTA_BASE: {
        ingest_wire_delta_base *x = &m->u.delta_base;
        INGEST__FORWARD(r_u32(&r, "chunk index", &x->index));
        INGEST__FORWARD(r_u32_in(&r, "base length", &x->base_len, 1, INGEST_WIRE_DELTA_MAX));
        INGEST__FORWARD(r_need(&r, sizeof(x->key), "key"));
        memcpy(x->key, payload + r.pos, sizeof(x->key));
        r.pos += sizeof(x->key);
        const size_t hb = (size_t)INGEST_WIRE_DELTA_BLOCKS(x->base_len) * INGEST_WIRE_DELTA_HASH_BYTES;
        if (len - r.pos != hb)
            return ingest__fail(ctx, INGEST_ECORRUPT,
                                "wire: DELTA_BASE: a base of %u bytes has %zu hash bytes, %zu present (offset %zu)",
                                (unsigned)x->base_len, hb, len - r.pos, r.pos);
        x->hashes = payload + r.pos;
        return 0;
    }
    case INGEST_MSG_CHUNK_DELTA: {
        ingest_wire_chunk_delta *x = &m->u.delta;
        INGEST__FORWARD(r_u32(&r, "chunk index", &x->index));
        INGEST__FORWARD(r_u32_in(&r, "block count", &x->nblocks, 1, INGEST_WIRE_DELTA_MAX_BLOCKS));
        const size_t mb = ((size_t)x->nblocks + 7) / 8;
        INGEST__FORWARD(r_need(&r, mb, "block map"));
        x->map = payload + r.pos;
        if ((x->nblocks & 7) != 0 && (x->map[mb - 1] >> (x->nblocks & 7)) != 0)
            return ingest__fail(ctx, INGEST_ECORRUPT, "wire: CHUNK_DELTA: map bits set past block %u (offset %zu)",
                                (unsigned)x->nblocks, r.pos + mb - 1);
        r.pos += mb;
        x->data = len > r.pos ? payload + r.pos : NULL;
        x->len = len - r.pos;
        return 0;
    }
    default:
        return ingest__fail(ctx, INGEST_EPROTO, "wire: unknown message type %u", type);
    }
}
