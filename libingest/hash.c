/*
 * Chunk ids and whole-file hashes: keyed BLAKE2b-256 through libsodium's
 * crypto_generichash, and the dedup key loader.
 */
#include "internal.h"
#include "ingest/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdalign.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(crypto_generichash_state) <= sizeof(((ingest_filehash *)0)->opaque),
               "ingest_filehash.opaque too small for crypto_generichash_state");
_Static_assert(alignof(crypto_generichash_state) <= 64,
               "ingest_filehash alignment too small for crypto_generichash_state");
_Static_assert(crypto_generichash_KEYBYTES_MAX >= INGEST_KEY_BYTES, "key too long for BLAKE2b");

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_rc;

static void sodium_init_once(void) { sodium_rc = sodium_init(); }

/*
 * sodium_init() selects the fastest BLAKE2b implementation for this CPU
 * (AVX2 here); without it the portable code runs.  Safe from any thread.
 */
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

void ingest_chunk_id(const uint8_t key[INGEST_KEY_BYTES], const void *data, size_t len,
                     uint8_t id[INGEST_ID_BYTES])
{
    (void)sodium_ready();
    /* crypto_generichash only fails for out-of-range key/out lengths. */
    (void)crypto_generichash(id, INGEST_ID_BYTES, (const unsigned char *)data, (unsigned long long)len, key,
                             INGEST_KEY_BYTES);
}

void ingest_filehash_init(ingest_filehash *h, const uint8_t key[INGEST_KEY_BYTES])
{
    (void)sodium_ready();
    (void)crypto_generichash_init((crypto_generichash_state *)(void *)h->opaque, key, INGEST_KEY_BYTES,
                                  INGEST_ID_BYTES);
}

void ingest_filehash_update(ingest_filehash *h, const void *data, size_t len)
{
    (void)crypto_generichash_update((crypto_generichash_state *)(void *)h->opaque,
                                    (const unsigned char *)data, (unsigned long long)len);
}

void ingest_filehash_final(ingest_filehash *h, uint8_t out[INGEST_ID_BYTES])
{
    (void)crypto_generichash_final((crypto_generichash_state *)(void *)h->opaque, out, INGEST_ID_BYTES);
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
