/*
 * Chunk ids, file hashes and the dedup key loader.  Known answers live in
 * tests/unit/golden/ids-default-key.txt (chunk id format 2: HMAC-SHA256
 * with the default key 00..1f), which the independent Python implementation
 * tests/reference/chunk_ids.py checks (tests/integration/
 * test_golden_reference.sh); here every id is also compared with
 * libsodium's HMAC-SHA256, a second implementation sharing no code with
 * OpenSSL's.
 */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <pthread.h>
#include <sodium.h>

#include "ingest/hash.h"
#include "internal.h"

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static uint8_t *gen_buffer(uint64_t seed, size_t len)
{
    uint8_t *b = malloc(len ? len : 1);
    assert_non_null(b);
    uint64_t s = seed;
    for (size_t i = 0; i < len; i += 8) {
        const uint64_t v = splitmix64(&s);
        for (size_t k = 0; k < 8 && i + k < len; k++)
            b[i + k] = (uint8_t)(v >> (8 * k));
    }
    return b;
}

static const char *golden_path(const char *name)
{
    static char buf[1024];
    const char *dir = getenv("INGEST_GOLDEN_DIR");
    if (dir != NULL) {
        snprintf(buf, sizeof(buf), "%s/%s", dir, name);
    } else {
        const char *f = __FILE__, *slash = strrchr(f, '/');
        const int dl = slash ? (int)(slash - f) : 1;
        snprintf(buf, sizeof(buf), "%.*s/golden/%s", dl, slash ? f : ".", name);
    }
    return buf;
}

static void test_default_key(void **state)
{
    (void)state;
    const uint8_t *k = ingest_default_dedup_key();
    for (int i = 0; i < INGEST_KEY_BYTES; i++)
        assert_int_equal(k[i], i);
    assert_true(sizeof(crypto_auth_hmacsha256_state) <= sizeof(ingest_filehash));
    assert_int_equal(INGEST_CHUNK_ID_FORMAT, 2);
}

static void add_line(char *out, size_t cap, const char *name, const void *d, size_t n)
{
    uint8_t id[INGEST_ID_BYTES];
    char hex[2 * INGEST_ID_BYTES + 1];
    ingest_chunk_id(ingest_default_dedup_key(), d, n, id);
    ingest_to_hex(id, sizeof(id), hex);
    const size_t w = strlen(out);
    snprintf(out + w, cap - w, "%s %s\n", name, hex);
}

static void test_golden_ids(void **state)
{
    (void)state;
    char got[4096] = "";
    uint8_t seq[256];
    for (int i = 0; i < 256; i++)
        seq[i] = (uint8_t)i;
    uint8_t *big = gen_buffer(UINT64_C(0x676f6c64656e3031), 1u << 20);
    add_line(got, sizeof(got), "empty", "", 0);
    add_line(got, sizeof(got), "zero-byte", "\0", 1);
    add_line(got, sizeof(got), "abc", "abc", 3);
    add_line(got, sizeof(got), "bytes-00-ff", seq, sizeof(seq));
    add_line(got, sizeof(got), "golden-1MiB", big, 1u << 20);
    free(big);
    const char *path = golden_path("ids-default-key.txt");
    if (getenv("INGEST_GOLDEN_UPDATE") != NULL) {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        fputs(got, f);
        assert_int_equal(fclose(f), 0);
    }
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("golden file %s missing", path);
    char want[4096];
    const size_t n = fread(want, 1, sizeof(want) - 1, f);
    fclose(f);
    want[n] = '\0';
    assert_string_equal(want, got);
}

static void test_keyed(void **state)
{
    (void)state;
    uint8_t k2[INGEST_KEY_BYTES], a[INGEST_ID_BYTES], b[INGEST_ID_BYTES], c[INGEST_ID_BYTES];
    memcpy(k2, ingest_default_dedup_key(), sizeof(k2));
    ingest_chunk_id(k2, "data", 4, a);
    k2[31] ^= 1;
    ingest_chunk_id(k2, "data", 4, b);
    ingest_chunk_id(k2, "data", 4, c);
    assert_memory_not_equal(a, b, INGEST_ID_BYTES);
    assert_memory_equal(b, c, INGEST_ID_BYTES);
    /* Format 1's keyed BLAKE2b gives other ids. */
    crypto_generichash(c, sizeof(c), (const uint8_t *)"data", 4, ingest_default_dedup_key(), INGEST_KEY_BYTES);
    ingest_chunk_id(ingest_default_dedup_key(), "data", 4, a);
    assert_memory_not_equal(a, c, INGEST_ID_BYTES);
}

static void sodium_hmac(const uint8_t *key, const uint8_t *d, size_t n, uint8_t out[INGEST_ID_BYTES])
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, key, INGEST_KEY_BYTES);
    crypto_auth_hmacsha256_update(&st, d, n);
    crypto_auth_hmacsha256_final(&st, out);
}

/* Ids of lengths around the block sizes and the chunk sizes, two keys alternating on one thread. */
static void check_against_sodium(uint64_t seed)
{
    static const size_t lens[] = { 0, 1, 31, 55, 56, 63, 64, 65, 119, 128, 1000, 1024, 4096, 16384, 65535, 65536, 262144 };
    uint8_t *d = gen_buffer(seed, 262144);
    uint8_t k2[INGEST_KEY_BYTES], got[INGEST_ID_BYTES], want[INGEST_ID_BYTES];
    for (size_t i = 0; i < INGEST_KEY_BYTES; i++)
        k2[i] = (uint8_t)(0xa5 ^ i ^ seed);
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        for (int k = 0; k < 2; k++) {
            const uint8_t *key = k ? k2 : ingest_default_dedup_key();
            ingest_chunk_id(key, d, lens[i], got);
            sodium_hmac(key, d, lens[i], want);
            assert_memory_equal(got, want, INGEST_ID_BYTES);
            ingest_chunk_id(key, d, lens[i], got); /* the reused context */
            assert_memory_equal(got, want, INGEST_ID_BYTES);
        }
    free(d);
}

static void test_chunk_id_is_hmac_sha256(void **state)
{
    (void)state;
    check_against_sodium(1);
}

static void *thread_main(void *arg)
{
    check_against_sodium((uint64_t)(uintptr_t)arg);
    return NULL;
}

/* Each thread keeps its own keyed context (freed when it exits: valgrind and ASan see no leak). */
static void test_chunk_id_threads(void **state)
{
    (void)state;
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, thread_main, (void *)(i + 2)), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
}

static void test_filehash_equals_oneshot(void **state)
{
    (void)state;
    const size_t n = 3u << 20;
    uint8_t *d = gen_buffer(42, n);
    uint8_t want[INGEST_ID_BYTES], got[INGEST_ID_BYTES];
    ingest_chunk_id(ingest_default_dedup_key(), d, n, want);
    uint64_t rs = 7;
    for (int round = 0; round < 3; round++) {
        ingest_filehash h;
        ingest_filehash_init(&h, ingest_default_dedup_key());
        for (size_t pos = 0; pos < n;) {
            size_t k = round == 0 ? n : 1 + (size_t)(splitmix64(&rs) % (round == 1 ? 200000 : 300));
            if (k > n - pos)
                k = n - pos;
            ingest_filehash_update(&h, d + pos, k);
            ingest_filehash_update(&h, d, 0);
            pos += k;
        }
        ingest_filehash_final(&h, got);
        assert_memory_equal(want, got, INGEST_ID_BYTES);
    }
    ingest_filehash h;
    ingest_filehash_init(&h, ingest_default_dedup_key());
    ingest_filehash_final(&h, got);
    ingest_chunk_id(ingest_default_dedup_key(), "", 0, want);
    assert_memory_equal(want, got, INGEST_ID_BYTES);
    /* a state keyed once and copied (as the sender starts each file's) hashes as a fresh one */
    uint8_t tmpl[sizeof(ingest_filehash)];
    ingest_filehash_init(&h, ingest_default_dedup_key());
    memcpy(tmpl, &h, sizeof(h));
    for (int round = 0; round < 2; round++) {
        ingest_filehash c;
        memcpy(&c, tmpl, sizeof(c));
        ingest_filehash_update(&c, d, round ? n : 1000);
        ingest_filehash_final(&c, got);
        ingest_chunk_id(ingest_default_dedup_key(), d, round ? n : 1000, want);
        assert_memory_equal(want, got, INGEST_ID_BYTES);
    }
    free(d);
}

/*
 * Each thread keeps the keyed state of its last key for ingest_filehash_init:
 * keys that alternate, and one key's byte changed in place, hash as
 * libsodium's one-shot HMAC does with the key given at that call.
 */
static void filehash_keys_alternate(uint64_t seed)
{
    uint8_t k1[INGEST_KEY_BYTES], k2[INGEST_KEY_BYTES], buf[INGEST_KEY_BYTES];
    memcpy(k1, ingest_default_dedup_key(), sizeof k1);
    for (size_t i = 0; i < sizeof k2; i++)
        k2[i] = (uint8_t)(0xa0 + i + seed);
    uint8_t *d = gen_buffer(seed, 5000);
    for (int round = 0; round < 12; round++) {
        const uint8_t *key = round % 3 == 1 ? k2 : k1;
        if (round == 6)
            k1[31] ^= 0x5a; /* the same buffer, other bytes */
        memcpy(buf, key, sizeof buf);
        ingest_filehash h;
        ingest_filehash_init(&h, key);
        const size_t n = 100u * (size_t)round + 1;
        ingest_filehash_update(&h, d, n);
        uint8_t got[INGEST_ID_BYTES], want[INGEST_ID_BYTES];
        ingest_filehash_final(&h, got);
        assert_int_equal(crypto_auth_hmacsha256_verify(got, d, n, buf), 0);
        crypto_auth_hmacsha256_state st;
        crypto_auth_hmacsha256_init(&st, buf, sizeof buf);
        crypto_auth_hmacsha256_update(&st, d, n);
        crypto_auth_hmacsha256_final(&st, want);
        assert_memory_equal(got, want, INGEST_ID_BYTES);
    }
    free(d);
}

static void *filehash_thread(void *arg)
{
    filehash_keys_alternate((uint64_t)(uintptr_t)arg);
    return NULL;
}

static void test_filehash_keys_alternate(void **state)
{
    (void)state;
    filehash_keys_alternate(1);
    pthread_t t[3];
    for (uintptr_t i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&t[i], NULL, filehash_thread, (void *)(i + 2)), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
}

/* ---- dedup key loader ---------------------------------------------------- */

static char *write_tmp(const void *d, size_t n)
{
    static char path[64];
    strcpy(path, "/tmp/test_hash_key_XXXXXX");
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, d, n), (ssize_t)n);
    close(fd);
    return path;
}

static int load(ingest_ctx *ctx, const void *d, size_t n, uint8_t key[INGEST_KEY_BYTES])
{
    char *p = write_tmp(d, n);
    const int rc = ingest_dedup_key_load(ctx, p, key);
    unlink(p);
    return rc;
}

static void expect_reject(ingest_ctx *ctx, const char *text, size_t n, const char *msg)
{
    uint8_t key[INGEST_KEY_BYTES];
    assert_int_equal(load(ctx, text, n, key), INGEST_EINVAL);
    if (strstr(ingest_ctx_errmsg(ctx), msg) == NULL)
        fail_msg("message '%s' lacks '%s'", ingest_ctx_errmsg(ctx), msg);
}

static void test_key_load(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    uint8_t raw[INGEST_KEY_BYTES], key[INGEST_KEY_BYTES];
    for (int i = 0; i < INGEST_KEY_BYTES; i++)
        raw[i] = (uint8_t)(0xa0 + i * 3);
    raw[5] = '\n'; /* raw keys may contain any byte */
    raw[6] = 0;
    assert_int_equal(load(ctx, raw, sizeof(raw), key), 0);
    assert_memory_equal(raw, key, INGEST_KEY_BYTES);

    char hex[2 * INGEST_KEY_BYTES + 2];
    ingest_to_hex(raw, sizeof(raw), hex);
    memset(key, 0, sizeof(key));
    assert_int_equal(load(ctx, hex, 64, key), 0);
    assert_memory_equal(raw, key, INGEST_KEY_BYTES);
    hex[64] = '\n';
    memset(key, 0, sizeof(key));
    assert_int_equal(load(ctx, hex, 65, key), 0);
    assert_memory_equal(raw, key, INGEST_KEY_BYTES);
    for (int i = 0; i < 64; i++) /* upper case too */
        if (hex[i] >= 'a')
            hex[i] = (char)(hex[i] - 32);
    memset(key, 0, sizeof(key));
    assert_int_equal(load(ctx, hex, 65, key), 0);
    assert_memory_equal(raw, key, INGEST_KEY_BYTES);

    expect_reject(ctx, hex, 31, "got 31 bytes");
    expect_reject(ctx, hex, 33, "got 33 bytes");
    expect_reject(ctx, hex, 63, "got 63 bytes");
    expect_reject(ctx, "", 0, "got 0 bytes");
    char longer[200];
    memset(longer, 'a', sizeof(longer));
    expect_reject(ctx, longer, sizeof(longer), "got at least 66 bytes");
    expect_reject(ctx, longer, 66, "got at least 66 bytes");
    char bad[66];
    memcpy(bad, hex, 64);
    bad[64] = '\r';
    bad[65] = '\n';
    expect_reject(ctx, bad, 66, "expected 32 raw bytes or 64 hex");
    bad[64] = 'x';
    expect_reject(ctx, bad, 65, "expected 32 raw bytes or 64 hex");
    memcpy(bad, hex, 64);
    bad[17] = 'g';
    expect_reject(ctx, bad, 64, "not a hex digit at offset 17");
    bad[17] = hex[17];
    bad[0] = ' ';
    expect_reject(ctx, bad, 64, "offset 0");

    assert_int_equal(ingest_dedup_key_load(ctx, "/nonexistent/dir/key", key), INGEST_ENOTFOUND);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "/nonexistent/dir/key"));
    assert_int_equal(ingest_dedup_key_load(ctx, "/", key), INGEST_EIO); /* a directory: read fails */
    ingest_ctx_destroy(ctx);
}

/* Hex both ways: every byte value, either case; any other character, anywhere, and a wrong length refused. */
static void test_hex(void **state)
{
    (void)state;
    uint8_t bin[256], back[256];
    char hex[2 * 256 + 1];
    for (int i = 0; i < 256; i++)
        bin[i] = (uint8_t)i;
    ingest_to_hex(bin, sizeof(bin), hex);
    assert_int_equal(strlen(hex), 512);
    assert_memory_equal(hex + 2 * 0xab, "abacadaeafb0", 12);
    assert_int_equal(ingest_from_hex(hex, 512, back, sizeof(back)), INGEST_OK);
    assert_memory_equal(bin, back, sizeof(bin));
    for (size_t i = 0; i < 512; i++)
        hex[i] = (char)toupper((unsigned char)hex[i]);
    memset(back, 0, sizeof(back));
    assert_int_equal(ingest_from_hex(hex, 512, back, sizeof(back)), INGEST_OK);
    assert_memory_equal(bin, back, sizeof(bin));
    char one[3] = "7f";
    uint8_t b = 0;
    assert_int_equal(ingest_from_hex(one, 2, &b, 1), INGEST_OK);
    assert_int_equal(b, 0x7f);
    for (int c = 0; c < 256; c++) {
        if (isxdigit(c))
            continue;
        for (int at = 0; at < 2; at++) {
            char t[2] = { '7', 'f' };
            t[at] = (char)c;
            assert_int_equal(ingest_from_hex(t, 2, &b, 1), INGEST_EINVAL);
        }
    }
    assert_int_equal(ingest_from_hex("7f0", 3, back, 1), INGEST_EINVAL);
    assert_int_equal(ingest_from_hex("7f", 2, back, 2), INGEST_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_key),
        cmocka_unit_test(test_golden_ids),
        cmocka_unit_test(test_keyed),
        cmocka_unit_test(test_chunk_id_is_hmac_sha256),
        cmocka_unit_test(test_chunk_id_threads),
        cmocka_unit_test(test_filehash_equals_oneshot),
        cmocka_unit_test(test_filehash_keys_alternate),
        cmocka_unit_test(test_key_load),
        cmocka_unit_test(test_hex),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
