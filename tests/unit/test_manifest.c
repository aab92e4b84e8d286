/* Unit tests of the batch manifest reader and writer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <ingest.h>

#include "ingest/manifest.h"

#define H64 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HDR(files, bytes)                                                                              \
    "{\"type\":\"batch\",\"format\":2,\"device\":\"d\",\"batch\":\"b\",\"files\":" #files ",\"bytes\":" #bytes \
    ",\"created_ns\":1}\n"
#define FILE_REC(path, size, nchunks, chunks)                                                            \
    "{\"type\":\"file\",\"path\":\"" path "\",\"landed\":\"\",\"size\":" #size                              \
    ",\"mtime_ns\":0,\"mode\":420,\"version\":1,\"hash\":\"" H64 "\",\"nchunks\":" #nchunks ",\"chunks\":[" \
    chunks "]}\n"
#define FILE0(path) FILE_REC(path, 0, 0, "")

/* --- helpers -------------------------------------------------------------- */

typedef struct file_spec {
    const char *path;
    const char *landed;
    uint64_t size;
    int64_t mtime_ns;
    uint32_t mode;
    uint64_t version;
    uint8_t hash[INGEST_ID_BYTES];
    uint32_t nchunks;
    ingest_manifest_chunk *chunks;
} file_spec;

static void fill_id(uint8_t id[INGEST_ID_BYTES], uint32_t seed)
{
    for (int i = 0; i < INGEST_ID_BYTES; i++) {
        seed = seed * 1664525u + 1013904223u;
        id[i] = (uint8_t)(seed >> 24);
    }
}

static void make_chunks(file_spec *f, uint32_t n, uint32_t seed)
{
    f->nchunks = n;
    f->chunks = n ? calloc(n, sizeof(*f->chunks)) : NULL;
    f->size = 0;
    for (uint32_t i = 0; i < n; i++) {
        fill_id(f->chunks[i].id, seed + i);
        f->chunks[i].len = 1 + (seed * 7919u + i * 104729u) % (64u * 1024u * 1024u);
        f->size += f->chunks[i].len;
    }
    fill_id(f->hash, seed ^ 0x5a5a5a5au);
}

static ingest_manifest_rec header_rec(const char *device, const char *batch, uint64_t nfiles, uint64_t bytes)
{
    ingest_manifest_rec r;
    memset(&r, 0, sizeof(r));
    r.type = INGEST_MREC_HEADER;
    r.format = INGEST_MANIFEST_FORMAT;
    r.device = device;
    r.batch = batch;
    r.nfiles = nfiles;
    r.total_bytes = bytes;
    r.created_ns = 1795000000123456789LL;
    return r;
}

static ingest_manifest_rec file_rec(const file_spec *f)
{
    ingest_manifest_rec r;
    memset(&r, 0, sizeof(r));
    r.type = INGEST_MREC_FILE;
    r.path = f->path;
    r.landed = f->landed;
    r.size = f->size;
    r.mtime_ns = f->mtime_ns;
    r.mode = f->mode;
    r.version = f->version;
    memcpy(r.hash, f->hash, INGEST_ID_BYTES);
    r.chunks = f->chunks;
    r.nchunks = f->nchunks;
    r.nchunks_total = f->nchunks;
    return r;
}

/* Read all records of a reader and compare them with the header and files. */
static void check_read(ingest_manifest_reader *r, const ingest_manifest_rec *hdr, const file_spec *files,
                       size_t nfiles, unsigned *lines_out)
{
    ingest_manifest_rec rec;
    unsigned lines = 0;
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    lines++;
    assert_int_equal(rec.type, INGEST_MREC_HEADER);
    assert_int_equal(rec.format, 2);
    assert_string_equal(rec.device, hdr->device);
    assert_string_equal(rec.batch, hdr->batch);
    assert_true(rec.nfiles == hdr->nfiles);
    assert_true(rec.total_bytes == hdr->total_bytes);
    assert_true(rec.created_ns == hdr->created_ns);
    for (size_t i = 0; i < nfiles; i++) {
        const file_spec *f = &files[i];
        assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
        lines++;
        assert_int_equal(rec.type, INGEST_MREC_FILE);
        assert_int_equal(strlen(rec.path), strlen(f->path));
        assert_string_equal(rec.path, f->path);
        assert_string_equal(rec.landed, f->landed ? f->landed : "");
        assert_true(rec.size == f->size);
        assert_true(rec.mtime_ns == f->mtime_ns);
        assert_int_equal(rec.mode, f->mode);
        assert_true(rec.version == f->version);
        assert_memory_equal(rec.hash, f->hash, INGEST_ID_BYTES);
        assert_true(rec.nchunks_total == f->nchunks);
        uint32_t got = 0;
        for (;;) {
            assert_true(rec.nchunks <= INGEST_MANIFEST_CHUNKS_PER_LINE);
            assert_true(got + rec.nchunks <= f->nchunks);
            if (rec.nchunks)
                assert_memory_equal(rec.chunks, f->chunks + got, rec.nchunks * sizeof(*rec.chunks));
            got += rec.nchunks;
            if (got == f->nchunks)
                break;
            assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
            lines++;
            assert_int_equal(rec.type, INGEST_MREC_CHUNKS);
            assert_true(rec.nchunks > 0);
        }
    }
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 0);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 0);
    if (lines_out)
        *lines_out = lines;
}

static unsigned count_lines(const char *p, size_t len)
{
    unsigned n = 0;
    for (size_t i = 0; i < len; i++)
        n += p[i] == '\n';
    return n;
}

static char *write_temp(const void *data, size_t len)
{
    char *path = strdup("/tmp/test_manifest_XXXXXX");
    assert_non_null(path);
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    return path;
}

/* --- round trip ---------------------------------------------------------------- */

static void test_round_trip(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    assert_non_null(ctx);
    file_spec files[7];
    memset(files, 0, sizeof(files));
    files[0].path = "empty.txt"; /* 0 bytes */
    files[0].landed = "dev-01/2026/11/22/empty.txt";
    files[0].mode = 0100644;
    files[0].version = 1;
    make_chunks(&files[0], 0, 1);
    files[1].path = "logs/one-chunk.log";
    files[1].landed = "dev-01/2026/11/22/logs/one-chunk.log";
    files[1].mtime_ns = -5;
    files[1].mode = 0100600;
    files[1].version = 3;
    make_chunks(&files[1], 1, 2);
    files[2].path = "big/many-chunks.bin"; /* spans three lines */
    files[2].landed = "";
    files[2].mtime_ns = INT64_MAX;
    files[2].mode = UINT32_MAX;
    files[2].version = UINT64_MAX;
    make_chunks(&files[2], 3000, 3);
    files[3].path = "donn\xc3\xa9" "es/\xe6\x97\xa5\xe6\x9c\xac/\xf0\x9f\x98\x80.csv"; /* unicode */
    files[3].landed = "dev-01/2026/11/22/donn\xc3\xa9" "es/\xe6\x97\xa5\xe6\x9c\xac/\xf0\x9f\x98\x80.csv";
    files[3].mtime_ns = INT64_MIN;
    make_chunks(&files[3], 2, 4);
    files[4].path = "we\"ird\\na me/\t\x01\x1f\x7f\r\n.txt"; /* escapes */
    files[4].landed = NULL;
    make_chunks(&files[4], 5, 5);
    files[5].path = "raw/\xff\xfe\xc3(\xed\xa0\x80.bin"; /* not UTF-8 */
    files[5].landed = "x/\x80";
    make_chunks(&files[5], 1024, 6); /* exactly one full line */
    files[6].path = ".hidden/..dots/...";
    files[6].landed = "a/.b";
    make_chunks(&files[6], 1025, 7); /* one chunk on a continuation line */
    uint64_t total = 0;
    for (size_t i = 0; i < 7; i++)
        total += files[i].size;

    ingest_manifest_writer *w = NULL;
    assert_int_equal(ingest_manifest_writer_create(ctx, &w), 0);
    const ingest_manifest_rec hdr = header_rec("dev-01", "b0000042.x_y", 7, total);
    assert_int_equal(ingest_manifest_writer_add(w, &hdr), 0);
    size_t len;
    const char *data = ingest_manifest_writer_data(w, &len);
    const char want_hdr[] = "{\"type\":\"batch\",\"format\":2,\"device\":\"dev-01\",\"batch\":\"b0000042.x_y\","
                            "\"files\":7,\"bytes\":";
    assert_true(len > sizeof(want_hdr));
    assert_memory_equal(data, want_hdr, sizeof(want_hdr) - 1);
    assert_int_equal(ingest_manifest_writer_finish(w), INGEST_EINVAL); /* files missing */
    for (size_t i = 0; i < 7; i++) {
        const ingest_manifest_rec fr = file_rec(&files[i]);
        assert_int_equal(ingest_manifest_writer_add(w, &fr), 0);
    }
    assert_int_equal(ingest_manifest_writer_finish(w), 0);
    data = ingest_manifest_writer_data(w, &len);
    /* 1 header + 7 file lines + 2 (3000 chunks) + 1 (1025 chunks) continuation lines */
    assert_int_equal(count_lines(data, len), 11);
    assert_int_equal(data[len - 1], '\n');
    /* The path with control characters is escaped, and the invalid UTF-8 too. */
    assert_non_null(memmem(data, len, "\"we\\\"ird\\\\na me/\\t\\u0001\\u001f\x7f\\r\\n.txt\"", 37));
    assert_non_null(memmem(data, len, "\"raw/\\udcff\\udcfe\\udcc3(\\udced\\udca0\\udc80.bin\"", 47));

    ingest_manifest_reader *r = NULL;
    unsigned lines = 0;
    assert_int_equal(ingest_manifest_reader_mem(ctx, data, len, &r), 0);
    check_read(r, &hdr, files, 7, &lines);
    assert_int_equal(lines, 11);
    ingest_manifest_reader_close(r);

    /* The same through the file reader, and without the final newline. */
    char *path = write_temp(data, len);
    assert_int_equal(ingest_manifest_reader_open(ctx, path, &r), 0);
    check_read(r, &hdr, files, 7, NULL);
    ingest_manifest_reader_close(r);
    assert_int_equal(truncate(path, (off_t)len - 1), 0);
    assert_int_equal(ingest_manifest_reader_open(ctx, path, &r), 0);
    check_read(r, &hdr, files, 7, NULL);
    ingest_manifest_reader_close(r);
    assert_int_equal(ingest_manifest_reader_mem(ctx, data, len - 1, &r), 0);
    check_read(r, &hdr, files, 7, NULL);
    ingest_manifest_reader_close(r);
    unlink(path);
    free(path);

    /* Flushing with reset between records gives the same bytes. */
    char *whole = malloc(len);
    assert_non_null(whole);
    memcpy(whole, data, len);
    ingest_manifest_writer *w2 = NULL;
    assert_int_equal(ingest_manifest_writer_create(ctx, &w2), 0);
    size_t off = 0, part;
    assert_int_equal(ingest_manifest_writer_add(w2, &hdr), 0);
    for (size_t i = 0; i <= 7; i++) {
        const char *p = ingest_manifest_writer_data(w2, &part);
        assert_true(off + part <= len);
        assert_memory_equal(p, whole + off, part);
        off += part;
        ingest_manifest_writer_reset(w2);
        if (i < 7) {
            const ingest_manifest_rec fr = file_rec(&files[i]);
            assert_int_equal(ingest_manifest_writer_add(w2, &fr), 0);
        }
    }
    assert_int_equal(off, len);
    assert_int_equal(ingest_manifest_writer_finish(w2), 0);
    ingest_manifest_writer_destroy(w2);
    free(whole);

    ingest_manifest_writer_destroy(w);
    for (size_t i = 0; i < 7; i++)
        free(files[i].chunks);
    ingest_ctx_destroy(ctx);
}

/* A wire manifest may leave "hash" out: only a reader told so accepts it. */
static void test_hash_omitted(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    assert_non_null(ctx);
    file_spec f;
    memset(&f, 0, sizeof(f));
    f.path = "ev/1.json";
    f.landed = "";
    f.mode = 0100644;
    make_chunks(&f, 2, 9);
    ingest_manifest_writer *w = NULL;
    assert_int_equal(ingest_manifest_writer_create(ctx, &w), 0);
    const ingest_manifest_rec hdr = header_rec("dev-01", "b1", 1, f.size);
    assert_int_equal(ingest_manifest_writer_add(w, &hdr), 0);
    ingest_manifest_rec fr = file_rec(&f);
    fr.omit_hash = 1;
    assert_int_equal(ingest_manifest_writer_add(w, &fr), 0);
    assert_int_equal(ingest_manifest_writer_finish(w), 0);
    size_t len;
    const char *data = ingest_manifest_writer_data(w, &len);
    assert_null(memmem(data, len, "\"hash\"", 6));
    ingest_manifest_reader *r = NULL;
    ingest_manifest_rec rec;
    /* By default a file record without "hash" is refused, naming the key and line. */
    assert_int_equal(ingest_manifest_reader_mem(ctx, data, len, &r), 0);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), ":2:1: missing key \"hash\""));
    ingest_manifest_reader_close(r);
    /* With INGEST_MANIFEST_READ_HASH_OPTIONAL it reads, marked omitted, everything else intact. */
    assert_int_equal(ingest_manifest_reader_mem(ctx, data, len, &r), 0);
    ingest_manifest_reader_set_flags(r, INGEST_MANIFEST_READ_HASH_OPTIONAL);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(rec.omit_hash, 0);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(rec.type, INGEST_MREC_FILE);
    assert_int_equal(rec.omit_hash, 1);
    const uint8_t zero[INGEST_ID_BYTES] = { 0 };
    assert_memory_equal(rec.hash, zero, INGEST_ID_BYTES);
    assert_int_equal(rec.nchunks, 2);
    assert_memory_equal(rec.chunks, f.chunks, 2 * sizeof(*f.chunks));
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 0);
    ingest_manifest_reader_close(r);
    /* A record that has the hash reads as before with the flag set. */
    ingest_manifest_writer_destroy(w);
    assert_int_equal(ingest_manifest_writer_create(ctx, &w), 0);
    assert_int_equal(ingest_manifest_writer_add(w, &hdr), 0);
    fr.omit_hash = 0;
    assert_int_equal(ingest_manifest_writer_add(w, &fr), 0);
    data = ingest_manifest_writer_data(w, &len);
    assert_int_equal(ingest_manifest_reader_mem(ctx, data, len, &r), 0);
    ingest_manifest_reader_set_flags(r, INGEST_MANIFEST_READ_HASH_OPTIONAL);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(rec.omit_hash, 0);
    assert_memory_equal(rec.hash, fr.hash, INGEST_ID_BYTES);
    ingest_manifest_reader_close(r);
    ingest_manifest_writer_destroy(w);
    free(f.chunks);
    ingest_ctx_destroy(ctx);
}

/*
 * Pushed chunks (docs/manifest.md, "On the wire"): with push_max the
 * writer lists the chunks of at most that length as [length]; only a
 * reader with INGEST_MANIFEST_READ_ID_OPTIONAL takes them (all-zero id,
 * counted in npushed).  The header's "digest" round-trips.
 */
static void test_chunks_pushed(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    assert_non_null(ctx);
    file_spec f;
    memset(&f, 0, sizeof(f));
    f.path = "ev/1.json";
    f.landed = "";
    f.mode = 0100644;
    make_chunks(&f, 3, 11);
    uint32_t longest = 0;
    for (uint32_t i = 0; i < 3; i++)
        longest = f.chunks[i].len > longest ? f.chunks[i].len : longest;
    ingest_manifest_writer *w = NULL;
    assert_int_equal(ingest_manifest_writer_create(ctx, &w), 0);
    ingest_manifest_rec hdr = header_rec("dev-01", "b1", 1, f.size);
    hdr.has_digest = 1;
    fill_id(hdr.digest, 77);
    assert_int_equal(ingest_manifest_writer_add(w, &hdr), 0);
    ingest_manifest_rec fr = file_rec(&f);
    fr.omit_hash = 1;
    fr.push_max = longest;
    assert_int_equal(ingest_manifest_writer_add(w, &fr), 0);
    size_t len;
    const char *data = ingest_manifest_writer_data(w, &len);
    char hex[2 * INGEST_ID_BYTES + 1], want[32];
    ingest_to_hex(f.chunks[0].id, INGEST_ID_BYTES, hex);
    assert_null(memmem(data, len, hex, 2 * INGEST_ID_BYTES));
    snprintf(want, sizeof want, "[[%u],[", f.chunks[0].len);
    assert_non_null(memmem(data, len, want, strlen(want)));
    assert_non_null(memmem(data, len, "\"digest\":\"", 10));
    ingest_manifest_reader *r = NULL;
    ingest_manifest_rec rec;
    /* Without the flag: refused, naming the form expected. */
    assert_int_equal(ingest_manifest_reader_mem(ctx, data, len, &r), 0);
    ingest_manifest_reader_set_flags(r, INGEST_MANIFEST_READ_HASH_OPTIONAL);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(rec.has_digest, 1);
    assert_memory_equal(rec.digest, hdr.digest, INGEST_ID_BYTES);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "a chunk must be [\"64 hex digits\", length]"));
    ingest_manifest_reader_close(r);
    /* With it: zero ids, the lengths, npushed. */
    assert_int_equal(ingest_manifest_reader_mem(ctx, data, len, &r), 0);
    ingest_manifest_reader_set_flags(r, INGEST_MANIFEST_READ_HASH_OPTIONAL | INGEST_MANIFEST_READ_ID_OPTIONAL);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(rec.nchunks, 3);
    assert_int_equal(rec.npushed, 3);
    const uint8_t zero[INGEST_ID_BYTES] = { 0 };
    for (uint32_t i = 0; i < 3; i++) {
        assert_memory_equal(rec.chunks[i].id, zero, INGEST_ID_BYTES);
        assert_int_equal(rec.chunks[i].len, f.chunks[i].len);
    }
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 0);
    ingest_manifest_reader_close(r);
    ingest_manifest_writer_destroy(w);
    /* push_max below a chunk's length: that chunk keeps its id; a header without digest reads so. */
    assert_int_equal(ingest_manifest_writer_create(ctx, &w), 0);
    hdr.has_digest = 0;
    assert_int_equal(ingest_manifest_writer_add(w, &hdr), 0);
    fr.push_max = f.chunks[1].len - 1;
    assert_int_equal(ingest_manifest_writer_add(w, &fr), 0);
    data = ingest_manifest_writer_data(w, &len);
    assert_null(memmem(data, len, "\"digest\"", 8));
    assert_int_equal(ingest_manifest_reader_mem(ctx, data, len, &r), 0);
    ingest_manifest_reader_set_flags(r, INGEST_MANIFEST_READ_HASH_OPTIONAL | INGEST_MANIFEST_READ_ID_OPTIONAL);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(rec.has_digest, 0);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    uint32_t pushed = 0;
    for (uint32_t i = 0; i < 3; i++) {
        const int is_pushed = f.chunks[i].len <= fr.push_max;
        pushed += (uint32_t)is_pushed;
        assert_memory_equal(rec.chunks[i].id, is_pushed ? zero : f.chunks[i].id, INGEST_ID_BYTES);
    }
    assert_int_equal(rec.npushed, pushed);
    assert_true(pushed > 0 && pushed < 3);
    ingest_manifest_reader_close(r);
    ingest_manifest_writer_destroy(w);
    /* Malformed pushed chunks, and a bad digest, each named. */
    static const struct {
        const char *chunks, *digest, *what;
    } bad[] = {
        { "[[]]", "", "a chunk must be [\"64 hex digits\", length] or [length]" },
        { "[[\"x\"]]", "", "a chunk must be [\"64 hex digits\", length] or [length]" },
        { "[[0]]", "", "chunk length must be 1..67108864" },
        { "[[5,5]]", "", "a chunk must be [\"64 hex digits\", length] or [length]" },
        { "[[5]]", ",\"digest\":\"00\"", "expected exactly 64 hex digits" },
        { "[[5]]", ",\"digest\":5", "expected a string of 64 hex digits" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char m[512];
        snprintf(m, sizeof m,
                 "{\"type\":\"batch\",\"format\":2,\"device\":\"d\",\"batch\":\"b\",\"files\":1,\"bytes\":5,"
                 "\"created_ns\":1%s}\n{\"type\":\"file\",\"path\":\"a\",\"landed\":\"\",\"size\":5,\"mtime_ns\":1,"
                 "\"mode\":33188,\"version\":0,\"nchunks\":1,\"chunks\":%s}\n",
                 bad[i].digest, bad[i].chunks);
        assert_int_equal(ingest_manifest_reader_mem(ctx, m, strlen(m), &r), 0);
        ingest_manifest_reader_set_flags(r, INGEST_MANIFEST_READ_HASH_OPTIONAL | INGEST_MANIFEST_READ_ID_OPTIONAL);
        int rc = ingest_manifest_reader_next(r, &rec);
        if (rc == 1)
            rc = ingest_manifest_reader_next(r, &rec);
        if (rc != INGEST_ECORRUPT || strstr(ingest_ctx_errmsg(ctx), bad[i].what) == NULL)
            fail_msg("case %zu: %d (%s), expected \"%s\"", i, rc, ingest_ctx_errmsg(ctx), bad[i].what);
        ingest_manifest_reader_close(r);
    }
    /* The digest: path and hash of each file, in order; any change changes it. */
    uint8_t k[INGEST_KEY_BYTES], h1[INGEST_ID_BYTES], h2[INGEST_ID_BYTES], d[3][INGEST_ID_BYTES];
    memset(k, 7, sizeof k);
    fill_id(h1, 1);
    fill_id(h2, 2);
    const char *paths[3][2] = { { "a", "b" }, { "b", "a" }, { "a", "c" } };
    for (int i = 0; i < 3; i++) {
        ingest_filehash dg;
        ingest_filehash_init(&dg, k);
        ingest_manifest_digest_add(&dg, paths[i][0], h1);
        ingest_manifest_digest_add(&dg, paths[i][1], h2);
        ingest_filehash_final(&dg, d[i]);
    }
    assert_memory_not_equal(d[0], d[1], INGEST_ID_BYTES);
    assert_memory_not_equal(d[0], d[2], INGEST_ID_BYTES);
    free(f.chunks);
    ingest_ctx_destroy(ctx);
}

/* A file the core refused: "refused" round-trips; it needs landed "" and version 0, and a reason of 1..1024 bytes. */
static void test_refused_record(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    assert_non_null(ctx);
    file_spec f;
    memset(&f, 0, sizeof(f));
    f.path = "deep/x.bin";
    f.landed = "";
    f.mode = 0100644;
    make_chunks(&f, 1, 5);
    ingest_manifest_writer *w = NULL;
    assert_int_equal(ingest_manifest_writer_create(ctx, &w), 0);
    const ingest_manifest_rec hdr = header_rec("dev-01", "b1", 1, f.size);
    assert_int_equal(ingest_manifest_writer_add(w, &hdr), 0);
    ingest_manifest_rec fr = file_rec(&f);
    fr.refused = "file deep/x.bin: a directory is there\n(quoted \"so\")";
    assert_int_equal(ingest_manifest_writer_add(w, &fr), 0);
    size_t len;
    const char *data = ingest_manifest_writer_data(w, &len);
    ingest_manifest_reader *r = NULL;
    ingest_manifest_rec rec;
    assert_int_equal(ingest_manifest_reader_mem(ctx, data, len, &r), 0);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_null(rec.refused);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_string_equal(rec.refused, fr.refused);
    assert_string_equal(rec.landed, "");
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 0);
    ingest_manifest_reader_close(r);
    ingest_manifest_writer_destroy(w);
    /* the writer refuses a refusal with a landed path, a version or no reason */
    const char *bad_why[] = { "", NULL };
    for (int k = 0; k < 3; k++) {
        assert_int_equal(ingest_manifest_writer_create(ctx, &w), 0);
        assert_int_equal(ingest_manifest_writer_add(w, &hdr), 0);
        ingest_manifest_rec b2 = fr;
        if (k == 0)
            b2.refused = bad_why[0];
        else if (k == 1)
            b2.landed = "dev-01/deep/x.bin";
        else
            b2.version = 3;
        assert_int_equal(ingest_manifest_writer_add(w, &b2), INGEST_EINVAL);
        assert_non_null(strstr(ingest_ctx_errmsg(ctx), "a refused file needs"));
        ingest_manifest_writer_destroy(w);
    }
    /* the reader refuses the same, naming the key */
    static const char *const bad[] = {
        "\"refused\":\"\"", "\"refused\":7",
    };
    for (size_t k = 0; k < 2; k++) {
        char m[1024];
        snprintf(m, sizeof(m),
                 "{\"type\":\"batch\",\"format\":2,\"device\":\"d\",\"batch\":\"b\",\"files\":1,\"bytes\":0,\"created_ns\":1}\n"
                 "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"\",\"size\":0,\"mtime_ns\":0,\"mode\":0,\"version\":0,"
                 "\"hash\":\"%064d\",\"nchunks\":0,\"chunks\":[],%s}\n",
                 0, bad[k]);
        assert_int_equal(ingest_manifest_reader_mem(ctx, m, strlen(m), &r), 0);
        assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
        assert_int_equal(ingest_manifest_reader_next(r, &rec), INGEST_ECORRUPT);
        assert_non_null(strstr(ingest_ctx_errmsg(ctx), "refused"));
        ingest_manifest_reader_close(r);
    }
    char m[1024];
    snprintf(m, sizeof(m),
             "{\"type\":\"batch\",\"format\":2,\"device\":\"d\",\"batch\":\"b\",\"files\":1,\"bytes\":0,\"created_ns\":1}\n"
             "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"d/a\",\"size\":0,\"mtime_ns\":0,\"mode\":0,\"version\":1,"
             "\"hash\":\"%064d\",\"nchunks\":0,\"chunks\":[],\"refused\":\"why\"}\n",
             0);
    assert_int_equal(ingest_manifest_reader_mem(ctx, m, strlen(m), &r), 0);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "a refused file has landed \"\" and version 0"));
    ingest_manifest_reader_close(r);
    free(f.chunks);
    ingest_ctx_destroy(ctx);
}

/* Keys in any order, unknown keys ignored, CRLF and spaces tolerated. */
static void test_reader_lenient_parts(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    const char text[] =
        " { \"created_ns\" : -1, \"bytes\":7, \"files\":2, \"batch\":\"B\", \"device\":\"D\", \"format\":2,"
        " \"type\":\"batch\", \"future\":{\"x\":[1.5,null,true]} }\r\n"
        "{\"chunks\":[[\"" H64 "\",3],[\"" H64 "\",4]],\"nchunks\":2,\"hash\":\"" H64 "\",\"version\":0,"
        "\"mode\":0,\"mtime_ns\":0,\"size\":7,\"landed\":\"\",\"path\":\"a\\/b\\\\c\",\"type\":\"file\",\"extra\":1}\n"
        FILE0("z");
    ingest_manifest_reader *r = NULL;
    ingest_manifest_rec rec;
    assert_int_equal(ingest_manifest_reader_mem(ctx, text, sizeof(text) - 1, &r), 0);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(rec.type, INGEST_MREC_HEADER);
    assert_string_equal(rec.device, "D");
    assert_true(rec.created_ns == -1);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(rec.type, INGEST_MREC_FILE);
    assert_string_equal(rec.path, "a/b\\c");
    assert_int_equal(rec.nchunks, 2);
    assert_int_equal(rec.chunks[1].len, 4);
    assert_int_equal(rec.chunks[0].id[0], 0xaa);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_string_equal(rec.path, "z");
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 0);
    ingest_manifest_reader_close(r);
    ingest_ctx_destroy(ctx);
}

/* --- malformed input ------------------------------------------------------------------ */

typedef struct bad_case {
    const char *name;
    const char *text;
    int code;
    unsigned line;
    const char *what;
} bad_case;

static const bad_case bad_cases[] = {
    { "empty manifest", "", INGEST_ECORRUPT, 1, "empty manifest" },
    { "bad JSON", HDR(1, 0) "{\"type\":\"file\",\"path\" \"x\"}\n", INGEST_ECORRUPT, 2, "':'" },
    { "not an object", HDR(0, 0) "[1]\n", INGEST_ECORRUPT, 2, "JSON object" },
    { "truncated line", HDR(1, 0) "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"\",\"si", INGEST_ECORRUPT, 2,
      "unterminated string" },
    { "truncated object", HDR(1, 0) "{\"type\":\"file\",\"path\":\"a\"", INGEST_ECORRUPT, 2, "end of input" },
    { "empty line", HDR(1, 0) "\n" FILE0("a"), INGEST_ECORRUPT, 2, "empty line" },
    { "trailing empty line", HDR(1, 0) FILE0("a") "\n", INGEST_ECORRUPT, 3, "empty line" },
    { "size as string",
      HDR(1, 0) "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"\",\"size\":\"0\",\"mtime_ns\":0,\"mode\":420,"
                "\"version\":1,\"hash\":\"" H64 "\",\"nchunks\":0,\"chunks\":[]}\n",
      INGEST_ECORRUPT, 2, "\"size\": expected a non-negative integer" },
    { "negative size",
      HDR(1, 0) "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"\",\"size\":-1,\"mtime_ns\":0,\"mode\":420,"
                "\"version\":1,\"hash\":\"" H64 "\",\"nchunks\":0,\"chunks\":[]}\n",
      INGEST_ECORRUPT, 2, "non-negative integer" },
    { "float mtime",
      HDR(1, 0) "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"\",\"size\":0,\"mtime_ns\":1.5,\"mode\":420,"
                "\"version\":1,\"hash\":\"" H64 "\",\"nchunks\":0,\"chunks\":[]}\n",
      INGEST_ECORRUPT, 2, "\"mtime_ns\": expected an integer" },
    { "path as number",
      HDR(1, 0) "{\"type\":\"file\",\"path\":7,\"landed\":\"\",\"size\":0,\"mtime_ns\":0,\"mode\":420,"
                "\"version\":1,\"hash\":\"" H64 "\",\"nchunks\":0,\"chunks\":[]}\n",
      INGEST_ECORRUPT, 2, "\"path\": expected a string" },
    { "chunks not an array",
      HDR(1, 0) "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"\",\"size\":0,\"mtime_ns\":0,\"mode\":420,"
                "\"version\":1,\"hash\":\"" H64 "\",\"nchunks\":0,\"chunks\":{}}\n",
      INGEST_ECORRUPT, 2, "expected an array" },
    { "type not a string", "{\"type\":1}\n", INGEST_ECORRUPT, 1, "\"type\": expected a string" },
    { "unknown type", HDR(0, 0) "{\"type\":\"dir\"}\n", INGEST_ECORRUPT, 2, "unknown record type" },
    { "missing type", "{\"format\":2}\n", INGEST_ECORRUPT, 1, "missing key \"type\"" },
    { "missing key",
      HDR(1, 0) "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"\",\"size\":0,\"mtime_ns\":0,"
                "\"version\":1,\"hash\":\"" H64 "\",\"nchunks\":0,\"chunks\":[]}\n",
      INGEST_ECORRUPT, 2, "missing key \"mode\"" },
    { "missing header key", "{\"type\":\"batch\",\"format\":2,\"device\":\"d\",\"batch\":\"b\",\"files\":0}\n",
      INGEST_ECORRUPT, 1, "missing key \"bytes\"" },
    { "duplicate key",
      HDR(1, 0) "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"\",\"size\":0,\"size\":0,\"mtime_ns\":0,"
                "\"mode\":420,\"version\":1,\"hash\":\"" H64 "\",\"nchunks\":0,\"chunks\":[]}\n",
      INGEST_ECORRUPT, 2, "duplicate key" },
    { "short hex",
      HDR(1, 0) "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"\",\"size\":0,\"mtime_ns\":0,\"mode\":420,"
                "\"version\":1,\"hash\":\"abc\",\"nchunks\":0,\"chunks\":[]}\n",
      INGEST_ECORRUPT, 2, "\"hash\": expected exactly 64 hex digits" },
    { "non-hex chunk id",
      HDR(1, 3) FILE_REC("a", 3, 1, "[\"gaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",3]"),
      INGEST_ECORRUPT, 2, "64 hex digits" },
    { "absolute path", HDR(1, 0) FILE0("/etc/passwd"), INGEST_ECORRUPT, 2, "\"path\": absolute path" },
    { "dotdot", HDR(1, 0) FILE0("a/../b"), INGEST_ECORRUPT, 2, "'..' path component" },
    { "leading dotdot", HDR(1, 0) FILE0("../b"), INGEST_ECORRUPT, 2, "'..' path component" },
    { "trailing dotdot", HDR(1, 0) FILE0("a/.."), INGEST_ECORRUPT, 2, "'..' path component" },
    { "dot", HDR(1, 0) FILE0("./a"), INGEST_ECORRUPT, 2, "'.' path component" },
    { "double slash", HDR(1, 0) FILE0("a//b"), INGEST_ECORRUPT, 2, "empty path component" },
    { "trailing slash", HDR(1, 0) FILE0("a/"), INGEST_ECORRUPT, 2, "empty path component" },
    { "empty path", HDR(1, 0) FILE0(""), INGEST_ECORRUPT, 2, "empty path" },
    { "NUL escape", HDR(1, 0) FILE0("a\\u0000b"), INGEST_ECORRUPT, 2, "NUL" },
    { "landed absolute",
      HDR(1, 0) "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"/x\",\"size\":0,\"mtime_ns\":0,\"mode\":420,"
                "\"version\":1,\"hash\":\"" H64 "\",\"nchunks\":0,\"chunks\":[]}\n",
      INGEST_ECORRUPT, 2, "\"landed\": absolute path" },
    { "bad device name", "{\"type\":\"batch\",\"format\":2,\"device\":\"a/b\",\"batch\":\"b\",\"files\":0,"
                         "\"bytes\":0,\"created_ns\":0}\n",
      INGEST_ECORRUPT, 1, "\"device\": name is not [A-Za-z0-9._-]" },
    { "dot batch name", "{\"type\":\"batch\",\"format\":2,\"device\":\"a\",\"batch\":\"..\",\"files\":0,"
                        "\"bytes\":0,\"created_ns\":0}\n",
      INGEST_ECORRUPT, 1, "\"batch\": name is not [A-Za-z0-9._-] starting with a letter or digit" },
    { "format 1", "{\"type\":\"batch\",\"format\":1,\"device\":\"a\",\"batch\":\"b\",\"files\":0,"
                  "\"bytes\":0,\"created_ns\":0}\n",
      INGEST_EVERSION, 1, "unsupported manifest format" },
    { "sum below size", HDR(1, 10) FILE_REC("a", 10, 1, "[\"" H64 "\",5]"), INGEST_ECORRUPT, 2,
      "do not add up to the file's size" },
    { "sum above size", HDR(1, 4) FILE_REC("a", 4, 1, "[\"" H64 "\",5]"), INGEST_ECORRUPT, 2,
      "add up to more than the file's size" },
    { "sum on continuation", HDR(1, 10) FILE_REC("a", 10, 2, "[\"" H64 "\",5]") "{\"type\":\"chunks\",\"chunks\":[[\"" H64 "\",4]]}\n",
      INGEST_ECORRUPT, 3, "do not add up" },
    { "chunks for an empty file", HDR(1, 0) FILE_REC("a", 0, 1, "[\"" H64 "\",1]"), INGEST_ECORRUPT, 2,
      "more chunks than bytes" },
    { "no chunks for a file", HDR(1, 5) FILE_REC("a", 5, 0, ""), INGEST_ECORRUPT, 2, "needs chunks" },
    { "chunk length 0", HDR(1, 1) FILE_REC("a", 1, 1, "[\"" H64 "\",0]"), INGEST_ECORRUPT, 2,
      "chunk length must be" },
    { "chunk length 64 MiB + 1", HDR(1, 67108865) FILE_REC("a", 67108865, 1, "[\"" H64 "\",67108865]"),
      INGEST_ECORRUPT, 2, "chunk length must be" },
    { "chunk not a pair", HDR(1, 1) FILE_REC("a", 1, 1, "[\"" H64 "\",1,2]"), INGEST_ECORRUPT, 2,
      "a chunk must be" },
    { "chunk reversed", HDR(1, 1) FILE_REC("a", 1, 1, "[1,\"" H64 "\"]"), INGEST_ECORRUPT, 2, "a chunk must be" },
    { "more chunks than nchunks", HDR(1, 2) FILE_REC("a", 2, 1, "[\"" H64 "\",1],[\"" H64 "\",1]"),
      INGEST_ECORRUPT, 2, "more chunks than the file's nchunks" },
    { "fewer files than announced", HDR(2, 0) FILE0("a"), INGEST_ECORRUPT, 3, "fewer file records" },
    { "more files than announced", HDR(1, 0) FILE0("a") FILE0("b"), INGEST_ECORRUPT, 3, "more file records" },
    { "bytes mismatch", HDR(1, 9) FILE_REC("a", 3, 1, "[\"" H64 "\",3]"), INGEST_ECORRUPT, 3,
      "do not add up to the header's \"bytes\"" },
    { "bytes exceeded", HDR(1, 2) FILE_REC("a", 3, 1, "[\"" H64 "\",3]"), INGEST_ECORRUPT, 2,
      "more than the header's \"bytes\"" },
    { "file before header", FILE0("a") HDR(1, 0), INGEST_ECORRUPT, 1, "first line must be the batch header" },
    { "second header", HDR(0, 0) HDR(0, 0), INGEST_ECORRUPT, 2, "a second batch header" },
    { "chunks without a file", HDR(1, 0) "{\"type\":\"chunks\",\"chunks\":[[\"" H64 "\",1]]}\n" FILE0("a"),
      INGEST_ECORRUPT, 2, "chunks record without a file" },
    { "file inside a chunk list", HDR(2, 2) FILE_REC("a", 2, 2, "[\"" H64 "\",1]") FILE0("b"), INGEST_ECORRUPT, 3,
      "before the previous file's chunk list is complete" },
    { "empty chunks record", HDR(1, 2) FILE_REC("a", 2, 2, "[\"" H64 "\",1]") "{\"type\":\"chunks\",\"chunks\":[]}\n",
      INGEST_ECORRUPT, 3, "empty chunks record" },
    { "end inside a chunk list", HDR(1, 2) FILE_REC("a", 2, 2, "[\"" H64 "\",1]"), INGEST_ECORRUPT, 3,
      "end of manifest before the last file's chunk list" },
    { "size overflow",
      HDR(1, 0) "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"\",\"size\":18446744073709551616,\"mtime_ns\":0,"
                "\"mode\":420,\"version\":1,\"hash\":\"" H64 "\",\"nchunks\":0,\"chunks\":[]}\n",
      INGEST_ECORRUPT, 2, "integer out of range" },
    { "mode overflow",
      HDR(1, 0) "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"\",\"size\":0,\"mtime_ns\":0,"
                "\"mode\":4294967296,\"version\":1,\"hash\":\"" H64 "\",\"nchunks\":0,\"chunks\":[]}\n",
      INGEST_ECORRUPT, 2, "\"mode\": integer out of range" },
    { "mtime overflow",
      HDR(1, 0) "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"\",\"size\":0,\"mtime_ns\":9223372036854775808,"
                "\"mode\":0,\"version\":1,\"hash\":\"" H64 "\",\"nchunks\":0,\"chunks\":[]}\n",
      INGEST_ECORRUPT, 2, "\"mtime_ns\": integer out of range" },
    { "nesting too deep", HDR(0, 0) "{\"type\":\"x\",\"u\":[[[[[[[[[1]]]]]]]]]}\n", INGEST_ECORRUPT, 2,
      "nesting too deep" },
    { "invalid UTF-8", HDR(1, 0) FILE0("a\xff"), INGEST_ECORRUPT, 2, "invalid UTF-8" },
    { "raw control char", HDR(1, 0) FILE0("a\tb"), INGEST_ECORRUPT, 2, "control character" },
    { "garbage after object", HDR(0, 0) " x\n", INGEST_ECORRUPT, 2, "unexpected character" },
};

static void check_fail(ingest_ctx *ctx, ingest_manifest_reader *r, const bad_case *c)
{
    ingest_manifest_rec rec;
    int rc;
    unsigned n = 0;
    while ((rc = ingest_manifest_reader_next(r, &rec)) == 1)
        n++;
    if (rc != c->code)
        fail_msg("%s: got %d (%s), want %d", c->name, rc, ingest_ctx_errmsg(ctx), c->code);
    const char *msg = ingest_ctx_errmsg(ctx);
    char where[32];
    snprintf(where, sizeof(where), ":%u:", c->line);
    if (strncmp(msg, "manifest ", 9) != 0 || strstr(msg, where) == NULL || strstr(msg, c->what) == NULL)
        fail_msg("%s: detail \"%s\" lacks \"%s\" or \"%s\"", c->name, msg, where, c->what);
    /* The failure is sticky. */
    assert_int_equal(ingest_manifest_reader_next(r, &rec), c->code);
    assert_true(n + 1 >= c->line || c->line == 1);
}

static void test_malformed_mem(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        ingest_manifest_reader *r = NULL;
        assert_int_equal(ingest_manifest_reader_mem(ctx, bad_cases[i].text, strlen(bad_cases[i].text), &r), 0);
        check_fail(ctx, r, &bad_cases[i]);
        assert_non_null(strstr(ingest_ctx_errmsg(ctx), "manifest <memory>:"));
        ingest_manifest_reader_close(r);
    }
    ingest_ctx_destroy(ctx);
}

static void test_malformed_file(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        char *path = write_temp(bad_cases[i].text, strlen(bad_cases[i].text));
        ingest_manifest_reader *r = NULL;
        assert_int_equal(ingest_manifest_reader_open(ctx, path, &r), 0);
        check_fail(ctx, r, &bad_cases[i]);
        assert_non_null(strstr(ingest_ctx_errmsg(ctx), path));
        ingest_manifest_reader_close(r);
        unlink(path);
        free(path);
    }
    ingest_manifest_reader *r = NULL;
    assert_int_equal(ingest_manifest_reader_open(ctx, "/nonexistent/manifest.jsonl", &r), INGEST_ENOTFOUND);
    assert_null(r);
    ingest_ctx_destroy(ctx);
}

/* Exact columns for a few errors. */
static void test_columns(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    static const struct {
        const char *text;
        const char *want;
    } cases[] = {
        { HDR(1, 0) "{\"type\":\"file\",\"path\":\"/abs\"}\n", "manifest <memory>:2:1: missing key" },
        { HDR(1, 0) FILE0("/abs"), "manifest <memory>:2:23: \"path\": absolute path" },
        { "{\"type\":\"batch\",\"format\":2,\"format\":2}", "manifest <memory>:1:28: duplicate key" },
        { "{\"type\":\"batch\" , }", "manifest <memory>:1:19: expected a string key" },
        { HDR(0, 0) "{\"type\":\"batch\",\"x\":01}", "manifest <memory>:2:21: leading zero" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ingest_manifest_reader *r = NULL;
        ingest_manifest_rec rec;
        assert_int_equal(ingest_manifest_reader_mem(ctx, cases[i].text, strlen(cases[i].text), &r), 0);
        int rc;
        while ((rc = ingest_manifest_reader_next(r, &rec)) == 1)
            ;
        assert_int_equal(rc, INGEST_ECORRUPT);
        const char *msg = ingest_ctx_errmsg(ctx);
        if (strncmp(msg, cases[i].want, strlen(cases[i].want)) != 0)
            fail_msg("case %zu: \"%s\" does not start with \"%s\"", i, msg, cases[i].want);
        ingest_manifest_reader_close(r);
    }
    ingest_ctx_destroy(ctx);
}

/* A chunk list of 1025 on one line; a line over INGEST_MANIFEST_LINE_MAX. */
static void test_big_lines(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    const size_t cap = 2 * INGEST_MANIFEST_LINE_MAX;
    char *text = malloc(cap);
    assert_non_null(text);
    int n = snprintf(text, cap, HDR(1, 1025) "{\"type\":\"file\",\"path\":\"a\",\"landed\":\"\",\"size\":1025,"
                                             "\"mtime_ns\":0,\"mode\":0,\"version\":1,\"hash\":\"" H64 "\","
                                             "\"nchunks\":1025,\"chunks\":[");
    size_t len = (size_t)n;
    for (int i = 0; i < 1025; i++)
        len += (size_t)snprintf(text + len, cap - len, "%s[\"" H64 "\",1]", i ? "," : "");
    len += (size_t)snprintf(text + len, cap - len, "]}\n");
    const bad_case many = { "too many chunks", text, INGEST_ECORRUPT, 2, "too many chunks on one line" };
    ingest_manifest_reader *r = NULL;
    assert_int_equal(ingest_manifest_reader_mem(ctx, text, len, &r), 0);
    check_fail(ctx, r, &many);
    ingest_manifest_reader_close(r);
    char *path = write_temp(text, len);
    assert_int_equal(ingest_manifest_reader_open(ctx, path, &r), 0);
    check_fail(ctx, r, &many);
    ingest_manifest_reader_close(r);
    unlink(path);
    free(path);

    /* A line longer than the bound, with and without a newline after it. */
    n = snprintf(text, cap, HDR(0, 0) "{\"type\":\"batch\",\"pad\":\"");
    len = (size_t)n;
    memset(text + len, 'x', INGEST_MANIFEST_LINE_MAX);
    len += INGEST_MANIFEST_LINE_MAX;
    memcpy(text + len, "\"}\n", 3);
    const bad_case longline = { "long line", text, INGEST_ETOOBIG, 2, "line longer than" };
    for (int nl = 0; nl < 2; nl++) {
        const size_t l = nl ? len + 3 : len;
        assert_int_equal(ingest_manifest_reader_mem(ctx, text, l, &r), 0);
        check_fail(ctx, r, &longline);
        ingest_manifest_reader_close(r);
        path = write_temp(text, l);
        assert_int_equal(ingest_manifest_reader_open(ctx, path, &r), 0);
        check_fail(ctx, r, &longline);
        ingest_manifest_reader_close(r);
        unlink(path);
        free(path);
    }
    /* A line of exactly INGEST_MANIFEST_LINE_MAX bytes is accepted. */
    const char head[] = "{\"type\":\"batch\",\"format\":2,\"device\":\"d\",\"batch\":\"b\",\"files\":0,\"bytes\":0,"
                        "\"created_ns\":1,\"pad\":\"";
    memcpy(text, head, sizeof(head) - 1);
    memset(text + sizeof(head) - 1, 'y', INGEST_MANIFEST_LINE_MAX - (sizeof(head) - 1) - 2);
    memcpy(text + INGEST_MANIFEST_LINE_MAX - 2, "\"}\n", 3);
    ingest_manifest_rec rec;
    path = write_temp(text, INGEST_MANIFEST_LINE_MAX + 1);
    assert_int_equal(ingest_manifest_reader_open(ctx, path, &r), 0);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 0);
    ingest_manifest_reader_close(r);
    unlink(path);
    free(path);
    assert_int_equal(ingest_manifest_reader_mem(ctx, text, INGEST_MANIFEST_LINE_MAX, &r), 0);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 1);
    assert_int_equal(ingest_manifest_reader_next(r, &rec), 0);
    ingest_manifest_reader_close(r);
    free(text);
    ingest_ctx_destroy(ctx);
}

/* --- writer validation ----------------------------------------------------------------- */

static void test_writer_refuses(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_manifest_writer *w = NULL;
    assert_int_equal(ingest_manifest_writer_create(ctx, &w), 0);
    file_spec f;
    memset(&f, 0, sizeof(f));
    f.path = "ok";
    make_chunks(&f, 3, 9);
    ingest_manifest_rec fr = file_rec(&f);
    size_t len;

    assert_int_equal(ingest_manifest_writer_add(w, &fr), INGEST_EINVAL); /* before the header */
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "before the batch header"));
    ingest_manifest_rec h = header_rec("dev/1", "b", 2, f.size);
    assert_int_equal(ingest_manifest_writer_add(w, &h), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "device"));
    h = header_rec("dev", "", 2, f.size);
    assert_int_equal(ingest_manifest_writer_add(w, &h), INGEST_EINVAL);
    h = header_rec("dev", "b", 2, f.size);
    h.format = 1;
    assert_int_equal(ingest_manifest_writer_add(w, &h), INGEST_EINVAL);
    h.format = 3;
    assert_int_equal(ingest_manifest_writer_add(w, &h), INGEST_EINVAL);
    h.format = 0; /* means the current format */
    assert_int_equal(ingest_manifest_writer_add(w, &h), 0);
    assert_int_equal(ingest_manifest_writer_add(w, &h), INGEST_EINVAL); /* twice */
    ingest_manifest_writer_data(w, &len);
    const size_t after_header = len;

    static const char *const bad_paths[] = { "/abs", "a/../b", "..", ".", "a//b", "a/", "", "./x", "x/." };
    for (size_t i = 0; i < sizeof(bad_paths) / sizeof(bad_paths[0]); i++) {
        fr = file_rec(&f);
        fr.path = bad_paths[i];
        assert_int_equal(ingest_manifest_writer_add(w, &fr), INGEST_EINVAL);
        assert_non_null(strstr(ingest_ctx_errmsg(ctx), "path"));
        fr = file_rec(&f);
        fr.landed = bad_paths[i][0] ? bad_paths[i] : "//";
        assert_int_equal(ingest_manifest_writer_add(w, &fr), INGEST_EINVAL);
        assert_non_null(strstr(ingest_ctx_errmsg(ctx), "landed"));
    }
    char longpath[INGEST_MANIFEST_PATH_MAX + 2];
    memset(longpath, 'p', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = '\0';
    fr = file_rec(&f);
    fr.path = longpath;
    assert_int_equal(ingest_manifest_writer_add(w, &fr), INGEST_EINVAL);
    fr = file_rec(&f);
    fr.size += 1;
    assert_int_equal(ingest_manifest_writer_add(w, &fr), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "add up"));
    fr = file_rec(&f);
    fr.nchunks_total = 2;
    assert_int_equal(ingest_manifest_writer_add(w, &fr), INGEST_EINVAL);
    const uint32_t keep = f.chunks[1].len;
    f.chunks[1].len = 0;
    fr = file_rec(&f);
    assert_int_equal(ingest_manifest_writer_add(w, &fr), INGEST_EINVAL);
    f.chunks[1].len = 64u * 1024u * 1024u + 1u;
    assert_int_equal(ingest_manifest_writer_add(w, &fr), INGEST_EINVAL);
    f.chunks[1].len = keep;
    fr = file_rec(&f);
    fr.type = INGEST_MREC_CHUNKS;
    assert_int_equal(ingest_manifest_writer_add(w, &fr), INGEST_EINVAL);
    /* Nothing was appended by the refused records. */
    ingest_manifest_writer_data(w, &len);
    assert_int_equal(len, after_header);

    /* Path length exactly at the bound is fine; the header's bytes are enforced. */
    longpath[INGEST_MANIFEST_PATH_MAX] = '\0';
    fr = file_rec(&f);
    fr.path = longpath;
    fr.nchunks_total = 0; /* 0 means nchunks */
    assert_int_equal(ingest_manifest_writer_add(w, &fr), 0);
    fr.path = "second";
    assert_int_equal(ingest_manifest_writer_add(w, &fr), INGEST_EINVAL); /* bytes exceeded */
    assert_int_equal(ingest_manifest_writer_finish(w), INGEST_EINVAL);   /* one file short */
    ingest_manifest_writer_destroy(w);
    ingest_manifest_writer_destroy(NULL);
    ingest_manifest_reader_close(NULL);
    free(f.chunks);
    ingest_ctx_destroy(ctx);
}

/* --- allocation failures ------------------------------------------------------------- */

typedef struct fail_alloc {
    long budget; /* allocations left before failing; < 0: unlimited */
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
    if (ptr != NULL)
        fa->live--;
    free(ptr);
}

static void test_alloc_failures(void **state)
{
    (void)state;
    const char text[] = HDR(2, 5) FILE_REC("a/b", 5, 2, "[\"" H64 "\",2],[\"" H64 "\",3]") FILE0("c");
    char *path = write_temp(text, sizeof(text) - 1);
    int ok = 0;
    for (long budget = 0; budget < 64 && !ok; budget++) {
        for (int use_file = 0; use_file < 2; use_file++) {
            fail_alloc fa = { -1, 0 };
            const ingest_allocator a = { fa_alloc, fa_free, &fa };
            ingest_ctx *ctx = ingest_ctx_create(&a);
            assert_non_null(ctx);
            fa.budget = budget;
            ingest_manifest_reader *r = NULL;
            int rc = use_file ? ingest_manifest_reader_open(ctx, path, &r)
                              : ingest_manifest_reader_mem(ctx, text, sizeof(text) - 1, &r);
            ingest_manifest_rec rec;
            int records = 0;
            if (rc == 0) {
                while ((rc = ingest_manifest_reader_next(r, &rec)) == 1)
                    records++;
            } else {
                assert_null(r);
            }
            if (rc == 0) {
                assert_int_equal(records, 3);
                ok = use_file;
            } else {
                assert_int_equal(rc, INGEST_ENOMEM);
            }
            ingest_manifest_reader_close(r);
            /* Writer under the same budget. */
            fa.budget = budget;
            ingest_manifest_writer *w = NULL;
            rc = ingest_manifest_writer_create(ctx, &w);
            if (rc == 0) {
                const ingest_manifest_rec h = header_rec("d", "b", 0, 0);
                rc = ingest_manifest_writer_add(w, &h);
                assert_true(rc == 0 || rc == INGEST_ENOMEM);
            }
            ingest_manifest_writer_destroy(w);
            ingest_ctx_destroy(ctx);
            assert_int_equal(fa.live, 0);
        }
    }
    assert_true(ok);
    unlink(path);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_hash_omitted),
        cmocka_unit_test(test_chunks_pushed),
        cmocka_unit_test(test_refused_record),
        cmocka_unit_test(test_reader_lenient_parts),
        cmocka_unit_test(test_malformed_mem),
        cmocka_unit_test(test_malformed_file),
        cmocka_unit_test(test_columns),
        cmocka_unit_test(test_big_lines),
        cmocka_unit_test(test_writer_refuses),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
