/*
 * Keys and the authenticated, encrypted session of the TCP transport
 * (docs/protocol.md).
 *
 * A device and a receiver each hold a static X25519 key pair (libsodium
 * crypto_kx).  The receiver knows the devices it accepts (an authorized-
 * devices file of "DEVICE-ID BASE64-PUBLIC-KEY" lines); the device pins the
 * receiver's public key.  The handshake mixes both static keys and fresh
 * ephemeral keys (forward secrecy); afterwards every frame is AEAD-sealed
 * (AES-256-GCM when both ends have it in hardware, else XChaCha20-Poly1305)
 * with a per-direction key and a counter nonce, so a replayed, reordered,
 * truncated or altered frame fails.
 *
 * THREAD SAFETY: a session is used by one thread at a time, except that
 * after the handshake ONE thread may call the send functions while ONE
 * other thread calls the receive functions: the two directions keep
 * separate state, buffers and error messages (ingest_session_send_errmsg,
 * ingest_session_recv_errmsg; send and receive never write the context's
 * errmsg).  Their buffers grow through the context's allocator, so with
 * a custom allocator that allocator must then be thread-safe (the default
 * is).  The authorized set is only read; it may be shared by many server
 * sessions in many threads while nobody modifies it.
 *
 * UNTRUSTED INPUT: before the handshake completes only the bounded
 * handshake messages are read (at most 173 bytes by the server and 72 by
 * the client); a server rejects an unknown device after reading its id.
 * Every frame length is checked against the session's payload bound before
 * anything is allocated.
 */
#ifndef INGEST_SESSION_H
#define INGEST_SESSION_H

#include "ingest/common.h"
#include "ingest/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INGEST_PUBKEY_BYTES 32
#define INGEST_SECKEY_BYTES 32
/* Device ids follow the batch id rule: 1..128 bytes of [A-Za-z0-9._-],
 * starting with a letter or digit (ingest_wire_id_valid). */
#define INGEST_DEVICE_ID_MAX 128
/* Bounds of an authorized-devices file. */
#define INGEST_AUTHSET_LINE_MAX 512
#define INGEST_AUTHSET_MAX_DEVICES 100000

/* A static key pair (X25519 for crypto_kx).  Wipe with ingest_secret_key_wipe. */
typedef struct ingest_secret_key {
    uint8_t pk[INGEST_PUBKEY_BYTES];
    uint8_t sk[INGEST_SECKEY_BYTES];
} ingest_secret_key;

/* Fresh random key pair.  Returns 0 or INGEST_ECRYPTO. */
INGEST_API int ingest_secret_key_generate(ingest_secret_key *k);
INGEST_API void ingest_secret_key_wipe(ingest_secret_key *k);

/*
 * Write a secret key file (text, docs/protocol.md "Key files"):
 *   ingest-secret-key v1
 *   kx-public BASE64
 *   kx-secret BASE64
 * created with O_EXCL and mode 0600, then fsynced.  An existing file is never
 * overwritten: INGEST_EEXIST.
 */
INGEST_API int ingest_secret_key_save(ingest_ctx *ctx, const char *path, const ingest_secret_key *k);
/*
 * Load a secret key file; checks that the public key matches the secret one.
 * A regular file that group or others can access (mode & 077) is refused
 * with INGEST_EINVAL and "chmod 600 PATH" in the detail, as ssh refuses a
 * private key that is too open; a root-owned file may give its group read
 * access (0640) when the caller is not root.  INGEST_ENOTFOUND if missing.
 */
INGEST_API int ingest_secret_key_load(ingest_ctx *ctx, const char *path, ingest_secret_key *k);

/* Write "BASE64\n" (original base64 variant) with O_EXCL, mode 0644. */
INGEST_API int ingest_public_key_save(ingest_ctx *ctx, const char *path, const uint8_t pk[INGEST_PUBKEY_BYTES]);
/* Load a .pub file: one base64 line (surrounding blanks and newline allowed). */
INGEST_API int ingest_public_key_load(ingest_ctx *ctx, const char *path, uint8_t pk[INGEST_PUBKEY_BYTES]);
/* Parse base64 text (original variant, exactly 32 bytes) into pk. */
INGEST_API int ingest_public_key_parse(ingest_ctx *ctx, const char *b64, size_t len,
                                       uint8_t pk[INGEST_PUBKEY_BYTES]);
/* Format pk as base64 into out (at least INGEST_PUBKEY_B64_BYTES bytes). */
#define INGEST_PUBKEY_B64_BYTES 45
INGEST_API void ingest_public_key_format(const uint8_t pk[INGEST_PUBKEY_BYTES], char out[INGEST_PUBKEY_B64_BYTES]);

/*
 * Write a fresh fleet dedup key: 64 hex digits and a newline, O_EXCL, mode
 * 0600 (loadable with ingest_dedup_key_load).
 */
INGEST_API int ingest_dedup_key_generate_file(ingest_ctx *ctx, const char *path);

/* ---- authorized devices ------------------------------------------------- */

typedef struct ingest_authset_s ingest_authset;

INGEST_API int ingest_authset_create(ingest_ctx *ctx, ingest_authset **out) INGEST_WUR;
INGEST_API void ingest_authset_destroy(ingest_authset *set);
/* Add a device; INGEST_EEXIST if the id is present, INGEST_EINVAL if bad. */
INGEST_API int ingest_authset_add(ingest_authset *set, const char *device_id,
                                  const uint8_t pk[INGEST_PUBKEY_BYTES]);
/*
 * Load an authorized-devices file: one "DEVICE-ID BASE64-PUBLIC-KEY" per
 * line, blanks around fields, '#' comments and blank lines allowed; at most
 * INGEST_AUTHSET_LINE_MAX bytes per line and INGEST_AUTHSET_MAX_DEVICES
 * devices.  A malformed or duplicate line fails with INGEST_ECORRUPT and
 * "FILE:LINE: reason" in ctx.
 */
INGEST_API int ingest_authset_load(ingest_ctx *ctx, const char *path, ingest_authset **out) INGEST_WUR;
/* Look up a device: 0 and its key, or INGEST_ENOTFOUND.  pk may be NULL. */
INGEST_API int ingest_authset_lookup(const ingest_authset *set, const char *device_id, size_t id_len,
                                     uint8_t pk[INGEST_PUBKEY_BYTES]);
INGEST_API size_t ingest_authset_count(const ingest_authset *set);
/*
 * The i-th device in id order (i < ingest_authset_count): 0 with *device_id
 * pointing into the set (valid while it is not changed) and its key in pk
 * (may be NULL), or INGEST_ENOTFOUND past the end.  To compare two sets,
 * e.g. an authorized-devices file re-read.
 */
INGEST_API int ingest_authset_entry(const ingest_authset *set, size_t i, const char **device_id,
                                    uint8_t pk[INGEST_PUBKEY_BYTES]);

/* ---- session ------------------------------------------------------------ */

typedef struct ingest_session_s ingest_session;

enum {
    INGEST_CIPHER_AUTO = 0,              /* AES-256-GCM if both sides have it, else XChaCha */
    INGEST_CIPHER_AES256GCM = 1,
    INGEST_CIPHER_XCHACHA20POLY1305 = 2,
};

/*
 * Session features, negotiated in the handshake (docs/protocol.md 2.1-2.2):
 * the device offers a set, the receiver agrees to the offered bits it
 * supports.  Both sets are covered by the handshake's authentication.
 * Bits 0-7 travel in a HELLO of protocol version 1; a device that offers a
 * higher bit sends a HELLO of version 2 (32 feature bits), which a receiver
 * of version 1 refuses (INGEST_EVERSION): the device then connects again
 * offering bits 0-7 only (docs/protocol.md 2.1.1).
 *
 * INGEST_SESSION_FEATURE_PIPELINE: the receiver may answer a BATCH_COMMIT
 * with RECEIVED and send the batch's ACK later, while the next batch
 * proceeds.
 */
#define INGEST_SESSION_FEATURE_PIPELINE 0x01u
/*
 * INGEST_SESSION_FEATURE_SHUFFLE2: the receiver decodes chunks encoded with
 * the shuffle2 filter (INGEST_CODEC_FILTER_SHUFFLE2, docs/compression.md).
 */
#define INGEST_SESSION_FEATURE_SHUFFLE2 0x02u
/*
 * INGEST_SESSION_FEATURE_PACK: the device may send small chunks compressed
 * together (INGEST_MSG_CHUNK_GROUP) and sends its manifest parts
 * compressed (each MANIFEST_PART is an encoded chunk, codec.h, whose bytes
 * are the manifest slice); docs/protocol.md 2.2.1.
 */
#define INGEST_SESSION_FEATURE_PACK 0x04u
/*
 * INGEST_SESSION_FEATURE_DICT: the device may offer trained dictionaries
 * (DICT_OFFER, DICT_WANT, DICT_DATA; docs/protocol.md) and then send chunks
 * compressed with those the receiver accepted.
 */
#define INGEST_SESSION_FEATURE_DICT 0x08u
/*
 * INGEST_SESSION_FEATURE_REFUSE: the receiver refuses a file it cannot land
 * (its path, its place in the bronze tree) with FILE_REFUSED and lands the
 * rest of its batch; without it such a file fails the whole batch.
 */
#define INGEST_SESSION_FEATURE_REFUSE 0x10u
/*
 * INGEST_SESSION_FEATURE_LANDING: the receiver's first message after the
 * handshake is LANDING (its layout and path limits), so that the agent can
 * refuse at the edge, before reading a file, what the core would refuse.
 */
#define INGEST_SESSION_FEATURE_LANDING 0x20u
/*
 * INGEST_SESSION_FEATURE_WITHDRAW: the device may take one file of the
 * open batch back after the WANT (FILE_WITHDRAWN: it vanished before its
 * chunks could be read); the receiver lands the rest and refuses that file
 * (FILE_REFUSED).  Only with INGEST_SESSION_FEATURE_REFUSE.
 */
#define INGEST_SESSION_FEATURE_WITHDRAW 0x40u
/*
 * INGEST_SESSION_FEATURE_DELTA: the receiver may describe the predecessor
 * of a wanted chunk (DELTA_BASE, before the WANT) and the device may then
 * send the chunk as literal blocks plus blocks of the predecessor
 * (CHUNK_DELTA), docs/protocol.md "Delta chunks".
 */
#define INGEST_SESSION_FEATURE_DELTA 0x80u
/*
 * INGEST_SESSION_FEATURE_PUSH: the wire manifest may list a small chunk
 * without its id ("pushed"): the receiver wants it without a lookup and
 * takes its id from its bytes when it arrives (docs/protocol.md "Pushed
 * chunks").  Needs INGEST_SESSION_FEATURE_PACK; a HELLO of version 2.
 */
#define INGEST_SESSION_FEATURE_PUSH 0x100u
/*
 * INGEST_SESSION_FEATURE_RUNS: indexes travel as runs where they are
 * consecutive: a WANT may carry (first, n) pairs (INGEST_WANT_RUNS) and the
 * device may send a group of consecutive chunks as CHUNK_RUN (first, count)
 * instead of CHUNK_GROUP's 4 bytes per index (docs/protocol.md).  Needs
 * INGEST_SESSION_FEATURE_PACK; a HELLO of version 2.
 */
#define INGEST_SESSION_FEATURE_RUNS 0x200u
/* The features a HELLO of version 1 can carry (one byte). */
#define INGEST_SESSION_FEATURES_V1 0xffu
/* Every feature this library knows. */
#define INGEST_SESSION_FEATURES_ALL                                                                    \
    (INGEST_SESSION_FEATURE_PIPELINE | INGEST_SESSION_FEATURE_SHUFFLE2 | INGEST_SESSION_FEATURE_PACK | \
     INGEST_SESSION_FEATURE_DICT | INGEST_SESSION_FEATURE_REFUSE | INGEST_SESSION_FEATURE_LANDING |   \
     INGEST_SESSION_FEATURE_WITHDRAW | INGEST_SESSION_FEATURE_DELTA | INGEST_SESSION_FEATURE_PUSH |     \
     INGEST_SESSION_FEATURE_RUNS)

/* A piece of a frame's payload for ingest_session_sendv. */
typedef struct ingest_iov {
    const void *base;
    size_t len;
} ingest_iov;

/*
 * Device side.  device_key and receiver_pub are copied (wiped on destroy).
 */
INGEST_API int ingest_session_client_create(ingest_ctx *ctx, const char *device_id,
                                            const ingest_secret_key *device_key,
                                            const uint8_t receiver_pub[INGEST_PUBKEY_BYTES],
                                            ingest_session **out) INGEST_WUR;
/*
 * Receiver side.  authorized is borrowed: it must outlive the handshake and
 * must not be modified during it.
 */
INGEST_API int ingest_session_server_create(ingest_ctx *ctx, const ingest_secret_key *receiver_key,
                                            const ingest_authset *authorized, ingest_session **out) INGEST_WUR;
/* Wipes every key.  NULL is accepted.  Never closes the fd. */
INGEST_API void ingest_session_destroy(ingest_session *s);

/*
 * Options, set before the handshake.  cipher: INGEST_CIPHER_* (AUTO by
 * default; a client offers only that cipher, a server accepts only it).
 * max_payload: bound of a received frame's payload, 64..
 * INGEST_WIRE_MAX_PAYLOAD_HIGHEST (default INGEST_WIRE_MAX_PAYLOAD); the
 * peer must send no more.  send_timeout_ms: how long a send may wait for
 * the socket (default 60000; negative: forever).
 */
INGEST_API int ingest_session_set_cipher(ingest_session *s, int cipher);
INGEST_API int ingest_session_set_max_payload(ingest_session *s, size_t max_payload);
INGEST_API void ingest_session_set_send_timeout(ingest_session *s, int send_timeout_ms);
/*
 * Features (INGEST_SESSION_FEATURE_* bits), set before the handshake: on a
 * client the ones it offers, on a server the ones it supports.  Default 0
 * on both.  Returns 0, or INGEST_EINVAL for a bit outside
 * INGEST_SESSION_FEATURES_ALL or after the handshake (nothing changed).
 */
INGEST_API int ingest_session_set_features(ingest_session *s, unsigned features);
/*
 * After a successful handshake: the agreed features (offered AND supported),
 * the same on both sides.  0 before the handshake and after a failed one.
 */
INGEST_API unsigned ingest_session_features(const ingest_session *s);
/*
 * Server: the highest handshake version it takes, 1 or 2 (the default).
 * At 1 it answers a HELLO of version 2 as a receiver of version 1 does
 * (status 2), so that a device's fallback can be tried against it.
 * INGEST_EINVAL for another value, on a client, or after the handshake.
 */
INGEST_API int ingest_session_set_max_version(ingest_session *s, unsigned version);

/*
 * Run the handshake over a connected stream socket (or pipe-like fd;
 * blocking or not), waiting at most timeout_ms in total (negative: forever).
 * Returns 0, or:
 *   INGEST_EAUTH      server: the device is not authorized (ctx names it;
 *                     the client was told and nothing more was read);
 *                     client: the receiver refused this device
 *   INGEST_ECRYPTO    client: the receiver's confirmation failed (it does
 *                     not hold the pinned key); server: the device's failed
 *   INGEST_EPROTO     malformed handshake message (bad magic, bad id);
 *                     client: the receiver agreed to a feature not offered
 *   INGEST_EVERSION   unsupported protocol version (either side)
 *   INGEST_ETIMEDOUT, INGEST_ECLOSED, INGEST_EIO
 * The fd belongs to the caller; on failure close it.
 */
INGEST_API int ingest_session_handshake_fd(ingest_session *s, int fd, int timeout_ms);

/* After the handshake: the device id (on the server, once read), the cipher. */
INGEST_API const char *ingest_session_peer_id(const ingest_session *s);
INGEST_API int ingest_session_cipher(const ingest_session *s);
INGEST_API const char *ingest_session_cipher_name(int cipher);
/* After the handshake: the largest payload the peer accepts per frame (0 before). */
INGEST_API size_t ingest_session_peer_max_payload(const ingest_session *s);

/*
 * Seal and write one frame: header {type, version, flags 0, len} and the
 * payload (the concatenation of the iov pieces).  len <= the peer's bound.
 * Returns 0, INGEST_EINVAL (bad type, no handshake), INGEST_ETOOBIG,
 * INGEST_ETIMEDOUT, INGEST_ECLOSED or INGEST_EIO.  A failed send after the
 * first byte went out leaves the send direction closed (the stream is cut
 * mid-frame); detail in ingest_session_send_errmsg.
 */
INGEST_API int ingest_session_send(ingest_session *s, int fd, unsigned type, const void *payload, size_t len);
INGEST_API int ingest_session_sendv(ingest_session *s, int fd, unsigned type, const ingest_iov *iov, size_t n);
/* Encode m (trailing bytes sent from their own buffer) and send it. */
INGEST_API int ingest_session_send_msg(ingest_session *s, int fd, const ingest_wire_msg *m);

/*
 * Read, authenticate and open one frame, waiting at most timeout_ms
 * (negative: forever).  *payload points into the session's buffer, valid
 * until the next receive or destroy.  Returns 0, or:
 *   INGEST_ETIMEDOUT  no frame started within timeout_ms (the session stays
 *                     usable; a timeout in the middle of a frame closes it)
 *   INGEST_ECLOSED    the peer closed the connection (between frames, or
 *                     mid-frame: "truncated frame")
 *   INGEST_ETOOBIG    the declared length exceeds the bound (nothing was
 *                     allocated)
 *   INGEST_ECRYPTO    authentication failed: tampered, replayed, reordered
 *                     or forged frame
 *   INGEST_EPROTO / INGEST_EVERSION  bad header inside an authentic frame
 * Any error but ETIMEDOUT-between-frames closes the receive direction:
 * later calls return the same code; the reason is in
 * ingest_session_recv_errmsg.  The caller then closes the fd.
 */
INGEST_API int ingest_session_recv_ref(ingest_session *s, int fd, unsigned *type, const uint8_t **payload,
                                       size_t *len, int timeout_ms);
/* Same, copying the payload to buf; INGEST_ETOOBIG (and closed) if > cap. */
INGEST_API int ingest_session_recv(ingest_session *s, int fd, unsigned *type, void *buf, size_t cap,
                                   size_t *len, int timeout_ms);
/* Receive and decode one message (views point into the session's buffer). */
INGEST_API int ingest_session_recv_msg(ingest_session *s, int fd, ingest_wire_msg *m, int timeout_ms);

/* Detail of the last send / receive failure ("" if none). */
INGEST_API const char *ingest_session_send_errmsg(const ingest_session *s);
INGEST_API const char *ingest_session_recv_errmsg(const ingest_session *s);

#ifdef __cplusplus
}
#endif
#endif
