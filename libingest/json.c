/* Strict, bounded JSON parsing into a flat token array, and writer helpers. */
#include "json.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define TOKS_FIRST 64

void ingest__json_init(ingest__json *j, ingest_ctx *ctx, size_t max_len, uint32_t max_toks,
                       unsigned max_depth)
{
    memset(j, 0, sizeof(*j));
    j->ctx = ctx;
    /* Offsets are stored in 32 bits. */
    j->max_len = max_len > UINT32_MAX - 1 ? UINT32_MAX - 1 : max_len;
    j->max_toks = max_toks ? max_toks : 1;
    j->max_depth = max_depth ? max_depth : 1;
}

void ingest__json_free(ingest__json *j)
{
    ingest__free(j->ctx, j->toks);
    ingest__free(j->ctx, j->scratch);
    j->toks = NULL;
    j->scratch = NULL;
    j->cap_toks = 0;
    j->scratch_cap = 0;
}

const char *ingest__json_type_name(int type)
{
    switch (type) {
    case INGEST__JSON_OBJECT: return "object";
    case INGEST__JSON_ARRAY: return "array";
    case INGEST__JSON_STRING: return "string";
    case INGEST__JSON_INT: return "integer";
    case INGEST__JSON_FLOAT: return "number";
    case INGEST__JSON_TRUE:
    case INGEST__JSON_FALSE: return "boolean";
    case INGEST__JSON_NULL: return "null";
    default: return "nothing";
    }
}

/* --- parsing ------------------------------------------------------------ */

static int fail_at(ingest__json *j, int code, size_t pos, const char *what)
{
    j->err_pos = pos;
    j->err_what = what;
    return code;
}

/* Append a token; returns its index or a negative error. */
static long new_tok(ingest__json *j, int type)
{
    if (j->ntoks >= j->max_toks)
        return fail_at(j, INGEST_ETOOBIG, j->pos, "too many values");
    if (j->ntoks == j->cap_toks) {
        uint32_t cap = j->cap_toks ? j->cap_toks * 2 : TOKS_FIRST;
        if (cap > j->max_toks || cap < j->cap_toks)
            cap = j->max_toks;
        ingest__json_tok *t = ingest__calloc(j->ctx, cap, sizeof(*t));
        if (t == NULL)
            return ingest__fail(j->ctx, INGEST_ENOMEM, "json: cannot allocate %u tokens", cap);
        if (j->ntoks)
            memcpy(t, j->toks, j->ntoks * sizeof(*t));
        ingest__free(j->ctx, j->toks);
        j->toks = t;
        j->cap_toks = cap;
    }
    const uint32_t i = j->ntoks++;
    ingest__json_tok *t = &j->toks[i];
    memset(t, 0, sizeof(*t));
    t->type = (uint8_t)type;
    t->pos = (uint32_t)j->pos;
    t->end = i + 1;
    return (long)i;
}

static void skip_ws(ingest__json *j)
{
    while (j->pos < j->len) {
        const char c = j->in[j->pos];
        if (c != ' ' && c != '\t' && c != '\r' && c != '\n')
            break;
        j->pos++;
    }
}

size_t ingest__utf8_seq(const unsigned char *s, size_t len)
{
    const unsigned c = s[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF; /* bounds of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* UTF-16 surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* above U+10FFFF */
    } else {
        return 0;
    }
    if (len < n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return n;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        const char c = p[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/*
 * j->pos is at the opening quote.  Decoded bytes go to the scratch buffer,
 * which holds len + 1 bytes: a string's decoded bytes plus its NUL never
 * exceed its encoded length with both quotes, so the scratch cannot
 * overflow.
 */
static int parse_string(ingest__json *j)
{
    const long ti = new_tok(j, INGEST__JSON_STRING);
    if (ti < 0)
        return (int)ti;
    const unsigned char *in = (const unsigned char *)j->in;
    char *const start = j->scratch + j->scratch_len;
    char *o = start;
    const size_t open = j->pos++;
    for (;;) {
        if (j->pos >= j->len)
            return fail_at(j, INGEST_ECORRUPT, open, "unterminated string");
        const unsigned c = in[j->pos];
        if (c == '"') {
            j->pos++;
            break;
        }
        if (c < 0x20)
            return fail_at(j, INGEST_ECORRUPT, j->pos, "control character in string (must be escaped)");
        if (c >= 0x80) {
            const size_t n = ingest__utf8_seq(in + j->pos, j->len - j->pos);
            if (n == 0)
                return fail_at(j, INGEST_ECORRUPT, j->pos, "invalid UTF-8 in string");
            memcpy(o, in + j->pos, n);
            o += n;
            j->pos += n;
            continue;
        }
        if (c != '\\') {
            *o++ = (char)c;
            j->pos++;
            continue;
        }
        const size_t esc = j->pos;
        if (j->pos + 1 >= j->len)
            return fail_at(j, INGEST_ECORRUPT, esc, "unterminated string");
        const char e = (char)in[j->pos + 1];
        j->pos += 2;
        switch (e) {
        case '"': *o++ = '"'; continue;
        case '\\': *o++ = '\\'; continue;
        case '/': *o++ = '/'; continue;
        case 'b': *o++ = '\b'; continue;
        case 'f': *o++ = '\f'; continue;
        case 'n': *o++ = '\n'; continue;
        case 'r': *o++ = '\r'; continue;
        case 't': *o++ = '\t'; continue;
        case 'u': break;
        default: return fail_at(j, INGEST_ECORRUPT, esc, "invalid escape in string");
        }
        unsigned cp;
        if (j->len - j->pos < 4 || hex4(j->in + j->pos, &cp) != 0)
            return fail_at(j, INGEST_ECORRUPT, esc, "invalid \\u escape (needs 4 hex digits)");
        j->pos += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo;
            if (j->len - j->pos < 6 || in[j->pos] != '\\' || in[j->pos + 1] != 'u' ||
                hex4(j->in + j->pos + 2, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
                return fail_at(j, INGEST_ECORRUPT, esc, "high surrogate escape without a low surrogate");
            j->pos += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            if (cp < 0xDC80 || cp > 0xDCFF)
                return fail_at(j, INGEST_ECORRUPT, esc, "low surrogate escape without a high surrogate");
            *o++ = (char)(cp & 0xFF); /* raw-byte escape */
            continue;
        }
        o += put_utf8(o, cp);
    }
    *o = '\0';
    ingest__json_tok *t = &j->toks[ti];
    t->str = (uint32_t)j->scratch_len;
    t->len = (uint32_t)(o - start);
    j->scratch_len += t->len + 1u;
    return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int parse_number(ingest__json *j)
{
    const long ti = new_tok(j, INGEST__JSON_INT);
    if (ti < 0)
        return (int)ti;
    const size_t start = j->pos;
    int neg = 0;
    if (j->in[j->pos] == '-') {
        neg = 1;
        j->pos++;
    }
    if (j->pos >= j->len || !is_digit(j->in[j->pos]))
        return fail_at(j, INGEST_ECORRUPT, start, "invalid number");
    uint64_t u = 0;
    int range = 0;
    if (j->in[j->pos] == '0') {
        j->pos++;
        if (j->pos < j->len && is_digit(j->in[j->pos]))
            return fail_at(j, INGEST_ECORRUPT, start, "leading zero in number");
    } else {
        while (j->pos < j->len && is_digit(j->in[j->pos])) {
            const unsigned d = (unsigned)(j->in[j->pos] - '0');
            if (u > (UINT64_MAX - d) / 10)
                range = 1;
            else
                u = u * 10 + d;
            j->pos++;
        }
    }
    int real = 0;
    if (j->pos < j->len && j->in[j->pos] == '.') {
        real = 1;
        j->pos++;
        if (j->pos >= j->len || !is_digit(j->in[j->pos]))
            return fail_at(j, INGEST_ECORRUPT, start, "invalid number (digits must follow '.')");
        while (j->pos < j->len && is_digit(j->in[j->pos]))
            j->pos++;
    }
    if (j->pos < j->len && (j->in[j->pos] == 'e' || j->in[j->pos] == 'E')) {
        real = 1;
        j->pos++;
        if (j->pos < j->len && (j->in[j->pos] == '+' || j->in[j->pos] == '-'))
            j->pos++;
        if (j->pos >= j->len || !is_digit(j->in[j->pos]))
            return fail_at(j, INGEST_ECORRUPT, start, "invalid number (digits must follow the exponent)");
        while (j->pos < j->len && is_digit(j->in[j->pos]))
            j->pos++;
    }
    ingest__json_tok *t = &j->toks[ti];
    if (real) {
        t->type = INGEST__JSON_FLOAT;
        return 0;
    }
    if (range || (neg && u > (uint64_t)INT64_MAX + 1))
        return fail_at(j, INGEST_ECORRUPT, start, "integer out of range");
    t->u = u;
    t->neg = (uint8_t)(neg && u != 0);
    return 0;
}

static int parse_literal(ingest__json *j, const char *word, int type)
{
    const size_t n = strlen(word);
    if (j->len - j->pos < n || memcmp(j->in + j->pos, word, n) != 0)
        return fail_at(j, INGEST_ECORRUPT, j->pos, "unexpected character");
    const long ti = new_tok(j, type);
    if (ti < 0)
        return (int)ti;
    j->pos += n;
    return 0;
}

static int same_key(const ingest__json *j, uint32_t a, uint32_t b)
{
    const ingest__json_tok *ta = &j->toks[a], *tb = &j->toks[b];
    return ta->len == tb->len && memcmp(j->scratch + ta->str, j->scratch + tb->str, ta->len) == 0;
}

static int parse_value(ingest__json *j, unsigned depth);

static int parse_container(ingest__json *j, unsigned depth, int type)
{
    const int obj = type == INGEST__JSON_OBJECT;
    if (depth >= j->max_depth)
        return fail_at(j, INGEST_ECORRUPT, j->pos, "nesting too deep");
    const long ti = new_tok(j, type);
    if (ti < 0)
        return (int)ti;
    const char close = obj ? '}' : ']';
    uint32_t count = 0;
    j->pos++;
    skip_ws(j);
    if (j->pos < j->len && j->in[j->pos] == close) {
        j->pos++;
        goto done;
    }
    for (;;) {
        skip_ws(j);
        if (obj) {
            if (j->pos >= j->len || j->in[j->pos] != '"')
                return fail_at(j, INGEST_ECORRUPT, j->pos, "expected a string key");
            const uint32_t key = j->ntoks;
            INGEST__FORWARD(parse_string(j));
            /* Reject a duplicate: walk the earlier members' keys. */
            uint32_t k = (uint32_t)ti + 1;
            for (uint32_t m = 0; m < count; m++) {
                if (same_key(j, k, key))
                    return fail_at(j, INGEST_ECORRUPT, j->toks[key].pos, "duplicate key");
                k = j->toks[k + 1].end;
            }
            skip_ws(j);
            if (j->pos >= j->len || j->in[j->pos] != ':')
                return fail_at(j, INGEST_ECORRUPT, j->pos, "expected ':' after the key");
            j->pos++;
        }
        INGEST__FORWARD(parse_value(j, depth + 1));
        count++;
        skip_ws(j);
        if (j->pos < j->len && j->in[j->pos] == ',') {
            j->pos++;
            continue;
        }
        if (j->pos < j->len && j->in[j->pos] == close) {
            j->pos++;
            break;
        }
        if (j->pos >= j->len)
            return fail_at(j, INGEST_ECORRUPT, j->pos, "unexpected end of input");
        return fail_at(j, INGEST_ECORRUPT, j->pos, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
done:
    j->toks[ti].len = count;
    j->toks[ti].end = j->ntoks;
    return 0;
}

static int parse_value(ingest__json *j, unsigned depth)
{
    skip_ws(j);
    if (j->pos >= j->len)
        return fail_at(j, INGEST_ECORRUPT, j->pos, "unexpected end of input");
    const char c = j->in[j->pos];
    switch (c) {
    case '{': return parse_container(j, depth, INGEST__JSON_OBJECT);
    case '[': return parse_container(j, depth, INGEST__JSON_ARRAY);
    case '"': return parse_string(j);
    case 't': return parse_literal(j, "true", INGEST__JSON_TRUE);
    case 'f': return parse_literal(j, "false", INGEST__JSON_FALSE);
    case 'n': return parse_literal(j, "null", INGEST__JSON_NULL);
    default:
        if (c == '-' || is_digit(c))
            return parse_number(j);
        return fail_at(j, INGEST_ECORRUPT, j->pos, "unexpected character");
    }
}

int ingest__json_parse(ingest__json *j, const char *s, size_t len)
{
    j->ntoks = 0;
    j->scratch_len = 0;
    j->err_pos = 0;
    j->err_what = NULL;
    j->in = s;
    j->len = len;
    j->pos = 0;
    if (len > j->max_len)
        return fail_at(j, INGEST_ETOOBIG, j->max_len, "input too long");
    if (j->scratch_cap < len + 1) {
        /* Grow geometrically up to max_len + 1 so that a run of lines of
         * slowly growing length does not reallocate on each. */
        size_t cap = j->scratch_cap ? j->scratch_cap : 256;
        while (cap < len + 1)
            cap *= 2;
        if (cap > j->max_len + 1)
            cap = j->max_len + 1;
        char *p = ingest__malloc(j->ctx, cap);
        if (p == NULL)
            return ingest__fail(j->ctx, INGEST_ENOMEM, "json: cannot allocate %zu bytes", cap);
        ingest__free(j->ctx, j->scratch);
        j->scratch = p;
        j->scratch_cap = cap;
    }
    INGEST__FORWARD(parse_value(j, 0));
    skip_ws(j);
    if (j->pos != j->len)
        return fail_at(j, INGEST_ECORRUPT, j->pos, "unexpected characters after the value");
    return 0;
}

int ingest__json_get_u64(const ingest__json_tok *t, uint64_t *out)
{
    if (t->type != INGEST__JSON_INT || t->neg)
        return -1;
    *out = t->u;
    return 0;
}

int ingest__json_get_i64(const ingest__json_tok *t, int64_t *out)
{
    if (t->type != INGEST__JSON_INT)
        return -1;
    if (t->neg) {
        /* u <= 2^63 was checked by the parser. */
        *out = t->u == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)t->u;
        return 0;
    }
    if (t->u > (uint64_t)INT64_MAX)
        return -1;
    *out = (int64_t)t->u;
    return 0;
}

long ingest__json_find(const ingest__json *j, uint32_t obj, const char *key)
{
    if (obj >= j->ntoks || j->toks[obj].type != INGEST__JSON_OBJECT)
        return -1;
    const size_t klen = strlen(key);
    uint32_t k = obj + 1;
    for (uint32_t m = 0; m < j->toks[obj].len; m++) {
        const ingest__json_tok *t = &j->toks[k];
        if (t->len == klen && memcmp(j->scratch + t->str, key, klen) == 0)
            return (long)k + 1;
        k = j->toks[k + 1].end;
    }
    return -1;
}

/* --- writing ------------------------------------------------------------- */

int ingest__json_put_str(ingest__buf *b, const char *s, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    INGEST__FORWARD(ingest__buf_append(b, "\"", 1));
    size_t run = 0; /* start of the pending run of bytes copied as is */
    size_t i = 0;
    while (i < len) {
        const unsigned c = p[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            i++;
            continue;
        }
        size_t n = 0;
        if (c >= 0x80 && (n = ingest__utf8_seq(p + i, len - i)) != 0) {
            i += n;
            continue;
        }
        INGEST__FORWARD(ingest__buf_append(b, p + run, i - run));
        char esc[6] = { '\\', 0, 0, 0, 0, 0 };
        size_t elen = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            /* A control character (\u00XX) or a byte of invalid UTF-8
             * (the raw-byte escape \uDCXX). */
            esc[1] = 'u';
            esc[2] = c < 0x80 ? '0' : 'd';
            esc[3] = c < 0x80 ? '0' : 'c';
            esc[4] = digits[c >> 4];
            esc[5] = digits[c & 15];
            elen = 6;
            break;
        }
        INGEST__FORWARD(ingest__buf_append(b, esc, elen));
        i++;
        run = i;
    }
    INGEST__FORWARD(ingest__buf_append(b, p + run, i - run));
    return ingest__buf_append(b, "\"", 1);
}

/* v in decimal, written backwards ending at end (20 digits at most): its first digit.  A
 * manifest line has several numbers per file: this is what snprintf("%" PRIu64) writes, without
 * its format parsing. */
static char *dec_u64(char *end, uint64_t v)
{
    char *p = end;
    do {
        *--p = (char)('0' + (int)(v % 10));
        v /= 10;
    } while (v != 0);
    return p;
}

int ingest__json_put_u64(ingest__buf *b, uint64_t v)
{
    char tmp[24];
    char *const end = tmp + sizeof(tmp);
    const char *p = dec_u64(end, v);
    return ingest__buf_append(b, p, (size_t)(end - p));
}

int ingest__json_put_i64(ingest__buf *b, int64_t v)
{
    char tmp[24];
    char *const end = tmp + sizeof(tmp);
    char *p = dec_u64(end, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
    if (v < 0)
        *--p = '-';
    return ingest__buf_append(b, p, (size_t)(end - p));
}
