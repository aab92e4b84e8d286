/* The programs' shared helpers (agent/common/prog.c): escaping peer text for logs. */
#include "../../agent/common/prog.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

static void expect(const char *in, const char *want)
{
    char out[PROG_ESCAPE_CAP(256)];
    prog_escape(out, sizeof(out), in);
    if (strcmp(out, want) != 0)
        fail_msg("escape of \"%s\": got \"%s\", want \"%s\"", in, out, want);
}

static void test_escape(void **state)
{
    (void)state;
    expect("", "");
    expect("plain text: 1 < 2 & \"quoted\" ~", "plain text: 1 < 2 & \"quoted\" ~");
    expect("a\\b", "a\\\\b");
    expect("line\nforged\r\ttab", "line\\nforged\\r\\ttab");
    expect("\033[31mred\033[0m", "\\x1b[31mred\\x1b[0m");
    expect("\x01\x1f\x7f", "\\x01\\x1f\\x7f");
    /* valid UTF-8 stays; C1 controls, separators and bidi controls do not */
    expect("\xce\xb1\xce\xb2\xce\xb3 \xe2\x82\xac \xf0\x9f\x98\x80", "\xce\xb1\xce\xb2\xce\xb3 \xe2\x82\xac \xf0\x9f\x98\x80");
    expect("\xc2\x9b" "2J", "\\u{009b}2J");
    expect("\xc2\x85", "\\u{0085}");
    expect("\xc2\xa0", "\xc2\xa0");
    expect("a\xe2\x80\xa8" "b\xe2\x80\xa9", "a\\u{2028}b\\u{2029}");
    expect("\xe2\x80\xae" "txt.exe", "\\u{202e}txt.exe");
    expect("\xe2\x81\xa6\xe2\x80\x8f", "\\u{2066}\\u{200f}");
    /* not UTF-8: stray continuation, overlong, surrogate, beyond U+10FFFF, cut short */
    expect("\x80", "\\x80");
    expect("\xff\xfe", "\\xff\\xfe");
    expect("\xc0\xaf", "\\xc0\\xaf");
    expect("\xe0\x80\xaf", "\\xe0\\x80\\xaf");
    expect("\xed\xa0\x80", "\\xed\\xa0\\x80");
    expect("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80");
    expect("\xe2\x82", "\\xe2\\x82");
    expect("\xe2\x82x", "\\xe2\\x82x");
    expect("\xce", "\\xce");
}

static void test_escape_bounds(void **state)
{
    (void)state;
    char out[16];
    /* fits exactly: no marker */
    prog_escape(out, sizeof(out), "0123456789abcde");
    assert_string_equal(out, "0123456789abcde");
    /* one more: cut, with "..." and the NUL inside the buffer */
    prog_escape(out, sizeof(out), "0123456789abcdef");
    assert_string_equal(out, "0123456789ab...");
    /* an escape is never cut in half */
    prog_escape(out, sizeof(out), "0123456789\n\n\n\n");
    assert_string_equal(out, "0123456789\\n...");
    prog_escape(out, sizeof(out), "012345678\xce\xb1\xce\xb1\xce\xb1\xce\xb1");
    assert_string_equal(out, "012345678\xce\xb1...");
    prog_escape(out, 4, "abcdef");
    assert_string_equal(out, "...");
    prog_escape(out, 4, "abc");
    assert_string_equal(out, "abc");
    /* PROG_ESCAPE_CAP is enough for the worst case */
    char in[65], big[PROG_ESCAPE_CAP(64)];
    memset(in, 0xff, 64);
    in[64] = '\0';
    prog_escape(big, sizeof(big), in);
    assert_int_equal(strlen(big), 4 * 64);
    assert_null(strstr(big, "..."));
    /* the thread-local slots: four at once stay distinct */
    const char *a = prog_esc("a\n"), *b = prog_esc("b\n"), *c = prog_esc("c\n"), *d = prog_esc("d\n");
    assert_string_equal(a, "a\\n");
    assert_string_equal(b, "b\\n");
    assert_string_equal(c, "c\\n");
    assert_string_equal(d, "d\\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_escape_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
