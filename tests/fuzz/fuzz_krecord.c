/*
 * Fuzz target: the Kafka transport's sealed records (include/ingest/krecord.h).
 * Input: byte 0 selects the target (0: a whole record, peeked and opened
 * under a fixed key, and when it opens, sealed again and re-opened; 1..5: a
 * payload of that record type, decoded and, when valid, re-encoded to the
 * same bytes; above: a payload of an unknown type); the rest is the input.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ingest.h"
#include "ingest/krecord.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ingest_ctx *ctx;
static const uint8_t key[INGEST_KREC_KEY_BYTES] = { 1, 2, 3 };
static uint8_t plain[INGEST_KREC_MAX], again[INGEST_KREC_MAX];

static void fuzz_record(const uint8_t *p, size_t n)
{
    ingest_krec_hdr h;
    if (ingest_krec_peek(ctx, p, n, &h) != 0)
        return;
    size_t got = 0, len = 0;
    ingest_krec_hdr oh;
    /* A random record never opens under the key (it would need a forged tag). */
    if (ingest_krec_open(ctx, key, p, n, &oh, plain, sizeof(plain), &got) == 0) {
        if (ingest_krec_seal(ctx, key, &oh, plain, got, again, sizeof(again), &len) != 0 || len != n)
            __builtin_trap();
    }
    /* Sealing the peeked header over the rest reads back the same header and bytes. */
    const size_t m = n < 4096 ? n : 4096;
    if (ingest_krec_seal(ctx, key, &h, p, m, again, sizeof(again), &len) != 0 ||
        ingest_krec_open(ctx, key, again, len, &oh, plain, sizeof(plain), &got) != 0 || got != m ||
        memcmp(plain, p, m) != 0 || oh.type != h.type || oh.seq != h.seq || strcmp(oh.device, h.device) != 0 ||
        strcmp(oh.batch, h.batch) != 0)
        __builtin_trap();
}

static void fuzz_body(unsigned type, const uint8_t *p, size_t n)
{
    ingest_krec_body b;
    if (ingest_krec_body_decode(ctx, type, p, n, &b) != 0)
        return;
    static uint32_t idx[INGEST_KREC_PAYLOAD_MAX / 4];
    if (type == INGEST_KREC_NEEDED)
        for (uint32_t i = 0; i < b.u.needed.count; i++)
            idx[i] = ingest_krec_needed_index(&b, i);
    size_t len = 0;
    /* Round trip: whatever decodes re-encodes to the same bytes. */
    if (ingest_krec_body_encode(ctx, &b, idx, again, sizeof(again), &len) != 0 || len != n || memcmp(again, p, n) != 0)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ctx == NULL && (ctx = ingest_ctx_create(NULL)) == NULL)
        __builtin_trap();
    if (size == 0 || size - 1 > INGEST_KREC_MAX)
        return 0;
    if (data[0] == 0)
        fuzz_record(data + 1, size - 1);
    else
        fuzz_body(data[0], data + 1, size - 1);
    return 0;
}
