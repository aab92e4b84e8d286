/*
 * Sizes and durations with units, as written in config files.
 *
 * A value is a whole decimal number (digits, '_' allowed between digits for
 * readability), optional blanks, then a unit.  Sizes: none or B (bytes),
 * KiB MiB GiB TiB (powers of 1024), kB MB GB TB (powers of 1000).
 * Durations: ms, s, m, h; a unit is required except for "0".  Units are
 * case-sensitive so that "mb" or "M" cannot be misread: they are rejected.
 */
#include "internal.h"
#include "ingest/config.h"

#include <string.h>

typedef struct unit {
    const char *name;
    uint64_t mult;
} unit;

static const unit size_units[] = {
    { "B", 1 },
    { "KiB", 1ull << 10 }, { "MiB", 1ull << 20 }, { "GiB", 1ull << 30 }, { "TiB", 1ull << 40 },
    { "kB", 1000ull }, { "MB", 1000000ull }, { "GB", 1000000000ull }, { "TB", 1000000000000ull },
};

static const unit duration_units[] = {
    { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 },
};

static int is_blank(char c) { return c == ' ' || c == '\t'; }

/*
 * Parse "<number><blanks><unit>".  what is "size" or "duration" for
 * messages; unit_required says whether a bare number (other than 0) is ok.
 */
static int parse_units(ingest_ctx *ctx, const char *text, const char *what, const unit *units,
                       size_t nunits, const char *unit_list, int unit_required, uint64_t *out)
{
    const char *p = text;
    uint64_t n = 0;

    *out = 0;
    while (is_blank(*p))
        p++;
    if (*p == '-')
        return ingest__fail(ctx, INGEST_EINVAL, "bad %s '%s': must not be negative", what, text);
    if (*p < '0' || *p > '9')
        return ingest__fail(ctx, INGEST_EINVAL, "bad %s '%s': expected a whole number and a unit (%s)",
                            what, text, unit_list);
    for (; (*p >= '0' && *p <= '9') || *p == '_'; p++) {
        if (*p == '_') {
            if (p[1] < '0' || p[1] > '9')
                return ingest__fail(ctx, INGEST_EINVAL, "bad %s '%s': '_' must be between digits",
                                    what, text);
            continue;
        }
        const unsigned d = (unsigned)(*p - '0');
        if (n > (UINT64_MAX - d) / 10)
            return ingest__fail(ctx, INGEST_EINVAL, "bad %s '%s': too large", what, text);
        n = n * 10 + d;
    }
    if (*p == '.' || *p == ',')
        return ingest__fail(ctx, INGEST_EINVAL, "bad %s '%s': must be a whole number", what, text);
    while (is_blank(*p))
        p++;
    const char *u = p;
    size_t ulen = strlen(u);
    while (ulen > 0 && is_blank(u[ulen - 1]))
        ulen--;
    if (ulen == 0) {
        if (unit_required && n != 0)
            return ingest__fail(ctx, INGEST_EINVAL, "bad %s '%s': a unit is required (%s)", what,
                                text, unit_list);
        *out = n;
        return INGEST_OK;
    }
    for (size_t i = 0; i < nunits; i++) {
        if (strlen(units[i].name) == ulen && memcmp(units[i].name, u, ulen) == 0) {
            if (n > UINT64_MAX / units[i].mult)
                return ingest__fail(ctx, INGEST_EINVAL, "bad %s '%s': too large", what, text);
            *out = n * units[i].mult;
            return INGEST_OK;
        }
    }
    return ingest__fail(ctx, INGEST_EINVAL, "bad %s '%s': unknown unit '%.*s' (use %s)", what, text,
                        (int)(ulen > 32 ? 32 : ulen), u, unit_list);
}

int ingest_parse_size(ingest_ctx *ctx, const char *text, uint64_t *out)
{
    return parse_units(ctx, text, "size", size_units, sizeof(size_units) / sizeof(size_units[0]),
                       "B, KiB, MiB, GiB, TiB, kB, MB, GB, TB", 0, out);
}

int ingest_parse_duration(ingest_ctx *ctx, const char *text, uint64_t *out_ms)
{
    return parse_units(ctx, text, "duration", duration_units,
                       sizeof(duration_units) / sizeof(duration_units[0]), "ms, s, m, h", 1, out_ms);
}
