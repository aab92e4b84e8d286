/* The catalog's record encodings, cursors and time arguments (docs/catalog.md). */
#include "catalog_fmt.h"
#include "ingest/catalog.h"

#include <stdio.h>
#include <string.h>

/* ---- varints ---------------------------------------------------------------- */

size_t ingest__varint_put(uint8_t out[10], uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

int ingest__varint_get(const uint8_t **pp, const uint8_t *end, uint64_t *v)
{
    const uint8_t *p = *pp;
    uint64_t x = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (p >= end)
            return -1;
        const uint8_t b = *p++;
        if (shift == 63 && b > 1)
            return -1; /* bits past 64 */
        x |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) {
            *v = x;
            *pp = p;
            return 0;
        }
    }
    return -1;
}

static uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static int64_t unzigzag(uint64_t u) { return (int64_t)(u >> 1) ^ -(int64_t)(u & 1); }

/* ---- keys ------------------------------------------------------------------- */

size_t ingest__cat_key(const char *landed, size_t len, uint64_t version, uint8_t *out)
{
    uint8_t full[INGEST__CAT_KEY_MAX];
    if (len >= INGEST__CAT_KEY_MAX) {
        memcpy(out, landed, INGEST__CAT_KEY_MAX);
        return INGEST__CAT_KEY_MAX;
    }
    memcpy(full, landed, len);
    full[len] = 0;
    uint8_t be[8];
    for (int i = 7; i >= 0; i--) {
        be[i] = (uint8_t)version;
        version >>= 8;
    }
    size_t n = len + 1, take = 8;
    if (n + take > INGEST__CAT_KEY_MAX)
        take = INGEST__CAT_KEY_MAX - n;
    memcpy(full + n, be, take);
    n += take;
    memcpy(out, full, n);
    return n;
}

int ingest__cat_cmp(const char *a, size_t alen, uint64_t av, const char *b, size_t blen, uint64_t bv)
{
    const size_t m = alen < blen ? alen : blen;
    const int c = memcmp(a, b, m);
    if (c != 0)
        return c;
    if (alen != blen)
        return alen < blen ? -1 : 1;
    return av < bv ? -1 : av > bv ? 1 : 0;
}

/* ---- blocks ----------------------------------------------------------------- */

#define BLOCK_HEAD 5 /* u8 version, u32 LE count */
#define BLOCK_BYTES_MAX (64u << 20)

void ingest__catblock_w_init(ingest__catblock_w *w, ingest_ctx *ctx)
{
    memset(w, 0, sizeof(*w));
    ingest__buf_init(&w->out, ctx, BLOCK_BYTES_MAX);
}

void ingest__catblock_w_reset(ingest__catblock_w *w)
{
    ingest__buf_reset(&w->out);
    w->count = 0;
    w->prev = NULL;
    w->prev_len = 0;
    w->prev_mtime = 0;
}

void ingest__catblock_w_free(ingest__catblock_w *w) { ingest__buf_free(&w->out); }

int ingest__catblock_w_add(ingest__catblock_w *w, const ingest__catrec *r)
{
    if (r->landed_len == 0 || r->landed_len > INGEST__CAT_PATH_MAX || r->path_len == 0 ||
        r->path_len > INGEST__CAT_PATH_MAX || w->count >= INGEST__CAT_BLOCK_RECS_MAX)
        return INGEST_EINVAL;
    if (w->out.len == 0) {
        const uint8_t head[BLOCK_HEAD] = { INGEST__CAT_BLOCK_VERSION, 0, 0, 0, 0 };
        INGEST__FORWARD(ingest__buf_append(&w->out, head, sizeof(head)));
    }
    size_t shared = 0;
    if (w->prev != NULL) {
        const size_t m = w->prev_len < r->landed_len ? w->prev_len : r->landed_len;
        while (shared < m && w->prev[shared] == r->landed[shared])
            shared++;
    }
    size_t ptail = 0;
    if (r->path_len <= r->landed_len &&
        memcmp(r->landed + r->landed_len - r->path_len, r->path, r->path_len) == 0 &&
        (r->path_len == r->landed_len || r->landed[r->landed_len - r->path_len - 1] == '/'))
        ptail = r->path_len;
    const size_t suffix = r->landed_len - shared;
    INGEST__FORWARD(ingest__buf_reserve(&w->out, 10 * 9 + suffix + (ptail ? 0 : r->path_len) + INGEST_ID_BYTES));
    uint8_t *p = w->out.buf + w->out.len;
    p += ingest__varint_put(p, shared);
    p += ingest__varint_put(p, suffix);
    memcpy(p, r->landed + shared, suffix);
    p += suffix;
    p += ingest__varint_put(p, r->version);
    p += ingest__varint_put(p, r->batch_no);
    p += ingest__varint_put(p, r->size);
    p += ingest__varint_put(p, zigzag((int64_t)((uint64_t)r->mtime_ns - (uint64_t)w->prev_mtime)));
    p += ingest__varint_put(p, r->mode);
    p += ingest__varint_put(p, ptail);
    if (ptail == 0) {
        p += ingest__varint_put(p, r->path_len);
        memcpy(p, r->path, r->path_len);
        p += r->path_len;
    }
    memcpy(p, r->hash, INGEST_ID_BYTES);
    p += INGEST_ID_BYTES;
    w->out.len = (size_t)(p - w->out.buf);
    w->count++;
    w->prev = r->landed;
    w->prev_len = r->landed_len;
    w->prev_mtime = r->mtime_ns;
    return 0;
}

const uint8_t *ingest__catblock_w_finish(ingest__catblock_w *w, size_t *len)
{
    ingest__put_u32(w->out.buf + 1, w->count);
    *len = w->out.len;
    return w->out.buf;
}

static int rfail(ingest__catblock_r *r, const uint8_t *at, const char *what)
{
    r->err = what;
    r->err_off = (size_t)(at - r->base);
    r->left = 0;
    r->p = r->end;
    return INGEST_ECORRUPT;
}

int ingest__catblock_r_reset(ingest__catblock_r *r, const uint8_t *v, size_t len)
{
    r->base = r->p = v;
    r->end = v + len;
    r->index = 0;
    r->have_prev = false; /* keys are compared within a block */
    r->prev_mtime = 0;
    r->err = NULL;
    r->err_off = 0;
    r->left = 0;
    if (len < BLOCK_HEAD)
        return rfail(r, v, "block shorter than its header");
    if (v[0] != INGEST__CAT_BLOCK_VERSION)
        return rfail(r, v, "unknown block version");
    r->left = ingest__get_u32(v + 1);
    if (r->left == 0 || r->left > INGEST__CAT_BLOCK_RECS_MAX)
        return rfail(r, v + 1, "record count out of range");
    r->p = v + BLOCK_HEAD;
    return 0;
}

int ingest__catblock_r_next(ingest__catblock_r *r, ingest__catrec *rec)
{
    if (r->left == 0) {
        if (r->p != r->end)
            return rfail(r, r->p, "bytes after the last record");
        return 0;
    }
    const int prev = r->slot, cur = r->slot ^ 1;
    const uint8_t *p = r->p, *const end = r->end;
    uint64_t shared, suffix, ptail, mt, mode;
    if (ingest__varint_get(&p, end, &shared) < 0)
        return rfail(r, p, "bad shared length");
    if (r->index == 0 ? shared != 0 : shared > r->len[prev])
        return rfail(r, r->p, "shared length past the previous path");
    const uint8_t *at = p;
    if (ingest__varint_get(&p, end, &suffix) < 0 || suffix > (uint64_t)(end - p) ||
        shared + suffix > INGEST__CAT_PATH_MAX || shared + suffix == 0)
        return rfail(r, at, "bad landed path length");
    if (memchr(p, 0, suffix) != NULL)
        return rfail(r, p, "NUL byte in a landed path");
    char *const l = r->landed[cur];
    if (shared > 0)
        memcpy(l, r->landed[prev], shared);
    memcpy(l + shared, p, suffix);
    p += suffix;
    const size_t ll = (size_t)(shared + suffix);
    l[ll] = '\0';
    at = p;
    if (ingest__varint_get(&p, end, &rec->version) < 0 || rec->version == 0)
        return rfail(r, at, "bad version");
    if (r->index > 0 &&
        ingest__cat_cmp(r->landed[prev], r->len[prev], r->prev_version, l, ll, rec->version) >= 0)
        return rfail(r, at, "records out of order");
    at = p;
    if (ingest__varint_get(&p, end, &rec->batch_no) < 0 || rec->batch_no == 0)
        return rfail(r, at, "bad batch number");
    at = p;
    if (ingest__varint_get(&p, end, &rec->size) < 0 || ingest__varint_get(&p, end, &mt) < 0 ||
        ingest__varint_get(&p, end, &mode) < 0 || mode > UINT32_MAX || ingest__varint_get(&p, end, &ptail) < 0)
        return rfail(r, at, "bad size, mtime, mode or path");
    if (ptail > ll || (ptail > 0 && ptail < ll && l[ll - ptail - 1] != '/'))
        return rfail(r, at, "path tail not a component suffix of the landed path");
    if (ptail > 0) {
        rec->path = l + ll - ptail;
        rec->path_len = (size_t)ptail;
    } else {
        uint64_t pl;
        at = p;
        if (ingest__varint_get(&p, end, &pl) < 0 || pl == 0 || pl > INGEST__CAT_PATH_MAX ||
            pl > (uint64_t)(end - p))
            return rfail(r, at, "bad path length");
        if (memchr(p, 0, pl) != NULL)
            return rfail(r, p, "NUL byte in a path");
        memcpy(r->path[cur], p, pl);
        r->path[cur][pl] = '\0';
        rec->path = r->path[cur];
        rec->path_len = (size_t)pl;
        p += pl;
    }
    if ((size_t)(end - p) < INGEST_ID_BYTES)
        return rfail(r, p, "record cut short");
    memcpy(rec->hash, p, INGEST_ID_BYTES);
    p += INGEST_ID_BYTES;
    rec->mtime_ns = (int64_t)((uint64_t)r->prev_mtime + (uint64_t)unzigzag(mt));
    rec->mode = (uint32_t)mode;
    rec->landed = l;
    rec->landed_len = ll;
    r->len[cur] = ll;
    r->prev_mtime = rec->mtime_ns;
    r->prev_version = rec->version;
    r->slot = cur;
    r->p = p;
    r->left--;
    r->index++;
    return 1;
}

/* ---- feed values ------------------------------------------------------------ */

int ingest__catfeed_w_begin(ingest__buf *out, const char *device, const char *batch, int64_t landed_ns,
                            uint64_t nfiles)
{
    const size_t dl = strlen(device), bl = strlen(batch);
    if (dl == 0 || dl > INGEST__CAT_NAME_MAX || bl == 0 || bl > INGEST__CAT_NAME_MAX)
        return INGEST_EINVAL;
    uint8_t h[INGEST__CAT_FEED_HEAD];
    h[0] = INGEST__CAT_FEED_VERSION;
    h[1] = 0;
    ingest__put_u16(h + 2, (uint16_t)dl);
    ingest__put_u16(h + 4, (uint16_t)bl);
    ingest__put_u64(h + 6, (uint64_t)landed_ns);
    ingest__put_u64(h + 14, nfiles);
    h[22] = h[23] = 0;
    INGEST__FORWARD(ingest__buf_append(out, h, sizeof(h)));
    INGEST__FORWARD(ingest__buf_append(out, device, dl));
    return ingest__buf_append(out, batch, bl);
}

int ingest__catfeed_w_add(ingest__buf *out, const char *prev, size_t prev_len, const char *landed, size_t len,
                          uint64_t version)
{
    size_t shared = 0;
    if (prev != NULL) {
        const size_t m = prev_len < len ? prev_len : len;
        while (shared < m && prev[shared] == landed[shared])
            shared++;
    }
    INGEST__FORWARD(ingest__buf_reserve(out, 30 + len - shared));
    uint8_t *p = out->buf + out->len;
    p += ingest__varint_put(p, shared);
    p += ingest__varint_put(p, len - shared);
    memcpy(p, landed + shared, len - shared);
    p += len - shared;
    p += ingest__varint_put(p, version);
    out->len = (size_t)(p - out->buf);
    return 0;
}

static int ffail(ingest__catfeed_r *r, const uint8_t *at, const char *what)
{
    r->err = what;
    r->err_off = (size_t)(at - r->base);
    r->p = r->end;
    r->index = r->nfiles;
    return INGEST_ECORRUPT;
}

int ingest__catfeed_r_begin(ingest__catfeed_r *r, const uint8_t *v, size_t len)
{
    r->base = r->p = v;
    r->end = v + len;
    r->index = 0;
    r->nfiles = 0;
    r->landed_len = 0;
    r->err = NULL;
    if (len < INGEST__CAT_FEED_HEAD)
        return ffail(r, v, "feed record shorter than its header");
    if (v[0] != INGEST__CAT_FEED_VERSION)
        return ffail(r, v, "unknown feed record version");
    const size_t dl = ingest__get_u16(v + 2), bl = ingest__get_u16(v + 4);
    if (dl == 0 || dl > INGEST__CAT_NAME_MAX || bl == 0 || bl > INGEST__CAT_NAME_MAX ||
        dl + bl > len - INGEST__CAT_FEED_HEAD)
        return ffail(r, v + 2, "bad device or batch name length");
    r->landed_ns = (int64_t)ingest__get_u64(v + 6);
    r->nfiles = ingest__get_u64(v + 14);
    const uint8_t *p = v + INGEST__CAT_FEED_HEAD;
    memcpy(r->device, p, dl);
    r->device[dl] = '\0';
    memcpy(r->batch, p + dl, bl);
    r->batch[bl] = '\0';
    if (memchr(r->device, 0, dl) != NULL || memchr(r->batch, 0, bl) != NULL)
        return ffail(r, p, "NUL byte in a name");
    r->p = p + dl + bl;
    /* each file takes at least 4 bytes: a bound before anyone trusts nfiles */
    if (r->nfiles > (uint64_t)(r->end - r->p) / 4)
        return ffail(r, v + 14, "more files than the record can hold");
    return 0;
}

int ingest__catfeed_r_next(ingest__catfeed_r *r)
{
    if (r->index >= r->nfiles) {
        if (r->p != r->end)
            return ffail(r, r->p, "bytes after the last file");
        return 0;
    }
    const uint8_t *p = r->p;
    uint64_t shared, suffix;
    if (ingest__varint_get(&p, r->end, &shared) < 0 || shared > r->landed_len || (r->index == 0 && shared != 0))
        return ffail(r, r->p, "bad shared length");
    const uint8_t *at = p;
    if (ingest__varint_get(&p, r->end, &suffix) < 0 || suffix > (uint64_t)(r->end - p) ||
        shared + suffix == 0 || shared + suffix > INGEST__CAT_PATH_MAX)
        return ffail(r, at, "bad landed path length");
    if (memchr(p, 0, suffix) != NULL)
        return ffail(r, p, "NUL byte in a landed path");
    memcpy(r->landed + shared, p, suffix);
    p += suffix;
    const size_t ll = (size_t)(shared + suffix);
    r->landed[ll] = '\0';
    uint64_t v;
    at = p;
    if (ingest__varint_get(&p, r->end, &v) < 0 || v == 0)
        return ffail(r, at, "bad version");
    r->landed_len = ll;
    r->version = v;
    r->p = p;
    r->index++;
    return 1;
}

/* ---- cursors ---------------------------------------------------------------- */

void ingest__cat_cursor_format(uint64_t id, uint64_t batch_no, char *out, size_t cap)
{
    snprintf(out, cap, "c1-%016llx-%llu", (unsigned long long)id, (unsigned long long)batch_no);
}

int ingest_catalog_cursor_parse(ingest_ctx *ctx, const char *s, uint64_t *catalog_id, uint64_t *batch_no)
{
    *catalog_id = 0;
    *batch_no = 0;
    const size_t n = strnlen(s, INGEST_CATALOG_CURSOR_MAX + 1);
    if (n > INGEST_CATALOG_CURSOR_MAX)
        return ingest__fail(ctx, INGEST_EINVAL, "cursor: longer than %d bytes", INGEST_CATALOG_CURSOR_MAX);
    if (n < 3 || memcmp(s, "c1-", 3) != 0)
        return ingest__fail(ctx, INGEST_EINVAL, "cursor '%s': byte 1: expected \"c1-\" (a cursor printed by "
                            "ingestctl catalog --after)", s);
    uint64_t id = 0;
    size_t i = 3;
    for (; i < 19; i++) {
        const int h = i < n ? ingest__hexval(s[i]) : -1;
        if (h < 0)
            return ingest__fail(ctx, INGEST_EINVAL, "cursor '%s': byte %zu: expected 16 hex digits after \"c1-\"",
                                s, i + 1);
        id = id << 4 | (uint64_t)h;
    }
    if (i >= n || s[i] != '-')
        return ingest__fail(ctx, INGEST_EINVAL, "cursor '%s': byte %zu: expected '-' after the catalog id", s,
                            i + 1);
    i++;
    if (i >= n || s[i] < '0' || s[i] > '9' || (s[i] == '0' && i + 1 < n))
        return ingest__fail(ctx, INGEST_EINVAL, "cursor '%s': byte %zu: expected a batch number", s, i + 1);
    uint64_t b = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return ingest__fail(ctx, INGEST_EINVAL, "cursor '%s': byte %zu: not a digit", s, i + 1);
        const uint64_t d = (uint64_t)(s[i] - '0');
        if (b > (UINT64_MAX - d) / 10)
            return ingest__fail(ctx, INGEST_EINVAL, "cursor '%s': byte %zu: batch number too large", s, i + 1);
        b = b * 10 + d;
    }
    *catalog_id = id;
    *batch_no = b;
    return 0;
}

/* ---- time arguments --------------------------------------------------------- */

#define TIME_TEXT_MAX 64

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

typedef struct tparse {
    ingest_ctx *ctx;
    const char *s;
    size_t i, n;
} tparse;

static int tfail(tparse *t, const char *what)
{
    return ingest__fail(t->ctx, INGEST_EINVAL, "time '%s': byte %zu: %s", t->s, t->i + 1, what);
}

/* Exactly ndig digits into *v. */
static int tdigits(tparse *t, unsigned ndig, unsigned *v, const char *what)
{
    unsigned x = 0;
    for (unsigned k = 0; k < ndig; k++, t->i++) {
        if (t->i >= t->n || t->s[t->i] < '0' || t->s[t->i] > '9')
            return tfail(t, what);
        x = x * 10 + (unsigned)(t->s[t->i] - '0');
    }
    *v = x;
    return 0;
}

/* ".ddd" up to 9 digits, as nanoseconds (none: 0). */
static int tfrac(tparse *t, int64_t *ns)
{
    *ns = 0;
    if (t->i >= t->n || t->s[t->i] != '.')
        return 0;
    t->i++;
    unsigned k = 0;
    int64_t v = 0;
    while (t->i < t->n && t->s[t->i] >= '0' && t->s[t->i] <= '9') {
        if (k == 9)
            return tfail(t, "more than 9 digits of fraction");
        v = v * 10 + (t->s[t->i] - '0');
        k++;
        t->i++;
    }
    if (k == 0)
        return tfail(t, "expected digits after '.'");
    for (; k < 9; k++)
        v *= 10;
    *ns = v;
    return 0;
}

static int time_relative(tparse *t, int64_t now_ns, int64_t *out)
{
    t->i = 1;
    uint64_t v = 0;
    if (t->i >= t->n || t->s[t->i] < '0' || t->s[t->i] > '9')
        return tfail(t, "expected a number after '-'");
    while (t->i < t->n && t->s[t->i] >= '0' && t->s[t->i] <= '9') {
        v = v * 10 + (uint64_t)(t->s[t->i] - '0');
        if (v > 1000000000ull)
            return tfail(t, "too large");
        t->i++;
    }
    if (t->i + 1 != t->n)
        return tfail(t, "expected one unit: s, m, h or d");
    int64_t unit;
    switch (t->s[t->i]) {
    case 's': unit = 1; break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    case 'd': unit = 86400; break;
    default: return tfail(t, "unknown unit (s, m, h or d)");
    }
    const int64_t secs = (int64_t)v * unit;
    if (secs > 100ll * 366 * 86400)
        return tfail(t, "too far back");
    *out = now_ns - secs * 1000000000;
    return 0;
}

static int time_unix(tparse *t, int64_t *out)
{
    t->i = 1;
    int64_t v = 0;
    if (t->i >= t->n || t->s[t->i] < '0' || t->s[t->i] > '9')
        return tfail(t, "expected Unix seconds after '@'");
    while (t->i < t->n && t->s[t->i] >= '0' && t->s[t->i] <= '9') {
        v = v * 10 + (t->s[t->i] - '0');
        if (v > 9000000000ll)
            return tfail(t, "too large");
        t->i++;
    }
    int64_t frac;
    INGEST__FORWARD(tfrac(t, &frac));
    if (t->i != t->n)
        return tfail(t, "unexpected character");
    *out = v * 1000000000 + frac;
    return 0;
}

int ingest_parse_time(ingest_ctx *ctx, const char *s, int64_t now_ns, int64_t *out_ns)
{
    tparse t = { ctx, s, 0, strnlen(s, TIME_TEXT_MAX + 1) };
    *out_ns = 0;
    if (t.n > TIME_TEXT_MAX)
        return ingest__fail(ctx, INGEST_EINVAL, "time: longer than %d bytes", TIME_TEXT_MAX);
    if (t.n == 0)
        return tfail(&t, "empty");
    if (s[0] == '-')
        return time_relative(&t, now_ns, out_ns);
    if (s[0] == '@')
        return time_unix(&t, out_ns);
    unsigned y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
    int64_t frac = 0, off = 0;
    INGEST__FORWARD(tdigits(&t, 4, &y, "expected a year of 4 digits (YYYY-MM-DD), @SECONDS or -AGE"));
    if (t.i >= t.n || s[t.i] != '-')
        return tfail(&t, "expected '-'");
    t.i++;
    INGEST__FORWARD(tdigits(&t, 2, &mo, "expected a month of 2 digits"));
    if (t.i >= t.n || s[t.i] != '-')
        return tfail(&t, "expected '-'");
    t.i++;
    INGEST__FORWARD(tdigits(&t, 2, &d, "expected a day of 2 digits"));
    static const unsigned mdays[12] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    if (y < 1970 || y > 2261 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] ||
        (mo == 2 && d == 29 && !(y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)))) {
        t.i -= 2;
        return tfail(&t, "no such date (1970 to 2261)");
    }
    if (t.i < t.n && (s[t.i] == 'T' || s[t.i] == ' ')) {
        t.i++;
        INGEST__FORWARD(tdigits(&t, 2, &h, "expected an hour of 2 digits"));
        if (t.i >= t.n || s[t.i] != ':')
            return tfail(&t, "expected ':'");
        t.i++;
        INGEST__FORWARD(tdigits(&t, 2, &mi, "expected minutes of 2 digits"));
        if (t.i < t.n && s[t.i] == ':') {
            t.i++;
            INGEST__FORWARD(tdigits(&t, 2, &sec, "expected seconds of 2 digits"));
            INGEST__FORWARD(tfrac(&t, &frac));
        }
        if (h > 23 || mi > 59 || sec > 60) {
            t.i--;
            return tfail(&t, "hour, minute or second out of range");
        }
        if (t.i < t.n && (s[t.i] == 'Z' || s[t.i] == 'z')) {
            t.i++;
        } else if (t.i < t.n && (s[t.i] == '+' || s[t.i] == '-')) {
            const int sign = s[t.i] == '-' ? -1 : 1;
            unsigned oh = 0, om = 0;
            t.i++;
            INGEST__FORWARD(tdigits(&t, 2, &oh, "expected an offset +HH:MM"));
            if (t.i >= t.n || s[t.i] != ':')
                return tfail(&t, "expected ':' in the offset");
            t.i++;
            INGEST__FORWARD(tdigits(&t, 2, &om, "expected offset minutes of 2 digits"));
            if (oh > 23 || om > 59)
                return tfail(&t, "offset out of range");
            off = sign * (int64_t)(oh * 3600 + om * 60);
        }
    }
    if (t.i != t.n)
        return tfail(&t, "unexpected character");
    const int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off;
    *out_ns = secs * 1000000000 + frac;
    return 0;
}
