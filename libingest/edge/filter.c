/*
 * Per-source file filters (include/exclude globs, size and age bounds,
 * 1-in-N sampling, a leading-bytes rule).  Semantics: include/ingest/filter.h.
 *
 * A glob is compiled once into a list of segments, one per path component
 * of the pattern: a component pattern (a small op list: literal byte, '?',
 * '*', class), "any one component", or "**" (any run of components).
 * Matching is the classic greedy wildcard walk done twice: over the bytes
 * of one component with '*' as the backtracking point, and over the
 * components of the path with "**" as the backtracking point.  Each
 * segment matches exactly one component, so remembering only the last
 * "**" is enough and a match costs at most (segments x components)
 * component matches, each at most (ops x bytes): no exponential blow-up
 * on hostile patterns.
 */
#include "../internal.h"
#include "ingest/filter.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

enum { OP_LIT, OP_ANY, OP_STAR, OP_CLASS };
enum { SEG_COMP, SEG_ANYCOMP, SEG_GLOBSTAR };

typedef struct gop {
    uint8_t op;
    uint8_t c;    /* OP_LIT: the byte */
    uint16_t cls; /* OP_CLASS: index into classes */
} gop;

typedef struct gseg {
    uint8_t kind;
    uint16_t off, len; /* SEG_COMP: ops [off, off + len) */
} gseg;

typedef struct glob {
    gseg *segs;
    gop *ops;
    uint8_t (*classes)[32]; /* bitmaps of 256 bits */
    size_t nsegs;
    void *mem; /* one block holding the three arrays */
} glob;

struct ingest_filter {
    ingest_ctx *ctx;
    glob *inc, *exc;
    size_t ninc, nexc;
    uint64_t min_size, max_size, max_age_ns, sample_every;
    uint8_t sample_key[crypto_shorthash_KEYBYTES];
    uint8_t prefix[INGEST_FILTER_MAX_PREFIX];
    size_t prefix_len;
};

/* ---- compiling ----------------------------------------------------------- */

/* Upper bounds for one pattern of at most INGEST_FILTER_MAX_GLOB bytes. */
#define MAX_OPS INGEST_FILTER_MAX_GLOB
#define MAX_SEGS (INGEST_FILTER_MAX_GLOB / 2 + 2)
#define MAX_CLASSES (INGEST_FILTER_MAX_GLOB / 2 + 1)

typedef struct gbuild {
    gop ops[MAX_OPS];
    gseg segs[MAX_SEGS];
    uint8_t classes[MAX_CLASSES][32];
    size_t nops, nsegs, nclasses;
} gbuild;

static int bad_glob(ingest_ctx *ctx, const char *what, const char *pat, size_t at, const char *why)
{
    return ingest__fail(ctx, INGEST_EINVAL, "%sbad glob '%.*s': %s at offset %zu", what,
                        INGEST_FILTER_MAX_GLOB, pat, why, at);
}

/* Read one possibly escaped byte of a class at *i; 0 or -1 (error set in *why). */
static int class_byte(const char *pat, size_t *i, uint8_t *out, const char **why)
{
    if (pat[*i] == '\\') {
        if (pat[*i + 1] == '\0') {
            *why = "trailing '\\'";
            return -1;
        }
        (*i)++;
    }
    if (pat[*i] == '\0') {
        *why = "unterminated '['";
        return -1;
    }
    if (pat[*i] == '/') {
        *why = "a class cannot contain '/'";
        return -1;
    }
    *out = (uint8_t)pat[*i];
    (*i)++;
    return 0;
}

/* pat[*i] is '['; on success *i is past the closing ']'. */
static int compile_class(gbuild *b, const char *pat, size_t *i, const char **why, size_t *err_at)
{
    const size_t open = *i;
    uint8_t *bits = b->classes[b->nclasses];
    bool neg = false;
    memset(bits, 0, 32);
    (*i)++;
    if (pat[*i] == '!' || pat[*i] == '^') {
        neg = true;
        (*i)++;
    }
    bool first = true;
    while (first || pat[*i] != ']') {
        uint8_t lo, hi;
        first = false;
        *err_at = *i;
        if (class_byte(pat, i, &lo, why) != 0) {
            if (pat[*i] == '\0')
                *err_at = open;
            return -1;
        }
        hi = lo;
        if (pat[*i] == '-' && pat[*i + 1] != ']' && pat[*i + 1] != '\0') {
            (*i)++;
            *err_at = *i;
            if (class_byte(pat, i, &hi, why) != 0)
                return -1;
            if (hi < lo) {
                *why = "reversed range in a class";
                return -1;
            }
        }
        for (unsigned c = lo; c <= hi; c++)
            bits[c >> 3] |= (uint8_t)(1u << (c & 7));
        if (pat[*i] == '\0') {
            *why = "unterminated '['";
            *err_at = open;
            return -1;
        }
    }
    (*i)++; /* ']' */
    if (neg)
        for (int k = 0; k < 32; k++)
            bits[k] = (uint8_t)~bits[k];
    bits['/' >> 3] &= (uint8_t) ~(1u << ('/' & 7)); /* never matches '/' */
    b->ops[b->nops++] = (gop){ .op = OP_CLASS, .cls = (uint16_t)b->nclasses };
    b->nclasses++;
    return 0;
}

/* Compile pat into b; what prefixes messages ("include[2]: " or ""). */
static int compile(ingest_ctx *ctx, const char *what, const char *pat, gbuild *b)
{
    const size_t n = strlen(pat);
    const char *why = NULL;
    size_t err_at = 0;

    b->nops = b->nsegs = b->nclasses = 0;
    if (n == 0)
        return ingest__fail(ctx, INGEST_EINVAL, "%sbad glob '': empty pattern", what);
    if (n > INGEST_FILTER_MAX_GLOB)
        return ingest__fail(ctx, INGEST_EINVAL, "%sbad glob '%.40s...': %zu bytes, more than %d", what,
                            pat, n, INGEST_FILTER_MAX_GLOB);
    if (pat[0] == '/')
        return bad_glob(ctx, what, pat, 0,
                        "patterns are relative to the source (remove the leading '/')");
    size_t i = 0;
    while (i <= n) {
        /* One component: [i, end) up to an unescaped '/' outside a class. */
        const size_t start = i;
        size_t end = i;
        while (pat[end] != '\0' && pat[end] != '/') {
            if (pat[end] == '\\' && pat[end + 1] != '\0')
                end++;
            else if (pat[end] == '[') {
                /* skip to the class end so that the compiler reports '/' inside it */
                size_t k = end + 1;
                if (pat[k] == '!' || pat[k] == '^')
                    k++;
                if (pat[k] == ']')
                    k++;
                while (pat[k] != '\0' && pat[k] != ']') {
                    if (pat[k] == '\\' && pat[k + 1] != '\0')
                        k++;
                    k++;
                }
                if (pat[k] == ']')
                    end = k;
            }
            end++;
        }
        const size_t clen = end - start;
        const bool last = pat[end] == '\0';
        if (clen == 0)
            return bad_glob(ctx, what, pat, start, "empty path component");
        if ((clen == 1 && pat[start] == '.') || (clen == 2 && pat[start] == '.' && pat[start + 1] == '.'))
            return bad_glob(ctx, what, pat, start, "'.' and '..' components never match");
        if (clen == 2 && pat[start] == '*' && pat[start + 1] == '*') {
            const bool prev_star = b->nsegs > 0 && b->segs[b->nsegs - 1].kind == SEG_GLOBSTAR;
            if (last && b->nsegs > 0) {
                /* a trailing globstar: at least one more component (any + any run) */
                b->segs[b->nsegs++] = (gseg){ .kind = SEG_ANYCOMP };
                b->segs[b->nsegs++] = (gseg){ .kind = SEG_GLOBSTAR };
            } else if (!prev_star) { /* "**" + "/" + "**" is one "**" */
                b->segs[b->nsegs++] = (gseg){ .kind = SEG_GLOBSTAR };
            }
        } else {
            gseg seg = { .kind = SEG_COMP, .off = (uint16_t)b->nops };
            size_t k = start;
            while (k < end) {
                const char c = pat[k];
                if (c == '*') {
                    if (k + 1 < end && pat[k + 1] == '*')
                        return bad_glob(ctx, what, pat, k, "'**' must be a whole path component");
                    b->ops[b->nops++] = (gop){ .op = OP_STAR };
                    k++;
                } else if (c == '?') {
                    b->ops[b->nops++] = (gop){ .op = OP_ANY };
                    k++;
                } else if (c == '[') {
                    if (compile_class(b, pat, &k, &why, &err_at) != 0)
                        return bad_glob(ctx, what, pat, err_at, why);
                } else if (c == '\\') {
                    if (k + 1 >= n)
                        return bad_glob(ctx, what, pat, k, "trailing '\\'");
                    b->ops[b->nops++] = (gop){ .op = OP_LIT, .c = (uint8_t)pat[k + 1] };
                    k += 2;
                } else {
                    b->ops[b->nops++] = (gop){ .op = OP_LIT, .c = (uint8_t)c };
                    k++;
                }
            }
            if (k != end) /* a class ran past the component: it held a '/' */
                return bad_glob(ctx, what, pat, end, "a class cannot contain '/'");
            seg.len = (uint16_t)(b->nops - seg.off);
            b->segs[b->nsegs++] = seg;
        }
        if (last)
            break;
        i = end + 1;
        if (pat[i] == '\0')
            return bad_glob(ctx, what, pat, i, "empty path component (trailing '/')");
    }
    return INGEST_OK;
}

static int glob_build(ingest_ctx *ctx, const char *what, const char *pat, glob *g, gbuild *b)
{
    INGEST__FORWARD(compile(ctx, what, pat, b));
    const size_t szs = b->nsegs * sizeof(gseg), szo = b->nops * sizeof(gop), szc = b->nclasses * 32;
    char *mem = ingest__malloc(ctx, szs + szo + szc + 1);
    if (mem == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "out of memory compiling a glob");
    g->mem = mem;
    g->segs = (gseg *)(void *)mem;
    g->ops = (gop *)(void *)(mem + szs);
    g->classes = (uint8_t(*)[32])(void *)(mem + szs + szo);
    g->nsegs = b->nsegs;
    memcpy(g->segs, b->segs, szs);
    memcpy(g->ops, b->ops, szo);
    memcpy(g->classes, b->classes, szc);
    return INGEST_OK;
}

/* ---- matching ------------------------------------------------------------ */

static bool op_match(const glob *g, const gop *o, uint8_t c)
{
    switch (o->op) {
    case OP_LIT:
        return o->c == c;
    case OP_ANY:
        return c != '/';
    case OP_CLASS:
        return (g->classes[o->cls][c >> 3] >> (c & 7)) & 1;
    default:
        return false;
    }
}

/* One component s[0, n) against a component pattern. */
static bool comp_match(const glob *g, const gseg *seg, const char *s, size_t n)
{
    const gop *ops = g->ops + seg->off;
    const size_t k = seg->len;
    size_t pi = 0, si = 0, star_p = SIZE_MAX, star_s = 0;
    while (si < n) {
        if (pi < k && ops[pi].op == OP_STAR) {
            star_p = ++pi;
            star_s = si;
            continue;
        }
        if (pi < k && op_match(g, &ops[pi], (uint8_t)s[si])) {
            pi++;
            si++;
            continue;
        }
        if (star_p != SIZE_MAX) {
            pi = star_p;
            si = ++star_s;
            continue;
        }
        return false;
    }
    while (pi < k && ops[pi].op == OP_STAR)
        pi++;
    return pi == k;
}

static bool seg_match(const glob *g, const gseg *seg, const char *s, size_t n)
{
    return seg->kind == SEG_ANYCOMP || comp_match(g, seg, s, n);
}

/* End of the component starting at pos, and the start of the next one. */
static size_t comp_end(const char *path, size_t len, size_t pos)
{
    const char *slash = memchr(path + pos, '/', len - pos);
    return slash ? (size_t)(slash - path) : len;
}

static size_t next_comp(size_t len, size_t end) { return end < len ? end + 1 : len; }

static bool glob_match(const glob *g, const char *path, size_t len)
{
    size_t si = 0, pos = 0, star_seg = SIZE_MAX, star_pos = 0;
    while (pos < len) {
        if (si < g->nsegs && g->segs[si].kind == SEG_GLOBSTAR) {
            star_seg = ++si;
            star_pos = pos;
            continue;
        }
        const size_t end = comp_end(path, len, pos);
        if (si < g->nsegs && seg_match(g, &g->segs[si], path + pos, end - pos)) {
            si++;
            pos = next_comp(len, end);
            continue;
        }
        if (star_seg != SIZE_MAX) {
            si = star_seg;
            star_pos = next_comp(len, comp_end(path, len, star_pos));
            pos = star_pos;
            continue;
        }
        return false;
    }
    while (si < g->nsegs && g->segs[si].kind == SEG_GLOBSTAR)
        si++;
    return si == g->nsegs;
}

/* ---- prefix -------------------------------------------------------------- */

int ingest_filter_prefix_parse(ingest_ctx *ctx, const char *text, uint8_t *out, size_t cap, size_t *len)
{
    *len = 0;
    if (text == NULL || text[0] == '\0')
        return ingest__fail(ctx, INGEST_EINVAL, "bad prefix: empty");
    if (strncmp(text, "hex:", 4) == 0) {
        const char *h = text + 4;
        const size_t n = strlen(h);
        if (n == 0 || n % 2 != 0)
            return ingest__fail(ctx, INGEST_EINVAL,
                                "bad prefix '%.140s': 'hex:' needs an even number of hex digits, "
                                "got %zu",
                                text, n);
        if (n / 2 > INGEST_FILTER_MAX_PREFIX || n / 2 > cap)
            return ingest__fail(ctx, INGEST_EINVAL, "bad prefix '%.40s...': %zu bytes, more than %d",
                                text, n / 2, INGEST_FILTER_MAX_PREFIX);
        for (size_t i = 0; i < n; i++)
            if (ingest__hexval(h[i]) < 0)
                return ingest__fail(ctx, INGEST_EINVAL,
                                    "bad prefix '%.140s': '%c' at offset %zu is not a hex digit", text,
                                    h[i], i + 4);
        for (size_t i = 0; i < n / 2; i++)
            out[i] = (uint8_t)(ingest__hexval(h[2 * i]) << 4 | ingest__hexval(h[2 * i + 1]));
        *len = n / 2;
        return INGEST_OK;
    }
    const size_t n = strlen(text);
    if (n > INGEST_FILTER_MAX_PREFIX || n > cap)
        return ingest__fail(ctx, INGEST_EINVAL, "bad prefix '%.40s...': %zu bytes, more than %d", text, n,
                            INGEST_FILTER_MAX_PREFIX);
    memcpy(out, text, n);
    *len = n;
    return INGEST_OK;
}

/* ---- the filter ---------------------------------------------------------- */

static void free_globs(ingest_ctx *ctx, glob *g, size_t n)
{
    if (g == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        ingest__free(ctx, g[i].mem);
    ingest__free(ctx, g);
}

static int build_list(ingest_ctx *ctx, const char *name, const char *const *pats, size_t n, glob **out,
                      size_t *count, gbuild *b)
{
    if (n == 0)
        return INGEST_OK;
    if (pats == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "%s: %zu patterns but no array", name, n);
    if (n > INGEST_FILTER_MAX_GLOBS)
        return ingest__fail(ctx, INGEST_EINVAL, "%s: %zu patterns, more than %d", name, n,
                            INGEST_FILTER_MAX_GLOBS);
    *out = ingest__calloc(ctx, n, sizeof(glob));
    if (*out == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char what[48];
        snprintf(what, sizeof(what), "%s[%zu]: ", name, i);
        if (pats[i] == NULL)
            return ingest__fail(ctx, INGEST_EINVAL, "%sbad glob: NULL", what);
        INGEST__FORWARD(glob_build(ctx, what, pats[i], &(*out)[i], b));
        (*count)++;
    }
    return INGEST_OK;
}

int ingest_filter_create(ingest_ctx *ctx, const ingest_filter_spec *spec, ingest_filter **out)
{
    int rc;
    gbuild b;
    ingest_filter *f = NULL;

    *out = NULL;
    if (spec->max_size != 0 && spec->max_size < spec->min_size)
        return ingest__fail(ctx, INGEST_EINVAL, "max_size (%llu) is less than min_size (%llu)",
                            (unsigned long long)spec->max_size, (unsigned long long)spec->min_size);
    f = ingest__calloc(ctx, 1, sizeof(*f));
    if (f == NULL) {
        rc = ingest__fail(ctx, INGEST_ENOMEM, "out of memory creating a filter");
        goto out;
    }
    f->ctx = ctx;
    rc = build_list(ctx, "include", spec->include, spec->include_count, &f->inc, &f->ninc, &b);
    if (rc != INGEST_OK)
        goto out;
    rc = build_list(ctx, "exclude", spec->exclude, spec->exclude_count, &f->exc, &f->nexc, &b);
    if (rc != INGEST_OK)
        goto out;
    if (spec->drop_if_prefix != NULL && spec->drop_if_prefix[0] != '\0') {
        rc = ingest_filter_prefix_parse(ctx, spec->drop_if_prefix, f->prefix, sizeof(f->prefix),
                                        &f->prefix_len);
        if (rc != INGEST_OK)
            goto out;
    }
    f->min_size = spec->min_size;
    f->max_size = spec->max_size;
    f->max_age_ns = spec->max_age_ms > UINT64_MAX / 1000000u ? UINT64_MAX : spec->max_age_ms * 1000000u;
    f->sample_every = spec->sample_every;
    const char *seed = spec->sample_seed ? spec->sample_seed : "";
    if (sodium_init() < 0) {
        rc = ingest__fail(ctx, INGEST_ECRYPTO, "libsodium failed to initialise");
        goto out;
    }
    crypto_generichash(f->sample_key, sizeof(f->sample_key), (const unsigned char *)seed, strlen(seed),
                       NULL, 0);
    *out = f;
    f = NULL;
out:
    ingest_filter_destroy(f);
    return rc;
}

void ingest_filter_destroy(ingest_filter *f)
{
    if (f == NULL)
        return;
    ingest_ctx *ctx = f->ctx;
    free_globs(ctx, f->inc, f->ninc);
    free_globs(ctx, f->exc, f->nexc);
    ingest__free(ctx, f);
}

static bool any_match(const glob *g, size_t n, const char *path, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (glob_match(&g[i], path, len))
            return true;
    return false;
}

int ingest_filter_check_stat(const ingest_filter *f, const char *relpath, uint64_t size, int64_t mtime_ns,
                             int64_t now_ns)
{
    const size_t len = strlen(relpath);
    if (f->ninc > 0 && !any_match(f->inc, f->ninc, relpath, len))
        return INGEST_FILTER_INCLUDE;
    if (any_match(f->exc, f->nexc, relpath, len))
        return INGEST_FILTER_EXCLUDE;
    if (size < f->min_size)
        return INGEST_FILTER_MIN_SIZE;
    if (f->max_size != 0 && size > f->max_size)
        return INGEST_FILTER_MAX_SIZE;
    if (f->max_age_ns != 0 && mtime_ns < now_ns &&
        (uint64_t)now_ns - (uint64_t)mtime_ns > f->max_age_ns)
        return INGEST_FILTER_MAX_AGE;
    if (f->sample_every > 1) {
        uint8_t h[crypto_shorthash_BYTES];
        crypto_shorthash(h, (const unsigned char *)relpath, len, f->sample_key);
        if (ingest__get_u64(h) % f->sample_every != 0)
            return INGEST_FILTER_SAMPLE;
    }
    return INGEST_FILTER_TAKE;
}

size_t ingest_filter_head_len(const ingest_filter *f) { return f->prefix_len; }

int ingest_filter_check_head(const ingest_filter *f, const void *head, size_t len)
{
    if (f->prefix_len != 0 && len >= f->prefix_len && memcmp(head, f->prefix, f->prefix_len) == 0)
        return INGEST_FILTER_PREFIX;
    return INGEST_FILTER_TAKE;
}

const char *ingest_filter_reason_name(int reason)
{
    static const char *const names[INGEST_FILTER_NREASONS] = {
        "take", "include", "exclude", "min_size", "max_size", "max_age", "sample", "prefix",
    };
    return reason >= 0 && reason < INGEST_FILTER_NREASONS ? names[reason] : "?";
}

int ingest_filter_glob_match(ingest_ctx *ctx, const char *pattern, const char *relpath)
{
    gbuild b; /* about 6 KiB: no allocation, so ctx may be NULL */
    glob g;
    INGEST__FORWARD(compile(ctx, "", pattern, &b));
    g.segs = b.segs;
    g.ops = b.ops;
    g.classes = b.classes;
    g.nsegs = b.nsegs;
    g.mem = NULL;
    return glob_match(&g, relpath, strlen(relpath)) ? 1 : 0;
}

int ingest_filter_glob_check(ingest_ctx *ctx, const char *pattern)
{
    const int rc = ingest_filter_glob_match(ctx, pattern, "");
    return rc < 0 ? rc : INGEST_OK;
}
