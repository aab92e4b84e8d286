/*
 * Chunk ids and whole-file hashes (chunk id format 2, docs/chunking.md):
 * HMAC-SHA256 keyed with the fleet's dedup key, and the dedup key loader.
 *
 * Chunk ids run through OpenSSL's libcrypto (EVP_MAC), which uses the CPU's
 * SHA instructions (SHA-NI, ARMv8 crypto extensions): measured 1.74x
 * libsodium's keyed BLAKE2b at 64 KiB and 1.45x at 1 KiB here (`ingestctl
 * bench crypto`, docs/chunking.md).  Each thread
 * keeps one EVP_MAC_CTX keyed once and re-initialises it per chunk, so the
 * key is not re-processed per chunk.  OpenSSL 3.0 still allocates inside
 * every digest (re)init (its provider contexts: 2 small mallocs per chunk,
 * counted by the bench; EVP_MAC_CTX_dup would cost 11 and is slower); no
 * non-deprecated API avoids that.  Should libcrypto fail (out of memory),
 * the id is computed by libsodium's HMAC-SHA256 instead: the same bytes,
 * slower, allocation-free, so ingest_chunk_id() cannot fail.
 *
 * The whole-file hash is HMAC-SHA256 too, over the file's chunk ids (32
 * bytes per chunk), so its speed matters little (libsodium's SHA-256 has no
 * SHA-NI: about 1 us per file for the key blocks and the final; the key
 * blocks are hashed once per thread and key, see ingest_filehash_init):
 * libsodium's streaming crypto_auth_hmacsha256 keeps its state in the
 * caller's ingest_filehash, with no allocation.
 */
#include "internal.h"
#include "ingest/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <pthread.h>
#include <sodium.h>
#include <stdalign.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(crypto_auth_hmacsha256_state) <= sizeof(((ingest_filehash *)0)->opaque),
               "ingest_filehash.opaque too small for crypto_auth_hmacsha256_state");
_Static_assert(alignof(crypto_auth_hmacsha256_state) <= 64,
               "ingest_filehash alignment too small for crypto_auth_hmacsha256_state");
_Static_assert(crypto_auth_hmacsha256_BYTES == INGEST_ID_BYTES, "HMAC-SHA256 gives 32 bytes");

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_rc;

static void sodium_init_once(void) { sodium_rc = sodium_init(); }

/* sodium_init() picks the CPU's fastest implementations.  Safe from any thread. */
static int sodium_ready(void)
{
    pthread_once(&sodium_once, sodium_init_once);
    return sodium_rc < 0 ? INGEST_ECRYPTO : 0;
}

static const uint8_t default_key[INGEST_KEY_BYTES] = {
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
};

const uint8_t *ingest_default_dedup_key(void) { return default_key; }

/* ---- the per-thread keyed HMAC context ----------------------------------- */

/*
 * One per thread that computes ids, in thread-local storage (no allocation
 * of ours); the pthread key only frees the OpenSSL objects when the thread
 * exits.  `key` is the key `mac` holds, compared on every call: a thread
 * that alternates keys (tests) re-keys, the daemons never do.
 */
typedef struct idmac {
    EVP_MAC *alg;
    EVP_MAC_CTX *mac;
    int registered; /* with the pthread key, for the release at thread exit */
    int keyed;
    uint8_t key[INGEST_KEY_BYTES];
    /* the whole-file hash's state right after its init with fh_key (ingest_filehash_init) */
    int fh_keyed;
    uint8_t fh_key[INGEST_KEY_BYTES];
    crypto_auth_hmacsha256_state fh0;
} idmac;

static _Thread_local idmac tls_idmac;
static pthread_once_t idmac_once = PTHREAD_ONCE_INIT;
static pthread_key_t idmac_key;
static int idmac_key_ok;

static void idmac_release(void *p)
{
    idmac *m = p;
    EVP_MAC_CTX_free(m->mac);
    EVP_MAC_free(m->alg);
    sodium_memzero(m, sizeof(*m));
}

static void idmac_once_init(void) { idmac_key_ok = pthread_key_create(&idmac_key, idmac_release) == 0; }

/* After a libcrypto failure: a fresh context next time. */
static void idmac_drop(idmac *m)
{
    EVP_MAC_CTX_free(m->mac);
    m->mac = NULL;
    m->keyed = 0;
}

/* This thread's idmac, registered for its release at thread exit; NULL when that failed. */
static idmac *idmac_mine(void)
{
    idmac *m = &tls_idmac;
    if (!m->registered) {
        pthread_once(&idmac_once, idmac_once_init);
        if (!idmac_key_ok || pthread_setspecific(idmac_key, m) != 0)
            return NULL;
        m->registered = 1;
    }
    return m;
}

/* This thread's context, keyed with key and ready for data, or NULL (then use the fallback). */
static EVP_MAC_CTX *idmac_get(const uint8_t key[INGEST_KEY_BYTES])
{
    idmac *m = idmac_mine();
    if (m == NULL)
        return NULL;
    if (m->mac == NULL) {
        if (m->alg == NULL && (m->alg = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL)) == NULL)
            return NULL;
        if ((m->mac = EVP_MAC_CTX_new(m->alg)) == NULL)
            return NULL;
        m->keyed = 0;
    }
    /*
     * memcmp, not sodium_memcmp: both keys are this process's own (no
     * attacker input), and at 1 KiB chunks the constant-time compare cost
     * ~5% of the id.
     */
    if (m->keyed && memcmp(m->key, key, INGEST_KEY_BYTES) == 0) {
        /* The key's inner and outer states are kept: only they are copied back. */
        if (EVP_MAC_init(m->mac, NULL, 0, NULL) != 1)
            goto fail;
        return m->mac;
    }
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = { OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                                  OSSL_PARAM_construct_end() };
    m->keyed = 0;
    if (EVP_MAC_init(m->mac, key, INGEST_KEY_BYTES, params) != 1)
        goto fail;
    memcpy(m->key, key, INGEST_KEY_BYTES);
    m->keyed = 1;
    return m->mac;
fail:
    idmac_drop(m);
    return NULL;
}

static void hmac_sodium(const uint8_t key[INGEST_KEY_BYTES], const void *data, size_t len,
                        uint8_t id[INGEST_ID_BYTES])
{
    crypto_auth_hmacsha256_state st;
    (void)sodium_ready();
    crypto_auth_hmacsha256_init(&st, key, INGEST_KEY_BYTES);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)data, (unsigned long long)len);
    crypto_auth_hmacsha256_final(&st, id);
    sodium_memzero(&st, sizeof(st));
}

void ingest_chunk_id(const uint8_t key[INGEST_KEY_BYTES], const void *data, size_t len,
                     uint8_t id[INGEST_ID_BYTES])
{
    EVP_MAC_CTX *mac = idmac_get(key);
    size_t out = 0;
    if (mac != NULL && (len == 0 || EVP_MAC_update(mac, (const unsigned char *)data, len) == 1) &&
        EVP_MAC_final(mac, id, &out, INGEST_ID_BYTES) == 1 && out == INGEST_ID_BYTES)
        return;
    if (mac != NULL)
        idmac_drop(&tls_idmac);
    hmac_sodium(key, data, len, id);
}

/* ---- the whole-file hash ------------------------------------------------- */

/*
 * HMAC's init hashes a block of the key for each of its two states: two
 * SHA-256 compressions in libsodium's portable code, about half of a
 * small file's hash.  Each thread keeps the state of its last key and
 * copies it (the receiver hashes every file with the same key).
 */
void ingest_filehash_init(ingest_filehash *h, const uint8_t key[INGEST_KEY_BYTES])
{
    crypto_auth_hmacsha256_state *st = (crypto_auth_hmacsha256_state *)(void *)h->opaque;
    idmac *m = idmac_mine();
    if (m != NULL && m->fh_keyed && memcmp(m->fh_key, key, INGEST_KEY_BYTES) == 0) {
        memcpy(st, &m->fh0, sizeof(*st));
        return;
    }
    (void)sodium_ready();
    crypto_auth_hmacsha256_init(st, key, INGEST_KEY_BYTES);
    if (m != NULL) {
        memcpy(&m->fh0, st, sizeof(*st));
        memcpy(m->fh_key, key, INGEST_KEY_BYTES);
        m->fh_keyed = 1;
    }
}

void ingest_filehash_update(ingest_filehash *h, const void *data, size_t len)
{
    crypto_auth_hmacsha256_update((crypto_auth_hmacsha256_state *)(void *)h->opaque, (const unsigned char *)data,
                                  (unsigned long long)len);
}

void ingest_filehash_final(ingest_filehash *h, uint8_t out[INGEST_ID_BYTES])
{
    crypto_auth_hmacsha256_final((crypto_auth_hmacsha256_state *)(void *)h->opaque, out);
    sodium_memzero(h->opaque, sizeof(h->opaque));
}

int ingest_dedup_key_load(ingest_ctx *ctx, const char *path, uint8_t key[INGEST_KEY_BYTES])
{
    /* Longest accepted form is 64 hex digits + "\n"; read one byte more to detect longer files. */
    uint8_t buf[2 * INGEST_KEY_BYTES + 2];
    size_t n = 0;
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        return ingest__fail(ctx, e == ENOENT ? INGEST_ENOTFOUND : INGEST_EIO, "dedup key: open %s: %s", path,
                            strerror(e));
    }
    rc = ingest__key_file_private(ctx, fd, path, "dedup key");
    if (rc != 0)
        goto out;
    while (n < sizeof(buf)) {
        const ssize_t r = read(fd, buf + n, sizeof(buf) - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            rc = ingest__fail(ctx, INGEST_EIO, "dedup key: read %s: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (n == INGEST_KEY_BYTES) {
        memcpy(key, buf, INGEST_KEY_BYTES);
        goto out;
    }
    size_t hexlen = n;
    if (hexlen == 2 * INGEST_KEY_BYTES + 1 && buf[hexlen - 1] == '\n')
        hexlen--;
    if (hexlen != 2 * INGEST_KEY_BYTES) {
        rc = ingest__fail(ctx, INGEST_EINVAL,
                          "dedup key %s: expected 32 raw bytes or 64 hex digits (optional newline), got %s%zu bytes",
                          path, n == sizeof(buf) ? "at least " : "", n);
        goto out;
    }
    for (size_t i = 0; i < INGEST_KEY_BYTES; i++) {
        const int hi = ingest__hexval((char)buf[2 * i]), lo = ingest__hexval((char)buf[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            const size_t at = hi < 0 ? 2 * i : 2 * i + 1;
            rc = ingest__fail(ctx, INGEST_EINVAL, "dedup key %s: not a hex digit at offset %zu (byte 0x%02x)", path,
                              at, buf[at]);
            sodium_memzero(key, INGEST_KEY_BYTES);
            goto out;
        }
        key[i] = (uint8_t)(hi << 4 | lo);
    }
out:
    sodium_memzero(buf, sizeof(buf));
    close(fd);
    return rc;
}
