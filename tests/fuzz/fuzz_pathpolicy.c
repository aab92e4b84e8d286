/*
 * Fuzz target: the bronze tree's name and path policy (libingest/pathpolicy.c),
 * which the receiver applies to every file and the agent to every file
 * before reading it (with the layout from LANDING, also fuzzed here).
 *
 * Input: up to four NUL-separated fields: layout, device, batch id, path;
 * the first byte of the input, when there are four fields, also picks the
 * name limit (1..255) and the path limit.  Checked on every input:
 *   - every refusal has a message;
 *   - a layout the rule takes is 1..1024 bytes, relative, holds {path};
 *   - a landed path that is given back is shorter than its limit, passes
 *     the relative-path rule again, keeps the file's path whole, has no
 *     empty, "." or ".." component, no component past the name limit, and
 *     is not under _manifests.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../libingest/pathpolicy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FIELD_MAX 5000

static void must(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_pathpolicy: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char field[4][FIELD_MAX + 1];
    size_t nf = 0, at = 0;
    for (size_t i = 0; i <= size && nf < 4; i++) {
        if (i == size || data[i] == '\0') {
            const size_t n = i - at > FIELD_MAX ? FIELD_MAX : i - at;
            memcpy(field[nf], data + at, n);
            field[nf][n] = '\0';
            nf++;
            at = i + 1;
        }
    }
    for (size_t k = nf; k < 4; k++)
        strcpy(field[k], k == 0 ? "{device}/{path}" : k == 1 ? "dev1" : k == 2 ? "b-000001" : "src/a.txt");
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL)
        return 0;
    char why[200] = "";
    const char *layout = field[0];
    if (ingest__path_check_layout(layout, why, sizeof why) != 0) {
        must(why[0] != '\0', "a refused layout without a message");
        ingest_ctx_destroy(ctx);
        return 0;
    }
    must(strlen(layout) >= 1 && strlen(layout) <= INGEST_PATH_LAYOUT_MAX, "a layout past its length taken");
    must(layout[0] != '/' && strstr(layout, "{path}") != NULL, "a layout without {path} or absolute taken");
    const uint8_t sel = size > 0 ? data[0] : 0;
    const size_t name_max = nf == 4 ? 1u + sel % INGEST_PATH_NAME_MAX : INGEST_PATH_NAME_MAX;
    const size_t cap = nf == 4 ? 64u + (size_t)sel * 16u : INGEST_PATH_LANDED_MAX;
    char out[INGEST_PATH_LANDED_MAX];
    const char *dev = field[1], *batch = field[2], *rel = field[3];
    if (ingest__path_check_id(ctx, "device", dev) != 0 || ingest__path_check_id(ctx, "batch", batch) != 0) {
        must(ingest_ctx_errmsg(ctx)[0] != '\0', "a refused id without a message");
        ingest_ctx_destroy(ctx);
        return 0;
    }
    const int rc = ingest__path_landed(ctx, layout, dev, batch, rel, 1700000000000000000ll, name_max, out, cap);
    if (rc != 0) {
        must(ingest_ctx_errmsg(ctx)[0] != '\0', "a refused path without a message");
        ingest_ctx_destroy(ctx);
        return 0;
    }
    const size_t n = strlen(out);
    must(n > 0 && n < cap, "a landed path past its limit");
    must(strstr(out, rel) != NULL, "the file's path is not whole in its landed path");
    must(ingest__path_check_rel(ctx, "landed", out) == 0, "a landed path that breaks the relative-path rule");
    must(strncmp(out, "_manifests", 10) != 0 || (out[10] != '/' && out[10] != '\0'), "a landed path under _manifests");
    for (const char *c = out;;) {
        const char *e = strchr(c, '/');
        const size_t cl = e ? (size_t)(e - c) : strlen(c);
        must(cl > 0 && cl <= name_max, "a landed component empty or past the name limit");
        must(!(cl == 1 && c[0] == '.') && !(cl == 2 && c[0] == '.' && c[1] == '.'), "a . or .. component landed");
        if (!e)
            break;
        c = e + 1;
    }
    ingest_ctx_destroy(ctx);
    return 0;
}
