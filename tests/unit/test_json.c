/* Unit tests of the internal JSON tokenizer and writer helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json.h"

typedef struct fixture {
    ingest_ctx *ctx;
    ingest__json j;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->ctx = ingest_ctx_create(NULL);
    assert_non_null(f->ctx);
    ingest__json_init(&f->j, f->ctx, 4096, 256, 4);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    ingest__json_free(&f->j);
    ingest_ctx_destroy(f->ctx);
    free(f);
    return 0;
}

static int parse(fixture *f, const char *s) { return ingest__json_parse(&f->j, s, strlen(s)); }

/* Parse s, which must be one string, and check its decoded bytes. */
static void want_string(fixture *f, const char *s, const char *want, size_t want_len)
{
    assert_int_equal(parse(f, s), 0);
    assert_int_equal(f->j.ntoks, 1);
    assert_int_equal(f->j.toks[0].type, INGEST__JSON_STRING);
    assert_int_equal(f->j.toks[0].len, want_len);
    assert_memory_equal(ingest__json_str(&f->j, &f->j.toks[0]), want, want_len);
    assert_int_equal(ingest__json_str(&f->j, &f->j.toks[0])[want_len], '\0');
}

static void want_error(fixture *f, const char *s, int code, size_t pos, const char *what_part)
{
    assert_int_equal(parse(f, s), code);
    assert_int_equal(f->j.err_pos, pos);
    assert_non_null(f->j.err_what);
    if (strstr(f->j.err_what, what_part) == NULL)
        fail_msg("error for %s is \"%s\", expected it to mention \"%s\"", s, f->j.err_what, what_part);
}

static void test_structure(void **state)
{
    fixture *f = *state;
    assert_int_equal(parse(f, " {\"a\": [1, {\"b\": null}, true], \"c\": \"x\", \"d\": false} "), 0);
    const ingest__json *j = &f->j;
    /* object, "a", array, 1, object, "b", null, true, "c", "x", "d", false */
    assert_int_equal(j->ntoks, 12);
    assert_int_equal(j->toks[0].type, INGEST__JSON_OBJECT);
    assert_int_equal(j->toks[0].len, 3);
    assert_int_equal(j->toks[0].end, 12);
    assert_int_equal(j->toks[0].pos, 1);
    assert_int_equal(j->toks[2].type, INGEST__JSON_ARRAY);
    assert_int_equal(j->toks[2].len, 3);
    assert_int_equal(j->toks[2].end, 8);
    assert_int_equal(j->toks[4].type, INGEST__JSON_OBJECT);
    assert_int_equal(j->toks[4].end, 7);
    assert_int_equal(j->toks[6].type, INGEST__JSON_NULL);
    assert_int_equal(j->toks[7].type, INGEST__JSON_TRUE);
    assert_int_equal(j->toks[11].type, INGEST__JSON_FALSE);
    assert_int_equal(ingest__json_find(j, 0, "a"), 2);
    assert_int_equal(ingest__json_find(j, 0, "c"), 9);
    assert_string_equal(ingest__json_str(j, &j->toks[9]), "x");
    assert_int_equal(ingest__json_find(j, 0, "d"), 11);
    assert_int_equal(ingest__json_find(j, 0, "b"), -1);
    assert_int_equal(ingest__json_find(j, 4, "b"), 6);
    assert_int_equal(ingest__json_find(j, 2, "b"), -1); /* not an object */

    assert_int_equal(parse(f, "{}"), 0);
    assert_int_equal(f->j.toks[0].len, 0);
    assert_int_equal(parse(f, "[ ]"), 0);
    assert_int_equal(f->j.toks[0].type, INGEST__JSON_ARRAY);
    assert_int_equal(f->j.toks[0].len, 0);
}

static void test_syntax_errors(void **state)
{
    fixture *f = *state;
    want_error(f, "", INGEST_ECORRUPT, 0, "end of input");
    want_error(f, "   ", INGEST_ECORRUPT, 3, "end of input");
    want_error(f, "{\"a\":1", INGEST_ECORRUPT, 6, "end of input");
    want_error(f, "{\"a\":1,}", INGEST_ECORRUPT, 7, "string key");
    want_error(f, "[1,]", INGEST_ECORRUPT, 3, "unexpected character");
    want_error(f, "[1 2]", INGEST_ECORRUPT, 3, "expected ',' or ']'");
    want_error(f, "{\"a\" 1}", INGEST_ECORRUPT, 5, "':'");
    want_error(f, "{a:1}", INGEST_ECORRUPT, 1, "string key");
    want_error(f, "{\"a\":1} x", INGEST_ECORRUPT, 8, "after the value");
    want_error(f, "tru", INGEST_ECORRUPT, 0, "unexpected character");
    want_error(f, "nul!", INGEST_ECORRUPT, 0, "unexpected character");
    want_error(f, "'a'", INGEST_ECORRUPT, 0, "unexpected character");
    want_error(f, "\"abc", INGEST_ECORRUPT, 0, "unterminated string");
    want_error(f, "{\"k\":1,\"k\":2}", INGEST_ECORRUPT, 7, "duplicate key");
    want_error(f, "{\"k\":{\"x\":1,\"y\":2},\"z\":1,\"k\":[]}", INGEST_ECORRUPT, 25, "duplicate key");
    /* Same key in different objects is fine. */
    assert_int_equal(parse(f, "{\"k\":{\"k\":1}}"), 0);
}

static void test_escapes(void **state)
{
    fixture *f = *state;
    want_string(f, "\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"", "a\"b\\c/d\b\f\n\r\t", 12);
    want_string(f, "\"\\u0041\\u00e9\\u20AC\"", "A\xc3\xa9\xe2\x82\xac", 6);
    want_string(f, "\"\\ud83d\\ude00\"", "\xf0\x9f\x98\x80", 4);             /* U+1F600 */
    want_string(f, "\"\\uDBFF\\uDFFF\"", "\xf4\x8f\xbf\xbf", 4);             /* U+10FFFF */
    want_string(f, "\"x\\u0000y\"", "x\0y", 3);                              /* NUL kept */
    want_string(f, "\"\\udc80\\udcff\"", "\x80\xff", 2);                     /* raw bytes */
    want_string(f, "\"\"", "", 0);
    want_error(f, "\"\\x\"", INGEST_ECORRUPT, 1, "invalid escape");
    want_error(f, "\"ab\\u12\"", INGEST_ECORRUPT, 3, "4 hex digits");
    want_error(f, "\"\\u12g4\"", INGEST_ECORRUPT, 1, "4 hex digits");
    want_error(f, "\"\\ud83d\"", INGEST_ECORRUPT, 1, "high surrogate");
    want_error(f, "\"\\ud83dx\\ude00\"", INGEST_ECORRUPT, 1, "high surrogate");
    want_error(f, "\"\\ud83d\\u0041\"", INGEST_ECORRUPT, 1, "high surrogate");
    want_error(f, "\"\\ud83d\\ud83d\"", INGEST_ECORRUPT, 1, "high surrogate");
    want_error(f, "\"\\ude00\"", INGEST_ECORRUPT, 1, "low surrogate");
    want_error(f, "\"\\udc7f\"", INGEST_ECORRUPT, 1, "low surrogate");
    want_error(f, "\"\\udd00\"", INGEST_ECORRUPT, 1, "low surrogate");
    want_error(f, "\"ab\\", INGEST_ECORRUPT, 3, "unterminated");
    want_error(f, "\"a\tb\"", INGEST_ECORRUPT, 2, "control character");
    want_error(f, "\"a\nb\"", INGEST_ECORRUPT, 2, "control character");
    assert_int_equal(ingest__json_parse(&f->j, "\"a\0b\"", 5), INGEST_ECORRUPT);
    assert_int_equal(f->j.err_pos, 2);
}

static void test_utf8(void **state)
{
    fixture *f = *state;
    want_string(f, "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\x7f\"", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\x7f", 10);
    want_string(f, "\"\xef\xbf\xbf\xf4\x8f\xbf\xbf\"", "\xef\xbf\xbf\xf4\x8f\xbf\xbf", 7);
    static const char *const bad[] = {
        "\"\x80\"",             /* stray continuation byte */
        "\"\xc0\x80\"",         /* overlong NUL */
        "\"\xc1\xbf\"",         /* overlong */
        "\"\xe0\x80\xaf\"",     /* overlong 3-byte */
        "\"\xf0\x80\x80\xaf\"", /* overlong 4-byte */
        "\"\xed\xa0\x80\"",     /* encoded surrogate */
        "\"\xf4\x90\x80\x80\"", /* above U+10FFFF */
        "\"\xf5\x80\x80\x80\"", /* invalid lead */
        "\"\xff\"",             /* invalid lead */
        "\"\xe2\x82\"",         /* truncated */
        "\"\xe2\x28\xa1\"",     /* bad continuation */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        want_error(f, bad[i], INGEST_ECORRUPT, 1, "invalid UTF-8");
    /* Truncated at the end of input (no closing quote). */
    assert_int_equal(ingest__json_parse(&f->j, "\"\xe2\x82", 3), INGEST_ECORRUPT);
    assert_string_equal(f->j.err_what, "invalid UTF-8 in string");
}

static void test_numbers(void **state)
{
    fixture *f = *state;
    uint64_t u;
    int64_t i;
    assert_int_equal(parse(f, "[0, -0, 18446744073709551615, -9223372036854775808, 9223372036854775807, 1.5, "
                              "-2e10, 3E+2, 0.0e-1, 42]"),
                     0);
    const ingest__json_tok *t = f->j.toks;
    assert_int_equal(t[1].type, INGEST__JSON_INT);
    assert_int_equal(ingest__json_get_u64(&t[1], &u), 0);
    assert_true(u == 0);
    assert_int_equal(ingest__json_get_u64(&t[2], &u), 0); /* -0 is 0 */
    assert_true(u == 0);
    assert_int_equal(ingest__json_get_u64(&t[3], &u), 0);
    assert_true(u == UINT64_MAX);
    assert_int_equal(ingest__json_get_i64(&t[3], &i), -1); /* does not fit */
    assert_int_equal(ingest__json_get_u64(&t[4], &u), -1); /* negative */
    assert_int_equal(ingest__json_get_i64(&t[4], &i), 0);
    assert_true(i == INT64_MIN);
    assert_int_equal(ingest__json_get_i64(&t[5], &i), 0);
    assert_true(i == INT64_MAX);
    for (int k = 6; k <= 9; k++) {
        assert_int_equal(t[k].type, INGEST__JSON_FLOAT);
        assert_int_equal(ingest__json_get_u64(&t[k], &u), -1);
        assert_int_equal(ingest__json_get_i64(&t[k], &i), -1);
    }
    assert_int_equal(ingest__json_get_i64(&t[10], &i), 0);
    assert_true(i == 42);
    assert_int_equal(ingest__json_get_u64(&t[0], &u), -1); /* not a number */

    want_error(f, "18446744073709551616", INGEST_ECORRUPT, 0, "out of range");
    want_error(f, "[1, 99999999999999999999999]", INGEST_ECORRUPT, 4, "out of range");
    want_error(f, "-9223372036854775809", INGEST_ECORRUPT, 0, "out of range");
    want_error(f, "01", INGEST_ECORRUPT, 0, "leading zero");
    want_error(f, "-01", INGEST_ECORRUPT, 0, "leading zero");
    want_error(f, "-", INGEST_ECORRUPT, 0, "invalid number");
    want_error(f, "-a", INGEST_ECORRUPT, 0, "invalid number");
    want_error(f, "1.", INGEST_ECORRUPT, 0, "'.'");
    want_error(f, "1.e5", INGEST_ECORRUPT, 0, "'.'");
    want_error(f, "1e", INGEST_ECORRUPT, 0, "exponent");
    want_error(f, "1e+", INGEST_ECORRUPT, 0, "exponent");
    want_error(f, "+1", INGEST_ECORRUPT, 0, "unexpected character");
    want_error(f, ".5", INGEST_ECORRUPT, 0, "unexpected character");
    want_error(f, "0x10", INGEST_ECORRUPT, 1, "after the value");
}

static void test_bounds(void **state)
{
    fixture *f = *state;
    /* max_depth 4 */
    assert_int_equal(parse(f, "[[[[1]]]]"), 0);
    want_error(f, "[[[[[1]]]]]", INGEST_ECORRUPT, 4, "nesting too deep");
    want_error(f, "{\"a\":{\"b\":[[{\"c\":1}]]}}", INGEST_ECORRUPT, 12, "nesting too deep");
    /* max_toks 256: an array of 255 values fits, 256 do not. */
    char buf[1024];
    size_t n = 0;
    buf[n++] = '[';
    for (int k = 0; k < 255; k++) {
        buf[n++] = '1';
        buf[n++] = ',';
    }
    buf[n - 1] = ']';
    assert_int_equal(ingest__json_parse(&f->j, buf, n), 0);
    assert_int_equal(f->j.ntoks, 256);
    assert_int_equal(f->j.toks[0].len, 255);
    buf[n - 1] = ',';
    buf[n++] = '1';
    buf[n++] = ']';
    assert_int_equal(ingest__json_parse(&f->j, buf, n), INGEST_ETOOBIG);
    assert_string_equal(f->j.err_what, "too many values");
    /* max_len 4096 */
    char *big = malloc(5000);
    assert_non_null(big);
    big[0] = '"';
    memset(big + 1, 'a', 4094);
    big[4095] = '"';
    assert_int_equal(ingest__json_parse(&f->j, big, 4096), 0);
    assert_int_equal(f->j.toks[0].len, 4094);
    big[4095] = 'a';
    big[4096] = '"';
    assert_int_equal(ingest__json_parse(&f->j, big, 4097), INGEST_ETOOBIG);
    free(big);
    /* The parser is reusable after failures. */
    assert_int_equal(parse(f, "{\"x\":\"y\"}"), 0);
    assert_int_equal(f->j.ntoks, 3);
}

static void put_and_check(ingest_ctx *ctx, const char *s, size_t len, const char *want)
{
    ingest__buf b;
    ingest__buf_init(&b, ctx, 1 << 20);
    assert_int_equal(ingest__json_put_str(&b, s, len), 0);
    assert_int_equal(b.len, strlen(want));
    assert_memory_equal(b.buf, want, b.len);
    ingest__buf_free(&b);
}

static void test_writer(void **state)
{
    fixture *f = *state;
    put_and_check(f->ctx, "plain/path.txt", 14, "\"plain/path.txt\"");
    put_and_check(f->ctx, "", 0, "\"\"");
    put_and_check(f->ctx, "q\"b\\s/", 6, "\"q\\\"b\\\\s/\"");
    put_and_check(f->ctx, "\b\f\n\r\t\x01\x1f\x7f", 8, "\"\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\"");
    put_and_check(f->ctx, "a\0b", 3, "\"a\\u0000b\"");
    put_and_check(f->ctx, "\xc3\xa9\xf0\x9f\x98\x80", 6, "\"\xc3\xa9\xf0\x9f\x98\x80\"");
    put_and_check(f->ctx, "\xff\xc3", 2, "\"\\udcff\\udcc3\"");
    put_and_check(f->ctx, "a\xed\xa0\x80z", 5, "\"a\\udced\\udca0\\udc80z\"");

    ingest__buf b;
    ingest__buf_init(&b, f->ctx, 64);
    assert_int_equal(ingest__json_put_u64(&b, UINT64_MAX), 0);
    assert_int_equal(ingest__buf_append(&b, " ", 1), 0);
    assert_int_equal(ingest__json_put_i64(&b, INT64_MIN), 0);
    assert_int_equal(ingest__buf_append(&b, " ", 1), 0);
    assert_int_equal(ingest__json_put_i64(&b, 0), 0);
    const char want[] = "18446744073709551615 -9223372036854775808 0";
    assert_int_equal(b.len, sizeof(want) - 1);
    assert_memory_equal(b.buf, want, b.len);
    /* every digit count, both signs: as snprintf writes them */
    uint64_t u = 1;
    for (int d = 1; d <= 20; d++, u = u * 10 + (uint64_t)(d % 10)) {
        char exp[64];
        ingest__buf_reset(&b);
        assert_int_equal(ingest__json_put_u64(&b, u), 0);
        snprintf(exp, sizeof exp, "%" PRIu64, u);
        assert_int_equal(b.len, strlen(exp));
        assert_memory_equal(b.buf, exp, b.len);
        const int64_t s = (int64_t)(u % (uint64_t)INT64_MAX);
        for (int sign = 0; sign < 2; sign++) {
            const int64_t v = sign ? -s : s;
            ingest__buf_reset(&b);
            assert_int_equal(ingest__json_put_i64(&b, v), 0);
            snprintf(exp, sizeof exp, "%" PRId64, v);
            assert_int_equal(b.len, strlen(exp));
            assert_memory_equal(b.buf, exp, b.len);
        }
    }
    ingest__buf_reset(&b);
    assert_int_equal(ingest__json_put_i64(&b, INT64_MAX), 0);
    assert_int_equal(ingest__json_put_u64(&b, 0), 0);
    assert_int_equal(ingest__json_put_i64(&b, -1), 0);
    assert_int_equal(b.len, strlen("9223372036854775807" "0" "-1"));
    assert_memory_equal(b.buf, "9223372036854775807" "0" "-1", b.len);
    /* Bounded: a string that does not fit fails with ETOOBIG. */
    char big[100];
    memset(big, 'x', sizeof(big));
    ingest__buf_reset(&b);
    assert_int_equal(ingest__json_put_str(&b, big, sizeof(big)), INGEST_ETOOBIG);
    ingest__buf_free(&b);
}

/* Any byte string survives put_str then parse, byte for byte. */
static void test_writer_round_trip(void **state)
{
    fixture *f = *state;
    ingest__json j;
    ingest__json_init(&j, f->ctx, 1 << 16, 16, 2);
    ingest__buf b;
    ingest__buf_init(&b, f->ctx, 1 << 16);
    unsigned seed = 12345;
    uint8_t s[300];
    for (int round = 0; round < 2000; round++) {
        size_t len = round < 256 ? 1 : (size_t)(seed % sizeof(s));
        for (size_t k = 0; k < len; k++) {
            seed = seed * 1103515245u + 12345u;
            s[k] = round < 256 ? (uint8_t)round : (uint8_t)(seed >> 16);
            /* Bias towards UTF-8 lead and continuation bytes. */
            if (round % 3 == 0 && (seed & 0x300) == 0)
                s[k] = (uint8_t)(0xC0 | (s[k] & 0x3F));
        }
        ingest__buf_reset(&b);
        assert_int_equal(ingest__json_put_str(&b, (const char *)s, len), 0);
        assert_int_equal(ingest__json_parse(&j, (const char *)b.buf, b.len), 0);
        assert_int_equal(j.toks[0].type, INGEST__JSON_STRING);
        assert_int_equal(j.toks[0].len, len);
        assert_memory_equal(ingest__json_str(&j, &j.toks[0]), s, len);
    }
    ingest__buf_free(&b);
    ingest__json_free(&j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_structure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_syntax_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_escapes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_utf8, setup, teardown),
        cmocka_unit_test_setup_teardown(test_numbers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_round_trip, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
