/*
 * The authenticated, encrypted session of the TCP transport
 * (docs/protocol.md, "Handshake" and "Records").
 */
#include "../internal.h"
#include "aead.h"
#include "ingest/session.h"
#include "ingest/wire.h"

#include <errno.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HS_MAGIC "INGST"
/*
 * Version 1 carries one byte of features, version 2 four (the only
 * difference).  A device sends version 2 only when it offers a feature
 * above bit 7; a receiver speaks both and answers in the device's version.
 */
#define HS_VERSION 2    /* the highest we speak */
#define HS_PREFIX 13    /* v1: magic 5, version, cipher offer, features, max payload 4, id length */
#define HS_PREFIX_V2 16 /* v2: magic 5, version, cipher offer, features 4, max payload 4, id length */
#define HS_HELLO_MAX (HS_PREFIX_V2 + INGEST_DEVICE_ID_MAX + 32)
#define HS_REPLY_HEAD 2 /* status, version */
#define HS_REPLY 72     /* v1: head, cipher, features, max payload 4, e_r 32, mac 32 */
#define HS_REPLY_V2 75  /* v2: head, cipher, features 4, max payload 4, e_r 32, mac 32 */
#define HS_REPLY_MAX HS_REPLY_V2
#define HS_MAC 32
#define HS_LABEL "ingest-session-v1"
#define KDF_CONTEXT "ingestv1"

/* Handshake status byte sent by the server. */
enum { ST_OK = 0, ST_UNKNOWN_DEVICE = 1, ST_VERSION = 2, ST_MALFORMED = 3, ST_NO_CIPHER = 4 };

#define OFFER_AES 0x01u
#define OFFER_XCHACHA 0x02u

#define REC_LEN 4  /* length prefix of a record */
#define REC_TAG INGEST__AEAD_TAG /* AEAD tag (both ciphers) */
#define SEND_SEGS 8             /* pieces a frame is sealed from without gathering them (header included) */
#define REC_MIN (INGEST_WIRE_HDR_BYTES + REC_TAG)
#define MIN_PAYLOAD_BOUND 64u

typedef struct dir {
    ingest_ctx ectx; /* this direction's allocator and error message */
    ingest__aead aead; /* this direction's key and cipher */
    uint64_t ctr;
    uint8_t *buf; /* record: length prefix + ciphertext + tag */
    size_t cap;
    uint8_t *pt; /* plaintext: frame header + payload */
    size_t ptcap;
    int dead; /* the error that closed this direction, or 0 */
} dir;

struct ingest_session_s {
    ingest_ctx *ctx;
    int is_server;
    int established;
    int cipher_pref;
    int cipher;
    unsigned features_pref; /* client: offered; server: supported */
    unsigned features;      /* agreed; set only when the handshake succeeds */
    unsigned max_version;   /* server: the highest HELLO version taken (HS_VERSION; tests: 1) */
    size_t max_payload;      /* what we accept */
    size_t peer_max_payload; /* what the peer accepts */
    int send_timeout_ms;
    char peer_id[INGEST_DEVICE_ID_MAX + 1];
    ingest_secret_key self;
    uint8_t peer_static[INGEST_PUBKEY_BYTES];
    const ingest_authset *auth;
    dir tx, rx;
};

/* ---- small helpers ------------------------------------------------------ */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t deadline_of(int timeout_ms) { return timeout_ms < 0 ? -1 : now_ms() + timeout_ms; }

/* Wait for fd to be ready for ev.  0, INGEST_ETIMEDOUT or INGEST_EIO. */
static int wait_fd(int fd, short ev, int64_t deadline)
{
    for (;;) {
        int t = -1;
        if (deadline >= 0) {
            const int64_t left = deadline - now_ms();
            if (left <= 0)
                return INGEST_ETIMEDOUT;
            t = left > 1000000 ? 1000000 : (int)left;
        }
        struct pollfd p = { fd, ev, 0 };
        const int n = poll(&p, 1, t);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return INGEST_EIO;
        if (n > 0)
            return 0; /* readable, writable, or an error/hangup the next call reports */
    }
}

/* Read exactly n bytes; *got counts what arrived.  0, ETIMEDOUT, ECLOSED, EIO. */
static int read_full(int fd, void *buf, size_t n, int64_t deadline, size_t *got, int *err)
{
    uint8_t *p = buf;
    int nonsock = 0;
    *got = 0;
    *err = 0;
    while (*got < n) {
        ssize_t r;
        if (nonsock) {
            const int w = wait_fd(fd, POLLIN, deadline);
            if (w != 0)
                return w;
            r = read(fd, p + *got, n - *got);
        } else {
            r = recv(fd, p + *got, n - *got, MSG_DONTWAIT);
        }
        if (r > 0) {
            *got += (size_t)r;
            continue;
        }
        if (r == 0)
            return INGEST_ECLOSED;
        if (errno == EINTR)
            continue;
        if (errno == ENOTSOCK) {
            nonsock = 1;
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            const int w = wait_fd(fd, POLLIN, deadline);
            if (w != 0)
                return w;
            continue;
        }
        *err = errno;
        return errno == ECONNRESET ? INGEST_ECLOSED : INGEST_EIO;
    }
    return 0;
}

/* Write exactly n bytes.  0, ETIMEDOUT, ECLOSED, EIO; *put counts what left. */
static int write_full(int fd, const void *buf, size_t n, int64_t deadline, size_t *put, int *err)
{
    const uint8_t *p = buf;
    int nonsock = 0;
    *put = 0;
    *err = 0;
    while (*put < n) {
        ssize_t r;
        if (nonsock) {
            const int w = wait_fd(fd, POLLOUT, deadline);
            if (w != 0)
                return w;
            r = write(fd, p + *put, n - *put);
        } else {
            r = send(fd, p + *put, n - *put, MSG_DONTWAIT | MSG_NOSIGNAL);
        }
        if (r >= 0) {
            *put += (size_t)r;
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno == ENOTSOCK) {
            nonsock = 1;
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            const int w = wait_fd(fd, POLLOUT, deadline);
            if (w != 0)
                return w;
            continue;
        }
        *err = errno;
        return (errno == EPIPE || errno == ECONNRESET) ? INGEST_ECLOSED : INGEST_EIO;
    }
    return 0;
}

static const char *io_what(int rc, int err)
{
    switch (rc) {
    case INGEST_ETIMEDOUT: return "timed out";
    case INGEST_ECLOSED: return err ? strerror(err) : "connection closed by the peer";
    default: return err ? strerror(err) : "I/O error";
    }
}

const char *ingest_session_cipher_name(int cipher)
{
    switch (cipher) {
    case INGEST_CIPHER_AES256GCM: return "aes256gcm";
    case INGEST_CIPHER_XCHACHA20POLY1305: return "xchacha20poly1305";
    case INGEST_CIPHER_AUTO: return "auto";
    default: return "unknown";
    }
}

/* ---- create / destroy / options ------------------------------------------ */

static int session_new(ingest_ctx *ctx, const ingest_secret_key *self, int is_server, ingest_session **out)
{
    *out = NULL;
    if (sodium_init() < 0)
        return ingest__fail(ctx, INGEST_ECRYPTO, "session: libsodium initialisation failed");
    ingest_session *s = ingest__calloc(ctx, 1, sizeof(*s));
    if (s == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "session: out of memory");
    s->ctx = ctx;
    s->is_server = is_server;
    s->max_version = HS_VERSION;
    s->max_payload = INGEST_WIRE_MAX_PAYLOAD;
    s->send_timeout_ms = 60000;
    s->self = *self;
    dir *const dirs[2] = { &s->tx, &s->rx };
    for (int i = 0; i < 2; i++) {
        dirs[i]->ectx.alloc = ctx->alloc;
        dirs[i]->ectx.log_cb = ctx->log_cb;
        dirs[i]->ectx.log_ud = ctx->log_ud;
        dirs[i]->ectx.log_level = ctx->log_level;
    }
    *out = s;
    return 0;
}

int ingest_session_client_create(ingest_ctx *ctx, const char *device_id, const ingest_secret_key *device_key,
                                 const uint8_t receiver_pub[INGEST_PUBKEY_BYTES], ingest_session **out)
{
    *out = NULL;
    const size_t n = device_id ? strnlen(device_id, INGEST_DEVICE_ID_MAX + 1) : 0;
    if (!ingest_wire_id_valid(device_id ? device_id : "", n))
        return ingest__fail(ctx, INGEST_EINVAL,
                            "session: invalid device id (1..%d bytes of [A-Za-z0-9._-], starting alphanumeric)",
                            INGEST_DEVICE_ID_MAX);
    ingest_session *s;
    INGEST__FORWARD(session_new(ctx, device_key, 0, &s));
    memcpy(s->peer_id, device_id, n); /* the client's own id, sent in HELLO */
    memcpy(s->peer_static, receiver_pub, INGEST_PUBKEY_BYTES);
    *out = s;
    return 0;
}

int ingest_session_server_create(ingest_ctx *ctx, const ingest_secret_key *receiver_key,
                                 const ingest_authset *authorized, ingest_session **out)
{
    *out = NULL;
    if (authorized == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "session: server needs an authorized-devices set");
    ingest_session *s;
    INGEST__FORWARD(session_new(ctx, receiver_key, 1, &s));
    s->auth = authorized;
    *out = s;
    return 0;
}

static void dir_free(dir *d)
{
    if (d->buf != NULL) {
        sodium_memzero(d->buf, d->cap);
        ingest__free(&d->ectx, d->buf);
    }
    if (d->pt != NULL) {
        sodium_memzero(d->pt, d->ptcap);
        ingest__free(&d->ectx, d->pt);
    }
    d->buf = d->pt = NULL;
    d->cap = d->ptcap = 0;
    ingest__aead_free(&d->aead);
}

void ingest_session_destroy(ingest_session *s)
{
    if (s == NULL)
        return;
    dir_free(&s->tx);
    dir_free(&s->rx);
    ingest_ctx *ctx = s->ctx;
    sodium_memzero(s, sizeof(*s));
    ingest__free(ctx, s);
}

int ingest_session_set_cipher(ingest_session *s, int cipher)
{
    if (s->established)
        return ingest__fail(s->ctx, INGEST_EINVAL, "session: cipher set after the handshake");
    if (cipher != INGEST_CIPHER_AUTO && cipher != INGEST_CIPHER_AES256GCM &&
        cipher != INGEST_CIPHER_XCHACHA20POLY1305)
        return ingest__fail(s->ctx, INGEST_EINVAL, "session: unknown cipher %d", cipher);
    if (cipher == INGEST_CIPHER_AES256GCM && !ingest__aead_aes_available())
        return ingest__fail(s->ctx, INGEST_EINVAL, "session: AES-256-GCM is not available on this CPU");
    s->cipher_pref = cipher;
    return 0;
}

int ingest_session_set_max_payload(ingest_session *s, size_t max_payload)
{
    if (s->established)
        return ingest__fail(s->ctx, INGEST_EINVAL, "session: max payload set after the handshake");
    if (max_payload < MIN_PAYLOAD_BOUND || max_payload > INGEST_WIRE_MAX_PAYLOAD_HIGHEST)
        return ingest__fail(s->ctx, INGEST_EINVAL, "session: max payload %zu outside %u..%u", max_payload,
                            MIN_PAYLOAD_BOUND, INGEST_WIRE_MAX_PAYLOAD_HIGHEST);
    s->max_payload = max_payload;
    return 0;
}

void ingest_session_set_send_timeout(ingest_session *s, int send_timeout_ms) { s->send_timeout_ms = send_timeout_ms; }

int ingest_session_set_features(ingest_session *s, unsigned features)
{
    if (s->established)
        return ingest__fail(s->ctx, INGEST_EINVAL, "session: features set after the handshake");
    if ((features & ~INGEST_SESSION_FEATURES_ALL) != 0)
        return ingest__fail(s->ctx, INGEST_EINVAL, "session: unknown feature bits 0x%x (known: 0x%x)",
                            features & ~INGEST_SESSION_FEATURES_ALL, INGEST_SESSION_FEATURES_ALL);
    s->features_pref = features;
    return 0;
}

unsigned ingest_session_features(const ingest_session *s) { return s->established ? s->features : 0; }

int ingest_session_set_max_version(ingest_session *s, unsigned version)
{
    if (!s->is_server || s->established || version < 1 || version > HS_VERSION)
        return ingest__fail(s->ctx, INGEST_EINVAL, "session: max version %u (a server's, before the handshake, 1..%d)",
                            version, HS_VERSION);
    s->max_version = version;
    return 0;
}

size_t ingest_session_peer_max_payload(const ingest_session *s) { return s->established ? s->peer_max_payload : 0; }

const char *ingest_session_peer_id(const ingest_session *s) { return s->peer_id; }
int ingest_session_cipher(const ingest_session *s) { return s->cipher; }
const char *ingest_session_send_errmsg(const ingest_session *s) { return s->tx.ectx.errmsg; }
const char *ingest_session_recv_errmsg(const ingest_session *s) { return s->rx.ectx.errmsg; }

/* ---- handshake ------------------------------------------------------------ */

/*
 * Transcript hash: label, receiver static, device static, the whole HELLO and
 * the reply up to the MAC.  So mac_r and mac_c authenticate the cipher offer
 * and choice, the features offered and agreed (a byte each in version 1, a u32 in version 2),
 * both payload bounds, the id and both ephemeral keys.
 */
static void transcript(uint8_t h[32], const uint8_t rs[32], const uint8_t cs[32], const uint8_t *hello,
                       size_t hello_len, const uint8_t *reply, size_t reply_len)
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 32);
    crypto_generichash_update(&st, (const unsigned char *)HS_LABEL, sizeof(HS_LABEL) - 1);
    crypto_generichash_update(&st, rs, 32);
    crypto_generichash_update(&st, cs, 32);
    crypto_generichash_update(&st, hello, hello_len);
    crypto_generichash_update(&st, reply, reply_len);
    crypto_generichash_final(&st, h, 32);
    sodium_memzero(&st, sizeof(st));
}

/*
 * From the four DH results and the transcript: the two direction keys and
 * the two confirmation MACs.  keys: c2s, s2c; macs: server's, client's.
 */
static void derive(const uint8_t dh[128], const uint8_t h[32], uint8_t c2s[32], uint8_t s2c[32],
                   uint8_t mac_s[32], uint8_t mac_c[32])
{
    uint8_t master[32], k3[32], k4[32];
    crypto_generichash(master, sizeof(master), dh, 128, h, 32);
    crypto_kdf_derive_from_key(c2s, 32, 1, KDF_CONTEXT, master);
    crypto_kdf_derive_from_key(s2c, 32, 2, KDF_CONTEXT, master);
    crypto_kdf_derive_from_key(k3, 32, 3, KDF_CONTEXT, master);
    crypto_kdf_derive_from_key(k4, 32, 4, KDF_CONTEXT, master);
    crypto_generichash(mac_s, 32, h, 32, k3, sizeof(k3));
    crypto_generichash(mac_c, 32, h, 32, k4, sizeof(k4));
    sodium_memzero(master, sizeof(master));
    sodium_memzero(k3, sizeof(k3));
    sodium_memzero(k4, sizeof(k4));
}

/* Key both directions for the agreed cipher (tx seals, rx opens). */
static int set_keys(ingest_session *s, const uint8_t tx[32], const uint8_t rx[32])
{
    ingest__aead_free(&s->tx.aead);
    ingest__aead_free(&s->rx.aead);
    s->tx.ctr = s->rx.ctr = 0;
    int rc = ingest__aead_init(&s->tx.aead, s->cipher, tx, 1);
    if (rc == 0)
        rc = ingest__aead_init(&s->rx.aead, s->cipher, rx, 0);
    if (rc != 0) {
        ingest__aead_free(&s->tx.aead);
        return ingest__fail(s->ctx, rc, "handshake: setting up %s failed (%s)", ingest_session_cipher_name(s->cipher),
                            rc == INGEST_ENOMEM ? "out of memory" : "libcrypto refused the key");
    }
    return 0;
}

static int hs_io_fail(ingest_session *s, const char *step, int rc, int err)
{
    if (rc == INGEST_ECLOSED)
        return ingest__fail(s->ctx, rc, "handshake: %s: %s (%s)", step, io_what(rc, err),
                            s->is_server ? "device hung up"
                                        : "the receiver closed the connection before the session was set up: it may "
                                          "be shedding unauthenticated connections under load (its log says so; "
                                          "an unknown device is told so instead)");
    return ingest__fail(s->ctx, rc, "handshake: %s: %s", step, io_what(rc, err));
}

static int client_handshake(ingest_session *s, int fd, int64_t deadline)
{
    uint8_t hello[HS_HELLO_MAX], reply[HS_REPLY_MAX];
    uint8_t e_pk[32], e_sk[32], dh[128], h[32], c2s[32], s2c[32], mac_s[32], mac_c[32];
    size_t n, id_len = strlen(s->peer_id);
    /* version 2 only when a feature needs it: a receiver of version 1 takes every other HELLO */
    const unsigned version = (s->features_pref & ~INGEST_SESSION_FEATURES_V1) != 0 ? 2u : 1u;
    const size_t pre = version == 2 ? HS_PREFIX_V2 : HS_PREFIX;
    const size_t rlen = version == 2 ? HS_REPLY_V2 : HS_REPLY;
    int rc, err;
    crypto_kx_keypair(e_pk, e_sk);

    uint8_t offer = 0;
    if (s->cipher_pref != INGEST_CIPHER_XCHACHA20POLY1305 && ingest__aead_aes_available())
        offer |= OFFER_AES;
    if (s->cipher_pref != INGEST_CIPHER_AES256GCM)
        offer |= OFFER_XCHACHA;
    memcpy(hello, HS_MAGIC, 5);
    hello[5] = (uint8_t)version;
    hello[6] = offer;
    if (version == 2) {
        ingest__put_u32(hello + 7, (uint32_t)s->features_pref);
        ingest__put_u32(hello + 11, (uint32_t)s->max_payload);
    } else {
        hello[7] = (uint8_t)s->features_pref;
        ingest__put_u32(hello + 8, (uint32_t)s->max_payload);
    }
    hello[pre - 1] = (uint8_t)id_len;
    memcpy(hello + pre, s->peer_id, id_len);
    memcpy(hello + pre + id_len, e_pk, 32);
    const size_t hello_len = pre + id_len + 32;

    rc = write_full(fd, hello, hello_len, deadline, &n, &err);
    if (rc != 0) {
        rc = hs_io_fail(s, "sending HELLO", rc, err);
        goto out;
    }
    rc = read_full(fd, reply, HS_REPLY_HEAD, deadline, &n, &err);
    if (rc != 0) {
        rc = hs_io_fail(s, "reading the receiver's reply", rc, err);
        goto out;
    }
    switch (reply[0]) {
    case ST_OK: break;
    case ST_UNKNOWN_DEVICE:
        rc = ingest__fail(s->ctx, INGEST_EAUTH, "handshake: the receiver refused device '%s': not authorized",
                          s->peer_id);
        goto out;
    case ST_VERSION:
        rc = ingest__fail(s->ctx, INGEST_EVERSION,
                          "handshake: the receiver does not speak protocol version %u (it speaks %u)", version,
                          (unsigned)reply[1]);
        goto out;
    case ST_MALFORMED:
        rc = ingest__fail(s->ctx, INGEST_EPROTO, "handshake: the receiver rejected our HELLO as malformed");
        goto out;
    case ST_NO_CIPHER:
        rc = ingest__fail(s->ctx, INGEST_EPROTO, "handshake: no cipher in common with the receiver (offered 0x%02x)",
                          (unsigned)offer);
        goto out;
    default:
        rc = ingest__fail(s->ctx, INGEST_EPROTO, "handshake: unknown status %u from the receiver",
                          (unsigned)reply[0]);
        goto out;
    }
    if (reply[1] != version) {
        rc = ingest__fail(s->ctx, INGEST_EVERSION, "handshake: receiver answered with protocol version %u, expected %u",
                          (unsigned)reply[1], version);
        goto out;
    }
    rc = read_full(fd, reply + HS_REPLY_HEAD, rlen - HS_REPLY_HEAD, deadline, &n, &err);
    if (rc != 0) {
        rc = hs_io_fail(s, "reading the receiver's reply", rc, err);
        goto out;
    }
    const uint8_t cipher = reply[2];
    const uint32_t agreed = version == 2 ? ingest__get_u32(reply + 3) : reply[3];
    const uint32_t peer_max = ingest__get_u32(reply + (version == 2 ? 7 : 4));
    if (!((cipher == INGEST_CIPHER_AES256GCM && (offer & OFFER_AES)) ||
          (cipher == INGEST_CIPHER_XCHACHA20POLY1305 && (offer & OFFER_XCHACHA))) ||
        peer_max < MIN_PAYLOAD_BOUND || peer_max > INGEST_WIRE_MAX_PAYLOAD_HIGHEST) {
        rc = ingest__fail(s->ctx, INGEST_EPROTO,
                          "handshake: malformed reply from the receiver (cipher %u, max payload %u)",
                          (unsigned)cipher, (unsigned)peer_max);
        goto out;
    }
    if ((agreed & ~s->features_pref) != 0) {
        rc = ingest__fail(s->ctx, INGEST_EPROTO,
                          "handshake: the receiver agreed to features 0x%02x, but we offered only 0x%02x "
                          "(a broken receiver, or the exchange was tampered with)",
                          (unsigned)agreed, s->features_pref);
        goto out;
    }
    const uint8_t *e_r = reply + rlen - HS_MAC - 32;
    if (crypto_scalarmult(dh, e_sk, s->peer_static) != 0 || crypto_scalarmult(dh + 32, s->self.sk, s->peer_static) != 0 ||
        crypto_scalarmult(dh + 64, e_sk, e_r) != 0 || crypto_scalarmult(dh + 96, s->self.sk, e_r) != 0) {
        rc = ingest__fail(s->ctx, INGEST_ECRYPTO, "handshake: weak public key from the receiver");
        goto out;
    }
    transcript(h, s->peer_static, s->self.pk, hello, hello_len, reply, rlen - HS_MAC);
    derive(dh, h, c2s, s2c, mac_s, mac_c);
    if (sodium_memcmp(mac_s, reply + rlen - HS_MAC, HS_MAC) != 0) {
        rc = ingest__fail(s->ctx, INGEST_ECRYPTO,
                          "handshake: the key exchange did not verify: this device is not in the receiver's "
                          "authorized_devices or is listed there with another key, or the receiver does not hold "
                          "the pinned receiver public key (wrong key pinned, or the exchange was tampered with); "
                          "the receiver's log says which");
        goto out;
    }
    rc = write_full(fd, mac_c, HS_MAC, deadline, &n, &err);
    if (rc != 0) {
        rc = hs_io_fail(s, "sending the confirmation", rc, err);
        goto out;
    }
    s->cipher = cipher;
    s->features = agreed;
    s->peer_max_payload = peer_max;
    rc = set_keys(s, c2s, s2c);
    if (rc != 0)
        goto out;
    s->established = 1;
out:
    sodium_memzero(e_sk, sizeof(e_sk));
    sodium_memzero(dh, sizeof(dh));
    sodium_memzero(c2s, sizeof(c2s));
    sodium_memzero(s2c, sizeof(s2c));
    sodium_memzero(mac_s, sizeof(mac_s));
    sodium_memzero(mac_c, sizeof(mac_c));
    return rc;
}

/* Send a refusal {status, version}; the caller's error stands either way. */
static void refuse(const ingest_session *s, int fd, int64_t deadline, uint8_t status)
{
    const uint8_t r[2] = { status, (uint8_t)s->max_version };
    size_t n;
    int err;
    (void)write_full(fd, r, sizeof(r), deadline, &n, &err);
}

/*
 * The stand-in public key of a device id not in the authorized set: a
 * point derived from our secret key and the id, the same for the same id.
 */
static void unknown_id_key(const ingest_session *s, const char *id, size_t id_len, uint8_t pk[INGEST_PUBKEY_BYTES])
{
    uint8_t sk[crypto_scalarmult_SCALARBYTES];
    crypto_generichash_state st;
    crypto_generichash_init(&st, s->self.sk, sizeof(s->self.sk), sizeof(sk));
    crypto_generichash_update(&st, (const uint8_t *)"ingest unknown device", 21);
    crypto_generichash_update(&st, (const uint8_t *)id, id_len);
    crypto_generichash_final(&st, sk, sizeof(sk));
    crypto_scalarmult_base(pk, sk);
    sodium_memzero(sk, sizeof(sk));
    sodium_memzero(&st, sizeof(st));
}

static int server_handshake(ingest_session *s, int fd, int64_t deadline)
{
    uint8_t hello[HS_HELLO_MAX], reply[HS_REPLY_MAX];
    uint8_t e_pk[32], e_sk[32], dh[128], h[32], c2s[32], s2c[32], mac_s[32], mac_c[32], got_mac[32];
    uint8_t dev_pk[INGEST_PUBKEY_BYTES];
    size_t n;
    int rc, err;
    memset(e_sk, 0, sizeof(e_sk));

    rc = read_full(fd, hello, HS_PREFIX, deadline, &n, &err);
    if (rc != 0) {
        rc = hs_io_fail(s, "reading HELLO", rc, err);
        goto out;
    }
    if (memcmp(hello, HS_MAGIC, 5) != 0) {
        rc = ingest__fail(s->ctx, INGEST_EPROTO, "handshake: bad magic in HELLO (not an ingest agent?)");
        goto out;
    }
    const unsigned version = hello[5];
    if (version != 1 && (version != 2 || s->max_version < 2)) {
        refuse(s, fd, deadline, ST_VERSION);
        rc = ingest__fail(s->ctx, INGEST_EVERSION, "handshake: device speaks protocol version %u, we speak 1 to %u",
                          version, s->max_version);
        goto out;
    }
    const size_t pre = version == 2 ? HS_PREFIX_V2 : HS_PREFIX;
    const size_t rlen = version == 2 ? HS_REPLY_V2 : HS_REPLY;
    if (version == 2 && (rc = read_full(fd, hello + HS_PREFIX, HS_PREFIX_V2 - HS_PREFIX, deadline, &n, &err)) != 0) {
        rc = hs_io_fail(s, "reading HELLO", rc, err);
        goto out;
    }
    const uint8_t offer = hello[6];
    /* Offered features we do not know are not an error: we just do not agree. */
    const uint32_t offered = version == 2 ? ingest__get_u32(hello + 7) : hello[7];
    const uint32_t agreed = offered & s->features_pref;
    const uint32_t peer_max = ingest__get_u32(hello + (version == 2 ? 11 : 8));
    const size_t id_len = hello[pre - 1];
    if ((offer & ~(OFFER_AES | OFFER_XCHACHA)) != 0 || offer == 0 ||
        peer_max < MIN_PAYLOAD_BOUND || peer_max > INGEST_WIRE_MAX_PAYLOAD_HIGHEST || id_len == 0 ||
        id_len > INGEST_DEVICE_ID_MAX) {
        refuse(s, fd, deadline, ST_MALFORMED);
        rc = ingest__fail(s->ctx, INGEST_EPROTO,
                          "handshake: malformed HELLO (offer 0x%02x, max payload %u, id length %zu)",
                          (unsigned)offer, (unsigned)peer_max, id_len);
        goto out;
    }
    rc = read_full(fd, hello + pre, id_len, deadline, &n, &err);
    if (rc != 0) {
        rc = hs_io_fail(s, "reading HELLO", rc, err);
        goto out;
    }
    const char *id = (const char *)hello + pre;
    if (!ingest_wire_id_valid(id, id_len)) {
        refuse(s, fd, deadline, ST_MALFORMED);
        rc = ingest__fail(s->ctx, INGEST_EPROTO, "handshake: malformed device id in HELLO");
        goto out;
    }
    memcpy(s->peer_id, id, id_len);
    s->peer_id[id_len] = '\0';
    /*
     * An unknown id is answered exactly as a known one (no enumeration of
     * the fleet before any proof): the exchange goes on with a stand-in key
     * of that id (derived from ours, so each id always gets the same one,
     * and made for every id so the work does not differ), which no device
     * can prove; it fails at the confirmation, as a wrong key does.
     */
    uint8_t fake_pk[INGEST_PUBKEY_BYTES];
    unknown_id_key(s, id, id_len, fake_pk);
    const int unknown = ingest_authset_lookup(s->auth, id, id_len, dev_pk) != 0;
    if (unknown)
        memcpy(dev_pk, fake_pk, sizeof(dev_pk));
    uint8_t cipher = 0;
    const int aes_ok = ingest__aead_aes_available() && (offer & OFFER_AES);
    if (s->cipher_pref == INGEST_CIPHER_AUTO)
        cipher = aes_ok ? INGEST_CIPHER_AES256GCM : (offer & OFFER_XCHACHA) ? INGEST_CIPHER_XCHACHA20POLY1305 : 0;
    else if (s->cipher_pref == INGEST_CIPHER_AES256GCM)
        cipher = aes_ok ? INGEST_CIPHER_AES256GCM : 0;
    else
        cipher = (offer & OFFER_XCHACHA) ? INGEST_CIPHER_XCHACHA20POLY1305 : 0;
    if (cipher == 0) {
        refuse(s, fd, deadline, ST_NO_CIPHER);
        rc = ingest__fail(s->ctx, INGEST_EPROTO, "handshake: device '%s': no common cipher (offered 0x%02x)",
                          s->peer_id, (unsigned)offer);
        goto out;
    }
    rc = read_full(fd, hello + pre + id_len, 32, deadline, &n, &err);
    if (rc != 0) {
        rc = hs_io_fail(s, "reading HELLO", rc, err);
        goto out;
    }
    const uint8_t *e_c = hello + pre + id_len;
    const size_t hello_len = pre + id_len + 32;

    crypto_kx_keypair(e_pk, e_sk);
    if (crypto_scalarmult(dh, s->self.sk, e_c) != 0 || crypto_scalarmult(dh + 32, s->self.sk, dev_pk) != 0 ||
        crypto_scalarmult(dh + 64, e_sk, e_c) != 0 || crypto_scalarmult(dh + 96, e_sk, dev_pk) != 0) {
        rc = ingest__fail(s->ctx, INGEST_ECRYPTO, "handshake: device '%s' sent a weak public key", s->peer_id);
        goto out;
    }
    reply[0] = ST_OK;
    reply[1] = (uint8_t)version;
    reply[2] = cipher;
    if (version == 2) {
        ingest__put_u32(reply + 3, agreed);
        ingest__put_u32(reply + 7, (uint32_t)s->max_payload);
    } else {
        reply[3] = (uint8_t)agreed;
        ingest__put_u32(reply + 4, (uint32_t)s->max_payload);
    }
    memcpy(reply + rlen - HS_MAC - 32, e_pk, 32);
    transcript(h, s->self.pk, dev_pk, hello, hello_len, reply, rlen - HS_MAC);
    derive(dh, h, c2s, s2c, mac_s, mac_c);
    memcpy(reply + rlen - HS_MAC, mac_s, HS_MAC);
    rc = write_full(fd, reply, rlen, deadline, &n, &err);
    if (rc != 0) {
        rc = hs_io_fail(s, "sending the reply", rc, err);
        goto out;
    }
    rc = read_full(fd, got_mac, HS_MAC, deadline, &n, &err);
    if (unknown) {
        /* whatever came (nothing proves a key no device holds): the real reason, for our log */
        rc = ingest__fail(s->ctx, INGEST_EAUTH, "handshake: device '%s' is not authorized", s->peer_id);
        goto out;
    }
    if (rc != 0) {
        rc = hs_io_fail(s, "reading the device's confirmation", rc, err);
        goto out;
    }
    if (sodium_memcmp(got_mac, mac_c, HS_MAC) != 0) {
        rc = ingest__fail(s->ctx, INGEST_ECRYPTO,
                          "handshake: device '%s' failed to prove its key (not the key listed for it)", s->peer_id);
        goto out;
    }
    s->cipher = cipher;
    s->features = agreed;
    s->peer_max_payload = peer_max;
    rc = set_keys(s, s2c, c2s);
    if (rc != 0)
        goto out;
    s->established = 1;
out:
    sodium_memzero(e_sk, sizeof(e_sk));
    sodium_memzero(dh, sizeof(dh));
    sodium_memzero(c2s, sizeof(c2s));
    sodium_memzero(s2c, sizeof(s2c));
    sodium_memzero(mac_s, sizeof(mac_s));
    sodium_memzero(mac_c, sizeof(mac_c));
    return rc;
}

int ingest_session_handshake_fd(ingest_session *s, int fd, int timeout_ms)
{
    if (s->established)
        return ingest__fail(s->ctx, INGEST_EINVAL, "handshake: already done");
    const int64_t deadline = deadline_of(timeout_ms);
    return s->is_server ? server_handshake(s, fd, deadline) : client_handshake(s, fd, deadline);
}

/* ---- records -------------------------------------------------------------- */

/* Grow *p to at least need bytes (contents are not kept). */
static int ensure(dir *d, uint8_t **p, size_t *cap, size_t need)
{
    if (*cap >= need)
        return 0;
    size_t ncap = *cap ? *cap : 4096;
    while (ncap < need)
        ncap *= 2;
    uint8_t *nb = ingest__malloc(&d->ectx, ncap);
    if (nb == NULL) {
        nb = ingest__malloc(&d->ectx, need);
        ncap = need;
        if (nb == NULL)
            return ingest__fail(&d->ectx, INGEST_ENOMEM, "session: out of memory for a %zu-byte frame", need);
    }
    if (*p != NULL) {
        sodium_memzero(*p, *cap);
        ingest__free(&d->ectx, *p);
    }
    *p = nb;
    *cap = ncap;
    return 0;
}

/* Mark a direction closed by rc; the message is already in d->ectx. */
static int kill_dir(dir *d, int rc)
{
    d->dead = rc;
    return rc;
}

int ingest_session_sendv(ingest_session *s, int fd, unsigned type, const ingest_iov *iov, size_t n)
{
    dir *d = &s->tx;
    size_t len = 0, put = 0;
    int err = 0, rc;
    if (!s->established)
        return ingest__fail(&d->ectx, INGEST_EINVAL, "send: no handshake yet");
    if (d->dead)
        return d->dead;
    if (type == 0 || type > INGEST_MSG_TYPE_LAST)
        return ingest__fail(&d->ectx, INGEST_EINVAL, "send: unknown message type %u", type);
    for (size_t i = 0; i < n; i++) {
        if (iov[i].len > s->peer_max_payload - len)
            return ingest__fail(&d->ectx, INGEST_ETOOBIG, "send: %s payload exceeds the peer's bound of %zu bytes",
                                ingest_wire_type_name(type), s->peer_max_payload);
        len += iov[i].len;
    }
    if (d->ctr == UINT64_MAX)
        return kill_dir(d, ingest__fail(&d->ectx, INGEST_ECRYPTO, "send: nonce counter exhausted"));
    const size_t ptlen = INGEST_WIRE_HDR_BYTES + len;
    const size_t reclen = REC_LEN + ptlen + REC_TAG;
    INGEST__FORWARD(ensure(d, &d->buf, &d->cap, reclen));
    const ingest_wire_hdr hdr = { (uint8_t)type, INGEST_WIRE_VERSION, 0, (uint32_t)len };
    uint8_t hb[INGEST_WIRE_HDR_BYTES];
    ingest_wire_hdr_encode(&hdr, hb);
    /* The pieces are sealed straight into the record, without a copy of the payload before (up to
     * SEND_SEGS pieces, as every message of ours; more are gathered first). */
    ingest__aead_seg seg[SEND_SEGS];
    size_t nseg = 0;
    seg[nseg].p = hb;
    seg[nseg++].len = sizeof hb;
    if (n < SEND_SEGS) {
        for (size_t i = 0; i < n; i++) {
            seg[nseg].p = iov[i].base;
            seg[nseg++].len = iov[i].len;
        }
    } else {
        INGEST__FORWARD(ensure(d, &d->pt, &d->ptcap, len));
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            if (iov[i].len > 0)
                memcpy(d->pt + at, iov[i].base, iov[i].len);
            at += iov[i].len;
        }
        seg[nseg].p = d->pt;
        seg[nseg++].len = len;
    }
    ingest__put_u32(d->buf, (uint32_t)(ptlen + REC_TAG));
    rc = ingest__aead_sealv(&d->aead, d->ctr, d->buf, REC_LEN, seg, nseg, d->buf + REC_LEN);
    if (rc != 0)
        return kill_dir(d, ingest__fail(&d->ectx, rc, "send: sealing frame %llu failed; send closed",
                                        (unsigned long long)d->ctr));
    d->ctr++;
    /* The counter moved: from here any failure leaves the peer out of step. */
    rc = write_full(fd, d->buf, reclen, deadline_of(s->send_timeout_ms), &put, &err);
    if (rc != 0)
        return kill_dir(d, ingest__fail(&d->ectx, rc, "send: %s frame (%zu bytes): %s after %zu bytes; send closed",
                                        ingest_wire_type_name(type), reclen, io_what(rc, err), put));
    return 0;
}

int ingest_session_send(ingest_session *s, int fd, unsigned type, const void *payload, size_t len)
{
    const ingest_iov v = { payload, len };
    return ingest_session_sendv(s, fd, type, &v, len > 0 ? 1 : 0);
}

int ingest_session_send_msg(ingest_session *s, int fd, const ingest_wire_msg *m)
{
    uint8_t head[64 + 2 * INGEST_WIRE_BATCH_ID_MAX + INGEST_WIRE_MESSAGE_MAX];
    ingest_iov v[3];
    size_t hl = 0;
    if (m->type == INGEST_MSG_WANT) {
        /* WANT can be large: encode it in the send buffer's stead. */
        const size_t need = ingest_wire_encoded_size(m);
        if (need == 0 || need > s->peer_max_payload)
            return ingest__fail(&s->tx.ectx, need == 0 ? INGEST_EINVAL : INGEST_ETOOBIG,
                                "send: WANT of %u indexes is invalid or exceeds the peer's bound of %zu bytes",
                                (unsigned)m->u.want.count, s->peer_max_payload);
        uint8_t *tmp = ingest__malloc(&s->tx.ectx, need);
        if (tmp == NULL)
            return ingest__fail(&s->tx.ectx, INGEST_ENOMEM, "send: out of memory for WANT");
        int rc = ingest_wire_encode(&s->tx.ectx, m, tmp, need, &hl);
        if (rc == 0)
            rc = ingest_session_send(s, fd, m->type, tmp, hl);
        ingest__free(&s->tx.ectx, tmp);
        return rc;
    }
    INGEST__FORWARD(ingest_wire_encode_head(&s->tx.ectx, m, head, sizeof(head), &hl));
    v[0].base = head;
    v[0].len = hl;
    size_t n = 1;
    if (m->type == INGEST_MSG_MANIFEST_PART) {
        v[1].base = m->u.manifest_part.data;
        v[1].len = m->u.manifest_part.len;
        n = 2;
    } else if (m->type == INGEST_MSG_CHUNK) {
        v[1].base = m->u.chunk.data;
        v[1].len = m->u.chunk.len;
        n = 2;
    } else if (m->type == INGEST_MSG_CHUNK_GROUP) {
        v[1].base = m->u.group.raw;
        v[1].len = 4 * (size_t)m->u.group.count;
        v[2].base = m->u.group.data;
        v[2].len = m->u.group.len;
        n = 3;
    } else if (m->type == INGEST_MSG_CHUNK_RUN) {
        v[1].base = m->u.group.data;
        v[1].len = m->u.group.len;
        n = 2;
    } else if (m->type == INGEST_MSG_DICT_DATA) {
        v[1].base = m->u.dict_data.data;
        v[1].len = m->u.dict_data.len;
        n = 2;
    } else if (m->type == INGEST_MSG_DELTA_BASE) {
        v[1].base = m->u.delta_base.hashes;
        v[1].len = (size_t)INGEST_WIRE_DELTA_BLOCKS(m->u.delta_base.base_len) * INGEST_WIRE_DELTA_HASH_BYTES;
        n = 2;
    } else if (m->type == INGEST_MSG_CHUNK_DELTA) {
        v[1].base = m->u.delta.map;
        v[1].len = ((size_t)m->u.delta.nblocks + 7) / 8;
        v[2].base = m->u.delta.data;
        v[2].len = m->u.delta.len;
        n = v[2].len > 0 ? 3 : 2;
    }
    return ingest_session_sendv(s, fd, m->type, v, n);
}

int ingest_session_recv_ref(ingest_session *s, int fd, unsigned *type, const uint8_t **payload, size_t *len,
                            int timeout_ms)
{
    dir *d = &s->rx;
    uint8_t lenbuf[REC_LEN];
    size_t got = 0;
    int err = 0, rc;
    *type = 0;
    *payload = NULL;
    *len = 0;
    if (!s->established)
        return ingest__fail(&d->ectx, INGEST_EINVAL, "recv: no handshake yet");
    if (d->dead)
        return d->dead;
    const int64_t deadline = deadline_of(timeout_ms);
    rc = read_full(fd, lenbuf, REC_LEN, deadline, &got, &err);
    if (rc == INGEST_ETIMEDOUT && got == 0)
        return ingest__fail(&d->ectx, rc, "recv: no frame within %d ms", timeout_ms);
    if (rc == INGEST_ECLOSED && got == 0)
        return kill_dir(d, ingest__fail(&d->ectx, rc, "recv: the peer closed the connection (%s)",
                                        io_what(rc, err)));
    if (rc != 0)
        return kill_dir(d, ingest__fail(&d->ectx, rc, "recv: truncated frame: %s after %zu of %d length bytes",
                                        io_what(rc, err), got, REC_LEN));
    const uint32_t reclen = ingest__get_u32(lenbuf);
    const size_t bound = INGEST_WIRE_HDR_BYTES + s->max_payload + REC_TAG;
    if (reclen > bound)
        return kill_dir(d, ingest__fail(&d->ectx, INGEST_ETOOBIG,
                                        "recv: frame %llu declares %u bytes, above the bound of %zu; session closed",
                                        (unsigned long long)d->ctr, (unsigned)reclen, bound));
    if (reclen < REC_MIN)
        return kill_dir(d, ingest__fail(&d->ectx, INGEST_EPROTO,
                                        "recv: frame %llu declares %u bytes, below the minimum of %d; session closed",
                                        (unsigned long long)d->ctr, (unsigned)reclen, REC_MIN));
    rc = ensure(d, &d->buf, &d->cap, reclen);
    if (rc == 0)
        rc = ensure(d, &d->pt, &d->ptcap, reclen - REC_TAG);
    if (rc != 0)
        return kill_dir(d, rc);
    rc = read_full(fd, d->buf, reclen, deadline, &got, &err);
    if (rc != 0)
        return kill_dir(d, ingest__fail(&d->ectx, rc, "recv: truncated frame: %s after %zu of %u bytes",
                                        io_what(rc, err), got, (unsigned)reclen));
    const unsigned long long ptlen = reclen - REC_TAG;
    rc = ingest__aead_open(&d->aead, d->ctr, lenbuf, REC_LEN, d->buf, reclen, d->pt);
    if (rc != 0)
        return kill_dir(d, ingest__fail(&d->ectx, INGEST_ECRYPTO,
                                        "recv: frame %llu failed authentication (tampered, replayed, reordered or "
                                        "forged); session closed",
                                        (unsigned long long)d->ctr));
    d->ctr++;
    ingest_wire_hdr hdr;
    rc = ingest_wire_hdr_decode(&d->ectx, d->pt, s->max_payload, &hdr);
    if (rc != 0)
        return kill_dir(d, rc);
    if ((size_t)hdr.length != ptlen - INGEST_WIRE_HDR_BYTES)
        return kill_dir(d, ingest__fail(&d->ectx, INGEST_EPROTO,
                                        "recv: %s frame header says %u payload bytes, frame holds %llu; session closed",
                                        ingest_wire_type_name(hdr.type), (unsigned)hdr.length,
                                        ptlen - INGEST_WIRE_HDR_BYTES));
    *type = hdr.type;
    *payload = d->pt + INGEST_WIRE_HDR_BYTES;
    *len = hdr.length;
    return 0;
}

int ingest_session_recv(ingest_session *s, int fd, unsigned *type, void *buf, size_t cap, size_t *len,
                        int timeout_ms)
{
    const uint8_t *p;
    size_t n;
    *len = 0;
    INGEST__FORWARD(ingest_session_recv_ref(s, fd, type, &p, &n, timeout_ms));
    if (n > cap)
        return kill_dir(&s->rx, ingest__fail(&s->rx.ectx, INGEST_ETOOBIG,
                                             "recv: %s payload of %zu bytes does not fit the %zu-byte buffer",
                                             ingest_wire_type_name(*type), n, cap));
    if (n > 0)
        memcpy(buf, p, n);
    *len = n;
    return 0;
}

int ingest_session_recv_msg(ingest_session *s, int fd, ingest_wire_msg *m, int timeout_ms)
{
    unsigned type;
    const uint8_t *p;
    size_t n;
    memset(m, 0, sizeof(*m));
    INGEST__FORWARD(ingest_session_recv_ref(s, fd, &type, &p, &n, timeout_ms));
    return ingest_wire_decode(&s->rx.ectx, type, p, n, m);
}
