/*
 * Fuzz target: the wire message decoders and the server's handshake parser.
 * Input: byte 0 selects the target (1..24: a message payload of that type,
 * 22..24 being unknown types; 0: a frame header; anything else: a
 * HELLO fed to a server session over a socketpair); the rest is the payload.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ingest.h"
#include "ingest/session.h"
#include "ingest/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ingest_ctx *ctx;
static ingest_authset *auth;
static ingest_secret_key rcv;

static void init(void)
{
    static const uint8_t dev_pk[32] = { 9 }; /* X25519 base point: a valid key */
    ctx = ingest_ctx_create(NULL);
    if (ingest_secret_key_generate(&rcv) != 0 || ingest_authset_create(ctx, &auth) != 0 ||
        ingest_authset_add(auth, "dev-01", dev_pk) != 0)
        __builtin_trap();
}

static void fuzz_hello(const uint8_t *p, size_t n)
{
    int sp[2];
    ingest_session *s = NULL;
    /* A HELLO is at most 173 bytes; the socket buffer holds it all. */
    if (n > 4096 || socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0)
        return;
    if (n > 0 && write(sp[0], p, n) != (ssize_t)n)
        __builtin_trap();
    shutdown(sp[0], SHUT_WR); /* EOF after the input: no waiting */
    if (ingest_session_server_create(ctx, &rcv, auth, &s) == 0) {
        const int rc = ingest_session_handshake_fd(s, sp[1], 1000);
        /* Without the device's secret the handshake can never complete. */
        if (rc == 0 || rc == INGEST_ETIMEDOUT)
            __builtin_trap();
    }
    ingest_session_destroy(s);
    close(sp[0]);
    close(sp[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ctx == NULL)
        init();
    if (size == 0)
        return 0;
    const uint8_t sel = data[0];
    const uint8_t *p = data + 1;
    const size_t n = size - 1;
    if (sel == 0) {
        ingest_wire_hdr h;
        if (n >= INGEST_WIRE_HDR_BYTES)
            (void)ingest_wire_hdr_decode(ctx, p, INGEST_WIRE_MAX_PAYLOAD, &h);
        return 0;
    }
    if (sel <= 24) {
        ingest_wire_msg m;
        if (ingest_wire_decode(ctx, sel, p, n, &m) == 0) {
            /* Round trip: whatever decodes re-encodes to the same bytes. */
            static uint8_t out[1 << 20];
            size_t len = 0;
            if (n <= sizeof(out) && (ingest_wire_encode(ctx, &m, out, sizeof(out), &len) != 0 || len != n ||
                                     memcmp(out, p, n) != 0))
                __builtin_trap();
        }
        return 0;
    }
    fuzz_hello(p, n);
    return 0;
}
