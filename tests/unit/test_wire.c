/* Unit tests for the wire message codecs: golden bytes, round trips, hostile payloads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingest.h"
#include "ingest/wire.h"

static ingest_ctx *ctx;

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static int setup(void **state)
{
    (void)state;
    ctx = ingest_ctx_create(NULL);
    return ctx == NULL;
}

static int teardown(void **state)
{
    (void)state;
    ingest_ctx_destroy(ctx);
    return 0;
}

static void ingest__put_u32_test(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

static void expect_fail(unsigned type, const uint8_t *p, size_t n, int code, const char *detail)
{
    ingest_wire_msg m;
    const int rc = ingest_wire_decode(ctx, type, p, n, &m);
    if (rc != code)
        fail_msg("type %u: decode returned %d, want %d (%s)", type, rc, code, ingest_ctx_errmsg(ctx));
    if (detail != NULL && strstr(ingest_ctx_errmsg(ctx), detail) == NULL)
        fail_msg("type %u: message '%s' lacks '%s'", type, ingest_ctx_errmsg(ctx), detail);
}

/* Encode m, check the size function agrees, decode it back into r. */
static size_t round_trip(const ingest_wire_msg *m, ingest_wire_msg *r, uint8_t *buf, size_t cap)
{
    size_t len = 0;
    assert_int_equal(ingest_wire_encode(ctx, m, buf, cap, &len), 0);
    assert_int_equal(ingest_wire_encoded_size(m), len);
    assert_int_equal(ingest_wire_decode(ctx, m->type, buf, len, r), 0);
    assert_int_equal(r->type, m->type);
    /* Every strict prefix is rejected (except where the tail is free-form). */
    if (m->type != INGEST_MSG_MANIFEST_PART && m->type != INGEST_MSG_CHUNK && m->type != INGEST_MSG_CHUNK_GROUP &&
        m->type != INGEST_MSG_CHUNK_RUN &&
        m->type != INGEST_MSG_DICT_DATA && m->type != INGEST_MSG_DELTA_BASE && m->type != INGEST_MSG_CHUNK_DELTA) {
        ingest_wire_msg t;
        for (size_t k = 0; k < len; k++)
            assert_int_equal(ingest_wire_decode(ctx, m->type, buf, k, &t), INGEST_ECORRUPT);
        /* And one trailing byte too. */
        buf[len] = 0;
        assert_int_equal(ingest_wire_decode(ctx, m->type, buf, len + 1, &t), INGEST_ECORRUPT);
        assert_non_null(strstr(ingest_ctx_errmsg(ctx), "trailing"));
    }
    return len;
}

static void test_header(void **state)
{
    (void)state;
    uint8_t b[8];
    ingest_wire_hdr h = { INGEST_MSG_CHUNK, INGEST_WIRE_VERSION, 0, 0x01020304 }, r;
    ingest_wire_hdr_encode(&h, b);
    const uint8_t golden[8] = { 5, 1, 0, 0, 4, 3, 2, 1 };
    assert_memory_equal(b, golden, 8);
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, 0x01020304, &r), 0);
    assert_int_equal(r.type, INGEST_MSG_CHUNK);
    assert_int_equal(r.length, 0x01020304);
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, 0x01020303, &r), INGEST_ETOOBIG);
    b[0] = 0;
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, ~0u, &r), INGEST_EPROTO);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "unknown message type 0"));
    b[0] = 200;
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, ~0u, &r), INGEST_EPROTO);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "unknown message type 200"));
    b[0] = INGEST_MSG_TYPE_LAST + 1;
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, ~0u, &r), INGEST_EPROTO);
    b[0] = INGEST_MSG_RECEIVED;
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, ~0u, &r), 0);
    assert_int_equal(r.type, 11);
    b[0] = INGEST_MSG_DICT_DATA;
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, ~0u, &r), 0);
    b[0] = INGEST_MSG_FILE_REFUSED;
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, ~0u, &r), 0);
    b[0] = INGEST_MSG_FILE_WITHDRAWN;
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, ~0u, &r), 0);
    b[0] = INGEST_MSG_DELTA_BASE;
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, ~0u, &r), 0);
    b[0] = INGEST_MSG_CHUNK_DELTA;
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, ~0u, &r), 0);
    b[0] = INGEST_MSG_CHUNK_RUN;
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, ~0u, &r), 0);
    b[0] = 22;
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, ~0u, &r), INGEST_EPROTO);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "unknown message type 22"));
    b[0] = 1;
    b[1] = 2;
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, ~0u, &r), INGEST_EVERSION);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "version 2"));
    b[1] = 1;
    b[2] = 1;
    assert_int_equal(ingest_wire_hdr_decode(ctx, b, ~0u, &r), INGEST_EPROTO);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "reserved flags"));
    assert_string_equal(ingest_wire_type_name(INGEST_MSG_BATCH_COMMIT), "BATCH_COMMIT");
    assert_string_equal(ingest_wire_type_name(INGEST_MSG_RECEIVED), "RECEIVED");
    assert_string_equal(ingest_wire_type_name(99), "UNKNOWN");
}

static void test_batch_begin(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t buf[512];
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_BATCH_BEGIN;
    strcpy(m.u.begin.batch_id, "20240101T000000-0001");
    m.u.begin.file_count = 3;
    m.u.begin.chunk_count = 70000;
    m.u.begin.total_bytes = 5000000000ull;
    const size_t len = round_trip(&m, &r, buf, sizeof(buf));
    assert_int_equal(len, 2 + 20 + 4 + 4 + 8);
    assert_string_equal(r.u.begin.batch_id, "20240101T000000-0001");
    assert_int_equal(r.u.begin.file_count, 3);
    assert_int_equal(r.u.begin.chunk_count, 70000);
    assert_true(r.u.begin.total_bytes == 5000000000ull);
    /* Golden prefix: u16 length 20, then the id. */
    assert_int_equal(buf[0], 20);
    assert_int_equal(buf[1], 0);
    assert_memory_equal(buf + 2, "20240101T000000-0001", 20);

    /* Bad ids on both sides. */
    strcpy(m.u.begin.batch_id, "../etc");
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);
    const uint8_t dotdot[] = { 2, 0, '.', '.', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    expect_fail(INGEST_MSG_BATCH_BEGIN, dotdot, sizeof(dotdot), INGEST_ECORRUPT, "batch id at offset 0");
    const uint8_t empty[] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    expect_fail(INGEST_MSG_BATCH_BEGIN, empty, sizeof(empty), INGEST_ECORRUPT, "batch id");
    const uint8_t longid[] = { 0xFF, 0xFF, 'a' };
    expect_fail(INGEST_MSG_BATCH_BEGIN, longid, sizeof(longid), INGEST_ECORRUPT, "exceeds 128");
    /* Too small an output buffer. */
    strcpy(m.u.begin.batch_id, "b1");
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, 10, &(size_t){ 0 }), INGEST_ETOOBIG);
    memset(m.u.begin.batch_id, 'a', sizeof(m.u.begin.batch_id));
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);
    assert_int_equal(ingest_wire_encoded_size(&m), 0);
}

static void test_manifest_messages(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t buf[256];
    static const char part[] = "{\"batch\":\"b1\"}\n{\"path\":\"a.csv\"}\n";
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_MANIFEST_PART;
    m.u.manifest_part.data = (const uint8_t *)part;
    m.u.manifest_part.len = sizeof(part) - 1;
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), sizeof(part) - 1);
    assert_int_equal(r.u.manifest_part.len, sizeof(part) - 1);
    assert_memory_equal(r.u.manifest_part.data, part, sizeof(part) - 1);
    assert_ptr_equal(r.u.manifest_part.data, buf); /* a view, no copy */
    expect_fail(INGEST_MSG_MANIFEST_PART, buf, 0, INGEST_ECORRUPT, "empty part");
    m.u.manifest_part.len = 0;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);

    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_MANIFEST_END;
    m.u.manifest_end.part_count = 2;
    m.u.manifest_end.manifest_bytes = 123456789012ull;
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 12);
    assert_int_equal(r.u.manifest_end.part_count, 2);
    assert_true(r.u.manifest_end.manifest_bytes == 123456789012ull);
}

static void test_want(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t buf[1024];
    const uint32_t idx[] = { 0, 1, 2, 1000, 0xFFFFFFFFu };
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_WANT;
    strcpy(m.u.want.batch_id, "b7");
    m.u.want.flags = INGEST_WANT_MORE;
    m.u.want.count = 5;
    m.u.want.idx = idx;
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 2 + 2 + 1 + 4 + 20);
    assert_string_equal(r.u.want.batch_id, "b7");
    assert_int_equal(r.u.want.flags, INGEST_WANT_MORE);
    assert_int_equal(r.u.want.count, 5);
    assert_null(r.u.want.idx);
    for (uint32_t i = 0; i < 5; i++)
        assert_int_equal(ingest_wire_want_index(&r.u.want, i), idx[i]);
    /* Re-encode from the decoded view: same bytes. */
    uint8_t buf2[1024];
    size_t l2;
    assert_int_equal(ingest_wire_encode(ctx, &r, buf2, sizeof(buf2), &l2), 0);
    assert_memory_equal(buf, buf2, l2);

    /* Empty WANT (nothing needed) is valid. */
    m.u.want.count = 0;
    m.u.want.flags = 0;
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 2 + 2 + 1 + 4);
    assert_int_equal(r.u.want.count, 0);

    /* Not strictly increasing: refused by both sides. */
    const uint32_t dup[] = { 3, 3 };
    m.u.want.count = 2;
    m.u.want.idx = dup;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);
    const uint8_t desc[] = { 1, 0, 'b', 0, 2, 0, 0, 0, 5, 0, 0, 0, 4, 0, 0, 0 };
    expect_fail(INGEST_MSG_WANT, desc, sizeof(desc), INGEST_ECORRUPT, "not above 5");
    /* A count larger than the bytes present, rejected before reading them. */
    const uint8_t lying[] = { 1, 0, 'b', 0, 0xFF, 0xFF, 0xFF, 0xFF, 1, 0, 0, 0 };
    expect_fail(INGEST_MSG_WANT, lying, sizeof(lying), INGEST_ECORRUPT, "index count 4294967295");
    const uint8_t badflags[] = { 1, 0, 'b', 0x80, 0, 0, 0, 0 };
    expect_fail(INGEST_MSG_WANT, badflags, sizeof(badflags), INGEST_ECORRUPT, "unknown flags");
}

/* A WANT of runs (the runs feature): (first, n) pairs, ordered and disjoint, 8 bytes each. */
static void test_want_runs(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t buf[1024];
    const uint32_t runs[] = { 0, 4000, 4001, 1, 4005, 2, 0xFFFFFFF0u, 15 };
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_WANT;
    strcpy(m.u.want.batch_id, "b7");
    m.u.want.flags = INGEST_WANT_RUNS | INGEST_WANT_MORE;
    m.u.want.count = 4;
    m.u.want.idx = runs;
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 2 + 2 + 1 + 4 + 32);
    assert_int_equal(r.u.want.flags, INGEST_WANT_RUNS | INGEST_WANT_MORE);
    assert_int_equal(r.u.want.count, 4);
    for (uint32_t k = 0; k < 4; k++) {
        uint32_t first, n;
        ingest_wire_want_run(&r.u.want, k, &first, &n);
        assert_int_equal(first, runs[2 * k]);
        assert_int_equal(n, runs[2 * k + 1]);
    }
    /* Adjacent runs (one starting where the one before ends) are valid. */
    const uint32_t adjacent[] = { 0, 2, 2, 1 };
    m.u.want.idx = adjacent;
    m.u.want.count = 2;
    m.u.want.flags = INGEST_WANT_RUNS;
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 2 + 2 + 1 + 4 + 16);
    /* Empty, overlapping, touching the previous run's inside, or past the last index: refused both ways. */
    static const uint32_t bad[][4] = {
        { 5, 0, 9, 1 },             /* empty run */
        { 5, 3, 7, 1 },             /* overlaps */
        { 5, 3, 4, 1 },             /* goes back */
        { 0xFFFFFFFEu, 2, 0, 0 },   /* past the last index (one run) */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        m.u.want.idx = bad[i];
        m.u.want.count = i == 3 ? 1 : 2;
        m.u.want.flags = INGEST_WANT_RUNS;
        if (ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }) != INGEST_EINVAL)
            fail_msg("case %zu: encoded", i);
        uint8_t p[4 + 4 + 16] = { 1, 0, 'b', INGEST_WANT_RUNS };
        ingest__put_u32_test(p + 4, m.u.want.count);
        for (uint32_t k = 0; k < 2 * m.u.want.count; k++)
            ingest__put_u32_test(p + 8 + 4 * k, bad[i][k]);
        expect_fail(INGEST_MSG_WANT, p, 8 + 8 * (size_t)m.u.want.count, INGEST_ECORRUPT,
                    "is empty, overlaps the one before or passes the last index");
    }
    /* A run count larger than the bytes present, refused before reading them. */
    const uint8_t lying[] = { 1, 0, 'b', INGEST_WANT_RUNS, 2, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0 };
    expect_fail(INGEST_MSG_WANT, lying, sizeof(lying), INGEST_ECORRUPT, "run count 2 needs 16 bytes, 8 present");
}

/* CHUNK_RUN: a group of consecutive indexes, first and count instead of the list. */
static void test_chunk_run(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t data[40], buf[100];
    for (int i = 0; i < 40; i++)
        data[i] = (uint8_t)(3 * i);
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_CHUNK_RUN;
    m.u.group.first = 1000;
    m.u.group.count = 4096;
    m.u.group.data = data;
    m.u.group.len = sizeof(data);
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 8 + 40);
    const uint8_t golden[8] = { 0xE8, 0x03, 0, 0, 0, 0x10, 0, 0 };
    assert_memory_equal(buf, golden, 8);
    assert_null(r.u.group.raw);
    assert_int_equal(r.u.group.count, 4096);
    assert_int_equal(ingest_wire_group_index(&r.u.group, 0), 1000);
    assert_int_equal(ingest_wire_group_index(&r.u.group, 4095), 5095);
    assert_memory_equal(r.u.group.data, data, 40);
    size_t hl;
    assert_int_equal(ingest_wire_encode_head(ctx, &m, buf, sizeof(buf), &hl), 0);
    assert_int_equal(hl, 8);
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &hl), 0);
    for (size_t k = 0; k <= 8; k++)
        expect_fail(INGEST_MSG_CHUNK_RUN, buf, k, INGEST_ECORRUPT,
                    k < 4 ? "truncated at first index" : k < 8 ? "truncated at chunk count" : "no chunk bytes");
    uint8_t bad[12];
    memcpy(bad, buf, sizeof bad);
    ingest__put_u32_test(bad + 4, 0);
    expect_fail(INGEST_MSG_CHUNK_RUN, bad, sizeof bad, INGEST_ECORRUPT, "chunk count 0");
    ingest__put_u32_test(bad + 4, 4097);
    expect_fail(INGEST_MSG_CHUNK_RUN, bad, sizeof bad, INGEST_ECORRUPT, "is not 1..4096");
    ingest__put_u32_test(bad, 0xFFFFFFFFu);
    ingest__put_u32_test(bad + 4, 2);
    expect_fail(INGEST_MSG_CHUNK_RUN, bad, sizeof bad, INGEST_ECORRUPT, "runs past index");
    m.u.group.count = 0;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &hl), INGEST_EINVAL);
    m.u.group.count = 1;
    m.u.group.len = 0;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &hl), INGEST_EINVAL);
}

static void test_chunk(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t data[100], buf[200];
    for (int i = 0; i < 100; i++)
        data[i] = (uint8_t)(255 - i);
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_CHUNK;
    m.u.chunk.index = 0xDEADBEEF;
    m.u.chunk.data = data;
    m.u.chunk.len = sizeof(data);
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 104);
    const uint8_t golden[4] = { 0xEF, 0xBE, 0xAD, 0xDE };
    assert_memory_equal(buf, golden, 4);
    assert_int_equal(r.u.chunk.index, 0xDEADBEEF);
    assert_int_equal(r.u.chunk.len, 100);
    assert_memory_equal(r.u.chunk.data, data, 100);
    /* The head alone is the 4-byte index. */
    size_t hl;
    assert_int_equal(ingest_wire_encode_head(ctx, &m, buf, sizeof(buf), &hl), 0);
    assert_int_equal(hl, 4);
    expect_fail(INGEST_MSG_CHUNK, buf, 4, INGEST_ECORRUPT, "no chunk bytes");
    expect_fail(INGEST_MSG_CHUNK, buf, 3, INGEST_ECORRUPT, "truncated at chunk index");
}

static void test_chunk_group(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t data[50], buf[200], idx[12];
    const uint32_t want[3] = { 7, 8, 0x01020304 };
    for (int i = 0; i < 50; i++)
        data[i] = (uint8_t)i;
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++)
            idx[4 * i + k] = (uint8_t)(want[i] >> (8 * k));
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_CHUNK_GROUP;
    m.u.group.count = 3;
    m.u.group.raw = idx;
    m.u.group.data = data;
    m.u.group.len = sizeof(data);
    assert_int_equal(INGEST_MSG_CHUNK_GROUP, 12);
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 4 + 12 + 50);
    const uint8_t golden[8] = { 3, 0, 0, 0, 7, 0, 0, 0 };
    assert_memory_equal(buf, golden, 8);
    assert_int_equal(r.u.group.count, 3);
    for (uint32_t i = 0; i < 3; i++)
        assert_int_equal(ingest_wire_group_index(&r.u.group, i), want[i]);
    assert_int_equal(r.u.group.len, 50);
    assert_memory_equal(r.u.group.data, data, 50);
    /* The head alone is the count; indexes and bytes travel from their own buffers. */
    size_t hl;
    assert_int_equal(ingest_wire_encode_head(ctx, &m, buf, sizeof(buf), &hl), 0);
    assert_int_equal(hl, 4);
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &hl), 0);
    /* Every prefix that ends before the first chunk byte is refused, naming what is short. */
    for (size_t k = 0; k <= 16; k++)
        expect_fail(INGEST_MSG_CHUNK_GROUP, buf, k, INGEST_ECORRUPT, k < 4 ? "truncated at chunk count" : "present");
    /* Count 0, count past the bound, a huge count against a short payload. */
    uint8_t bad[32];
    memcpy(bad, buf, sizeof(bad));
    bad[0] = 0;
    expect_fail(INGEST_MSG_CHUNK_GROUP, bad, sizeof(bad), INGEST_ECORRUPT, "chunk count 0");
    ingest__put_u32_test(bad, INGEST_WIRE_GROUP_MAX_CHUNKS + 1);
    expect_fail(INGEST_MSG_CHUNK_GROUP, bad, sizeof(bad), INGEST_ECORRUPT, "is not 1..4096");
    ingest__put_u32_test(bad, 4096);
    expect_fail(INGEST_MSG_CHUNK_GROUP, bad, sizeof(bad), INGEST_ECORRUPT, "4096 indexes need 16384 bytes");
    /* Indexes not strictly increasing: equal, then decreasing. */
    memcpy(bad, buf, sizeof(bad));
    bad[8] = 7;
    expect_fail(INGEST_MSG_CHUNK_GROUP, bad, sizeof(bad), INGEST_ECORRUPT, "index 7 at position 1 is not above 7");
    bad[8] = 6;
    expect_fail(INGEST_MSG_CHUNK_GROUP, bad, sizeof(bad), INGEST_ECORRUPT, "offset 8");
    /* The encoder refuses what the decoder would. */
    idx[4] = 7;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &hl), INGEST_EINVAL);
    idx[4] = 8;
    m.u.group.count = 0;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &hl), INGEST_EINVAL);
    m.u.group.count = 3;
    m.u.group.len = 0;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &hl), INGEST_EINVAL);
    m.u.group.len = sizeof(data);
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, 20, &hl), INGEST_ETOOBIG);
}

static void test_commit_ack_error_ping(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t buf[2048];

    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_BATCH_COMMIT;
    strcpy(m.u.commit.batch_id, "b.1");
    m.u.commit.chunks_sent = 42;
    round_trip(&m, &r, buf, sizeof(buf));
    assert_string_equal(r.u.commit.batch_id, "b.1");
    assert_int_equal(r.u.commit.chunks_sent, 42);

    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_ACK;
    strcpy(m.u.ack.batch_id, "b.1");
    m.u.ack.status = INGEST_ENOSPC;
    strcpy(m.u.ack.message, "bronze: disk full (ünïcode ok)");
    round_trip(&m, &r, buf, sizeof(buf));
    assert_int_equal(r.u.ack.status, INGEST_ENOSPC);
    assert_string_equal(r.u.ack.message, "bronze: disk full (ünïcode ok)");
    /* A message of exactly the maximum, and one beyond. */
    memset(m.u.ack.message, 'm', INGEST_WIRE_MESSAGE_MAX);
    m.u.ack.message[INGEST_WIRE_MESSAGE_MAX] = '\0';
    round_trip(&m, &r, buf, sizeof(buf));
    assert_int_equal(strlen(r.u.ack.message), INGEST_WIRE_MESSAGE_MAX);
    m.u.ack.message[0] = '\0';
    const uint8_t nul[] = { 1, 0, 'b', 0, 0, 0, 0, 2, 0, 'x', 0 };
    expect_fail(INGEST_MSG_ACK, nul, sizeof(nul), INGEST_ECORRUPT, "NUL byte");
    uint8_t toolong[2 + 1 + 4 + 2];
    memcpy(toolong, (const uint8_t[]){ 1, 0, 'b', 0, 0, 0, 0, 0x01, 0x04 }, 9); /* 1025 */
    expect_fail(INGEST_MSG_ACK, toolong, sizeof(toolong), INGEST_ECORRUPT, "message length 1025 exceeds 1024");

    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_ERROR;
    m.u.error.code = INGEST_EAUTH;
    strcpy(m.u.error.message, "go away");
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 4 + 2 + 7);
    assert_int_equal(r.u.error.code, INGEST_EAUTH);
    assert_string_equal(r.u.error.message, "go away");
    m.u.error.code = 0;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);
    const uint8_t pos[] = { 5, 0, 0, 0, 0, 0 };
    expect_fail(INGEST_MSG_ERROR, pos, sizeof(pos), INGEST_ECORRUPT, "not negative");

    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_PING;
    m.u.ping.nonce = 0x0102030405060708ull;
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 8);
    assert_true(r.u.ping.nonce == 0x0102030405060708ull);
    m.type = INGEST_MSG_PONG;
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 8);
    assert_int_equal(r.type, INGEST_MSG_PONG);
}

static void test_received(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t buf[512];
    assert_int_equal(INGEST_MSG_RECEIVED, 11);
    assert_int_equal(INGEST_MSG_TYPE_LAST, INGEST_MSG_CHUNK_RUN);
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_RECEIVED;
    strcpy(m.u.received.batch_id, "20240101T000000-0007");
    /* round_trip also rejects every strict prefix and a trailing byte. */
    const size_t len = round_trip(&m, &r, buf, sizeof(buf));
    assert_int_equal(len, 2 + 20);
    assert_string_equal(r.u.received.batch_id, "20240101T000000-0007");
    /* Golden bytes: u16 length 20, then the id, nothing else. */
    assert_int_equal(buf[0], 20);
    assert_int_equal(buf[1], 0);
    assert_memory_equal(buf + 2, "20240101T000000-0007", 20);
    /* The same bytes as the batch id that opens an ACK for the same batch. */
    ingest_wire_msg a;
    uint8_t abuf[512];
    size_t alen;
    memset(&a, 0, sizeof(a));
    a.type = INGEST_MSG_ACK;
    strcpy(a.u.ack.batch_id, m.u.received.batch_id);
    assert_int_equal(ingest_wire_encode(ctx, &a, abuf, sizeof(abuf), &alen), 0);
    assert_true(alen > len);
    assert_memory_equal(abuf, buf, len);
    /* The head is the whole message. */
    size_t hl;
    assert_int_equal(ingest_wire_encode_head(ctx, &m, abuf, sizeof(abuf), &hl), 0);
    assert_int_equal(hl, len);
    assert_memory_equal(abuf, buf, len);

    /* Truncated: no payload, half a length, a length beyond the bytes. */
    expect_fail(INGEST_MSG_RECEIVED, buf, 0, INGEST_ECORRUPT, "RECEIVED: truncated at batch id (offset 0");
    expect_fail(INGEST_MSG_RECEIVED, buf, 1, INGEST_ECORRUPT, "truncated at batch id");
    expect_fail(INGEST_MSG_RECEIVED, buf, len - 1, INGEST_ECORRUPT, "RECEIVED: truncated at batch id (offset 2");
    /* Oversize batch ids: a huge declared length, and 129 bytes present. */
    const uint8_t longid[] = { 0xFF, 0xFF, 'a' };
    expect_fail(INGEST_MSG_RECEIVED, longid, sizeof(longid), INGEST_ECORRUPT, "batch id length 65535 exceeds 128");
    uint8_t id129[2 + 129];
    id129[0] = 129;
    id129[1] = 0;
    memset(id129 + 2, 'a', 129);
    expect_fail(INGEST_MSG_RECEIVED, id129, sizeof(id129), INGEST_ECORRUPT, "batch id length 129 exceeds 128");
    /* Exactly 128 bytes is fine. */
    id129[0] = 128;
    assert_int_equal(ingest_wire_decode(ctx, INGEST_MSG_RECEIVED, id129, 2 + 128, &r), 0);
    assert_int_equal(strlen(r.u.received.batch_id), 128);
    /* Empty and badly formed ids, on both sides. */
    const uint8_t empty[] = { 0, 0 };
    expect_fail(INGEST_MSG_RECEIVED, empty, sizeof(empty), INGEST_ECORRUPT, "batch id at offset 0");
    const uint8_t dotdot[] = { 2, 0, '.', '.' };
    expect_fail(INGEST_MSG_RECEIVED, dotdot, sizeof(dotdot), INGEST_ECORRUPT, "batch id at offset 0");
    strcpy(m.u.received.batch_id, "../x");
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "RECEIVED: invalid batch id"));
    memset(m.u.received.batch_id, 'a', sizeof(m.u.received.batch_id));
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);
    assert_int_equal(ingest_wire_encoded_size(&m), 0);
    /* Too small an output buffer. */
    strcpy(m.u.received.batch_id, "b1");
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, 3, &(size_t){ 0 }), INGEST_ETOOBIG);
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, 4, &(size_t){ 0 }), 0);
}

static void test_dict_offer(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t buf[128];
    assert_int_equal(INGEST_MSG_DICT_OFFER, 13);
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_DICT_OFFER;
    m.u.dict_offer.dict_id = 0x7A000001u;
    m.u.dict_offer.size = 112640;
    for (int i = 0; i < INGEST_WIRE_DICT_HASH_BYTES; i++)
        m.u.dict_offer.hash[i] = (uint8_t)(i * 7 + 1);
    /* round_trip also rejects every strict prefix and a trailing byte. */
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 4 + 4 + 32);
    const uint8_t golden[8] = { 0x01, 0x00, 0x00, 0x7A, 0x00, 0xB8, 0x01, 0x00 };
    assert_memory_equal(buf, golden, 8);
    assert_memory_equal(buf + 8, m.u.dict_offer.hash, 32);
    assert_int_equal(r.u.dict_offer.dict_id, 0x7A000001u);
    assert_int_equal(r.u.dict_offer.size, 112640);
    assert_memory_equal(r.u.dict_offer.hash, m.u.dict_offer.hash, 32);
    expect_fail(INGEST_MSG_DICT_OFFER, buf, 0, INGEST_ECORRUPT, "DICT_OFFER: truncated at dictionary id (offset 0");
    expect_fail(INGEST_MSG_DICT_OFFER, buf, 20, INGEST_ECORRUPT, "truncated at hash (offset 8");
    /* Bounds: id 0, size 0, size past the codec's bound; exactly the bound is fine. */
    uint8_t b[40];
    memcpy(b, buf, 40);
    memset(b, 0, 4);
    expect_fail(INGEST_MSG_DICT_OFFER, b, 40, INGEST_ECORRUPT, "dictionary id 0 (offset 0)");
    memcpy(b, buf, 40);
    memset(b + 4, 0, 4);
    expect_fail(INGEST_MSG_DICT_OFFER, b, 40, INGEST_ECORRUPT, "size 0 outside");
    b[4] = 1;
    b[5] = 0;
    b[6] = 0x40; /* 4 MiB + 1 */
    expect_fail(INGEST_MSG_DICT_OFFER, b, 40, INGEST_ECORRUPT, "size 4194305 outside 1..4194304 (offset 4)");
    b[4] = 0;
    assert_int_equal(ingest_wire_decode(ctx, INGEST_MSG_DICT_OFFER, b, 40, &r), 0);
    assert_int_equal(r.u.dict_offer.size, INGEST_WIRE_DICT_MAX);
    /* The encoder refuses what the decoder would. */
    m.u.dict_offer.size = INGEST_WIRE_DICT_MAX + 1;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);
    assert_int_equal(ingest_wire_encoded_size(&m), 0);
    m.u.dict_offer.size = 1;
    m.u.dict_offer.dict_id = 0;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);
    m.u.dict_offer.dict_id = 5;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, 39, &(size_t){ 0 }), INGEST_ETOOBIG);
    assert_string_equal(ingest_wire_type_name(INGEST_MSG_DICT_OFFER), "DICT_OFFER");
}

static void test_dict_want(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t buf[2048];
    assert_int_equal(INGEST_MSG_DICT_WANT, 14);
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_DICT_WANT;
    m.u.dict_want.dict_id = 40000;
    m.u.dict_want.answer = INGEST_DICT_SEND;
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 4 + 1 + 2);
    const uint8_t golden[7] = { 0x40, 0x9C, 0, 0, 1, 0, 0 };
    assert_memory_equal(buf, golden, 7);
    assert_int_equal(r.u.dict_want.dict_id, 40000);
    assert_int_equal(r.u.dict_want.answer, INGEST_DICT_SEND);
    assert_string_equal(r.u.dict_want.message, "");
    m.u.dict_want.answer = INGEST_DICT_REFUSED;
    strcpy(m.u.dict_want.message, "the receiver holds 64 dictionaries");
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 4 + 1 + 2 + 34);
    assert_string_equal(r.u.dict_want.message, "the receiver holds 64 dictionaries");
    /* A longest message round-trips; one byte more does not encode. */
    memset(m.u.dict_want.message, 'x', INGEST_WIRE_MESSAGE_MAX);
    m.u.dict_want.message[INGEST_WIRE_MESSAGE_MAX] = '\0';
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 4 + 1 + 2 + INGEST_WIRE_MESSAGE_MAX);
    /* Hostile: unknown answer, id 0, a message longer than its bound, a NUL in it. */
    const uint8_t badans[] = { 1, 0, 0, 0, 3, 0, 0 };
    expect_fail(INGEST_MSG_DICT_WANT, badans, sizeof(badans), INGEST_ECORRUPT, "unknown answer 3 (offset 4)");
    const uint8_t id0[] = { 0, 0, 0, 0, 0, 0, 0 };
    expect_fail(INGEST_MSG_DICT_WANT, id0, sizeof(id0), INGEST_ECORRUPT, "DICT_WANT: dictionary id 0");
    const uint8_t longmsg[] = { 1, 0, 0, 0, 2, 0x01, 0x04, 'a' };
    expect_fail(INGEST_MSG_DICT_WANT, longmsg, sizeof(longmsg), INGEST_ECORRUPT, "message length 1025 exceeds 1024");
    const uint8_t nul[] = { 1, 0, 0, 0, 2, 2, 0, 'a', 0 };
    expect_fail(INGEST_MSG_DICT_WANT, nul, sizeof(nul), INGEST_ECORRUPT, "contains a NUL");
    m.u.dict_want.message[0] = '\0';
    m.u.dict_want.answer = 3;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);
    m.u.dict_want.answer = 0;
    m.u.dict_want.dict_id = 0;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);
}

static void test_dict_data(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t data[64], buf[128];
    for (int i = 0; i < 64; i++)
        data[i] = (uint8_t)(i ^ 0x5A);
    assert_int_equal(INGEST_MSG_DICT_DATA, 15);
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_DICT_DATA;
    m.u.dict_data.dict_id = 40000;
    m.u.dict_data.offset = 1048576;
    m.u.dict_data.data = data;
    m.u.dict_data.len = sizeof(data);
    assert_int_equal(round_trip(&m, &r, buf, sizeof(buf)), 8 + 64);
    const uint8_t golden[8] = { 0x40, 0x9C, 0, 0, 0, 0, 0x10, 0 };
    assert_memory_equal(buf, golden, 8);
    assert_int_equal(r.u.dict_data.dict_id, 40000);
    assert_int_equal(r.u.dict_data.offset, 1048576);
    assert_int_equal(r.u.dict_data.len, 64);
    assert_memory_equal(r.u.dict_data.data, data, 64);
    assert_ptr_equal(r.u.dict_data.data, buf + 8); /* a view, never a copy */
    /* The head alone is id and offset; the bytes travel from their own buffer. */
    size_t hl;
    assert_int_equal(ingest_wire_encode_head(ctx, &m, buf, sizeof(buf), &hl), 0);
    assert_int_equal(hl, 8);
    /* Every truncation: the fixed fields, then no bytes at all. */
    for (size_t k = 0; k < 8; k++)
        expect_fail(INGEST_MSG_DICT_DATA, buf, k, INGEST_ECORRUPT, k < 4 ? "truncated at dictionary id" : "truncated at offset");
    expect_fail(INGEST_MSG_DICT_DATA, buf, 8, INGEST_ECORRUPT, "no dictionary bytes");
    /* Bounds: id 0; a slice ending past 4 MiB (an offset at the bound, a slice one byte too long). */
    uint8_t b[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3 };
    expect_fail(INGEST_MSG_DICT_DATA, b, 11, INGEST_ECORRUPT, "dictionary id 0 (offset 0)");
    b[0] = 1;
    put_u32(b + 4, INGEST_WIRE_DICT_MAX);
    expect_fail(INGEST_MSG_DICT_DATA, b, 9, INGEST_ECORRUPT, "end past 4194304");
    put_u32(b + 4, INGEST_WIRE_DICT_MAX - 2);
    expect_fail(INGEST_MSG_DICT_DATA, b, 11, INGEST_ECORRUPT, "3 bytes at dictionary offset 4194302 end past");
    assert_int_equal(ingest_wire_decode(ctx, INGEST_MSG_DICT_DATA, b, 10, &r), 0);
    assert_int_equal(r.u.dict_data.len, 2);
    /* The encoder refuses the same, and empty slices. */
    m.u.dict_data.offset = INGEST_WIRE_DICT_MAX - 63;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);
    assert_int_equal(ingest_wire_encoded_size(&m), 0);
    m.u.dict_data.offset = 0;
    m.u.dict_data.len = 0;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);
    m.u.dict_data.len = 64;
    m.u.dict_data.dict_id = 0;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);
    m.u.dict_data.dict_id = 1;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, 71, &(size_t){ 0 }), INGEST_ETOOBIG);
    /* A slice as large as the frame bound decodes (the codec's bound is the dictionary's). */
    const size_t big = INGEST_WIRE_DICT_MAX;
    uint8_t *p = malloc(8 + big);
    assert_non_null(p);
    memset(p, 0xAB, 8 + big);
    put_u32(p, 7);
    put_u32(p + 4, 0);
    assert_int_equal(ingest_wire_decode(ctx, INGEST_MSG_DICT_DATA, p, 8 + big, &r), 0);
    assert_int_equal(r.u.dict_data.len, big);
    expect_fail(INGEST_MSG_DICT_DATA, p, 8 + big + 1, INGEST_ECORRUPT, "end past");
    free(p);
}

/* LANDING: golden layout, bounds both ways. */
static void test_landing(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t buf[1400];
    assert_int_equal(INGEST_MSG_LANDING, 17);
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_LANDING;
    m.u.landing.path_max = 4095;
    m.u.landing.name_max = 255;
    strcpy(m.u.landing.layout, "{device}/{yyyy}/{path}");
    const size_t len = round_trip(&m, &r, buf, sizeof(buf));
    assert_int_equal(len, 4 + 4 + 2 + strlen(m.u.landing.layout));
    assert_int_equal(buf[0], 0xff); /* little-endian 4095 */
    assert_int_equal(buf[1], 0x0f);
    assert_int_equal(buf[4], 255);
    assert_int_equal(buf[8], (uint8_t)strlen(m.u.landing.layout));
    assert_int_equal(r.u.landing.path_max, 4095);
    assert_int_equal(r.u.landing.name_max, 255);
    assert_string_equal(r.u.landing.layout, m.u.landing.layout);
    /* the encoder refuses what the decoder would */
    size_t n = 0;
    m.u.landing.path_max = 4096;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &n), INGEST_EINVAL);
    m.u.landing.path_max = 4095;
    m.u.landing.name_max = 0;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &n), INGEST_EINVAL);
    m.u.landing.name_max = 255;
    m.u.landing.layout[0] = '\0';
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &n), INGEST_EINVAL);
    strcpy(m.u.landing.layout, "{path}");
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &n), 0);
    uint8_t bad[1400];
    memcpy(bad, buf, n);
    bad[0] = 0x00;
    bad[1] = 0x10; /* 4096 */
    expect_fail(INGEST_MSG_LANDING, bad, n, INGEST_ECORRUPT, "path max 4096 outside 1..4095 (offset 0)");
    memcpy(bad, buf, n);
    bad[4] = 0;
    expect_fail(INGEST_MSG_LANDING, bad, n, INGEST_ECORRUPT, "name max 0 outside 1..255 (offset 4)");
    memcpy(bad, buf, n);
    bad[8] = 0;
    expect_fail(INGEST_MSG_LANDING, bad, 10, INGEST_ECORRUPT, "empty layout (offset 8)");
    memcpy(bad, buf, n);
    bad[8] = 0x01;
    bad[9] = 0x04; /* 1025 bytes */
    expect_fail(INGEST_MSG_LANDING, bad, n, INGEST_ECORRUPT, "exceeds 1024");
    memcpy(bad, buf, n);
    bad[10] = 0;
    expect_fail(INGEST_MSG_LANDING, bad, n, INGEST_ECORRUPT, "contains a NUL byte");
    expect_fail(INGEST_MSG_LANDING, buf, n - 1, INGEST_ECORRUPT, "layout");
}

/* FILE_REFUSED: golden layout, bounds, and a non-negative code or an empty message refused both ways. */
static void test_file_refused(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t buf[1400];
    assert_int_equal(INGEST_MSG_FILE_REFUSED, 16);
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_FILE_REFUSED;
    strcpy(m.u.refused.batch_id, "b-7");
    m.u.refused.file_index = 0x01020304;
    m.u.refused.code = INGEST_EEXIST;
    strcpy(m.u.refused.message, "file a\nb: a directory is there");
    const size_t len = round_trip(&m, &r, buf, sizeof(buf));
    assert_int_equal(len, 2 + 3 + 4 + 4 + 2 + strlen(m.u.refused.message));
    assert_int_equal(buf[0], 3);
    assert_memory_equal(buf + 2, "b-7", 3);
    assert_int_equal(buf[5], 0x04); /* little-endian file index */
    assert_int_equal(buf[8], 0x01);
    assert_int_equal(r.u.refused.file_index, 0x01020304);
    assert_int_equal(r.u.refused.code, INGEST_EEXIST);
    assert_string_equal(r.u.refused.message, m.u.refused.message);
    /* the encoder refuses what the decoder would */
    size_t n = 0;
    m.u.refused.code = 0;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &n), INGEST_EINVAL);
    m.u.refused.code = INGEST_EEXIST;
    m.u.refused.message[0] = '\0';
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &n), INGEST_EINVAL);
    /* decoder: a code of 0, an empty message, a message past 1024 bytes */
    strcpy(m.u.refused.message, "x");
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &n), 0);
    uint8_t bad[1400];
    memcpy(bad, buf, n);
    memset(bad + 9, 0, 4);
    expect_fail(INGEST_MSG_FILE_REFUSED, bad, n, INGEST_ECORRUPT, "code 0 is not negative (offset 9)");
    memcpy(bad, buf, n);
    bad[13] = 0;
    expect_fail(INGEST_MSG_FILE_REFUSED, bad, n - 1, INGEST_ECORRUPT, "empty message (offset 13)");
    memcpy(bad, buf, n);
    bad[13] = 0x01;
    bad[14] = 0x04; /* 1025 bytes */
    expect_fail(INGEST_MSG_FILE_REFUSED, bad, n, INGEST_ECORRUPT, "exceeds 1024");
}

/* FILE_WITHDRAWN: FILE_REFUSED's layout under its own type; the same bounds, named by its own name. */
static void test_file_withdrawn(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    uint8_t buf[1400];
    assert_int_equal(INGEST_MSG_FILE_WITHDRAWN, 18);
    assert_string_equal(ingest_wire_type_name(INGEST_MSG_FILE_WITHDRAWN), "FILE_WITHDRAWN");
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_FILE_WITHDRAWN;
    strcpy(m.u.withdrawn.batch_id, "b-7");
    m.u.withdrawn.file_index = 3;
    m.u.withdrawn.code = INGEST_ENOTFOUND;
    strcpy(m.u.withdrawn.message, "vanished at the edge");
    const size_t len = round_trip(&m, &r, buf, sizeof(buf));
    assert_int_equal(len, 2 + 3 + 4 + 4 + 2 + strlen(m.u.withdrawn.message));
    assert_int_equal(r.type, INGEST_MSG_FILE_WITHDRAWN);
    assert_int_equal(r.u.withdrawn.file_index, 3);
    assert_int_equal(r.u.withdrawn.code, INGEST_ENOTFOUND);
    assert_string_equal(r.u.withdrawn.message, m.u.withdrawn.message);
    size_t n = 0;
    m.u.withdrawn.code = 1;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &n), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "FILE_WITHDRAWN"));
    m.u.withdrawn.code = INGEST_ENOTFOUND;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &n), 0);
    uint8_t bad[1400];
    memcpy(bad, buf, n);
    memset(bad + 9, 0, 4);
    expect_fail(INGEST_MSG_FILE_WITHDRAWN, bad, n, INGEST_ECORRUPT, "FILE_WITHDRAWN: code 0 is not negative (offset 9)");
    memcpy(bad, buf, n);
    bad[13] = 0;
    expect_fail(INGEST_MSG_FILE_WITHDRAWN, bad, n - (n - 15), INGEST_ECORRUPT, "FILE_WITHDRAWN: empty message (offset 13)");
}

/* Set the u32 at p + at to v: decoding p[0, n) as type fails naming detail. */
static void expect_u32_fail(unsigned type, uint8_t *p, size_t n, size_t at, uint32_t v, const char *detail)
{
    put_u32(p + at, v);
    expect_fail(type, p, n, INGEST_ECORRUPT, detail);
}

/* DELTA_BASE and CHUNK_DELTA (delta chunks): golden bytes, round trips, bounds both ways. */
static void test_delta(void **state)
{
    (void)state;
    ingest_wire_msg m, r;
    static uint8_t buf[64 * 1024 + 64], hashes[64 * 1024 + 8];
    assert_int_equal(INGEST_MSG_DELTA_BASE, 19);
    assert_int_equal(INGEST_MSG_CHUNK_DELTA, 20);
    assert_string_equal(ingest_wire_type_name(INGEST_MSG_DELTA_BASE), "DELTA_BASE");
    assert_string_equal(ingest_wire_type_name(INGEST_MSG_CHUNK_DELTA), "CHUNK_DELTA");
    for (size_t i = 0; i < sizeof(hashes); i++)
        hashes[i] = (uint8_t)(i * 7);
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_DELTA_BASE;
    m.u.delta_base.index = 5;
    m.u.delta_base.base_len = 2049; /* three blocks, the last of 1 byte */
    for (int i = 0; i < 16; i++)
        m.u.delta_base.key[i] = (uint8_t)(0xA0 + i);
    m.u.delta_base.hashes = hashes;
    size_t len = round_trip(&m, &r, buf, sizeof(buf));
    assert_int_equal(len, 4 + 4 + 16 + 3 * 8);
    const uint8_t golden[9] = { 5, 0, 0, 0, 0x01, 0x08, 0, 0, 0xA0 };
    assert_memory_equal(buf, golden, sizeof(golden));
    assert_int_equal(r.u.delta_base.index, 5);
    assert_int_equal(r.u.delta_base.base_len, 2049);
    assert_memory_equal(r.u.delta_base.key, m.u.delta_base.key, 16);
    assert_memory_equal(r.u.delta_base.hashes, hashes, 24);
    /* the hashes must be exactly the base's blocks: one short, one over */
    expect_fail(INGEST_MSG_DELTA_BASE, buf, len - 1, INGEST_ECORRUPT, "a base of 2049 bytes has 24 hash bytes, 23 present");
    buf[len] = 0;
    expect_fail(INGEST_MSG_DELTA_BASE, buf, len + 1, INGEST_ECORRUPT, "25 present (offset 24)");
    /* the length field is bounded before the hashes are looked at */
    uint8_t bad[64];
    memcpy(bad, buf, 24);
    expect_u32_fail(INGEST_MSG_DELTA_BASE, bad, 24, 4, 0, "base length 0 outside 1..");
    expect_u32_fail(INGEST_MSG_DELTA_BASE, bad, 24, 4, INGEST_WIRE_DELTA_MAX + 1, "base length 67108865 outside");
    expect_u32_fail(INGEST_MSG_DELTA_BASE, bad, 20, 4, 2049, "truncated at key");
    /* the largest base fits a default frame */
    m.u.delta_base.base_len = INGEST_WIRE_DELTA_MAX;
    assert_int_equal(ingest_wire_encoded_size(&m), 24 + (size_t)INGEST_WIRE_DELTA_MAX_BLOCKS * 8);
    assert_true(ingest_wire_encoded_size(&m) <= INGEST_WIRE_MAX_PAYLOAD);
    size_t n = 0;
    m.u.delta_base.base_len = INGEST_WIRE_DELTA_MAX + 1;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &n), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "DELTA_BASE"));
    m.u.delta_base.base_len = 0;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &n), INGEST_EINVAL);

    /* CHUNK_DELTA: 10 blocks, blocks 0 and 9 copied, literal bytes after the map */
    const uint8_t map[2] = { 0x01, 0x02 }, lit[5] = { 1, 2, 3, 4, 5 };
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_CHUNK_DELTA;
    m.u.delta.index = 9;
    m.u.delta.nblocks = 10;
    m.u.delta.map = map;
    m.u.delta.data = lit;
    m.u.delta.len = sizeof(lit);
    len = round_trip(&m, &r, buf, sizeof(buf));
    assert_int_equal(len, 4 + 4 + 2 + 5);
    const uint8_t golden2[10] = { 9, 0, 0, 0, 10, 0, 0, 0, 0x01, 0x02 };
    assert_memory_equal(buf, golden2, sizeof(golden2));
    assert_int_equal(r.u.delta.index, 9);
    assert_int_equal(r.u.delta.nblocks, 10);
    assert_memory_equal(r.u.delta.map, map, 2);
    assert_int_equal(r.u.delta.len, 5);
    assert_memory_equal(r.u.delta.data, lit, 5);
    size_t hl = 0;
    assert_int_equal(ingest_wire_encode_head(ctx, &m, buf, sizeof(buf), &hl), 0);
    assert_int_equal(hl, 8);
    /* every block copied: no literal bytes at all */
    const uint8_t all[2] = { 0xff, 0x03 };
    m.u.delta.map = all;
    m.u.delta.data = NULL;
    m.u.delta.len = 0;
    len = round_trip(&m, &r, buf, sizeof(buf));
    assert_int_equal(len, 10);
    assert_int_equal(r.u.delta.len, 0);
    /* bits past the last block, both ways */
    const uint8_t over[2] = { 0x00, 0x04 };
    m.u.delta.map = over;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &n), INGEST_EINVAL);
    memcpy(bad, golden2, 8);
    memcpy(bad + 8, over, 2);
    expect_fail(INGEST_MSG_CHUNK_DELTA, bad, 10, INGEST_ECORRUPT, "map bits set past block 10 (offset 9)");
    /* the block count is bounded, and the map must be there */
    expect_u32_fail(INGEST_MSG_CHUNK_DELTA, bad, 10, 4, 0, "block count 0 outside 1..65536");
    expect_u32_fail(INGEST_MSG_CHUNK_DELTA, bad, 10, 4, INGEST_WIRE_DELTA_MAX_BLOCKS + 1, "block count 65537 outside");
    expect_u32_fail(INGEST_MSG_CHUNK_DELTA, bad, 10, 4, 17, "truncated at block map");
    m.u.delta.nblocks = INGEST_WIRE_DELTA_MAX_BLOCKS + 1;
    m.u.delta.map = all;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &n), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "CHUNK_DELTA"));
}

static void test_unknown_types(void **state)
{
    (void)state;
    ingest_wire_msg m;
    uint8_t buf[16] = { 0 };
    expect_fail(0, buf, 8, INGEST_EPROTO, "unknown message type 0");
    expect_fail(200, buf, 8, INGEST_EPROTO, "unknown message type 200");
    expect_fail(22, buf, 8, INGEST_EPROTO, "unknown message type 22");
    expect_fail(255, buf, 8, INGEST_EPROTO, NULL);
    memset(&m, 0, sizeof(m));
    m.type = 42;
    assert_int_equal(ingest_wire_encode(ctx, &m, buf, sizeof(buf), &(size_t){ 0 }), INGEST_EINVAL);
    assert_int_equal(ingest_wire_encoded_size(&m), 0);
}

static void test_id_rule(void **state)
{
    (void)state;
    assert_true(ingest_wire_id_valid("a", 1));
    assert_true(ingest_wire_id_valid("Pump-7.north_2-x", 16));
    /* one rule with manifests and landing: no ':' (a device id becomes a path component) */
    assert_false(ingest_wire_id_valid("Pump-7.north:2", 14));
    assert_false(ingest_wire_id_valid("", 0));
    assert_false(ingest_wire_id_valid(".", 1));
    assert_false(ingest_wire_id_valid("..", 2));
    assert_false(ingest_wire_id_valid("-x", 2));
    assert_false(ingest_wire_id_valid("a/b", 3));
    assert_false(ingest_wire_id_valid("a b", 3));
    assert_false(ingest_wire_id_valid("a\0b", 3));
    char big[130];
    memset(big, 'a', sizeof(big));
    assert_true(ingest_wire_id_valid(big, 128));
    assert_false(ingest_wire_id_valid(big, 129));
}

/* Random bytes for every type: never crashes, never succeeds with junk. */
static void test_random_payloads(void **state)
{
    (void)state;
    uint8_t buf[300];
    unsigned seed = 12345;
    const char *quick = getenv("INGEST_TEST_QUICK");
    const int rounds = (quick != NULL && strcmp(quick, "1") == 0) ? 2000 : 50000;
    int ok = 0;
    for (int i = 0; i < rounds; i++) {
        const size_t n = (size_t)(rand_r(&seed) % (int)sizeof(buf));
        for (size_t k = 0; k < n; k++)
            buf[k] = (uint8_t)rand_r(&seed);
        const unsigned type = (unsigned)(rand_r(&seed) % 22); /* 0 and 21 are unknown */
        ingest_wire_msg m;
        if (ingest_wire_decode(ctx, type, buf, n, &m) == 0) {
            ok++;
            /* Whatever decodes re-encodes to the same bytes. */
            uint8_t again[300];
            size_t l2;
            assert_int_equal(ingest_wire_encode(ctx, &m, again, sizeof(again), &l2), 0);
            assert_int_equal(l2, n);
            assert_memory_equal(again, buf, n);
        }
    }
    assert_true(ok > 0); /* MANIFEST_PART and CHUNK accept most inputs */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_batch_begin),
        cmocka_unit_test(test_manifest_messages),
        cmocka_unit_test(test_want),
        cmocka_unit_test(test_chunk),
        cmocka_unit_test(test_commit_ack_error_ping),
        cmocka_unit_test(test_received),
        cmocka_unit_test(test_dict_offer),
        cmocka_unit_test(test_dict_want),
        cmocka_unit_test(test_dict_data),
        cmocka_unit_test(test_file_refused),
        cmocka_unit_test(test_landing),
        cmocka_unit_test(test_file_withdrawn),
        cmocka_unit_test(test_delta),
        cmocka_unit_test(test_unknown_types),
        cmocka_unit_test(test_chunk_group),
        cmocka_unit_test(test_want_runs),
        cmocka_unit_test(test_chunk_run),
        cmocka_unit_test(test_id_rule),
        cmocka_unit_test(test_random_payloads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
