/*
 * Fuzz target: sizes and durations with units (ingest_parse_size,
 * ingest_parse_duration, libingest/units.c) and the config keys that use
 * them (a size, a duration, a rate or a whole number in an agent config,
 * the key chosen by the value's length modulo 4).
 *
 * The input, cut at its first NUL and at 128 bytes, is the value.  A small
 * reference parser, written from docs/config.md's rules, says what each
 * parser must answer; any disagreement aborts:
 *   - a whole decimal number ('_' only between digits), optional blanks,
 *     then a unit; blanks around the whole are allowed;
 *   - sizes: none, B, KiB..TiB (1024^n), kB..TB (1000^n);
 *   - durations: ms, s, m, h, required unless the number is 0;
 *   - anything else, or a value that overflows 64 bits, is refused, with
 *     *out set to 0 and a message in the context.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingest/common.h"
#include "ingest/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TEXT_MAX 128

typedef struct ref_unit {
    const char *name;
    uint64_t mult;
} ref_unit;

static const ref_unit ref_sizes[] = {
    { "B", 1 },
    { "KiB", 1ull << 10 }, { "MiB", 1ull << 20 }, { "GiB", 1ull << 30 }, { "TiB", 1ull << 40 },
    { "kB", 1000ull }, { "MB", 1000000ull }, { "GB", 1000000000ull }, { "TB", 1000000000000ull },
    { NULL, 0 },
};
static const ref_unit ref_durations[] = {
    { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 }, { NULL, 0 },
};

static bool ref_blank(char c) { return c == ' ' || c == '\t'; }
static bool ref_digit(char c) { return c >= '0' && c <= '9'; }

/* The reference: true and *v when text is valid. */
static bool ref_parse(const char *text, const ref_unit *units, bool unit_required, uint64_t *v)
{
    const char *p = text;
    uint64_t n = 0;
    *v = 0;
    while (ref_blank(*p))
        p++;
    if (!ref_digit(*p))
        return false;
    for (; ref_digit(*p) || *p == '_'; p++) {
        if (*p == '_') {
            if (!ref_digit(p[1]))
                return false;
            continue;
        }
        const uint64_t d = (uint64_t)(*p - '0');
        if (n > (UINT64_MAX - d) / 10)
            return false;
        n = n * 10 + d;
    }
    while (ref_blank(*p))
        p++;
    size_t ulen = strlen(p);
    while (ulen > 0 && ref_blank(p[ulen - 1]))
        ulen--;
    if (ulen == 0) {
        if (unit_required && n != 0)
            return false;
        *v = n;
        return true;
    }
    for (const ref_unit *u = units; u->name != NULL; u++)
        if (strlen(u->name) == ulen && memcmp(u->name, p, ulen) == 0) {
            if (n > UINT64_MAX / u->mult)
                return false;
            *v = n * u->mult;
            return true;
        }
    return false;
}

static void check(bool cond, const char *what, const char *text)
{
    if (!cond) {
        fprintf(stderr, "fuzz_units: %s for '%s'\n", what, text);
        abort();
    }
}

static void check_parser(ingest_ctx *ctx, const char *text, bool is_size)
{
    uint64_t got = 12345, want = 0;
    const int rc = is_size ? ingest_parse_size(ctx, text, &got) : ingest_parse_duration(ctx, text, &got);
    const bool ok = ref_parse(text, is_size ? ref_sizes : ref_durations, !is_size, &want);
    check(ok == (rc == INGEST_OK), is_size ? "size: accepted differs" : "duration: accepted differs", text);
    if (rc != INGEST_OK) {
        check(rc == INGEST_EINVAL && got == 0, "refused, but not EINVAL with 0", text);
        check(ingest_ctx_errmsg(ctx)[0] != '\0', "refused without a message", text);
        return;
    }
    check(got == want, is_size ? "size: value differs" : "duration: value differs", text);
    /* The same value, canonical form: a bare number of bytes, or of ms. */
    char canon[32];
    uint64_t again = 0;
    snprintf(canon, sizeof(canon), is_size ? "%llu" : "%llums", (unsigned long long)got);
    check((is_size ? ingest_parse_size(ctx, canon, &again) : ingest_parse_duration(ctx, canon, &again)) ==
                  INGEST_OK &&
              again == got,
          "canonical form does not read back", text);
}

/* ---- the same values as config keys ---------------------------------------- */

#define PIB (1ull << 50)
#define HOUR_MS 3600000ull

/* text as a single-quoted YAML scalar, or false when it cannot be one here. */
static bool yaml_quote(const char *text, char *out, size_t cap)
{
    size_t o = 0;
    out[o++] = '\'';
    for (const char *p = text; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
            return false;
        if (o + 3 >= cap)
            return false;
        if (*p == '\'')
            out[o++] = '\'';
        out[o++] = *p;
    }
    out[o++] = '\'';
    out[o] = '\0';
    return true;
}

/* sources[].sample_every (T_INT, 1..1000000): [+-]digits, '_' between digits. */
static bool ref_int(const char *text, uint64_t *v)
{
    const char *c = text;
    const bool neg = *c == '-';
    if (neg || *c == '+')
        c++;
    if (!ref_digit(*c) || strspn(c, "0123456789_") != strlen(c) || !ref_parse(c, ref_sizes, false, v))
        return false;
    return !neg && *v >= 1 && *v <= 1000000;
}

enum { K_SIZE, K_DURATION, K_RATE, K_INT };

/* One key of a minimal agent config set to the value: accepted exactly when
 * the reference accepts it within the key's bounds, and then stored as is. */
static void check_key(ingest_ctx *ctx, const char *text, const char *q, int kind)
{
    static const char *const keys[] = { "    min_size: %s\n", "    max_age: %s\n", "    sample_every: %s\n",
                                        "throttle:\n  rate: %s\n" };
    static const int key_of[] = { 0, 1, 3, 2 };
    char line[2 * TEXT_MAX + 32], yaml[4 * TEXT_MAX + 512];
    snprintf(line, sizeof(line), keys[key_of[kind]], q);
    const int n = snprintf(yaml, sizeof(yaml),
                           "device:\n  id: gw-0042\n  key: device.key\n"
                           "core:\n  address: core.example.net:7443\n  receiver_key: receiver.pub\n"
                           "dedup_key: dedup.key\nstate_dir: /var/lib/ingest-agent\n"
                           "sources:\n  - path: /var/lib/sensors\n%s",
                           line);
    check(n > 0 && (size_t)n < sizeof(yaml), "yaml buffer too small", text);

    uint64_t v = 0;
    bool want = false;
    switch (kind) {
    case K_SIZE: want = ref_parse(text, ref_sizes, false, &v) && v <= PIB; break;
    case K_DURATION: want = ref_parse(text, ref_durations, true, &v) && v <= 87600 * HOUR_MS; break;
    case K_RATE: {
        /* a size, optionally followed by "/s" */
        char r[TEXT_MAX + 1];
        size_t len = strlen(text);
        if (len >= 2 && strcmp(text + len - 2, "/s") == 0)
            len -= 2;
        memcpy(r, text, len);
        r[len] = '\0';
        want = ref_parse(r, ref_sizes, false, &v) && v <= PIB;
        break;
    }
    default: want = ref_int(text, &v); break;
    }

    ingest_agent_config *a = NULL;
    const int rc = ingest_agent_config_parse(ctx, "/fuzz/agent.yaml", yaml, (size_t)n, &a);
    check(want == (rc == INGEST_OK), keys[key_of[kind]], text);
    if (rc == INGEST_OK) {
        const uint64_t got = kind == K_SIZE       ? a->sources[0].min_size
                             : kind == K_DURATION ? a->sources[0].max_age_ms
                             : kind == K_RATE     ? a->throttle_rate
                                                  : a->sources[0].sample_every;
        check(a->sources_count == 1 && got == v, "config: stored value differs", text);
    } else {
        check(a == NULL && ingest_ctx_errmsg(ctx)[0] != '\0', "config: refused without a message", text);
    }
    ingest_agent_config_free(a);
}

static void check_config(ingest_ctx *ctx, const char *text)
{
    char q[2 * TEXT_MAX + 4];
    if (!yaml_quote(text, q, sizeof(q)))
        return;
    /* One key per input (a config parse costs far more than the rest):
     * which one follows the value's length, so mutations reach all four. */
    check_key(ctx, text, q, (int)(strlen(text) % 4));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[TEXT_MAX + 1];
    const size_t n = size < TEXT_MAX ? size : TEXT_MAX;
    memcpy(text, data, n);
    text[n] = '\0';
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL)
        return 0;
    check_parser(ctx, text, true);
    check_parser(ctx, text, false);
    check_config(ctx, text);
    ingest_ctx_destroy(ctx);
    return 0;
}
