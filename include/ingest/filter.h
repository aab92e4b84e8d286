/*
 * Per-source file filters of the edge agent: which files found under a
 * source are shipped.
 *
 *   ingest_filter_create(ctx, &spec, &f);          compile once per source
 *   for each regular file (path relative to the source, stat):
 *       r = ingest_filter_check_stat(f, rel, size, mtime_ns, now_ns);
 *       if (r == INGEST_FILTER_TAKE && (n = ingest_filter_head_len(f)) > 0) {
 *           read up to n first bytes of the file into head (len = bytes read)
 *           r = ingest_filter_check_head(f, head, len);
 *       }
 *       if (r != INGEST_FILTER_TAKE) count skipped[r], ingest_filter_reason_name(r)
 *
 * Rules, applied in this order; the first one that refuses a file names
 * the reason:
 *   include      the path matches none of the include globs (no include
 *                globs: every path passes)                   "include"
 *   exclude      the path matches one of the exclude globs   "exclude"
 *   min_size     size < min_size                             "min_size"
 *   max_size     size > max_size (0 = no upper bound)        "max_size"
 *   max_age      mtime < now - max_age (0 = no bound; a
 *                future mtime always passes)                 "max_age"
 *   sample_every keep 1 in N of the files that passed the
 *                rules above (see below)                     "sample"
 *   prefix       the file's first bytes equal drop_if_prefix
 *                (ingest_filter_check_head)                  "prefix"
 *
 * Globs are matched against the whole path relative to the source, with
 * '/' between components, no leading '/' or "./" (e.g. "cam1/2024/a.jpg"):
 *   *        any run of bytes within one component (also a leading '.')
 *   ?        one byte other than '/'
 *   [abc] [a-z] [!a-z] [^a-z]   one byte of (not of) the class; ']' first
 *            in the class is literal; a class never matches '/'
 *   \c       the byte c literally (also inside a class)
 *   **       as a whole component: any number of components, including
 *            zero in "**" + "/x" (x at any depth) and "a/" + "**" + "/b"
 *            (also "a/b"); a trailing "a/" + "**" matches everything inside
 *            a (at least one more component), not "a" itself.
 * A pattern without '/' matches top-level names only: "*.csv" takes
 * "a.csv" but not "d/a.csv"; to match at any depth write "**", "/",
 * "*.csv" run together (docs/config.md, section Filters, has examples).
 * Matching is bytewise and case-sensitive.  Patterns are rejected (with a
 * message naming the pattern and the offset) when empty, longer than
 * INGEST_FILTER_MAX_GLOB bytes, starting with '/', containing an empty,
 * "." or ".." component, "**" not forming a whole component, an
 * unterminated or empty class, a reversed range, '/' in a class, or a
 * trailing '\'.
 *
 * Sampling is deterministic by path: a file is kept when
 * SipHash-2-4(key, relative path) mod N == 0, with key = the first 16
 * bytes of BLAKE2b(sample_seed) (seed "" when NULL).  The same path under
 * the same seed always gets the same answer (on every device, in every
 * rescan), and over many paths about 1 in N is kept.
 *
 * drop_if_prefix is "hex:" followed by 2 to 128 hex digits (an even
 * count), or any other non-empty string taken as its bytes; at most
 * INGEST_FILTER_MAX_PREFIX bytes.  A file shorter than the prefix never
 * matches it.
 *
 * THREAD SAFETY: a filter is immutable once created; the check functions
 * may be called from any number of threads at once.  ingest_filter_reason_name
 * is thread-safe.
 */
#ifndef INGEST_FILTER_H
#define INGEST_FILTER_H

#include "ingest/common.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define INGEST_FILTER_MAX_GLOBS 64   /* patterns per include/exclude list */
#define INGEST_FILTER_MAX_GLOB 256   /* bytes per pattern */
#define INGEST_FILTER_MAX_PREFIX 64  /* bytes of drop_if_prefix */

/* Results of the checks: TAKE or the reason a file is skipped. */
enum {
    INGEST_FILTER_TAKE = 0,
    INGEST_FILTER_INCLUDE = 1,  /* matched no include glob */
    INGEST_FILTER_EXCLUDE = 2,  /* matched an exclude glob */
    INGEST_FILTER_MIN_SIZE = 3, /* smaller than min_size */
    INGEST_FILTER_MAX_SIZE = 4, /* larger than max_size */
    INGEST_FILTER_MAX_AGE = 5,  /* modified before now - max_age */
    INGEST_FILTER_SAMPLE = 6,   /* not in the 1-in-N sample */
    INGEST_FILTER_PREFIX = 7,   /* starts with drop_if_prefix */
    INGEST_FILTER_NREASONS = 8  /* size of a counter array indexed by result */
};

/* What to filter on.  Every field may be zero/NULL: no such rule. */
typedef struct ingest_filter_spec {
    const char *const *include;  /* globs; none: every path passes */
    size_t include_count;        /* <= INGEST_FILTER_MAX_GLOBS */
    const char *const *exclude;  /* globs */
    size_t exclude_count;        /* <= INGEST_FILTER_MAX_GLOBS */
    uint64_t min_size;           /* bytes; 0 = no lower bound */
    uint64_t max_size;           /* bytes; 0 = no upper bound; else >= min_size */
    uint64_t max_age_ms;         /* 0 = no age bound */
    uint64_t sample_every;       /* N: keep 1 in N; 0 or 1 = keep all */
    const char *sample_seed;     /* key of the sample hash; NULL = "" */
    const char *drop_if_prefix;  /* NULL or "" = none; "hex:..." or a string */
} ingest_filter_spec;

typedef struct ingest_filter ingest_filter;

/*
 * Compile spec (the strings are copied; spec need not outlive the call).
 * Returns 0, INGEST_EINVAL (bad glob, too many globs, bad prefix,
 * max_size < min_size) with e.g. "exclude[2]: bad glob 'a[b': unterminated
 * '[' at offset 1" in ctx, or INGEST_ENOMEM.  *out is NULL on failure.
 */
INGEST_API int ingest_filter_create(ingest_ctx *ctx, const ingest_filter_spec *spec,
                                    ingest_filter **out) INGEST_WUR;
/* Release a filter; NULL is accepted. */
INGEST_API void ingest_filter_destroy(ingest_filter *f);

/*
 * The rules that need no file content: include, exclude, min_size,
 * max_size, max_age, sample (in that order).  relpath is the path relative
 * to the source (NUL-terminated); times are nanoseconds since the epoch.
 * Returns INGEST_FILTER_TAKE or the reason (INGEST_FILTER_INCLUDE..SAMPLE).
 */
INGEST_API int ingest_filter_check_stat(const ingest_filter *f, const char *relpath, uint64_t size,
                                        int64_t mtime_ns, int64_t now_ns);

/*
 * How many leading bytes of a file ingest_filter_check_head needs: the
 * length of drop_if_prefix, 0 when there is no content rule (then do not
 * read anything).
 */
INGEST_API size_t ingest_filter_head_len(const ingest_filter *f);

/*
 * The content rule: head holds the first len bytes of the file (len =
 * min(head_len, file size); more is allowed and ignored).  Returns
 * INGEST_FILTER_TAKE or INGEST_FILTER_PREFIX.
 */
INGEST_API int ingest_filter_check_head(const ingest_filter *f, const void *head, size_t len);

/* "take", "include", "exclude", "min_size", "max_size", "max_age", "sample", "prefix"; "?" otherwise. */
INGEST_API const char *ingest_filter_reason_name(int reason);

/*
 * Validate one glob without building a filter (used by the config loader).
 * Returns 0 or INGEST_EINVAL with "bad glob 'P': WHAT at offset N" in ctx
 * (ctx may be NULL).
 */
INGEST_API int ingest_filter_glob_check(ingest_ctx *ctx, const char *pattern);

/*
 * Match one glob against a relative path, compiling it on the fly: 1 match,
 * 0 no match, or INGEST_EINVAL for a bad pattern.  For tools and tests;
 * filters compile their globs once.
 */
INGEST_API int ingest_filter_glob_match(ingest_ctx *ctx, const char *pattern, const char *relpath);

/*
 * Parse a drop_if_prefix value into out (cap >= INGEST_FILTER_MAX_PREFIX);
 * *len = its byte count.  Returns 0 or INGEST_EINVAL (empty, too long,
 * bad hex) with the reason in ctx (ctx may be NULL).
 */
INGEST_API int ingest_filter_prefix_parse(ingest_ctx *ctx, const char *text, uint8_t *out, size_t cap,
                                          size_t *len);

#ifdef __cplusplus
}
#endif
#endif
