/* Static key pairs, key files, the dedup key file and authorized devices. */
#include "../internal.h"
#include "ingest/session.h"
#include "ingest/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET_KEY_MAGIC "ingest-secret-key v1"
#define KEY_FILE_MAX 4096 /* key and .pub files are far smaller */

int ingest_secret_key_generate(ingest_secret_key *k)
{
    if (sodium_init() < 0)
        return INGEST_ECRYPTO;
    if (crypto_kx_keypair(k->pk, k->sk) != 0)
        return INGEST_ECRYPTO;
    return 0;
}

void ingest_secret_key_wipe(ingest_secret_key *k)
{
    if (k != NULL)
        sodium_memzero(k, sizeof(*k));
}

void ingest_public_key_format(const uint8_t pk[INGEST_PUBKEY_BYTES], char out[INGEST_PUBKEY_B64_BYTES])
{
    sodium_bin2base64(out, INGEST_PUBKEY_B64_BYTES, pk, INGEST_PUBKEY_BYTES, sodium_base64_VARIANT_ORIGINAL);
}

/*
 * Only the base64 alphabet and '=' padding.  libsodium 1.0.18 (Debian 12)
 * decodes every byte >= 0x80 as some base64 digit, so without this check
 * a key text with a stray non-ASCII byte loads as another key instead of
 * being refused (found by tests/fuzz/fuzz_keys.c).
 */
static int b64_alphabet_only(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        const char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
              c == '/' || c == '='))
            return 0;
    }
    return 1;
}

int ingest_public_key_parse(ingest_ctx *ctx, const char *b64, size_t len, uint8_t pk[INGEST_PUBKEY_BYTES])
{
    size_t bin_len = 0;
    const char *end = NULL;
    if (len != INGEST_PUBKEY_B64_BYTES - 1)
        return ingest__fail(ctx, INGEST_EINVAL, "public key: expected %d base64 characters, got %zu",
                            INGEST_PUBKEY_B64_BYTES - 1, len);
    if (!b64_alphabet_only(b64, len) ||
        sodium_base642bin(pk, INGEST_PUBKEY_BYTES, b64, len, NULL, &bin_len, &end,
                          sodium_base64_VARIANT_ORIGINAL) != 0 ||
        bin_len != INGEST_PUBKEY_BYTES || end != b64 + len)
        return ingest__fail(ctx, INGEST_EINVAL, "public key: not valid base64 of %d bytes", INGEST_PUBKEY_BYTES);
    return 0;
}

/* Create path exclusively with mode, write all of data, fsync. */
static int write_new_file(ingest_ctx *ctx, const char *path, mode_t mode, const void *data, size_t len)
{
    int rc = 0;
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
        const int e = errno;
        if (e == EEXIST)
            return ingest__fail(ctx, INGEST_EEXIST, "%s: already exists; refusing to overwrite", path);
        return ingest__fail(ctx, ingest__errno(e), "%s: create: %s", path, strerror(e));
    }
    /* The umask can only remove bits; make the mode exact anyway. */
    if (fchmod(fd, mode) != 0) {
        rc = ingest__fail(ctx, INGEST_EIO, "%s: chmod: %s", path, strerror(errno));
        goto out;
    }
    const uint8_t *p = data;
    size_t done = 0;
    while (done < len) {
        const ssize_t n = write(fd, p + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            const int e = errno;
            rc = ingest__fail(ctx, ingest__errno(e), "%s: write: %s", path, strerror(e));
            goto out;
        }
        done += (size_t)n;
    }
    if (fsync(fd) != 0) {
        const int e = errno;
        rc = ingest__fail(ctx, ingest__errno(e), "%s: fsync: %s", path, strerror(e));
    }
out:
    close(fd);
    if (rc != 0)
        unlink(path);
    return rc;
}

/*
 * As ssh does for private keys: a secret must not be readable (or writable)
 * by group or others.  Checked on the open descriptor, so the file checked is
 * the file read.  One exception, PostgreSQL's: a file owned by root may give
 * its group read access (root:ingest 0640), the usual way to hand a key to a
 * service user; root itself still needs 0600.  Only regular files are
 * checked; anything else fails when it is read.
 */
int ingest__key_file_private(ingest_ctx *ctx, int fd, const char *path, const char *what)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        return ingest__fail(ctx, ingest__errno(e), "%s %s: stat: %s", what, path, strerror(e));
    }
    if (!S_ISREG(st.st_mode))
        return 0;
    mode_t too_open = S_IRWXG | S_IRWXO;
    if (st.st_uid == 0 && geteuid() != 0)
        too_open = S_IWGRP | S_IXGRP | S_IRWXO;
    if ((st.st_mode & too_open) == 0)
        return 0;
    return ingest__fail(ctx, INGEST_EINVAL,
                        "%s %s: permissions %04o are too open: group or others can access it; "
                        "refusing to use it (fix: chmod 600 %s)",
                        what, path, (unsigned)(st.st_mode & 07777), path);
}

/*
 * Read a whole small file into buf (cap includes room for a NUL); with
 * secret_what set, refuse it unless private (ingest__key_file_private).
 */
static int read_small_file(ingest_ctx *ctx, const char *path, const char *secret_what, char *buf, size_t cap,
                           size_t *len)
{
    int rc = 0;
    size_t done = 0;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        return ingest__fail(ctx, e == ENOENT ? INGEST_ENOTFOUND : INGEST_EIO, "%s: open: %s", path, strerror(e));
    }
    if (secret_what != NULL) {
        rc = ingest__key_file_private(ctx, fd, path, secret_what);
        if (rc != 0)
            goto out;
    }
    for (;;) {
        if (done == cap - 1) {
            rc = ingest__fail(ctx, INGEST_ETOOBIG, "%s: larger than %zu bytes", path, cap - 1);
            goto out;
        }
        const ssize_t n = read(fd, buf + done, cap - 1 - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = ingest__fail(ctx, INGEST_EIO, "%s: read: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    buf[done] = '\0';
    *len = done;
out:
    close(fd);
    return rc;
}

int ingest_secret_key_save(ingest_ctx *ctx, const char *path, const ingest_secret_key *k)
{
    char pk64[INGEST_PUBKEY_B64_BYTES], sk64[INGEST_PUBKEY_B64_BYTES];
    char text[256];
    ingest_public_key_format(k->pk, pk64);
    sodium_bin2base64(sk64, sizeof(sk64), k->sk, sizeof(k->sk), sodium_base64_VARIANT_ORIGINAL);
    const int n = snprintf(text, sizeof(text), "%s\nkx-public %s\nkx-secret %s\n", SECRET_KEY_MAGIC, pk64, sk64);
    const int rc = write_new_file(ctx, path, 0600, text, (size_t)n);
    sodium_memzero(sk64, sizeof(sk64));
    sodium_memzero(text, sizeof(text));
    return rc;
}

/* Next line of text (NUL-terminated buffer) without its newline; NULL at end. */
static char *next_line(char **cursor)
{
    char *s = *cursor;
    if (*s == '\0')
        return NULL;
    char *nl = strchr(s, '\n');
    if (nl != NULL) {
        *nl = '\0';
        *cursor = nl + 1;
    } else {
        *cursor = s + strlen(s);
    }
    const size_t n = strlen(s);
    if (n > 0 && s[n - 1] == '\r')
        s[n - 1] = '\0';
    return s;
}

/* Parse "NAME BASE64" into 32 bytes. */
static int parse_key_line(ingest_ctx *ctx, const char *path, int lineno, char *line, const char *name,
                          uint8_t out[32])
{
    const size_t nl = strlen(name);
    size_t bin_len = 0;
    const char *end = NULL;
    if (line == NULL || strncmp(line, name, nl) != 0 || line[nl] != ' ')
        return ingest__fail(ctx, INGEST_ECORRUPT, "%s:%d: expected '%s BASE64'", path, lineno, name);
    const char *b64 = line + nl + 1;
    const size_t len = strlen(b64);
    if (!b64_alphabet_only(b64, len) || sodium_base642bin(out, 32, b64, len, NULL, &bin_len, &end, sodium_base64_VARIANT_ORIGINAL) != 0 ||
        bin_len != 32 || end != b64 + len)
        return ingest__fail(ctx, INGEST_ECORRUPT, "%s:%d: %s is not base64 of 32 bytes", path, lineno, name);
    return 0;
}

int ingest_secret_key_load(ingest_ctx *ctx, const char *path, ingest_secret_key *k)
{
    char text[KEY_FILE_MAX];
    size_t len = 0;
    uint8_t derived[INGEST_PUBKEY_BYTES];
    int rc;
    memset(k, 0, sizeof(*k));
    if (sodium_init() < 0)
        return ingest__fail(ctx, INGEST_ECRYPTO, "libsodium: initialisation failed");
    rc = read_small_file(ctx, path, "secret key", text, sizeof(text), &len);
    if (rc != 0)
        goto out;
    if (memchr(text, '\0', len) != NULL) {
        rc = ingest__fail(ctx, INGEST_ECORRUPT, "%s: not a secret key file (binary data)", path);
        goto out;
    }
    char *cur = text;
    const char *magic = next_line(&cur);
    if (magic == NULL || strncmp(magic, "ingest-secret-key ", 18) != 0) {
        rc = ingest__fail(ctx, INGEST_ECORRUPT, "%s:1: not a secret key file (expected '%s')", path,
                          SECRET_KEY_MAGIC);
        goto out;
    }
    if (strcmp(magic, SECRET_KEY_MAGIC) != 0) {
        rc = ingest__fail(ctx, INGEST_EVERSION, "%s:1: unsupported key file version '%s'", path, magic + 18);
        goto out;
    }
    rc = parse_key_line(ctx, path, 2, next_line(&cur), "kx-public", k->pk);
    if (rc != 0)
        goto out;
    rc = parse_key_line(ctx, path, 3, next_line(&cur), "kx-secret", k->sk);
    if (rc != 0)
        goto out;
    for (const char *rest; (rest = next_line(&cur)) != NULL;)
        if (rest[0] != '\0' && rest[0] != '#') {
            rc = ingest__fail(ctx, INGEST_ECORRUPT, "%s: unexpected line after the key", path);
            goto out;
        }
    if (crypto_scalarmult_base(derived, k->sk) != 0 || sodium_memcmp(derived, k->pk, sizeof(derived)) != 0) {
        rc = ingest__fail(ctx, INGEST_ECORRUPT, "%s: kx-public does not match kx-secret", path);
        goto out;
    }
out:
    sodium_memzero(text, sizeof(text));
    if (rc != 0)
        ingest_secret_key_wipe(k);
    return rc;
}

int ingest_public_key_save(ingest_ctx *ctx, const char *path, const uint8_t pk[INGEST_PUBKEY_BYTES])
{
    char line[INGEST_PUBKEY_B64_BYTES + 1];
    ingest_public_key_format(pk, line);
    line[INGEST_PUBKEY_B64_BYTES - 1] = '\n';
    return write_new_file(ctx, path, 0644, line, INGEST_PUBKEY_B64_BYTES);
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

int ingest_public_key_load(ingest_ctx *ctx, const char *path, uint8_t pk[INGEST_PUBKEY_BYTES])
{
    char text[KEY_FILE_MAX];
    size_t len = 0;
    INGEST__FORWARD(read_small_file(ctx, path, NULL, text, sizeof(text), &len));
    size_t a = 0, b = len;
    while (a < b && is_blank(text[a]))
        a++;
    while (b > a && is_blank(text[b - 1]))
        b--;
    const int rc = ingest_public_key_parse(ctx, text + a, b - a, pk);
    if (rc != 0)
        return ingest__fail(ctx, INGEST_ECORRUPT, "%s: expected one line with a base64 public key of %d bytes",
                            path, INGEST_PUBKEY_BYTES);
    return 0;
}

int ingest_dedup_key_generate_file(ingest_ctx *ctx, const char *path)
{
    uint8_t key[INGEST_KEY_BYTES];
    char hex[2 * INGEST_KEY_BYTES + 1];
    if (sodium_init() < 0)
        return ingest__fail(ctx, INGEST_ECRYPTO, "libsodium: initialisation failed");
    randombytes_buf(key, sizeof(key));
    ingest_to_hex(key, sizeof(key), hex);
    hex[2 * INGEST_KEY_BYTES] = '\n';
    const int rc = write_new_file(ctx, path, 0600, hex, sizeof(hex));
    sodium_memzero(key, sizeof(key));
    sodium_memzero(hex, sizeof(hex));
    return rc;
}

/* ---- authorized devices ------------------------------------------------- */

typedef struct auth_entry {
    char id[INGEST_DEVICE_ID_MAX + 1];
    uint8_t pk[INGEST_PUBKEY_BYTES];
    uint32_t line; /* source line, 0 when added by API */
} auth_entry;

struct ingest_authset_s {
    ingest_ctx *ctx;
    auth_entry *v;
    size_t n;
    size_t cap;
};

int ingest_authset_create(ingest_ctx *ctx, ingest_authset **out)
{
    *out = NULL;
    ingest_authset *set = ingest__calloc(ctx, 1, sizeof(*set));
    if (set == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "authset: out of memory");
    set->ctx = ctx;
    *out = set;
    return 0;
}

void ingest_authset_destroy(ingest_authset *set)
{
    if (set == NULL)
        return;
    ingest__free(set->ctx, set->v);
    ingest__free(set->ctx, set);
}

size_t ingest_authset_count(const ingest_authset *set) { return set->n; }

int ingest_authset_entry(const ingest_authset *set, size_t i, const char **device_id,
                         uint8_t pk[INGEST_PUBKEY_BYTES])
{
    if (i >= set->n)
        return INGEST_ENOTFOUND;
    *device_id = set->v[i].id;
    if (pk != NULL)
        memcpy(pk, set->v[i].pk, INGEST_PUBKEY_BYTES);
    return 0;
}

static int grow(ingest_authset *set)
{
    if (set->n < set->cap)
        return 0;
    if (set->n >= INGEST_AUTHSET_MAX_DEVICES)
        return ingest__fail(set->ctx, INGEST_ETOOBIG, "authset: more than %d devices", INGEST_AUTHSET_MAX_DEVICES);
    size_t ncap = set->cap ? set->cap * 2 : 16;
    if (ncap > INGEST_AUTHSET_MAX_DEVICES)
        ncap = INGEST_AUTHSET_MAX_DEVICES;
    auth_entry *nv = ingest__calloc(set->ctx, ncap, sizeof(*nv));
    if (nv == NULL)
        return ingest__fail(set->ctx, INGEST_ENOMEM, "authset: out of memory for %zu devices", ncap);
    if (set->n > 0)
        memcpy(nv, set->v, set->n * sizeof(*nv));
    ingest__free(set->ctx, set->v);
    set->v = nv;
    set->cap = ncap;
    return 0;
}

/* Binary search: index of id, or the insertion point with *found = 0. */
static size_t find(const ingest_authset *set, const char *id, size_t len, int *found)
{
    size_t lo = 0, hi = set->n;
    *found = 0;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const char *e = set->v[mid].id;
        int c = strncmp(e, id, len);
        if (c == 0 && e[len] != '\0')
            c = 1;
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int ingest_authset_add(ingest_authset *set, const char *device_id, const uint8_t pk[INGEST_PUBKEY_BYTES])
{
    const size_t len = strnlen(device_id, INGEST_DEVICE_ID_MAX + 1);
    int found;
    if (!ingest_wire_id_valid(device_id, len))
        return ingest__fail(set->ctx, INGEST_EINVAL, "authset: invalid device id (1..%d bytes of [A-Za-z0-9._-])",
                            INGEST_DEVICE_ID_MAX);
    const size_t at = find(set, device_id, len, &found);
    if (found)
        return ingest__fail(set->ctx, INGEST_EEXIST, "authset: device '%s' already present", device_id);
    INGEST__FORWARD(grow(set));
    memmove(set->v + at + 1, set->v + at, (set->n - at) * sizeof(*set->v));
    memset(&set->v[at], 0, sizeof(set->v[at]));
    memcpy(set->v[at].id, device_id, len);
    memcpy(set->v[at].pk, pk, INGEST_PUBKEY_BYTES);
    set->n++;
    return 0;
}

int ingest_authset_lookup(const ingest_authset *set, const char *device_id, size_t id_len,
                          uint8_t pk[INGEST_PUBKEY_BYTES])
{
    int found;
    if (id_len == 0 || id_len > INGEST_DEVICE_ID_MAX)
        return INGEST_ENOTFOUND;
    const size_t at = find(set, device_id, id_len, &found);
    if (!found)
        return INGEST_ENOTFOUND;
    if (pk != NULL)
        memcpy(pk, set->v[at].pk, INGEST_PUBKEY_BYTES);
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const auth_entry *)a)->id, ((const auth_entry *)b)->id);
}

/* Parse one line into set (appended, unsorted).  line has no newline. */
static int parse_auth_line(ingest_authset *set, const char *path, uint32_t lineno, char *line)
{
    ingest_ctx *ctx = set->ctx;
    char *p = line;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\0' || *p == '#')
        return 0;
    char *id = p;
    while (*p != '\0' && *p != ' ' && *p != '\t')
        p++;
    const size_t id_len = (size_t)(p - id);
    while (*p == ' ' || *p == '\t')
        p++;
    char *key = p;
    while (*p != '\0' && *p != ' ' && *p != '\t')
        p++;
    const size_t key_len = (size_t)(p - key);
    while (*p == ' ' || *p == '\t')
        p++;
    if (key_len == 0)
        return ingest__fail(ctx, INGEST_ECORRUPT, "%s:%u: expected 'DEVICE-ID BASE64-PUBLIC-KEY'", path,
                            (unsigned)lineno);
    if (*p != '\0' && *p != '#')
        return ingest__fail(ctx, INGEST_ECORRUPT, "%s:%u: unexpected text after the public key", path,
                            (unsigned)lineno);
    if (!ingest_wire_id_valid(id, id_len))
        return ingest__fail(ctx, INGEST_ECORRUPT,
                            "%s:%u: invalid device id (1..%d bytes of [A-Za-z0-9._-], starting alphanumeric)",
                            path, (unsigned)lineno, INGEST_DEVICE_ID_MAX);
    INGEST__FORWARD(grow(set));
    auth_entry *e = &set->v[set->n];
    memset(e, 0, sizeof(*e));
    if (ingest_public_key_parse(NULL, key, key_len, e->pk) != 0)
        return ingest__fail(ctx, INGEST_ECORRUPT, "%s:%u: public key is not base64 of %d bytes", path,
                            (unsigned)lineno, INGEST_PUBKEY_BYTES);
    memcpy(e->id, id, id_len);
    e->line = lineno;
    set->n++;
    return 0;
}

int ingest_authset_load(ingest_ctx *ctx, const char *path, ingest_authset **out)
{
    ingest_authset *set = NULL;
    char line[INGEST_AUTHSET_LINE_MAX + 2];
    uint32_t lineno = 0;
    int rc;
    *out = NULL;
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        const int e = errno;
        return ingest__fail(ctx, e == ENOENT ? INGEST_ENOTFOUND : INGEST_EIO, "%s: open: %s", path, strerror(e));
    }
    rc = ingest_authset_create(ctx, &set);
    if (rc != 0)
        goto out;
    while (fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        size_t n = strlen(line);
        if (n > 0 && line[n - 1] == '\n')
            line[--n] = '\0';
        else if (!feof(f)) {
            rc = ingest__fail(ctx, INGEST_ECORRUPT, "%s:%u: line longer than %d bytes", path, (unsigned)lineno,
                              INGEST_AUTHSET_LINE_MAX);
            goto out;
        }
        if (n > INGEST_AUTHSET_LINE_MAX) {
            rc = ingest__fail(ctx, INGEST_ECORRUPT, "%s:%u: line longer than %d bytes", path, (unsigned)lineno,
                              INGEST_AUTHSET_LINE_MAX);
            goto out;
        }
        if (n > 0 && line[n - 1] == '\r')
            line[--n] = '\0';
        rc = parse_auth_line(set, path, lineno, line);
        if (rc == INGEST_ETOOBIG)
            rc = ingest__fail(ctx, INGEST_ECORRUPT, "%s:%u: more than %d devices", path, (unsigned)lineno,
                              INGEST_AUTHSET_MAX_DEVICES);
        if (rc != 0)
            goto out;
    }
    if (ferror(f)) {
        rc = ingest__fail(ctx, INGEST_EIO, "%s: read error", path);
        goto out;
    }
    if (set->n > 1)
        qsort(set->v, set->n, sizeof(*set->v), cmp_entry);
    for (size_t i = 1; i < set->n; i++)
        if (strcmp(set->v[i - 1].id, set->v[i].id) == 0) {
            const uint32_t a = set->v[i - 1].line, b = set->v[i].line;
            rc = ingest__fail(ctx, INGEST_ECORRUPT, "%s:%u: device '%s' already listed on line %u", path,
                              (unsigned)(a > b ? a : b), set->v[i].id, (unsigned)(a < b ? a : b));
            goto out;
        }
    *out = set;
    set = NULL;
out:
    fclose(f);
    ingest_authset_destroy(set);
    return rc;
}
