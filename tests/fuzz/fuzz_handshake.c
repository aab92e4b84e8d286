/*
 * Fuzz target: the session handshake (libingest/transport/session.c), both sides.
 *
 * Byte 0 of the input sets up the session; the rest is what the peer sends,
 * written into a socketpair whose far end is then shut for writing, so the
 * handshake reads the input and then sees EOF (never a wait):
 *   bit 0     0: receiver side, the input is a device's HELLO and
 *                confirmation; 1: device side, the input is a receiver's
 *                REPLY (or refusal)
 *   bits 1-2  cipher preference: auto, AES-256-GCM, XChaCha20-Poly1305, auto
 *   bits 3-6  features 0x01-0x08 offered (device) or supported (receiver)
 *   bit 7     and push (0x100): a device then sends a HELLO of version 2
 *
 * The receiver knows two devices: "dev-01" (public key: the X25519 base
 * point) and "gw-0042" (a fixed key pair).  Without the secret keys and the
 * other side's fresh ephemeral key no input can complete a handshake, so
 * each must fail with a handshake error (never succeed, never time out),
 * leave no features agreed, and write back at most one REPLY.
 */
#include <fcntl.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ingest.h"
#include "ingest/session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HS_REPLY_BYTES 75 /* session.c HS_REPLY_V2: the most a receiver sends */
#define INPUT_MAX 4096    /* well inside a socketpair's buffer */

static ingest_ctx *fz_ctx;
static ingest_authset *fz_auth;
static ingest_secret_key fz_rcv, fz_dev;

static void fz_check(int cond, const char *what, int rc)
{
    if (!cond) {
        fprintf(stderr, "fuzz_handshake: %s (rc %d: %s; %s)\n", what, rc, ingest_strerror(rc),
                ingest_ctx_errmsg(fz_ctx));
        abort();
    }
}

/* Fixed key pairs: the seed corpus stays meaningful from run to run. */
static void fz_keypair(ingest_secret_key *k, uint8_t fill)
{
    uint8_t seed[crypto_kx_SEEDBYTES];
    memset(seed, fill, sizeof(seed));
    fz_check(crypto_kx_seed_keypair(k->pk, k->sk, seed) == 0, "seed keypair", 0);
}

static void fz_setup(void)
{
    static const uint8_t base_point[INGEST_PUBKEY_BYTES] = { 9 };
    if (fz_ctx != NULL)
        return;
    fz_check(sodium_init() >= 0, "sodium_init", 0);
    fz_ctx = ingest_ctx_create(NULL);
    fz_check(fz_ctx != NULL, "ctx", 0);
    fz_keypair(&fz_rcv, 0x52);
    fz_keypair(&fz_dev, 0x44);
    fz_check(ingest_authset_create(fz_ctx, &fz_auth) == 0, "authset", 0);
    fz_check(ingest_authset_add(fz_auth, "dev-01", base_point) == 0, "authset add", 0);
    fz_check(ingest_authset_add(fz_auth, "gw-0042", fz_dev.pk) == 0, "authset add", 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0 || size - 1 > INPUT_MAX)
        return 0;
    fz_setup();
    const unsigned setup = data[0];
    const int client = setup & 1u;
    static const int ciphers[] = { INGEST_CIPHER_AUTO, INGEST_CIPHER_AES256GCM, INGEST_CIPHER_XCHACHA20POLY1305,
                                   INGEST_CIPHER_AUTO };
    const int cipher = ciphers[(setup >> 1) & 3u];
    const unsigned features = ((setup >> 3) & 0x0fu) | ((setup & 0x80u) ? INGEST_SESSION_FEATURE_PUSH : 0u);
    const uint8_t *p = data + 1;
    const size_t n = size - 1;

    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
        return 0;
    if (n > 0)
        fz_check(write(sp[0], p, n) == (ssize_t)n, "socketpair write", 0);
    shutdown(sp[0], SHUT_WR); /* EOF after the input: no waiting */

    ingest_session *s = NULL;
    const int crc = client ? ingest_session_client_create(fz_ctx, "gw-0042", &fz_dev, fz_rcv.pk, &s)
                           : ingest_session_server_create(fz_ctx, &fz_rcv, fz_auth, &s);
    fz_check(crc == 0, "session create", crc);
    fz_check(ingest_session_set_cipher(s, cipher) == 0, "set cipher", 0);
    fz_check(ingest_session_set_features(s, features) == 0, "set features", 0);

    const int rc = ingest_session_handshake_fd(s, sp[1], 1000);
    fz_check(rc != 0, "handshake completed without the keys", rc);
    fz_check(rc != INGEST_ETIMEDOUT, "handshake waited although the input had ended", rc);
    fz_check(rc == INGEST_EAUTH || rc == INGEST_EVERSION || rc == INGEST_EPROTO || rc == INGEST_ECRYPTO ||
                 rc == INGEST_ECLOSED,
             client ? "device side: not a handshake error" : "receiver side: not a handshake error", rc);
    fz_check(ingest_session_features(s) == 0, "features agreed by a failed handshake", rc);
    fz_check(ingest_ctx_errmsg(fz_ctx)[0] != '\0', "handshake failed without a message", rc);

    if (!client) {
        /* What the receiver wrote back: a refusal or one REPLY, no more. */
        uint8_t back[HS_REPLY_BYTES + 1];
        size_t got = 0;
        fcntl(sp[0], F_SETFL, O_NONBLOCK);
        for (;;) {
            const ssize_t r = read(sp[0], back + got, sizeof(back) - got);
            if (r <= 0 || (got += (size_t)r) == sizeof(back))
                break;
        }
        fz_check(got <= HS_REPLY_BYTES, "receiver wrote more than one REPLY", rc);
    }
    ingest_session_destroy(s);
    close(sp[0]);
    close(sp[1]);
    return 0;
}
