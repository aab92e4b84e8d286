/* Tests of the per-source file filters (libingest/edge/filter.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingest/common.h"
#include "ingest/filter.h"

#define NS 1000000000ll
#define NOW (1700000000ll * NS)

/* ---- glob semantics -------------------------------------------------------- */

typedef struct gcase {
    const char *pat, *path;
    int want;
} gcase;

static void run_cases(const gcase *c, size_t n)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    for (size_t i = 0; i < n; i++) {
        const int got = ingest_filter_glob_match(ctx, c[i].pat, c[i].path);
        if (got != c[i].want)
            fail_msg("glob '%s' on '%s': got %d, want %d (%s)", c[i].pat, c[i].path, got, c[i].want,
                     got < 0 ? ingest_ctx_errmsg(ctx) : "");
    }
    ingest_ctx_destroy(ctx);
}

static void test_glob_basic(void **state)
{
    (void)state;
    static const gcase c[] = {
        { "a.csv", "a.csv", 1 },
        { "a.csv", "b.csv", 0 },
        { "a.csv", "a.csvx", 0 },
        { "a.csv", "d/a.csv", 0 },
        { "*.csv", "a.csv", 1 },
        { "*.csv", ".csv", 1 },
        { "*.csv", ".hidden.csv", 1 },
        { "*.csv", "d/a.csv", 0 }, /* no '/': top level only */
        { "*.csv", "a.csv.gz", 0 },
        { "*", "anything", 1 },
        { "*", "a/b", 0 },
        { "*/*", "a/b", 1 },
        { "*/*", "a/b/c", 0 },
        { "d/*.log", "d/x.log", 1 },
        { "d/*.log", "e/x.log", 0 },
        { "a*b*c", "abc", 1 },
        { "a*b*c", "axxbyyc", 1 },
        { "a*b*c", "axxbyy", 0 },
        { "a*b*c", "acb", 0 },
        { "*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0 },
        { "?.txt", "a.txt", 1 },
        { "?.txt", "ab.txt", 0 },
        { "?.txt", ".txt", 0 },
        { "a?b", "a/b", 0 }, /* '?' never matches '/' */
        { "cam?/img", "cam1/img", 1 },
        { "x", "x/", 1 }, /* a trailing '/' in the path adds no component */
    };
    run_cases(c, sizeof(c) / sizeof(c[0]));
}

static void test_glob_classes_escapes(void **state)
{
    (void)state;
    static const gcase c[] = {
        { "[abc].txt", "b.txt", 1 },
        { "[abc].txt", "d.txt", 0 },
        { "img[0-9][0-9].jpg", "img07.jpg", 1 },
        { "img[0-9][0-9].jpg", "img7a.jpg", 0 },
        { "[!0-9]*", "x1", 1 },
        { "[!0-9]*", "1x", 0 },
        { "[^0-9]*", "1x", 0 },
        { "[^0-9]*", "_x", 1 },
        { "[]]", "]", 1 },
        { "[]a]", "a", 1 },
        { "[!]]", "]", 0 },
        { "[!]]", "x", 1 },
        { "[a-]", "-", 1 },
        { "[a-]", "b", 0 },
        { "[\\]x]", "]", 1 },
        { "[\\-a]", "-", 1 },
        { "[A-Za-z_]*", "Zed", 1 },
        { "[A-Za-z_]*", "9ed", 0 },
        { "a[!x]b", "a/b", 0 }, /* a negated class still never matches '/' */
        { "\\*.txt", "*.txt", 1 },
        { "\\*.txt", "a.txt", 0 },
        { "\\?", "?", 1 },
        { "\\?", "a", 0 },
        { "\\[x]", "[x]", 1 },
        { "\\[x]", "x", 0 },
        { "a\\\\b", "a\\b", 1 },
        { "\\a", "a", 1 },
        { "DATA.csv", "data.csv", 0 }, /* case-sensitive */
        { "\xc3\xa9t\xc3\xa9.txt", "\xc3\xa9t\xc3\xa9.txt", 1 },
        { "??t??.txt", "\xc3\xa9t\xc3\xa9.txt", 1 }, /* bytes, not characters */
    };
    run_cases(c, sizeof(c) / sizeof(c[0]));
}

static void test_glob_globstar(void **state)
{
    (void)state;
    static const gcase c[] = {
        /* "**" alone: everything */
        { "**", "a", 1 },
        { "**", "a/b/c", 1 },
        /* leading: any depth, including zero */
        { "**/x", "x", 1 },
        { "**/x", "a/x", 1 },
        { "**/x", "a/b/c/x", 1 },
        { "**/x", "a/xx", 0 },
        { "**/x", "x/a", 0 },
        { "**/*.csv", "a.csv", 1 },
        { "**/*.csv", "2024/01/a.csv", 1 },
        { "**/*.csv", "2024/01/a.json", 0 },
        /* trailing: everything inside, not the directory name itself */
        { "a/**", "a/b", 1 },
        { "a/**", "a/b/c/d", 1 },
        { "a/**", "a", 0 },
        { "a/**", "b/a/c", 0 },
        { "a/**", "ab/c", 0 },
        { "a/**/**", "a", 0 },
        { "a/**/**", "a/b", 1 },
        /* middle: zero or more components */
        { "a/**/b", "a/b", 1 },
        { "a/**/b", "a/x/b", 1 },
        { "a/**/b", "a/x/y/z/b", 1 },
        { "a/**/b", "a/x/y/z/bb", 0 },
        { "a/**/b", "x/a/b", 0 },
        { "a/**/b", "a/b/c", 0 },
        { "a/**/b/**/c", "a/b/c", 1 },
        { "a/**/b/**/c", "a/1/b/2/3/c", 1 },
        { "a/**/b/**/c", "a/1/c/2/b", 0 },
        { "**/**/x", "x", 1 },
        { "**/**/x", "p/q/x", 1 },
        { "**/tmp/**", "tmp/a", 1 },
        { "**/tmp/**", "x/y/tmp/a/b", 1 },
        { "**/tmp/**", "x/tmp", 0 },
        { "**/.*", "a/.hidden", 1 },
        { "**/.*", "a/visible", 0 },
        /* backtracking: a later component must still match */
        { "**/a/b", "a/a/a/b", 1 },
        { "**/a/b", "a/a/a/c", 0 },
        { "**/cam[0-9]/**/*.jpg", "site/cam3/2024/05/x.jpg", 1 },
        { "**/cam[0-9]/**/*.jpg", "site/camX/2024/05/x.jpg", 0 },
    };
    run_cases(c, sizeof(c) / sizeof(c[0]));
}

static void bad(const char *pat, const char *expect)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    const int rc = ingest_filter_glob_check(ctx, pat);
    if (rc != INGEST_EINVAL || strstr(ingest_ctx_errmsg(ctx), expect) == NULL)
        fail_msg("glob '%s': rc %d, message [%s], expected [%s]", pat, rc, ingest_ctx_errmsg(ctx), expect);
    assert_int_equal(ingest_filter_glob_match(ctx, pat, "x"), INGEST_EINVAL);
    ingest_ctx_destroy(ctx);
}

static void test_glob_invalid(void **state)
{
    (void)state;
    bad("", "bad glob '': empty pattern");
    bad("/abs/*.csv", "bad glob '/abs/*.csv': patterns are relative to the source (remove the leading '/') at offset 0");
    bad("a//b", "bad glob 'a//b': empty path component at offset 2");
    bad("a/", "bad glob 'a/': empty path component (trailing '/') at offset 2");
    bad("./a", "bad glob './a': '.' and '..' components never match at offset 0");
    bad("a/../b", "'.' and '..' components never match at offset 2");
    bad("a**", "bad glob 'a**': '**' must be a whole path component at offset 1");
    bad("**.csv", "'**' must be a whole path component at offset 0");
    bad("a/***/b", "'**' must be a whole path component at offset 2");
    bad("x[abc", "bad glob 'x[abc': unterminated '[' at offset 1");
    bad("x[!", "unterminated '[' at offset 1");
    bad("[]", "unterminated '[' at offset 0");
    bad("[z-a]", "bad glob '[z-a]': reversed range in a class at offset 3");
    bad("a[/]b", "a class cannot contain '/'");
    bad("a[x/y]b", "a class cannot contain '/'");
    bad("abc\\", "bad glob 'abc\\': trailing '\\' at offset 3");
    bad("[a\\", "trailing '\\'");
    char big[INGEST_FILTER_MAX_GLOB + 2];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    bad(big, "257 bytes, more than 256");
    /* exactly at the bound is fine, also when it is all components */
    big[INGEST_FILTER_MAX_GLOB] = '\0';
    assert_int_equal(ingest_filter_glob_check(NULL, big), 0);
    for (int i = 1; i < INGEST_FILTER_MAX_GLOB; i += 2)
        big[i] = '/';
    big[INGEST_FILTER_MAX_GLOB - 1] = '\0'; /* "a/a/.../a" */
    assert_int_equal(ingest_filter_glob_match(NULL, big, "a/a"), 0);
    for (int i = 0; i < INGEST_FILTER_MAX_GLOB - 2; i += 3)
        memcpy(big + i, "**/", 3);
    strcpy(big + (INGEST_FILTER_MAX_GLOB / 3) * 3, "x");
    assert_int_equal(ingest_filter_glob_match(NULL, big, "a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/x"), 1);
    char cls[INGEST_FILTER_MAX_GLOB + 1] = "";
    for (int i = 0; i < INGEST_FILTER_MAX_GLOB / 3; i++)
        strcat(cls, "[a]");
    assert_int_equal(ingest_filter_glob_check(NULL, cls), 0);
}

/* ---- the filter ---------------------------------------------------------- */

static ingest_filter *make(ingest_ctx *ctx, const ingest_filter_spec *spec)
{
    ingest_filter *f = NULL;
    const int rc = ingest_filter_create(ctx, spec, &f);
    if (rc != 0)
        fail_msg("create: %d %s", rc, ingest_ctx_errmsg(ctx));
    assert_non_null(f);
    return f;
}

static int chk(const ingest_filter *f, const char *path, uint64_t size)
{
    return ingest_filter_check_stat(f, path, size, NOW - 10 * NS, NOW);
}

static void test_empty_filter_takes_all(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    const ingest_filter_spec spec = { 0 };
    ingest_filter *f = make(ctx, &spec);
    assert_int_equal(chk(f, "a", 0), INGEST_FILTER_TAKE);
    assert_int_equal(chk(f, "x/y/z.bin", UINT64_MAX), INGEST_FILTER_TAKE);
    assert_int_equal(ingest_filter_check_stat(f, "old", 1, 0, NOW), INGEST_FILTER_TAKE);
    assert_int_equal(ingest_filter_head_len(f), 0);
    assert_int_equal(ingest_filter_check_head(f, "", 0), INGEST_FILTER_TAKE);
    ingest_filter_destroy(f);
    ingest_filter_destroy(NULL);
    ingest_ctx_destroy(ctx);
}

static void test_include_exclude(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    static const char *const inc[] = { "**/*.csv", "**/*.json" };
    static const char *const exc[] = { "**/tmp/**", "**/.*" };
    ingest_filter_spec spec = { .include = inc, .include_count = 2 };
    ingest_filter *f = make(ctx, &spec);
    assert_int_equal(chk(f, "a.csv", 1), INGEST_FILTER_TAKE);
    assert_int_equal(chk(f, "d/e/a.json", 1), INGEST_FILTER_TAKE);
    assert_int_equal(chk(f, "d/e/a.bin", 1), INGEST_FILTER_INCLUDE);
    assert_int_equal(chk(f, "tmp/a.csv", 1), INGEST_FILTER_TAKE);
    ingest_filter_destroy(f);

    spec = (ingest_filter_spec){ .exclude = exc, .exclude_count = 2 };
    f = make(ctx, &spec);
    assert_int_equal(chk(f, "a.bin", 1), INGEST_FILTER_TAKE);
    assert_int_equal(chk(f, "x/tmp/a.csv", 1), INGEST_FILTER_EXCLUDE);
    assert_int_equal(chk(f, "x/.a.csv.swp", 1), INGEST_FILTER_EXCLUDE);
    assert_int_equal(chk(f, ".partial", 1), INGEST_FILTER_EXCLUDE);
    ingest_filter_destroy(f);

    /* both: include first, then exclude wins over include */
    spec = (ingest_filter_spec){ .include = inc, .include_count = 2, .exclude = exc, .exclude_count = 2 };
    f = make(ctx, &spec);
    assert_int_equal(chk(f, "a/b.csv", 1), INGEST_FILTER_TAKE);
    assert_int_equal(chk(f, "a/tmp/b.csv", 1), INGEST_FILTER_EXCLUDE);
    assert_int_equal(chk(f, "a/tmp/b.bin", 1), INGEST_FILTER_INCLUDE);
    ingest_filter_destroy(f);
    ingest_ctx_destroy(ctx);
}

static void test_sizes_and_age(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_filter_spec spec = { .min_size = 10 };
    ingest_filter *f = make(ctx, &spec);
    assert_int_equal(chk(f, "a", 9), INGEST_FILTER_MIN_SIZE);
    assert_int_equal(chk(f, "a", 0), INGEST_FILTER_MIN_SIZE);
    assert_int_equal(chk(f, "a", 10), INGEST_FILTER_TAKE);
    assert_int_equal(chk(f, "a", UINT64_MAX), INGEST_FILTER_TAKE);
    ingest_filter_destroy(f);

    spec = (ingest_filter_spec){ .max_size = 100 };
    f = make(ctx, &spec);
    assert_int_equal(chk(f, "a", 0), INGEST_FILTER_TAKE);
    assert_int_equal(chk(f, "a", 100), INGEST_FILTER_TAKE);
    assert_int_equal(chk(f, "a", 101), INGEST_FILTER_MAX_SIZE);
    ingest_filter_destroy(f);

    spec = (ingest_filter_spec){ .min_size = 100, .max_size = 100 };
    f = make(ctx, &spec);
    assert_int_equal(chk(f, "a", 99), INGEST_FILTER_MIN_SIZE);
    assert_int_equal(chk(f, "a", 100), INGEST_FILTER_TAKE);
    assert_int_equal(chk(f, "a", 101), INGEST_FILTER_MAX_SIZE);
    ingest_filter_destroy(f);

    spec = (ingest_filter_spec){ .max_age_ms = 3600 * 1000 };
    f = make(ctx, &spec);
    assert_int_equal(ingest_filter_check_stat(f, "a", 1, NOW - 3600 * NS, NOW), INGEST_FILTER_TAKE);
    assert_int_equal(ingest_filter_check_stat(f, "a", 1, NOW - 3600 * NS - 1, NOW), INGEST_FILTER_MAX_AGE);
    assert_int_equal(ingest_filter_check_stat(f, "a", 1, NOW + 50 * NS, NOW), INGEST_FILTER_TAKE);
    assert_int_equal(ingest_filter_check_stat(f, "a", 1, INT64_MIN, INT64_MAX), INGEST_FILTER_MAX_AGE);
    assert_int_equal(ingest_filter_check_stat(f, "a", 1, -5 * NS, NOW), INGEST_FILTER_MAX_AGE);
    ingest_filter_destroy(f);

    /* a huge max_age does not overflow into "everything is too old" */
    spec = (ingest_filter_spec){ .max_age_ms = UINT64_MAX / 2 };
    f = make(ctx, &spec);
    assert_int_equal(ingest_filter_check_stat(f, "a", 1, 0, NOW), INGEST_FILTER_TAKE);
    ingest_filter_destroy(f);

    spec = (ingest_filter_spec){ .min_size = 10, .max_size = 9 };
    f = (ingest_filter *)1;
    assert_int_equal(ingest_filter_create(ctx, &spec, &f), INGEST_EINVAL);
    assert_null(f);
    assert_string_equal(ingest_ctx_errmsg(ctx), "max_size (9) is less than min_size (10)");
    ingest_ctx_destroy(ctx);
}

static void test_rule_order(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    static const char *const inc[] = { "keep/**" };
    static const char *const exc[] = { "keep/no/**" };
    const ingest_filter_spec spec = { .include = inc, .include_count = 1, .exclude = exc,
                                      .exclude_count = 1, .min_size = 10, .max_size = 1000,
                                      .max_age_ms = 60000, .sample_every = 1,
                                      .drop_if_prefix = "JUNK" };
    ingest_filter *f = make(ctx, &spec);
    const int64_t old = NOW - 61 * NS;
    /* everything wrong: the first rule names the reason */
    assert_int_equal(ingest_filter_check_stat(f, "other/a", 1, old, NOW), INGEST_FILTER_INCLUDE);
    assert_int_equal(ingest_filter_check_stat(f, "keep/no/a", 1, old, NOW), INGEST_FILTER_EXCLUDE);
    assert_int_equal(ingest_filter_check_stat(f, "keep/a", 1, old, NOW), INGEST_FILTER_MIN_SIZE);
    assert_int_equal(ingest_filter_check_stat(f, "keep/a", 5000, old, NOW), INGEST_FILTER_MAX_SIZE);
    assert_int_equal(ingest_filter_check_stat(f, "keep/a", 500, old, NOW), INGEST_FILTER_MAX_AGE);
    assert_int_equal(ingest_filter_check_stat(f, "keep/a", 500, NOW - NS, NOW), INGEST_FILTER_TAKE);
    assert_int_equal(ingest_filter_head_len(f), 4);
    assert_int_equal(ingest_filter_check_head(f, "JUNK and more", 13), INGEST_FILTER_PREFIX);
    assert_int_equal(ingest_filter_check_head(f, "JUNQ", 4), INGEST_FILTER_TAKE);
    ingest_filter_destroy(f);
    ingest_ctx_destroy(ctx);
}

static void test_sample(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_filter_spec spec = { .sample_every = 10 };
    ingest_filter *f = make(ctx, &spec);
    ingest_filter *g = make(ctx, &spec); /* the same spec: the same answers */
    spec.sample_seed = "other";
    ingest_filter *h = make(ctx, &spec);
    int kept = 0, differ = 0;
    char path[64];
    for (int i = 0; i < 10000; i++) {
        snprintf(path, sizeof(path), "cam%d/2024/img%05d.jpg", i % 7, i);
        const int r = chk(f, path, 1);
        assert_true(r == INGEST_FILTER_TAKE || r == INGEST_FILTER_SAMPLE);
        kept += r == INGEST_FILTER_TAKE;
        assert_int_equal(chk(g, path, 1), r);
        assert_int_equal(chk(f, path, 1), r); /* repeatable */
        differ += chk(h, path, 1) != r;
    }
    /* about 1 in 10: 1000 expected, sd ~30 */
    if (kept < 880 || kept > 1120)
        fail_msg("kept %d of 10000 with sample_every 10", kept);
    assert_true(differ > 500); /* another seed picks another sample */
    ingest_filter_destroy(f);
    ingest_filter_destroy(g);
    ingest_filter_destroy(h);

    /* pinned answers under the default seed, so the choice never drifts between versions */
    spec = (ingest_filter_spec){ .sample_every = 3 };
    f = make(ctx, &spec);
    char pinned[31] = "";
    for (int i = 0; i < 30; i++) {
        snprintf(path, sizeof(path), "f%d", i);
        pinned[i] = chk(f, path, 1) == INGEST_FILTER_TAKE ? 'T' : '-';
    }
    /* = SipHash-2-4(BLAKE2b-128(""), "fI") % 3 == 0, checked with an independent Python version */
    assert_string_equal(pinned, "T-----T-T---T-T---TT--TTT-TT--");
    ingest_filter_destroy(f);

    /* 0 and 1 keep everything */
    for (uint64_t n = 0; n <= 1; n++) {
        spec = (ingest_filter_spec){ .sample_every = n };
        f = make(ctx, &spec);
        for (int i = 0; i < 100; i++) {
            snprintf(path, sizeof(path), "p%d", i);
            assert_int_equal(chk(f, path, 1), INGEST_FILTER_TAKE);
        }
        ingest_filter_destroy(f);
    }
    /* sampling applies after the other rules: excluded files do not use up the sample */
    static const char *const exc[] = { "skip/**" };
    spec = (ingest_filter_spec){ .sample_every = 2, .exclude = exc, .exclude_count = 1 };
    f = make(ctx, &spec);
    int s = 0;
    for (int i = 0; i < 200; i++) {
        snprintf(path, sizeof(path), "skip/%d", i);
        assert_int_equal(chk(f, path, 1), INGEST_FILTER_EXCLUDE);
        snprintf(path, sizeof(path), "ok/%d", i);
        s += chk(f, path, 1) == INGEST_FILTER_SAMPLE;
    }
    assert_true(s > 60 && s < 140);
    ingest_filter_destroy(f);
    ingest_ctx_destroy(ctx);
}

static void test_prefix(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_filter_spec spec = { .drop_if_prefix = "hex:00000000" };
    ingest_filter *f = make(ctx, &spec);
    static const uint8_t zeros[8] = { 0 }, some[5] = { 0, 0, 0, 1, 0 };
    assert_int_equal(ingest_filter_head_len(f), 4);
    assert_int_equal(ingest_filter_check_head(f, zeros, 4), INGEST_FILTER_PREFIX);
    assert_int_equal(ingest_filter_check_head(f, zeros, 8), INGEST_FILTER_PREFIX);
    assert_int_equal(ingest_filter_check_head(f, zeros, 3), INGEST_FILTER_TAKE); /* shorter file */
    assert_int_equal(ingest_filter_check_head(f, some, 5), INGEST_FILTER_TAKE);
    /* the stat checks ignore the prefix */
    assert_int_equal(chk(f, "a", 0), INGEST_FILTER_TAKE);
    ingest_filter_destroy(f);

    spec.drop_if_prefix = "hex:DeadBEEF";
    f = make(ctx, &spec);
    assert_int_equal(ingest_filter_check_head(f, "\xde\xad\xbe\xef!", 5), INGEST_FILTER_PREFIX);
    assert_int_equal(ingest_filter_check_head(f, "\xde\xad\xbe\xee", 4), INGEST_FILTER_TAKE);
    ingest_filter_destroy(f);

    spec.drop_if_prefix = "#SKIP";
    f = make(ctx, &spec);
    assert_int_equal(ingest_filter_head_len(f), 5);
    assert_int_equal(ingest_filter_check_head(f, "#SKIP this file", 15), INGEST_FILTER_PREFIX);
    assert_int_equal(ingest_filter_check_head(f, "#skip this file", 15), INGEST_FILTER_TAKE);
    ingest_filter_destroy(f);

    spec.drop_if_prefix = ""; /* none */
    f = make(ctx, &spec);
    assert_int_equal(ingest_filter_head_len(f), 0);
    ingest_filter_destroy(f);

    uint8_t out[INGEST_FILTER_MAX_PREFIX];
    size_t len = 99;
    char text[200];
    memcpy(text, "hex:", 4);
    for (int i = 0; i < 2 * INGEST_FILTER_MAX_PREFIX; i++)
        text[4 + i] = "0123456789abcdef"[i % 16];
    text[4 + 2 * INGEST_FILTER_MAX_PREFIX] = '\0';
    assert_int_equal(ingest_filter_prefix_parse(ctx, text, out, sizeof(out), &len), 0);
    assert_int_equal(len, INGEST_FILTER_MAX_PREFIX);
    assert_int_equal(out[0], 0x01);
    assert_int_equal(out[7], 0xef);
    strcat(text, "00");
    assert_int_equal(ingest_filter_prefix_parse(ctx, text, out, sizeof(out), &len), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "65 bytes, more than 64"));

    static const struct {
        const char *text, *expect;
    } bads[] = {
        { "hex:", "bad prefix 'hex:': 'hex:' needs an even number of hex digits, got 0" },
        { "hex:abc", "'hex:' needs an even number of hex digits, got 3" },
        { "hex:zz", "bad prefix 'hex:zz': 'z' at offset 4 is not a hex digit" },
        { "hex:00 1", "' ' at offset 6 is not a hex digit" },
        { "", "bad prefix: empty" },
        { "0123456789012345678901234567890123456789012345678901234567890123456789",
          "70 bytes, more than 64" },
    };
    for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
        if (bads[i].text[0] != '\0') {
            spec.drop_if_prefix = bads[i].text;
            f = (ingest_filter *)1;
            assert_int_equal(ingest_filter_create(ctx, &spec, &f), INGEST_EINVAL);
            assert_null(f);
        } else {
            assert_int_equal(ingest_filter_prefix_parse(ctx, "", out, sizeof(out), &len), INGEST_EINVAL);
        }
        if (strstr(ingest_ctx_errmsg(ctx), bads[i].expect) == NULL)
            fail_msg("prefix '%s': [%s], expected [%s]", bads[i].text, ingest_ctx_errmsg(ctx),
                     bads[i].expect);
    }
    /* a 64-byte string is the limit */
    assert_int_equal(ingest_filter_prefix_parse(ctx, "0123456789012345678901234567890123456789012345678901234567890123",
                                                out, sizeof(out), &len),
                     0);
    assert_int_equal(len, 64);
    ingest_ctx_destroy(ctx);
}

static void test_create_errors(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    static const char *const some[] = { "ok/*", "**/fine", "x[ab" };
    ingest_filter_spec spec = { .exclude = some, .exclude_count = 3 };
    ingest_filter *f = (ingest_filter *)1;
    assert_int_equal(ingest_filter_create(ctx, &spec, &f), INGEST_EINVAL);
    assert_null(f);
    assert_string_equal(ingest_ctx_errmsg(ctx), "exclude[2]: bad glob 'x[ab': unterminated '[' at offset 1");
    spec = (ingest_filter_spec){ .include = some, .include_count = 3 };
    assert_int_equal(ingest_filter_create(ctx, &spec, &f), INGEST_EINVAL);
    assert_string_equal(ingest_ctx_errmsg(ctx), "include[2]: bad glob 'x[ab': unterminated '[' at offset 1");

    const char *many[INGEST_FILTER_MAX_GLOBS + 1];
    for (int i = 0; i <= INGEST_FILTER_MAX_GLOBS; i++)
        many[i] = "**/*.tmp";
    spec = (ingest_filter_spec){ .include = many, .include_count = INGEST_FILTER_MAX_GLOBS + 1 };
    assert_int_equal(ingest_filter_create(ctx, &spec, &f), INGEST_EINVAL);
    assert_string_equal(ingest_ctx_errmsg(ctx), "include: 65 patterns, more than 64");
    spec.include_count = INGEST_FILTER_MAX_GLOBS;
    spec.exclude = many;
    spec.exclude_count = INGEST_FILTER_MAX_GLOBS;
    f = make(ctx, &spec);
    assert_int_equal(chk(f, "a/b.tmp", 1), INGEST_FILTER_EXCLUDE);
    assert_int_equal(chk(f, "a/b.txt", 1), INGEST_FILTER_INCLUDE);
    ingest_filter_destroy(f);

    static const char *const with_null[] = { "a", NULL };
    spec = (ingest_filter_spec){ .include = with_null, .include_count = 2 };
    assert_int_equal(ingest_filter_create(ctx, &spec, &f), INGEST_EINVAL);
    assert_string_equal(ingest_ctx_errmsg(ctx), "include[1]: bad glob: NULL");

    for (int r = 0; r < INGEST_FILTER_NREASONS; r++)
        assert_string_not_equal(ingest_filter_reason_name(r), "?");
    assert_string_equal(ingest_filter_reason_name(INGEST_FILTER_TAKE), "take");
    assert_string_equal(ingest_filter_reason_name(INGEST_FILTER_INCLUDE), "include");
    assert_string_equal(ingest_filter_reason_name(INGEST_FILTER_EXCLUDE), "exclude");
    assert_string_equal(ingest_filter_reason_name(INGEST_FILTER_MIN_SIZE), "min_size");
    assert_string_equal(ingest_filter_reason_name(INGEST_FILTER_MAX_SIZE), "max_size");
    assert_string_equal(ingest_filter_reason_name(INGEST_FILTER_MAX_AGE), "max_age");
    assert_string_equal(ingest_filter_reason_name(INGEST_FILTER_SAMPLE), "sample");
    assert_string_equal(ingest_filter_reason_name(INGEST_FILTER_PREFIX), "prefix");
    assert_string_equal(ingest_filter_reason_name(-1), "?");
    assert_string_equal(ingest_filter_reason_name(INGEST_FILTER_NREASONS), "?");
    ingest_ctx_destroy(ctx);
}

/* ---- allocation failures ---------------------------------------------------- */

typedef struct fail_alloc {
    long budget;
    long live;
} fail_alloc;

static void *fa_alloc(void *opaque, size_t size)
{
    fail_alloc *fa = opaque;
    if (fa->budget == 0)
        return NULL;
    if (fa->budget > 0)
        fa->budget--;
    void *p = malloc(size);
    if (p != NULL)
        fa->live++;
    return p;
}

static void fa_free(void *opaque, void *ptr)
{
    fail_alloc *fa = opaque;
    if (ptr != NULL) {
        fa->live--;
        free(ptr);
    }
}

static void test_alloc_failures(void **state)
{
    (void)state;
    static const char *const inc[] = { "**/*.csv", "a/[bc]/**" };
    static const char *const exc[] = { "**/tmp/**" };
    const ingest_filter_spec spec = { .include = inc, .include_count = 2, .exclude = exc,
                                      .exclude_count = 1, .drop_if_prefix = "hex:ff" };
    int ok = 0;
    for (long n = 0; n < 50 && !ok; n++) {
        fail_alloc fa = { -1, 0 };
        const ingest_allocator a = { fa_alloc, fa_free, &fa };
        ingest_ctx *ctx = ingest_ctx_create(&a);
        assert_non_null(ctx);
        fa.budget = n;
        ingest_filter *f = NULL;
        const int rc = ingest_filter_create(ctx, &spec, &f);
        if (rc == 0) {
            assert_int_equal(chk(f, "a/c/x.bin", 1), INGEST_FILTER_TAKE);
            assert_int_equal(chk(f, "a/tmp/x.csv", 1), INGEST_FILTER_EXCLUDE);
            ingest_filter_destroy(f);
            ok = 1;
        } else {
            assert_int_equal(rc, INGEST_ENOMEM);
            assert_null(f);
        }
        ingest_ctx_destroy(ctx);
        assert_int_equal(fa.live, 0);
    }
    assert_true(ok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_glob_basic),
        cmocka_unit_test(test_glob_classes_escapes),
        cmocka_unit_test(test_glob_globstar),
        cmocka_unit_test(test_glob_invalid),
        cmocka_unit_test(test_empty_filter_takes_all),
        cmocka_unit_test(test_include_exclude),
        cmocka_unit_test(test_sizes_and_age),
        cmocka_unit_test(test_rule_order),
        cmocka_unit_test(test_sample),
        cmocka_unit_test(test_prefix),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
