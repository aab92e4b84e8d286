/* The bronze tree's policy for names and paths, shared by the lander and the agent (pathpolicy.h). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ingest/manifest.h"
#include "ingest/wire.h"
#include "pathpolicy.h"

static const char *const PLACEHOLDERS[] = {"{device}", "{path}", "{yyyy}", "{mm}", "{dd}", "{batch}"};
#define NPLACEHOLDERS (sizeof PLACEHOLDERS / sizeof PLACEHOLDERS[0])

/* The placeholder at p (its index), or -1. */
static int placeholder_at(const char *p)
{
    for (size_t k = 0; *p == '{' && k < NPLACEHOLDERS; k++)
        if (strncmp(p, PLACEHOLDERS[k], strlen(PLACEHOLDERS[k])) == 0)
            return (int)k;
    return -1;
}

int ingest__path_check_id(ingest_ctx *ctx, const char *what, const char *s)
{
    const size_t n = strlen(s);
    if (n == 0 || n > INGEST_MANIFEST_NAME_MAX)
        return ingest__fail(ctx, INGEST_EINVAL, "%s name has %zu bytes (1..%u)", what, n, INGEST_MANIFEST_NAME_MAX);
    /* the device and batch id rule of the wire (ingest_wire_id_valid): one rule everywhere */
    for (size_t i = 0; i < n; i++)
        if (!ingest_wire_id_valid(s, i + 1))
            return ingest__fail(ctx, INGEST_EINVAL, "%s name \"%.*s\": byte 0x%02x at %zu not allowed", what, (int)n,
                                s, (unsigned char)s[i], i);
    return 0;
}

/* What check_rel's messages name: what, or with of given "file {of}: landed path" (made for a message only). */
static const char *subject(const char *what, const char *of, char *buf, size_t cap)
{
    if (of == NULL)
        return what;
    snprintf(buf, cap, "file %.200s%s: landed path", of, strlen(of) > 200 ? "..." : "");
    return buf;
}

static int check_rel(ingest_ctx *ctx, const char *what, const char *of, const char *p, size_t name_max)
{
    char wb[256];
#define WHAT subject(what, of, wb, sizeof wb)
    const size_t n = strlen(p);
    if (n == 0)
        return ingest__fail(ctx, INGEST_EINVAL, "%s: empty path", WHAT);
    if (n >= INGEST_PATH_LANDED_MAX)
        return ingest__fail(ctx, INGEST_EINVAL, "%s: path of %zu bytes is too long (at most %u)", WHAT, n,
                            INGEST_PATH_LANDED_MAX - 1);
    if (p[0] == '/')
        return ingest__fail(ctx, INGEST_EINVAL, "%s \"%.200s\": absolute path refused", WHAT, p);
    const char *c = p;
    for (;;) {
        const char *e = strchr(c, '/');
        const size_t cl = e ? (size_t)(e - c) : strlen(c);
        if (cl == 0)
            return ingest__fail(ctx, INGEST_EINVAL, "%s \"%.200s\": empty path component", WHAT, p);
        if ((cl == 1 && c[0] == '.') || (cl == 2 && c[0] == '.' && c[1] == '.'))
            return ingest__fail(ctx, INGEST_EINVAL, "%s \"%.200s\": \"%.*s\" component refused", WHAT, p, (int)cl, c);
        if (cl > name_max)
            return ingest__fail(ctx, INGEST_EINVAL,
                                "%s \"%.200s%s\": a component of %zu bytes; the bronze filesystem allows %zu", WHAT, p,
                                n > 200 ? "..." : "", cl, name_max);
        if (!e)
            break;
        c = e + 1;
    }
    return 0;
}
#undef WHAT

int ingest__path_check_rel(ingest_ctx *ctx, const char *what, const char *p)
{
    return check_rel(ctx, what, NULL, p, INGEST_PATH_NAME_MAX);
}

static int expand(ingest_ctx *ctx, const char *layout, const char *device, const char *batch, const char *relpath,
                  int64_t mtime_ns, char *out, size_t cap)
{
    int64_t secs = mtime_ns / 1000000000;
    if (mtime_ns % 1000000000 < 0)
        secs--;
    const time_t t = (time_t)secs;
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "file %.200s: mtime %lld out of range", relpath, (long long)mtime_ns);
    char yyyy[16], mm[16], dd[16];
    snprintf(yyyy, sizeof yyyy, "%04d", tm.tm_year + 1900);
    snprintf(mm, sizeof mm, "%02d", tm.tm_mon + 1);
    snprintf(dd, sizeof dd, "%02d", tm.tm_mday);
    const char *vals[NPLACEHOLDERS] = {device, relpath, yyyy, mm, dd, batch};
    size_t o = 0;
    for (const char *p = layout; *p;) {
        const int k = placeholder_at(p);
        if (*p == '{' && k < 0)
            return ingest__fail(ctx, INGEST_EINVAL, "layout \"%.200s\": unknown placeholder at %zu", layout,
                                (size_t)(p - layout));
        const char *v = k >= 0 ? vals[k] : p;
        const size_t skip = k >= 0 ? strlen(PLACEHOLDERS[k]) : 1;
        const size_t vl = k >= 0 ? strlen(v) : 1;
        if (o + vl >= cap) {
            /* say how long it would be: the rest of the layout expanded, counted only */
            size_t total = o + vl;
            for (const char *q = p + skip; *q;) {
                const int qk = placeholder_at(q);
                total += qk >= 0 ? strlen(vals[qk]) : 1;
                q += qk >= 0 ? strlen(PLACEHOLDERS[qk]) : 1;
            }
            return ingest__fail(ctx, INGEST_ETOOBIG,
                                "file %.200s%s: its landed path would be %zu bytes (the path is %zu, the layout adds "
                                "%zu); the bronze tree takes at most %zu",
                                relpath, strlen(relpath) > 200 ? "..." : "", total, strlen(relpath),
                                total - strlen(relpath), cap - 1);
        }
        memcpy(out + o, v, vl);
        o += vl;
        p += skip;
    }
    out[o] = '\0';
    return 0;
}

int ingest__path_landed(ingest_ctx *ctx, const char *layout, const char *device, const char *batch,
                        const char *relpath, int64_t mtime_ns, size_t name_max, char *out, size_t cap)
{
    if (cap == 0 || cap > INGEST_PATH_LANDED_MAX || name_max == 0 || name_max > INGEST_PATH_NAME_MAX)
        return ingest__fail(ctx, INGEST_EINVAL, "landed path: buffer of %zu bytes (1..%u), names of %zu (1..%u)", cap,
                            INGEST_PATH_LANDED_MAX, name_max, INGEST_PATH_NAME_MAX);
    INGEST__FORWARD(check_rel(ctx, "file", NULL, relpath, INGEST_PATH_NAME_MAX));
    INGEST__FORWARD(expand(ctx, layout, device, batch, relpath, mtime_ns, out, cap));
    /* a layout like "{device}-{path}" can make a component longer than the file's own */
    INGEST__FORWARD(check_rel(ctx, NULL, relpath, out, name_max));
    if (strncmp(out, "_manifests", 10) == 0 && (out[10] == '/' || out[10] == '\0'))
        return ingest__fail(ctx, INGEST_EINVAL, "file %.200s: landed path %.200s is under _manifests", relpath, out);
    return 0;
}

int ingest__path_check_layout(const char *layout, char *why, size_t cap)
{
    bool has_path = false;
    const size_t n = strlen(layout);
    if (n == 0 || n > INGEST_PATH_LAYOUT_MAX) {
        snprintf(why, cap, "the layout has %zu bytes (1..%u)", n, INGEST_PATH_LAYOUT_MAX);
        return INGEST_EINVAL;
    }
    if (layout[0] == '/') {
        snprintf(why, cap, "the layout must be relative to the bronze root");
        return INGEST_EINVAL;
    }
    if (strncmp(layout, "_manifests/", 11) == 0) {
        /* every file would be refused when it lands (ingest__path_landed): the tree of the batch manifests */
        snprintf(why, cap, "the layout puts files under _manifests, the bronze tree's own directory of batch "
                           "manifests");
        return INGEST_EINVAL;
    }
    for (const char *c = layout; *c != '\0';) {
        if (*c == '}') {
            snprintf(why, cap, "unmatched '}' at offset %zu", (size_t)(c - layout));
            return INGEST_EINVAL;
        }
        if (*c != '{') {
            /* no ".." path component */
            if ((c == layout || c[-1] == '/') && c[0] == '.' && c[1] == '.' && (c[2] == '/' || c[2] == '\0')) {
                snprintf(why, cap, "'..' is not allowed in the layout");
                return INGEST_EINVAL;
            }
            c++;
            continue;
        }
        const int k = placeholder_at(c);
        if (k < 0) {
            const char *close = strchr(c, '}');
            const int m = close ? (int)(close - c + 1) : (int)strlen(c);
            snprintf(why, cap, "unknown placeholder '%.*s' (known: {device} {path} {yyyy} {mm} {dd} {batch})",
                     m > 40 ? 40 : m, c);
            return INGEST_EINVAL;
        }
        has_path |= k == 1;
        c += strlen(PLACEHOLDERS[k]);
    }
    if (!has_path) {
        snprintf(why, cap, "the layout must contain {path}");
        return INGEST_EINVAL;
    }
    return 0;
}
