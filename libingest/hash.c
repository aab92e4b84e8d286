/*
 * Chunk ids and whole-file hashes (chunk id format 2, docs/chunking.md):
 * HMAC-SHA256 keyed with the fleet's dedup key, and the dedup key loader.
 *
 * Both run on OpenSSL's libcrypto SHA-256 (SHA256_Init/Update/Final), which
 * uses the CPU's SHA instructions (SHA-NI, ARMv8 crypto extensions);
 * libsodium's SHA-256 has none.  HMAC is built here on two SHA-256 states:
 * each thread keeps the inner and outer states of its last key (the key
 * block hashed once) and copies them per hash, so a hash allocates nothing,
 * cannot fail and costs the blocks of its data plus two.  `ingestctl bench
 * crypto` (docs/chunking.md): ids of 1 KiB blocks at 1.16x OpenSSL's EVP_MAC
 * re-initialised per block (which allocates twice per block), 5.8x
 * libsodium's HMAC; at 64 KiB the same as EVP_MAC.  OpenSSL 3.0 deprecates
 * these low-level calls in favour of EVP, whose contexts allocate; a
 * libcrypto built without them (OPENSSL_NO_DEPRECATED_3_0) gets libsodium's
 * SHA-256 here instead: the same bytes, slower.
 */
#define OPENSSL_API_COMPAT 10101 /* SHA256_Init & co. without deprecation warnings */
#include "internal.h"
#include "ingest/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/opensslconf.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <sodium.h>
#include <stdalign.h>
#include <string.h>
#include <unistd.h>

#if defined(OPENSSL_NO_DEPRECATED_3_0)
typedef crypto_hash_sha256_state sha_state;
static void sha_init(sha_state *s) { crypto_hash_sha256_init(s); }
static void sha_update(sha_state *s, const void *d, size_t n)
{
    crypto_hash_sha256_update(s, (const unsigned char *)d, (unsigned long long)n);
}
static void sha_final(sha_state *s, uint8_t out[32]) { crypto_hash_sha256_final(s, out); }
#else
typedef SHA256_CTX sha_state;
static void sha_init(sha_state *s) { (void)SHA256_Init(s); }
static void sha_update(sha_state *s, const void *d, size_t n) { (void)SHA256_Update(s, d, n); }
static void sha_final(sha_state *s, uint8_t out[32]) { (void)SHA256_Final(out, s); }
#endif

/* HMAC-SHA256's two states right after their key blocks (RFC 2104). */
typedef struct hmac_state {
    sha_state in, out;
} hmac_state;

_Static_assert(sizeof(hmac_state) <= sizeof(((ingest_filehash *)0)->opaque),
               "ingest_filehash.opaque too small for two SHA-256 states");
_Static_assert(alignof(hmac_state) <= 64, "ingest_filehash alignment too small for a SHA-256 state");
_Static_assert(INGEST_KEY_BYTES <= 64, "a dedup key fits one SHA-256 block");

static void hmac_key(hmac_state *h, const uint8_t key[INGEST_KEY_BYTES])
{
    uint8_t pad[64];
    memset(pad, 0x36, sizeof(pad));
    for (size_t i = 0; i < INGEST_KEY_BYTES; i++)
        pad[i] ^= key[i];
    sha_init(&h->in);
    sha_update(&h->in, pad, sizeof(pad));
    memset(pad, 0x5c, sizeof(pad));
    for (size_t i = 0; i < INGEST_KEY_BYTES; i++)
        pad[i] ^= key[i];
    sha_init(&h->out);
    sha_update(&h->out, pad, sizeof(pad));
    sodium_memzero(pad, sizeof(pad));
}

static void hmac_final(hmac_state *h, uint8_t out[INGEST_ID_BYTES])
{
    uint8_t inner[32];
    sha_final(&h->in, inner);
    sha_update(&h->out, inner, sizeof(inner));
    sha_final(&h->out, out);
    sodium_memzero(inner, sizeof(inner));
}

static const uint8_t default_key[INGEST_KEY_BYTES] = {
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
};

const uint8_t *ingest_default_dedup_key(void) { return default_key; }

/* ---- the per-thread key states ------------------------------------------ */

/*
 * One per thread that hashes, in thread-local storage: the HMAC states of
 * the last key it used, compared on every call (a thread that alternates
 * keys, as tests do, keys again; the daemons never do).  The pthread key
 * only wipes it when the thread exits.
 */
typedef struct idmac {
    int registered; /* with the pthread key, for the wipe at thread exit */
    int keyed;
    uint8_t key[INGEST_KEY_BYTES];
    hmac_state st; /* right after the key blocks of key */
} idmac;

static _Thread_local idmac tls_idmac;
static pthread_once_t idmac_once = PTHREAD_ONCE_INIT;
static pthread_key_t idmac_key;
static int idmac_key_ok;

static void idmac_release(void *p) { sodium_memzero(p, sizeof(idmac)); }

static void idmac_once_init(void) { idmac_key_ok = pthread_key_create(&idmac_key, idmac_release) == 0; }

/*
 * Set *h to the states of key: copied from this thread's, which are keyed
 * first if they hold another key.  memcmp, not sodium_memcmp: both keys are
 * this process's own (no attacker input).
 */
static void hmac_begin(hmac_state *h, const uint8_t key[INGEST_KEY_BYTES])
{
    idmac *m = &tls_idmac;
    if (!m->registered) {
        pthread_once(&idmac_once, idmac_once_init);
        /* Not registered: the states are still kept, only not wiped at exit. */
        if (idmac_key_ok && pthread_setspecific(idmac_key, m) == 0)
            m->registered = 1;
    }
    if (!m->keyed || memcmp(m->key, key, INGEST_KEY_BYTES) != 0) {
        hmac_key(&m->st, key);
        memcpy(m->key, key, INGEST_KEY_BYTES);
        m->keyed = 1;
    }
    memcpy(h, &m->st, sizeof(*h));
}

void ingest_chunk_id(const uint8_t key[INGEST_KEY_BYTES], const void *data, size_t len,
                     uint8_t id[INGEST_ID_BYTES])
{
    hmac_state h;
    hmac_begin(&h, key);
    sha_update(&h.in, data, len);
    hmac_final(&h, id);
    sodium_memzero(&h, sizeof(h));
}

/* ---- the whole-file hash ------------------------------------------------- */

void ingest_filehash_init(ingest_filehash *h, const uint8_t key[INGEST_KEY_BYTES])
{
    hmac_begin((hmac_state *)(void *)h->opaque, key);
}

void ingest_filehash_update(ingest_filehash *h, const void *data, size_t len)
{
    sha_update(&((hmac_state *)(void *)h->opaque)->in, data, len);
}

void ingest_filehash_final(ingest_filehash *h, uint8_t out[INGEST_ID_BYTES])
{
    hmac_final((hmac_state *)(void *)h->opaque, out);
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
