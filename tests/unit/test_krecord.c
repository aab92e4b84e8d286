/* Tests of the Kafka transport's sealed records (include/ingest/krecord.h). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "ingest.h"
#include "ingest/krecord.h"
#include "support/testkit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct failing nofail; /* make_ctx's allocator, never failing */

typedef struct pair {
    ingest_secret_key dev, core, other;
    ingest_krec_keys d, c, o; /* the device's, the core's toward it, the core's toward another device */
} pair;

static void make_pair(pair *p)
{
    assert_int_equal(ingest_secret_key_generate(&p->dev), 0);
    assert_int_equal(ingest_secret_key_generate(&p->core), 0);
    assert_int_equal(ingest_secret_key_generate(&p->other), 0);
    assert_int_equal(ingest_krec_keys_device(&p->dev, p->core.pk, &p->d), 0);
    assert_int_equal(ingest_krec_keys_core(&p->core, p->dev.pk, &p->c), 0);
    assert_int_equal(ingest_krec_keys_core(&p->core, p->other.pk, &p->o), 0);
}

static ingest_krec_hdr hdr(unsigned type, const char *dev, const char *batch, uint32_t seq)
{
    ingest_krec_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = type;
    snprintf(h.device, sizeof(h.device), "%s", dev);
    snprintf(h.batch, sizeof(h.batch), "%s", batch);
    h.seq = seq;
    return h;
}

static void test_keys_pair_up(void **state)
{
    (void)state;
    pair p;
    make_pair(&p);
    assert_memory_equal(p.d.seal, p.c.open, INGEST_KREC_KEY_BYTES);
    assert_memory_equal(p.c.seal, p.d.open, INGEST_KREC_KEY_BYTES);
    assert_memory_not_equal(p.d.seal, p.d.open, INGEST_KREC_KEY_BYTES);
    assert_memory_not_equal(p.c.open, p.o.open, INGEST_KREC_KEY_BYTES);
    ingest_krec_keys_wipe(&p.d);
    static const uint8_t zero[INGEST_KREC_KEY_BYTES];
    assert_memory_equal(p.d.seal, zero, sizeof(zero));
}

static void test_seal_open_round_trip(void **state)
{
    (void)state;
    ingest_ctx *ctx = make_ctx(&nofail);
    pair p;
    make_pair(&p);
    const size_t sizes[] = { 0, 1, 1000, INGEST_KREC_PAYLOAD_MAX };
    uint8_t *payload = malloc(INGEST_KREC_MAX), *rec = malloc(INGEST_KREC_MAX), *back = malloc(INGEST_KREC_MAX);
    assert_non_null(payload);
    assert_non_null(rec);
    assert_non_null(back);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        gen_random(payload, sizes[k], k + 1);
        /* the longest ids: the payload bound still fits */
        char dev[INGEST_DEVICE_ID_MAX + 1], batch[INGEST_WIRE_BATCH_ID_MAX + 1];
        memset(dev, 'd', sizeof(dev) - 1);
        dev[sizeof(dev) - 1] = '\0';
        memset(batch, 'b', sizeof(batch) - 1);
        batch[sizeof(batch) - 1] = '\0';
        const ingest_krec_hdr h = hdr(INGEST_KREC_CHUNK, k % 2 ? "gw-7" : dev, k % 2 ? "b-000042" : batch, (uint32_t)k);
        size_t n = 0;
        assert_int_equal(ingest_krec_seal(ctx, p.d.seal, &h, payload, sizes[k], rec, INGEST_KREC_MAX, &n), 0);
        assert_int_equal(n, ingest_krec_sealed_size(&h, sizes[k]));
        assert_true(n <= INGEST_KREC_MAX);
        ingest_krec_hdr ph, oh;
        assert_int_equal(ingest_krec_peek(ctx, rec, n, &ph), 0);
        assert_string_equal(ph.device, h.device);
        assert_string_equal(ph.batch, h.batch);
        assert_int_equal(ph.seq, k);
        size_t got = 0;
        assert_int_equal(ingest_krec_open(ctx, p.c.open, rec, n, &oh, back, INGEST_KREC_MAX, &got), 0);
        assert_int_equal(got, sizes[k]);
        if (got)
            assert_memory_equal(back, payload, got);
        assert_int_equal(oh.type, INGEST_KREC_CHUNK);
        /* the device cannot open its own record with its open key, nor another pair's core */
        assert_int_equal(ingest_krec_open(ctx, p.d.open, rec, n, &oh, back, INGEST_KREC_MAX, &got), INGEST_ECRYPTO);
        assert_int_equal(ingest_krec_open(ctx, p.o.open, rec, n, &oh, back, INGEST_KREC_MAX, &got), INGEST_ECRYPTO);
    }
    /* one byte more than a record holds */
    const ingest_krec_hdr h = hdr(INGEST_KREC_CHUNK, "gw-7", "b-1", 0);
    size_t n = 0;
    const size_t over = INGEST_KREC_MAX - ingest_krec_sealed_size(&h, 0) + 1;
    assert_int_equal(ingest_krec_seal(ctx, p.d.seal, &h, payload, over, rec, INGEST_KREC_MAX, &n), INGEST_ETOOBIG);
    /* bad ids and types */
    ingest_krec_hdr bad = hdr(INGEST_KREC_CHUNK, "gw/7", "b-1", 0);
    assert_int_equal(ingest_krec_seal(ctx, p.d.seal, &bad, payload, 1, rec, INGEST_KREC_MAX, &n), INGEST_EINVAL);
    bad = hdr(INGEST_KREC_CHUNK, "gw-7", "", 0);
    assert_int_equal(ingest_krec_seal(ctx, p.d.seal, &bad, payload, 1, rec, INGEST_KREC_MAX, &n), INGEST_EINVAL);
    bad = hdr(9, "gw-7", "b-1", 0);
    assert_int_equal(ingest_krec_seal(ctx, p.d.seal, &bad, payload, 1, rec, INGEST_KREC_MAX, &n), INGEST_EINVAL);
    free(payload);
    free(rec);
    free(back);
    ingest_ctx_destroy(ctx);
}

static void test_every_altered_byte_is_refused(void **state)
{
    (void)state;
    ingest_ctx *ctx = make_ctx(&nofail);
    pair p;
    make_pair(&p);
    const ingest_krec_hdr h = hdr(INGEST_KREC_MANIFEST, "gw-7", "b-000042", 3);
    uint8_t payload[64], rec[256], back[256];
    gen_random(payload, sizeof(payload), 9);
    size_t n = 0, got = 0;
    assert_int_equal(ingest_krec_seal(ctx, p.d.seal, &h, payload, sizeof(payload), rec, sizeof(rec), &n), 0);
    ingest_krec_hdr oh;
    for (size_t i = 0; i < n; i++) {
        for (unsigned bit = 0; bit < 8; bit++) {
            rec[i] ^= (uint8_t)(1u << bit);
            const int rc = ingest_krec_open(ctx, p.c.open, rec, n, &oh, back, sizeof(back), &got);
            if (rc != INGEST_ECRYPTO && rc != INGEST_ECORRUPT)
                fail_msg("byte %zu bit %u altered: open returned %d", i, bit, rc);
            rec[i] ^= (uint8_t)(1u << bit);
        }
    }
    /* truncated at every length */
    for (size_t k = 0; k < n; k++) {
        const int rc = ingest_krec_open(ctx, p.c.open, rec, k, &oh, back, sizeof(back), &got);
        assert_true(rc == INGEST_ECRYPTO || rc == INGEST_ECORRUPT);
    }
    /* moved to another batch or record number of the same length: refused */
    uint8_t moved[256];
    memcpy(moved, rec, n);
    char *b = memmem(moved, n, "b-000042", 8);
    assert_non_null(b);
    b[7] = '3';
    assert_int_equal(ingest_krec_open(ctx, p.c.open, moved, n, &oh, back, sizeof(back), &got), INGEST_ECRYPTO);
    assert_int_equal(ingest_krec_open(ctx, p.c.open, rec, n, &oh, back, sizeof(back), &got), 0);
    assert_int_equal(got, sizeof(payload));
    /* a buffer too small for the payload */
    assert_int_equal(ingest_krec_open(ctx, p.c.open, rec, n, &oh, back, 10, &got), INGEST_ETOOBIG);
    ingest_ctx_destroy(ctx);
}

static void test_peek_names_the_field(void **state)
{
    (void)state;
    ingest_ctx *ctx = make_ctx(&nofail);
    ingest_krec_hdr h;
    static const uint8_t nomagic[64] = { 'X' };
    assert_int_equal(ingest_krec_peek(ctx, nomagic, sizeof(nomagic), &h), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "magic at offset 0"));
    uint8_t r[64] = { 'I', 'K', 'R', '1', 7 };
    assert_int_equal(ingest_krec_peek(ctx, r, sizeof(r), &h), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "unknown type 7 at offset 4"));
    r[4] = INGEST_KREC_END;
    r[6] = 200; /* device id longer than allowed */
    assert_int_equal(ingest_krec_peek(ctx, r, sizeof(r), &h), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "bad device id (length 200) at offset 6"));
    r[6] = 2;
    memcpy(r + 7, "d1", 2);
    r[9] = 60; /* batch id past the record */
    assert_int_equal(ingest_krec_peek(ctx, r, sizeof(r), &h), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "bad batch id (length 60) at offset 9"));
    ingest_ctx_destroy(ctx);
}

static void test_bodies(void **state)
{
    (void)state;
    ingest_ctx *ctx = make_ctx(&nofail);
    uint8_t buf[4096];
    size_t n = 0;
    ingest_krec_body b, d;
    static const uint8_t piece[5] = { 1, 2, 3, 4, 5 };
    /* MANIFEST, CHUNK, END: pieces of protocol messages */
    memset(&b, 0, sizeof(b));
    b.type = INGEST_KREC_MANIFEST;
    b.u.msg.wtype = INGEST_MSG_MANIFEST_PART;
    b.u.msg.offset = 10;
    b.u.msg.total = 15;
    b.u.msg.data = piece;
    b.u.msg.len = sizeof(piece);
    assert_int_equal(ingest_krec_body_encode(ctx, &b, NULL, buf, sizeof(buf), &n), 0);
    assert_int_equal(ingest_krec_body_decode(ctx, INGEST_KREC_MANIFEST, buf, n, &d), 0);
    assert_int_equal(d.u.msg.wtype, INGEST_MSG_MANIFEST_PART);
    assert_int_equal(d.u.msg.offset, 10);
    assert_int_equal(d.u.msg.total, 15);
    assert_memory_equal(d.u.msg.data, piece, sizeof(piece));
    buf[8] = 14; /* the piece now runs past its message */
    assert_int_equal(ingest_krec_body_decode(ctx, INGEST_KREC_MANIFEST, buf, n, &d), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "does not fit its message of 14"));
    buf[8] = 15;
    buf[0] = INGEST_MSG_CHUNK; /* a chunk does not travel in a MANIFEST record */
    assert_int_equal(ingest_krec_body_decode(ctx, INGEST_KREC_MANIFEST, buf, n, &d), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "message type 5 at offset 0"));
    assert_int_equal(ingest_krec_body_decode(ctx, INGEST_KREC_CHUNK, buf, n, &d), 0);
    buf[2] = 1;
    assert_int_equal(ingest_krec_body_decode(ctx, INGEST_KREC_CHUNK, buf, n, &d), INGEST_ECORRUPT);
    assert_int_equal(ingest_krec_body_decode(ctx, INGEST_KREC_CHUNK, buf, 11, &d), INGEST_ECORRUPT);
    b.u.msg.offset = 11;
    assert_int_equal(ingest_krec_body_encode(ctx, &b, NULL, buf, sizeof(buf), &n), INGEST_EINVAL);
    b.type = INGEST_KREC_END;
    b.u.msg.wtype = INGEST_MSG_BATCH_COMMIT;
    b.u.msg.offset = 0;
    b.u.msg.total = 5;
    assert_int_equal(ingest_krec_body_encode(ctx, &b, NULL, buf, sizeof(buf), &n), 0);
    assert_int_equal(ingest_krec_body_decode(ctx, INGEST_KREC_END, buf, n, &d), 0);
    assert_int_equal(ingest_krec_body_decode(ctx, INGEST_KREC_END, buf, n - 1, &d), 0); /* a shorter piece of the same message */
    assert_int_equal(ingest_krec_body_decode(ctx, INGEST_KREC_END, buf, 11, &d), INGEST_ECORRUPT);
    assert_int_equal(ingest_krec_msg_type(INGEST_MSG_CHUNK_GROUP), INGEST_KREC_CHUNK);
    assert_int_equal(ingest_krec_msg_type(INGEST_MSG_ERROR), INGEST_KREC_END);
    assert_int_equal(ingest_krec_msg_type(INGEST_MSG_WANT), 0);
    /* LANDED */
    memset(&b, 0, sizeof(b));
    b.type = INGEST_KREC_LANDED;
    b.u.landed.status = INGEST_ENOSPC;
    snprintf(b.u.landed.message, sizeof(b.u.landed.message), "bronze is full");
    assert_int_equal(ingest_krec_body_encode(ctx, &b, NULL, buf, sizeof(buf), &n), 0);
    assert_int_equal(ingest_krec_body_decode(ctx, INGEST_KREC_LANDED, buf, n, &d), 0);
    assert_int_equal(d.u.landed.status, INGEST_ENOSPC);
    assert_string_equal(d.u.landed.message, "bronze is full");
    buf[6] = '\0';
    assert_int_equal(ingest_krec_body_decode(ctx, INGEST_KREC_LANDED, buf, n, &d), INGEST_ECORRUPT);
    /* NEEDED */
    const uint32_t idx[3] = { 4, 9, 4000000 };
    memset(&b, 0, sizeof(b));
    b.type = INGEST_KREC_NEEDED;
    b.u.needed.round = 2;
    b.u.needed.count = 3;
    assert_int_equal(ingest_krec_body_encode(ctx, &b, idx, buf, sizeof(buf), &n), 0);
    assert_int_equal(ingest_krec_body_decode(ctx, INGEST_KREC_NEEDED, buf, n, &d), 0);
    assert_int_equal(d.u.needed.count, 3);
    assert_int_equal(ingest_krec_needed_index(&d, 2), 4000000);
    buf[12] = 3; /* 4, 3: not ascending */
    assert_int_equal(ingest_krec_body_decode(ctx, INGEST_KREC_NEEDED, buf, n, &d), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "not ascending at offset 12"));
    buf[4] = 200; /* a count past the record */
    assert_int_equal(ingest_krec_body_decode(ctx, INGEST_KREC_NEEDED, buf, n, &d), INGEST_ECORRUPT);
    const uint32_t down[2] = { 5, 5 };
    b.u.needed.count = 2;
    assert_int_equal(ingest_krec_body_encode(ctx, &b, down, buf, sizeof(buf), &n), INGEST_EINVAL);
    assert_int_equal(ingest_krec_body_decode(ctx, 0, buf, n, &d), INGEST_ECORRUPT);
    ingest_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_pair_up),
        cmocka_unit_test(test_seal_open_round_trip),
        cmocka_unit_test(test_every_altered_byte_is_refused),
        cmocka_unit_test(test_peek_names_the_field),
        cmocka_unit_test(test_bodies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
