/* Errors, logging, hex and bounded buffers (the allocation seam is alloc.c). */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned ingest_version_number(void) { return INGEST_VERSION_NUMBER; }

const char *ingest_version_string(void)
{
#define INGEST__STR2(x) #x
#define INGEST__STR(x) INGEST__STR2(x)
    return INGEST__STR(INGEST_VERSION_MAJOR) "." INGEST__STR(INGEST_VERSION_MINOR) "." INGEST__STR(
        INGEST_VERSION_PATCH);
}

const char *ingest_strerror(int code)
{
    switch (code) {
    case INGEST_OK: return "success";
    case INGEST_EINVAL: return "invalid argument";
    case INGEST_ENOMEM: return "out of memory";
    case INGEST_EIO: return "I/O error";
    case INGEST_ECORRUPT: return "malformed data";
    case INGEST_ENOTFOUND: return "not found";
    case INGEST_ESTALE: return "stale entry (file changed or deleted)";
    case INGEST_ETOOBIG: return "length exceeds its bound";
    case INGEST_EMISMATCH: return "content does not match its id";
    case INGEST_EEXIST: return "already exists";
    case INGEST_ECRYPTO: return "cryptographic check failed";
    case INGEST_ENOSPC: return "out of space";
    case INGEST_EPROTO: return "protocol error";
    case INGEST_EAUTH: return "not authorized";
    case INGEST_ETIMEDOUT: return "timed out";
    case INGEST_ECLOSED: return "connection closed";
    case INGEST_EVERSION: return "unsupported version";
    case INGEST_EBUSY: return "busy";
    case INGEST_EBATCHID: return "batch id used before for other data";
    default: return "unknown error";
    }
}

void ingest_ctx_set_log(ingest_ctx *ctx, ingest_log_fn cb, void *userdata, int level)
{
    ctx->log_cb = cb;
    ctx->log_ud = userdata;
    ctx->log_level = level;
}

const char *ingest_ctx_errmsg(const ingest_ctx *ctx) { return ctx ? ctx->errmsg : ""; }

int ingest__fail(ingest_ctx *ctx, int code, const char *fmt, ...)
{
    if (ctx == NULL)
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->errmsg, sizeof(ctx->errmsg), fmt, ap);
    va_end(ap);
    if (ctx->log_cb != NULL && ctx->log_level >= INGEST_LOG_DEBUG)
        ctx->log_cb(ctx->log_ud, INGEST_LOG_DEBUG, ctx->errmsg);
    return code;
}

int ingest__errno(int err)
{
    switch (err) {
    case 0: return INGEST_OK;
    case ENOMEM: return INGEST_ENOMEM;
    case ENOENT: return INGEST_ENOTFOUND;
    case EEXIST: return INGEST_EEXIST;
    case EINVAL: return INGEST_EINVAL;
    case ENOSPC:
    case EDQUOT: return INGEST_ENOSPC;
    case ETIMEDOUT: return INGEST_ETIMEDOUT;
    case EPIPE:
    case ECONNRESET: return INGEST_ECLOSED;
    case EBUSY:
    case EAGAIN: return INGEST_EBUSY;
    default: return INGEST_EIO;
    }
}

void ingest__log(ingest_ctx *ctx, int level, const char *fmt, ...)
{
    if (ctx == NULL || ctx->log_cb == NULL || level > ctx->log_level)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ctx->log_cb(ctx->log_ud, level, msg);
}

void ingest_to_hex(const uint8_t *bin, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[bin[i] >> 4];
        out[2 * i + 1] = digits[bin[i] & 15];
    }
    out[2 * len] = '\0';
}

/* A hex digit's value, 0xff for anything else: one load per digit, no branch. */
static const uint8_t hexval_tab[256] = {
    ['0'] = 0,     ['1'] = 1,     ['2'] = 2,     ['3'] = 3,     ['4'] = 4,     ['5'] = 5,     ['6'] = 6,
    ['7'] = 7,     ['8'] = 8,     ['9'] = 9,     ['a'] = 10,    ['b'] = 11,    ['c'] = 12,    ['d'] = 13,
    ['e'] = 14,    ['f'] = 15,    ['A'] = 10,    ['B'] = 11,    ['C'] = 12,    ['D'] = 13,    ['E'] = 14,
    ['F'] = 15,
};
/* Which entries of hexval_tab are digits (0 is a digit's value too). */
static const uint8_t hexdigit_tab[256] = {
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1,
};

int ingest__hexval(char c)
{
    const unsigned char u = (unsigned char)c;
    return hexdigit_tab[u] ? hexval_tab[u] : -1;
}

int ingest_from_hex(const char *hex, size_t hexlen, uint8_t *out, size_t outlen)
{
    if (hexlen != 2 * outlen)
        return INGEST_EINVAL;
    const unsigned char *h = (const unsigned char *)hex;
    unsigned ok = 1;
    for (size_t i = 0; i < outlen; i++) {
        const unsigned char a = h[2 * i], b = h[2 * i + 1];
        ok &= (unsigned)hexdigit_tab[a] & hexdigit_tab[b];
        out[i] = (uint8_t)(hexval_tab[a] << 4 | hexval_tab[b]);
    }
    return ok ? INGEST_OK : INGEST_EINVAL;
}

void ingest__buf_init(ingest__buf *b, ingest_ctx *ctx, size_t max)
{
    b->ctx = ctx;
    b->buf = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

int ingest__buf_reserve(ingest__buf *b, size_t extra)
{
    if (extra > b->max - b->len)
        return ingest__fail(b->ctx, INGEST_ETOOBIG, "buffer: %zu more bytes exceed the bound of %zu",
                            extra, b->max);
    const size_t need = b->len + extra;
    if (need <= b->cap)
        return INGEST_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > b->max / 2 ? b->max : cap * 2;
    uint8_t *p = ingest__malloc(b->ctx, cap);
    if (p == NULL)
        return ingest__fail(b->ctx, INGEST_ENOMEM, "buffer: cannot allocate %zu bytes", cap);
    if (b->len)
        memcpy(p, b->buf, b->len);
    ingest__free(b->ctx, b->buf);
    b->buf = p;
    b->cap = cap;
    return INGEST_OK;
}

int ingest__buf_append(ingest__buf *b, const void *data, size_t len)
{
    INGEST__FORWARD(ingest__buf_reserve(b, len));
    if (len)
        memcpy(b->buf + b->len, data, len);
    b->len += len;
    return INGEST_OK;
}

int ingest__buf_printf(ingest__buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return ingest__fail(b->ctx, INGEST_EINVAL, "buffer: bad format");
    if ((size_t)n < sizeof(small))
        return ingest__buf_append(b, small, (size_t)n);
    INGEST__FORWARD(ingest__buf_reserve(b, (size_t)n + 1));
    va_start(ap, fmt);
    vsnprintf((char *)b->buf + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return INGEST_OK;
}

void ingest__buf_reset(ingest__buf *b) { b->len = 0; }

void ingest__buf_free(ingest__buf *b)
{
    ingest__free(b->ctx, b->buf);
    b->buf = NULL;
    b->len = b->cap = 0;
}

/*
 * Length of the UTF-8 sequence at s (1..4) and its code point, or 0 if the
 * bytes there are not one (overlong, surrogate, above U+10FFFF, cut short).
 */
static size_t utf8_seq(const unsigned char *s, uint32_t *cp)
{
    const unsigned c = s[0];
    size_t n;
    uint32_t v, min;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, v = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, v = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, v = c & 0x07, min = 0x10000;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) /* also stops at the NUL */
            return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return n;
}

/* Code points that move or split a line on a terminal, escaped although valid. */
static int cp_is_control(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 || cp == 0x200e || cp == 0x200f ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

const char *ingest_escape(char *out, size_t cap, const char *text)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)text;
    size_t o = 0, mark = 0; /* mark: where "..." goes if the text is cut */
    if (cap < 4) {
        if (cap > 0)
            out[0] = '\0';
        return out;
    }
    while (*s != '\0') {
        char piece[16];
        size_t pn = 0, used = 1;
        uint32_t cp = 0;
        const unsigned c = *s;
        if (c == '\\') {
            piece[pn++] = '\\';
            piece[pn++] = '\\';
        } else if (c == '\n' || c == '\r' || c == '\t') {
            piece[pn++] = '\\';
            piece[pn++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        } else if (c >= 0x20 && c < 0x7f) {
            piece[pn++] = (char)c;
        } else if (c >= 0x80 && (used = utf8_seq(s, &cp)) > 0) {
            if (cp_is_control(cp))
                pn = (size_t)snprintf(piece, sizeof(piece), "\\u{%04x}", (unsigned)cp);
            else
                memcpy(piece, s, pn = used);
        } else {
            used = 1;
            piece[pn++] = '\\';
            piece[pn++] = 'x';
            piece[pn++] = hex[c >> 4];
            piece[pn++] = hex[c & 15];
        }
        if (o + pn + 1 > cap) { /* cut at the last boundary that leaves room for "..." */
            memcpy(out + mark, "...", 4);
            return out;
        }
        memcpy(out + o, piece, pn);
        o += pn;
        s += used;
        if (o + 4 <= cap)
            mark = o;
    }
    out[o] = '\0';
    return out;
}

int64_t ingest_time_ns(const struct timespec *t)
{
    /* modulo 2^64 (unsigned arithmetic: defined), then back to int64 (two's complement, as every target) */
    const uint64_t ns = (uint64_t)t->tv_sec * 1000000000u + (uint64_t)t->tv_nsec;
    int64_t v;
    memcpy(&v, &ns, sizeof v);
    return v;
}
