/*
 * ingestctl bench crypto [--size BYTES] [--small BYTES] [--runs N]
 *
 * The per-byte primitives of the data path against their alternatives, on
 * one thread, in one process: CPU seconds (CLOCK_THREAD_CPUTIME_ID) over
 * --size bytes (default 1 GiB) in 64 KiB blocks, and the keyed hashes again
 * over --small bytes (default 256 MiB) in 1 KiB blocks (small files are one
 * chunk each, so the per-call cost matters).  Runs interleave the variants
 * so that machine noise hits them alike; each figure is the median of
 * --runs (default 3).  1 MB = 10^6 bytes.
 *
 * Keyed hashes (32-byte key, 32-byte output):
 *   blake2b_sodium      libsodium crypto_generichash, keyed BLAKE2b-256
 *                       (chunk id format 1)
 *   hmac_sha256_reinit  OpenSSL EVP_MAC HMAC-SHA256, one context keyed
 *                       once, EVP_MAC_init(ctx, NULL, 0, NULL) per block
 *   hmac_sha256_dup     the same, EVP_MAC_CTX_dup of a keyed template per
 *                       block (and a free)
 *   hmac_sha256_sodium  libsodium crypto_auth_hmacsha256 (no SHA-NI)
 *   sha256_prefix       SHA-256(k' || data), k' a 64-byte block derived
 *                       from the key, its state precomputed once
 *                       (EVP_MD_CTX_copy_ex per block).  Length extension
 *                       applies: not a MAC; measured for the cost only.
 *   ingest_chunk_id     what this library's ingest_chunk_id does
 * AEAD (12-byte nonce, 4 bytes of additional data, 16-byte tag, in place):
 *   aes256gcm_sodium    crypto_aead_aes256gcm_*_detached_afternm
 *   aes256gcm_openssl   EVP AES-256-GCM, one EVP_CIPHER_CTX per direction
 *                       keyed once, only the IV per block
 *   xchacha_sodium      crypto_aead_xchacha20poly1305_ietf_*_detached
 * Each seal is opened by the other library too (a check, not timed).
 *
 * With OpenSSL's allocator counted (CRYPTO_set_mem_functions, when this
 * process has not allocated through OpenSSL yet), "allocs_per_op" gives the
 * mallocs of each OpenSSL variant per block.
 */
#include "ingestctl.h"

#include <ingest.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_RUNS 9
#define BIG 65536u
#define SMALL 1024u
#define BUF_MAX (64u << 20)

enum { H_BLAKE2B, H_HMAC_REINIT, H_HMAC_DUP, H_HMAC_SODIUM, H_SHA_PREFIX, H_CHUNK_ID, H_N };
static const char *const h_names[H_N] = { "blake2b_sodium", "hmac_sha256_reinit", "hmac_sha256_dup",
                                          "hmac_sha256_sodium", "sha256_prefix", "ingest_chunk_id" };
enum { A_SODIUM_SEAL, A_SODIUM_OPEN, A_OSSL_SEAL, A_OSSL_OPEN, A_XC_SEAL, A_XC_OPEN, A_N };
static const char *const a_names[A_N] = { "aes256gcm_sodium_seal", "aes256gcm_sodium_open", "aes256gcm_openssl_seal",
                                          "aes256gcm_openssl_open", "xchacha_sodium_seal", "xchacha_sodium_open" };

static unsigned long long n_allocs;
static void *count_malloc(size_t n, const char *f, int l)
{
    (void)f;
    (void)l;
    __atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
    return malloc(n);
}
static void *count_realloc(void *p, size_t n, const char *f, int l)
{
    (void)f;
    (void)l;
    if (p == NULL)
        __atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
    return realloc(p, n);
}
static void count_free(void *p, const char *f, int l)
{
    (void)f;
    (void)l;
    free(p);
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_dbl(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct hctx {
    uint8_t key[32];
    EVP_MAC_CTX *mac;  /* keyed, re-initialised per block */
    EVP_MAC_CTX *tmpl; /* keyed template for dup */
    EVP_MD_CTX *pre;   /* SHA-256 state after k' */
    EVP_MD_CTX *work;
} hctx;

/* One keyed hash of data[0, len) by variant v into out; 0 or -1. */
static int hash_one(hctx *h, int v, const uint8_t *data, size_t len, uint8_t out[32])
{
    size_t ol = 0;
    switch (v) {
    case H_BLAKE2B:
        return crypto_generichash(out, 32, data, len, h->key, 32);
    case H_HMAC_REINIT:
        if (EVP_MAC_init(h->mac, NULL, 0, NULL) != 1 || EVP_MAC_update(h->mac, data, len) != 1 ||
            EVP_MAC_final(h->mac, out, &ol, 32) != 1)
            return -1;
        return 0;
    case H_HMAC_DUP: {
        EVP_MAC_CTX *c = EVP_MAC_CTX_dup(h->tmpl);
        const int ok = c != NULL && EVP_MAC_update(c, data, len) == 1 && EVP_MAC_final(c, out, &ol, 32) == 1;
        EVP_MAC_CTX_free(c);
        return ok ? 0 : -1;
    }
    case H_HMAC_SODIUM: {
        crypto_auth_hmacsha256_state st;
        crypto_auth_hmacsha256_init(&st, h->key, 32);
        crypto_auth_hmacsha256_update(&st, data, len);
        return crypto_auth_hmacsha256_final(&st, out);
    }
    case H_SHA_PREFIX:
        if (EVP_MD_CTX_copy_ex(h->work, h->pre) != 1 || EVP_DigestUpdate(h->work, data, len) != 1 ||
            EVP_DigestFinal_ex(h->work, out, NULL) != 1)
            return -1;
        return 0;
    case H_CHUNK_ID:
        ingest_chunk_id(h->key, data, len, out);
        return 0;
    }
    return -1;
}

static void nonce_of(uint64_t n, uint8_t *out, size_t len)
{
    memset(out, 0, len);
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(n >> (8 * i));
}

static int ossl_seal(EVP_CIPHER_CTX *c, uint64_t n, uint8_t *m, size_t ml, const uint8_t ad[4], uint8_t tag[16])
{
    uint8_t iv[12];
    int l = 0, l2 = 0;
    nonce_of(n, iv, sizeof iv);
    if (EVP_EncryptInit_ex2(c, NULL, NULL, iv, NULL) != 1 || EVP_EncryptUpdate(c, NULL, &l, ad, 4) != 1 ||
        EVP_EncryptUpdate(c, m, &l, m, (int)ml) != 1 || EVP_EncryptFinal_ex(c, m + l, &l2) != 1 ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, tag) != 1)
        return -1;
    return 0;
}

static int ossl_open(EVP_CIPHER_CTX *c, uint64_t n, uint8_t *m, size_t ml, const uint8_t ad[4], uint8_t tag[16])
{
    uint8_t iv[12];
    int l = 0, l2 = 0;
    nonce_of(n, iv, sizeof iv);
    if (EVP_DecryptInit_ex2(c, NULL, NULL, iv, NULL) != 1 || EVP_DecryptUpdate(c, NULL, &l, ad, 4) != 1 ||
        EVP_DecryptUpdate(c, m, &l, m, (int)ml) != 1 || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, 16, tag) != 1 ||
        EVP_DecryptFinal_ex(c, m + l, &l2) <= 0)
        return -1;
    return 0;
}

typedef struct actx {
    uint8_t key[32];
    crypto_aead_aes256gcm_state *st; /* NULL without AES-NI in libsodium */
    EVP_CIPHER_CTX *enc, *dec;
} actx;

/* Variant v over blocks of buf[0, len) of `block` bytes; tags[i] per block.  0 or -1. */
static int aead_pass(actx *a, int v, uint8_t *buf, size_t len, size_t block, uint8_t (*tags)[16])
{
    for (size_t off = 0, i = 0; off < len; off += block, i++) {
        uint8_t *m = buf + off;
        const size_t ml = len - off < block ? len - off : block;
        uint8_t ad[4] = { (uint8_t)ml, (uint8_t)(ml >> 8), (uint8_t)(ml >> 16), (uint8_t)(ml >> 24) };
        uint8_t nonce[24];
        nonce_of(i, nonce, sizeof nonce);
        int rc = -1;
        switch (v) {
        case A_SODIUM_SEAL:
            rc = crypto_aead_aes256gcm_encrypt_detached_afternm(m, tags[i], NULL, m, ml, ad, 4, NULL, nonce, a->st);
            break;
        case A_SODIUM_OPEN:
            rc = crypto_aead_aes256gcm_decrypt_detached_afternm(m, NULL, m, ml, tags[i], ad, 4, nonce, a->st);
            break;
        case A_OSSL_SEAL:
            rc = ossl_seal(a->enc, i, m, ml, ad, tags[i]);
            break;
        case A_OSSL_OPEN:
            rc = ossl_open(a->dec, i, m, ml, ad, tags[i]);
            break;
        case A_XC_SEAL:
            rc = crypto_aead_xchacha20poly1305_ietf_encrypt_detached(m, tags[i], NULL, m, ml, ad, 4, NULL, nonce,
                                                                     a->key);
            break;
        case A_XC_OPEN:
            rc = crypto_aead_xchacha20poly1305_ietf_decrypt_detached(m, NULL, m, ml, tags[i], ad, 4, nonce, a->key);
            break;
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* A block sealed by one library opens with the other, both ways (untimed). */
static int aead_cross_check(actx *a, const uint8_t *src, size_t n)
{
    uint8_t *x = malloc(n);
    uint8_t tag[16], tag2[16], ad[4] = { 1, 2, 3, 4 }, nonce[12];
    int rc = -1;
    if (x == NULL)
        return -1;
    nonce_of(77, nonce, sizeof nonce);
    memcpy(x, src, n);
    if (crypto_aead_aes256gcm_encrypt_detached_afternm(x, tag, NULL, x, n, ad, 4, NULL, nonce, a->st) != 0 ||
        ossl_open(a->dec, 77, x, n, ad, tag) != 0 || memcmp(x, src, n) != 0)
        goto out;
    if (ossl_seal(a->enc, 77, x, n, ad, tag2) != 0 || memcmp(tag, tag2, 16) != 0 ||
        crypto_aead_aes256gcm_decrypt_detached_afternm(x, NULL, x, n, tag2, ad, 4, nonce, a->st) != 0 ||
        memcmp(x, src, n) != 0)
        goto out;
    rc = 0;
out:
    free(x);
    return rc;
}

static const char usage_text[] = "usage: ingestctl bench crypto [--size BYTES] [--small BYTES] [--runs N]\n";

static int hash_pass(hctx *h, int v, const uint8_t *buf, size_t len, size_t block, uint8_t *sink)
{
    uint8_t out[32];
    for (size_t off = 0; off < len; off += block) {
        if (hash_one(h, v, buf + off, len - off < block ? len - off : block, out) != 0)
            return -1;
        sink[0] ^= out[0];
    }
    return 0;
}

int cmd_bench_crypto(int argc, char **argv)
{
    uint64_t size = UINT64_C(1) << 30, small = UINT64_C(256) << 20;
    long runs = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            fputs(usage_text, stderr);
            return 2;
        }
        const char *v = argv[++i];
        int ok = 0;
        if (strcmp(a, "--size") == 0) {
            size = bench_parse_size(v, &ok);
            if (!ok || size < BIG) {
                fprintf(stderr, "ingestctl bench crypto: bad --size '%s' (at least 64KiB)\n", v);
                return 2;
            }
        } else if (strcmp(a, "--small") == 0) {
            small = bench_parse_size(v, &ok);
            if (!ok || small < SMALL) {
                fprintf(stderr, "ingestctl bench crypto: bad --small '%s' (at least 1KiB)\n", v);
                return 2;
            }
        } else if (strcmp(a, "--runs") == 0) {
            char *end = NULL;
            runs = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || runs < 1 || runs > MAX_RUNS) {
                fprintf(stderr, "ingestctl bench crypto: --runs must be 1..%d\n", MAX_RUNS);
                return 2;
            }
        } else {
            fprintf(stderr, "ingestctl bench crypto: unknown option %s\n%s", a, usage_text);
            return 2;
        }
    }
    /* Before anything allocates through OpenSSL, or it refuses (then no counts). */
    const int counted = CRYPTO_set_mem_functions(count_malloc, count_realloc, count_free);
    if (sodium_init() < 0) {
        fprintf(stderr, "ingestctl bench crypto: libsodium failed to initialise\n");
        return 1;
    }
    int status = 1;
    const size_t buflen = size < BUF_MAX ? (size_t)size : BUF_MAX;
    const size_t sbuflen = small < BUF_MAX ? (size_t)small : BUF_MAX;
    const uint64_t passes = (size + buflen - 1) / buflen, spasses = (small + sbuflen - 1) / sbuflen;
    size_t nblocks = (buflen + BIG - 1) / BIG;
    if (nblocks < 1000)
        nblocks = 1000; /* the allocation count seals up to 1000 blocks of 1 KiB */
    uint8_t *buf = malloc(buflen), *ref = malloc(buflen), sink[1] = { 0 };
    uint8_t(*tags)[16] = malloc(nblocks * 16);
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MD *sha = EVP_MD_fetch(NULL, "SHA256", NULL);
    EVP_CIPHER *gcm = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
    hctx h;
    actx a;
    memset(&h, 0, sizeof h);
    memset(&a, 0, sizeof a);
    double hs[2][H_N][MAX_RUNS], as[A_N][MAX_RUNS];
    double alloc_ops[H_N + A_N];
    for (int k = 0; k < H_N + A_N; k++)
        alloc_ops[k] = -1;
    if (buf == NULL || ref == NULL || tags == NULL || mac == NULL || sha == NULL || gcm == NULL) {
        fprintf(stderr, "ingestctl bench crypto: out of memory or OpenSSL lacks HMAC/SHA256/AES-256-GCM\n");
        goto out;
    }
    randombytes_buf(buf, buflen);
    memcpy(ref, buf, buflen);
    randombytes_buf(h.key, sizeof h.key);
    memcpy(a.key, h.key, sizeof a.key);
    {
        char dig[] = "SHA256";
        const OSSL_PARAM params[] = { OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, dig, 0),
                                      OSSL_PARAM_construct_end() };
        uint8_t kblock[64];
        memset(kblock, 0x5c, sizeof kblock);
        memcpy(kblock, h.key, 32);
        h.mac = EVP_MAC_CTX_new(mac);
        h.tmpl = EVP_MAC_CTX_new(mac);
        h.pre = EVP_MD_CTX_new();
        h.work = EVP_MD_CTX_new();
        if (h.mac == NULL || h.tmpl == NULL || h.pre == NULL || h.work == NULL ||
            EVP_MAC_init(h.mac, h.key, 32, params) != 1 || EVP_MAC_init(h.tmpl, h.key, 32, params) != 1 ||
            EVP_DigestInit_ex2(h.pre, sha, NULL) != 1 || EVP_DigestUpdate(h.pre, kblock, sizeof kblock) != 1) {
            fprintf(stderr, "ingestctl bench crypto: OpenSSL hash setup failed\n");
            goto out;
        }
    }
    const int have_aes = crypto_aead_aes256gcm_is_available();
    if (have_aes) {
        a.st = sodium_malloc(sizeof(*a.st));
        if (a.st == NULL)
            goto out;
        crypto_aead_aes256gcm_beforenm(a.st, a.key);
    }
    a.enc = EVP_CIPHER_CTX_new();
    a.dec = EVP_CIPHER_CTX_new();
    if (a.enc == NULL || a.dec == NULL || EVP_EncryptInit_ex2(a.enc, gcm, a.key, NULL, NULL) != 1 ||
        EVP_DecryptInit_ex2(a.dec, gcm, a.key, NULL, NULL) != 1) {
        fprintf(stderr, "ingestctl bench crypto: OpenSSL AES-256-GCM setup failed\n");
        goto out;
    }
    /* Every variant of the keyed hash gives the same id as HMAC-SHA256 where it must. */
    {
        uint8_t x[32], y[32], z[32];
        if (hash_one(&h, H_HMAC_REINIT, buf, 1000, x) != 0 || hash_one(&h, H_HMAC_DUP, buf, 1000, y) != 0 ||
            hash_one(&h, H_HMAC_SODIUM, buf, 1000, z) != 0 || memcmp(x, y, 32) != 0 || memcmp(x, z, 32) != 0) {
            fprintf(stderr, "ingestctl bench crypto: HMAC-SHA256 variants disagree\n");
            goto out;
        }
    }
    if (have_aes && aead_cross_check(&a, buf, 5000) != 0) {
        fprintf(stderr, "ingestctl bench crypto: a frame sealed by one library did not open with the other\n");
        goto out;
    }
    /* Allocations per operation (untimed): up to 1000 blocks of 1 KiB (the tags fit: nblocks >= 1000 or ops <= nblocks). */
    if (counted) {
        const size_t ops = buflen / SMALL < 1000 ? buflen / SMALL : 1000;
        for (int v = 0; v < H_N; v++) {
            const unsigned long long n0 = n_allocs;
            if (hash_pass(&h, v, buf, ops * SMALL, SMALL, sink) != 0)
                goto out;
            alloc_ops[v] = (double)(n_allocs - n0) / (double)ops;
        }
        for (int v = A_OSSL_SEAL; v <= A_OSSL_OPEN; v++) {
            const unsigned long long n0 = n_allocs;
            if (aead_pass(&a, v, buf, ops * SMALL, SMALL, tags) != 0)
                goto out;
            alloc_ops[H_N + v] = (double)(n_allocs - n0) / (double)ops;
        }
        if (memcmp(buf, ref, buflen) != 0) {
            fprintf(stderr, "ingestctl bench crypto: AES-256-GCM (OpenSSL) did not round-trip\n");
            goto out;
        }
    }
    for (long r = 0; r < runs; r++) {
        for (int v = 0; v < H_N; v++) {
            double t = cpu_now();
            for (uint64_t p = 0; p < passes; p++)
                if (hash_pass(&h, v, buf, buflen, BIG, sink) != 0)
                    goto hash_failed;
            hs[0][v][r] = cpu_now() - t;
            t = cpu_now();
            for (uint64_t p = 0; p < spasses; p++)
                if (hash_pass(&h, v, buf, sbuflen, SMALL, sink) != 0)
                    goto hash_failed;
            hs[1][v][r] = cpu_now() - t;
        }
        for (int v = 0; v < A_N; v += 2) {
            if (!have_aes && v == A_SODIUM_SEAL) {
                as[v][r] = as[v + 1][r] = 0;
                continue;
            }
            double ts = 0, to = 0;
            for (uint64_t p = 0; p < passes; p++) {
                double t = cpu_now();
                if (aead_pass(&a, v, buf, buflen, BIG, tags) != 0)
                    goto aead_failed;
                const double u = cpu_now();
                if (aead_pass(&a, v + 1, buf, buflen, BIG, tags) != 0)
                    goto aead_failed;
                ts += u - t;
                to += cpu_now() - u;
            }
            if (memcmp(buf, ref, buflen) != 0)
                goto aead_failed;
            as[v][r] = ts;
            as[v + 1][r] = to;
        }
    }
    double hmed[2][H_N], amed[A_N];
    for (int b = 0; b < 2; b++)
        for (int v = 0; v < H_N; v++) {
            qsort(hs[b][v], (size_t)runs, sizeof(double), cmp_dbl);
            hmed[b][v] = hs[b][v][runs / 2];
        }
    for (int v = 0; v < A_N; v++) {
        qsort(as[v], (size_t)runs, sizeof(double), cmp_dbl);
        amed[v] = as[v][runs / 2];
    }
    const double big_bytes = (double)passes * (double)buflen, small_bytes = (double)spasses * (double)sbuflen;
    printf("{\"bytes_64k\":%.0f,\"bytes_1k\":%.0f,\"runs\":%ld,\"openssl\":\"%s\",\"aes_ni_libsodium\":%s,",
           big_bytes, small_bytes, runs, OpenSSL_version(OPENSSL_VERSION), have_aes ? "true" : "false");
    for (int b = 0; b < 2; b++) {
        printf("\"hash_%s_mbps\":{", b == 0 ? "64k" : "1k");
        for (int v = 0; v < H_N; v++)
            printf("%s\"%s\":%.1f", v ? "," : "", h_names[v],
                   (b == 0 ? big_bytes : small_bytes) / hmed[b][v] / 1e6);
        printf("},");
    }
    printf("\"aead_64k_mbps\":{");
    for (int v = 0; v < A_N; v++) {
        if (amed[v] <= 0)
            printf("%s\"%s\":null", v ? "," : "", a_names[v]);
        else
            printf("%s\"%s\":%.1f", v ? "," : "", a_names[v], big_bytes / amed[v] / 1e6);
    }
    printf("},\"allocs_per_op\":{");
    int first = 1;
    for (int v = 0; v < H_N + A_N; v++) {
        const char *name = v < H_N ? h_names[v] : a_names[v - H_N];
        if (v == H_BLAKE2B || v == H_HMAC_SODIUM || (v >= H_N && v - H_N != A_OSSL_SEAL && v - H_N != A_OSSL_OPEN))
            continue;
        if (alloc_ops[v] < 0)
            printf("%s\"%s\":null", first ? "" : ",", name);
        else
            printf("%s\"%s\":%.2f", first ? "" : ",", name, alloc_ops[v]);
        first = 0;
    }
    printf("},\"ratios\":{\"hmac_reinit_vs_blake2b_64k\":%.2f,\"hmac_reinit_vs_blake2b_1k\":%.2f,"
           "\"hmac_dup_vs_reinit_1k\":%.2f,\"chunk_id_vs_blake2b_64k\":%.2f,\"chunk_id_vs_blake2b_1k\":%.2f",
           hmed[0][H_BLAKE2B] / hmed[0][H_HMAC_REINIT], hmed[1][H_BLAKE2B] / hmed[1][H_HMAC_REINIT],
           hmed[1][H_HMAC_REINIT] / hmed[1][H_HMAC_DUP], hmed[0][H_BLAKE2B] / hmed[0][H_CHUNK_ID],
           hmed[1][H_BLAKE2B] / hmed[1][H_CHUNK_ID]);
    if (have_aes)
        printf(",\"aes_openssl_vs_sodium_seal\":%.2f,\"aes_openssl_vs_sodium_open\":%.2f",
               amed[A_SODIUM_SEAL] / amed[A_OSSL_SEAL], amed[A_SODIUM_OPEN] / amed[A_OSSL_OPEN]);
    printf("},\"sink\":%u}\n", sink[0]);
    status = 0;
    goto out;
hash_failed:
    fprintf(stderr, "ingestctl bench crypto: a keyed hash failed\n");
    goto out;
aead_failed:
    fprintf(stderr, "ingestctl bench crypto: an AEAD pass failed or did not round-trip\n");
out:
    EVP_MAC_CTX_free(h.mac);
    EVP_MAC_CTX_free(h.tmpl);
    EVP_MD_CTX_free(h.pre);
    EVP_MD_CTX_free(h.work);
    EVP_CIPHER_CTX_free(a.enc);
    EVP_CIPHER_CTX_free(a.dec);
    if (a.st != NULL)
        sodium_free(a.st);
    EVP_MAC_free(mac);
    EVP_MD_free(sha);
    EVP_CIPHER_free(gcm);
    free(buf);
    free(ref);
    free(tags);
    return status;
}
