/*
 * Fuzz target: the files a receiver and an agent read their keys from
 * (libingest/transport/keys.c, hash.c).  Byte 0 of the input selects the loader, the
 * rest is the file's content:
 *   0  authorized devices (ingest_authset_load)
 *   1  secret key file (ingest_secret_key_load)
 *   2  public key file (ingest_public_key_load)
 *   3  dedup key file (ingest_dedup_key_load)
 *   4  a bare base64 public key (ingest_public_key_parse)
 * (other values: byte 0 modulo 5).
 *
 * The loaders take a path, so the content goes to an in-memory file
 * (memfd, or an unlinked temporary file) reached as /proc/self/fd/N; no
 * file is left behind.  Checks besides no crash and no leak: an accepted
 * authorized-devices file finds every device it lists with its key; an
 * accepted secret key's public half is derived from its secret half, a
 * refused one is wiped; an accepted public key formats back to the text.
 */
#include <fcntl.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ingest.h"
#include "ingest/session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fz_fd = -1;
static char fz_path[64];

static void fz_check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_keys: %s\n", what);
        abort();
    }
}

static void fz_setup(void)
{
    if (fz_fd >= 0)
        return;
    fz_fd = memfd_create("fuzz_keys", MFD_CLOEXEC);
    if (fz_fd < 0) {
        const char *dir = getenv("TMPDIR");
        char tmpl[512];
        snprintf(tmpl, sizeof(tmpl), "%s/fuzz_keys.XXXXXX", dir != NULL && dir[0] != '\0' ? dir : "/tmp");
        fz_fd = mkstemp(tmpl);
        fz_check(fz_fd >= 0, "no temporary file");
        unlink(tmpl);
    }
    /* Owner-only, as key files should be. */
    fz_check(fchmod(fz_fd, 0600) == 0, "fchmod");
    snprintf(fz_path, sizeof(fz_path), "/proc/self/fd/%d", fz_fd);
    fz_check(sodium_init() >= 0, "sodium_init");
}

static void fz_write(const uint8_t *p, size_t n)
{
    fz_check(ftruncate(fz_fd, 0) == 0, "ftruncate");
    size_t done = 0;
    while (done < n) {
        const ssize_t w = pwrite(fz_fd, p + done, n - done, (off_t)done);
        fz_check(w > 0, "pwrite");
        done += (size_t)w;
    }
}

static int fz_blank(char c) { return c == ' ' || c == '\t'; }

/* Every "ID KEY" line of an accepted file is found in the set with its key. */
static void fz_check_authset(const ingest_authset *set, const uint8_t *p, size_t n)
{
    size_t lines = 0;
    for (size_t at = 0; at < n;) {
        size_t end = at;
        while (end < n && p[end] != '\n')
            end++;
        size_t len = end - at;
        const char *s = (const char *)p + at;
        lines++;
        at = end + 1;
        if (len > 0 && s[len - 1] == '\r')
            len--;
        size_t i = 0;
        while (i < len && fz_blank(s[i]))
            i++;
        if (i == len || s[i] == '#')
            continue;
        const size_t id = i;
        while (i < len && !fz_blank(s[i]))
            i++;
        const size_t id_len = i - id;
        while (i < len && fz_blank(s[i]))
            i++;
        const size_t key = i;
        while (i < len && !fz_blank(s[i]))
            i++;
        uint8_t want[INGEST_PUBKEY_BYTES], got[INGEST_PUBKEY_BYTES];
        fz_check(ingest_public_key_parse(NULL, s + key, i - key, want) == 0, "accepted a bad key");
        fz_check(ingest_authset_lookup(set, s + id, id_len, got) == 0, "a listed device is not found");
        fz_check(memcmp(want, got, sizeof(want)) == 0, "a listed device has another key");
    }
    fz_check(ingest_authset_count(set) <= lines, "more devices than lines");
    fz_check(ingest_authset_lookup(set, "", 0, NULL) == INGEST_ENOTFOUND, "the empty id is found");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    fz_setup();
    const unsigned sel = data[0] % 5u;
    const uint8_t *p = data + 1;
    const size_t n = size - 1;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL)
        return 0;
    if (sel != 4)
        fz_write(p, n);
    switch (sel) {
    case 0: {
        ingest_authset *set = NULL;
        const int rc = ingest_authset_load(ctx, fz_path, &set);
        if (rc == 0) {
            /* Text with a NUL is refused or cut there: check only plain text. */
            if (memchr(p, '\0', n) == NULL)
                fz_check_authset(set, p, n);
        } else {
            fz_check(set == NULL && ingest_ctx_errmsg(ctx)[0] != '\0', "authset refused without a message");
        }
        ingest_authset_destroy(set);
        break;
    }
    case 1: {
        ingest_secret_key k;
        static const ingest_secret_key zero;
        const int rc = ingest_secret_key_load(ctx, fz_path, &k);
        if (rc == 0) {
            uint8_t derived[INGEST_PUBKEY_BYTES];
            fz_check(crypto_scalarmult_base(derived, k.sk) == 0 && memcmp(derived, k.pk, sizeof(derived)) == 0,
                     "secret key accepted with a public half that does not match");
        } else {
            fz_check(memcmp(&k, &zero, sizeof(k)) == 0, "a refused secret key is not wiped");
        }
        ingest_secret_key_wipe(&k);
        break;
    }
    case 2: {
        uint8_t pk[INGEST_PUBKEY_BYTES];
        if (ingest_public_key_load(ctx, fz_path, pk) == 0) {
            char b64[INGEST_PUBKEY_B64_BYTES];
            ingest_public_key_format(pk, b64);
            fz_check(n >= sizeof(b64) - 1 && memmem(p, n, b64, sizeof(b64) - 1) != NULL,
                     "public key accepted but formats to other text");
        }
        break;
    }
    case 3: {
        uint8_t key[INGEST_KEY_BYTES];
        (void)ingest_dedup_key_load(ctx, fz_path, key);
        break;
    }
    default: {
        uint8_t pk[INGEST_PUBKEY_BYTES];
        if (ingest_public_key_parse(ctx, (const char *)p, n, pk) == 0) {
            char b64[INGEST_PUBKEY_B64_BYTES];
            ingest_public_key_format(pk, b64);
            fz_check(n == sizeof(b64) - 1 && memcmp(p, b64, n) == 0, "public key parse is not canonical");
        }
        break;
    }
    }
    ingest_ctx_destroy(ctx);
    return 0;
}
