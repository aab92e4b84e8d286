/*
 * Sealed records for the Kafka transport (issue 11, part 2; docs/kafka.md
 * when it lands): what a device publishes (a batch's manifest parts, the
 * chunks the core is not known to hold, an end record) and what the core
 * replies (landed, or the chunks still needed).  Brokers can neither read
 * nor forge a record: each is sealed with XChaCha20-Poly1305 under a key
 * derived from the device's and the core's static X25519 keys (every
 * receiver of a fleet holds the core key), with a random nonce, and its
 * header (type, device, batch, record number) authenticated as associated
 * data, so a record cannot be moved to another batch, device or place.
 *
 * A sealed record:
 *
 *   offset  size  field
 *   0       4     magic "IKR1"
 *   4       1     type (INGEST_KREC_*)
 *   5       1     flags (0)
 *   6       1     d = length of the device id (1..INGEST_DEVICE_ID_MAX)
 *   7       d     device id ([A-Za-z0-9._-], ingest_wire_id_valid)
 *   7+d     1     b = length of the batch id (1..INGEST_WIRE_BATCH_ID_MAX)
 *   8+d     b     batch id
 *   8+d+b   4     record number, little-endian (per batch and direction)
 *   12+d+b  24    nonce
 *   36+d+b  n+16  the sealed payload and its tag
 *
 * Every record is at most INGEST_KREC_MAX bytes, under a broker's default
 * message.max.bytes; a larger manifest or chunk travels in pieces.
 *
 * UNTRUSTED INPUT: the parsers take arbitrary bytes; every length is
 * checked against the record and its bound before use, nothing is
 * allocated, and a failure names the field and its offset.
 * THREAD SAFETY: all functions are thread-safe; ctx only takes a detail.
 */
#ifndef INGEST_KRECORD_H
#define INGEST_KRECORD_H

#include "ingest/common.h"
#include "ingest/session.h"
#include "ingest/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INGEST_KREC_MAX 1000000u /* bytes of a sealed record */
#define INGEST_KREC_NONCE_BYTES 24
#define INGEST_KREC_TAG_BYTES 16
#define INGEST_KREC_KEY_BYTES 32
/* Bytes a record adds to its payload, at most (longest ids). */
#define INGEST_KREC_OVERHEAD_MAX \
    (12u + INGEST_DEVICE_ID_MAX + INGEST_WIRE_BATCH_ID_MAX + INGEST_KREC_NONCE_BYTES + INGEST_KREC_TAG_BYTES)
/* Bytes of payload a record always has room for. */
#define INGEST_KREC_PAYLOAD_MAX (INGEST_KREC_MAX - INGEST_KREC_OVERHEAD_MAX)

enum {
    INGEST_KREC_MANIFEST = 1, /* device -> core: the batch's begin, manifest parts and manifest end */
    INGEST_KREC_CHUNK = 2,    /* device -> core: a chunk or a chunk group */
    INGEST_KREC_END = 3,      /* device -> core: the batch's commit (or its abandonment) */
    INGEST_KREC_LANDED = 4,   /* core -> device: the batch is durable (or refused) */
    INGEST_KREC_NEEDED = 5,   /* core -> device: chunks still needed to land it */
    INGEST_KREC_TYPE_LAST = 5,
};

typedef struct ingest_krec_hdr {
    unsigned type;
    char device[INGEST_DEVICE_ID_MAX + 1];
    char batch[INGEST_WIRE_BATCH_ID_MAX + 1];
    uint32_t seq; /* record number within the batch, per direction */
} ingest_krec_hdr;

/* The two keys of a device-core pair, from one side: seal what it sends, open what it receives. */
typedef struct ingest_krec_keys {
    uint8_t seal[INGEST_KREC_KEY_BYTES];
    uint8_t open[INGEST_KREC_KEY_BYTES];
} ingest_krec_keys;

/* A device's keys toward the core (core_pk: the receivers' public key); 0 or INGEST_ECRYPTO (a bad key). */
INGEST_API int ingest_krec_keys_device(const ingest_secret_key *device, const uint8_t core_pk[INGEST_PUBKEY_BYTES],
                                       ingest_krec_keys *out);
/* The core's keys toward one device (device_pk from the authorized devices); 0 or INGEST_ECRYPTO. */
INGEST_API int ingest_krec_keys_core(const ingest_secret_key *core, const uint8_t device_pk[INGEST_PUBKEY_BYTES],
                                     ingest_krec_keys *out);
INGEST_API void ingest_krec_keys_wipe(ingest_krec_keys *k);

/* Bytes of the sealed record of h with len payload bytes (0 when h's ids are invalid). */
INGEST_API size_t ingest_krec_sealed_size(const ingest_krec_hdr *h, size_t len);
/*
 * Seal payload[0, len) under key into out[0, cap): *out_len gets the size.
 * INGEST_EINVAL (a bad type or id), INGEST_ETOOBIG (past INGEST_KREC_MAX or
 * cap).
 */
INGEST_API int ingest_krec_seal(ingest_ctx *ctx, const uint8_t key[INGEST_KREC_KEY_BYTES], const ingest_krec_hdr *h,
                                const void *payload, size_t len, uint8_t *out, size_t cap, size_t *out_len);
/*
 * Read a record's header without opening it (to find the device's key):
 * 0, or INGEST_ECORRUPT naming the field and offset.
 */
INGEST_API int ingest_krec_peek(ingest_ctx *ctx, const uint8_t *rec, size_t len, ingest_krec_hdr *h);
/*
 * Open a record under key: its header into h, its payload into
 * payload[0, cap) (*plen bytes; cap >= len suffices).  INGEST_ECORRUPT
 * (malformed), INGEST_ECRYPTO (forged, altered, or sealed under another
 * key), INGEST_ETOOBIG (cap).
 */
INGEST_API int ingest_krec_open(ingest_ctx *ctx, const uint8_t key[INGEST_KREC_KEY_BYTES], const uint8_t *rec,
                                size_t len, ingest_krec_hdr *h, uint8_t *payload, size_t cap, size_t *plen);

/* ---- payloads ---------------------------------------------------------------- */

/*
 * Payloads, little-endian:
 *   MANIFEST, CHUNK, END   a piece of one protocol message (wire.h), as the
 *             TCP transport would send it: u8 message type, 3 bytes 0,
 *             u32 offset of the piece, u32 total bytes of the message's
 *             payload, the piece (offset + piece <= total <=
 *             INGEST_WIRE_MAX_PAYLOAD_HIGHEST; a piece is empty only when
 *             the message is).  MANIFEST carries BATCH_BEGIN, MANIFEST_PART
 *             and MANIFEST_END; CHUNK carries CHUNK and CHUNK_GROUP; END
 *             carries BATCH_COMMIT, or ERROR when the device gave the batch up.
 *   LANDED    i32 status (INGEST_ACK_* or an INGEST_E* code), u16 n, message[n]
 *   NEEDED    u32 round, u32 n, u32 chunk index[n] (ascending, n >= 1)
 */
typedef struct ingest_krec_body {
    unsigned type;
    union {
        struct {
            unsigned wtype;         /* INGEST_MSG_* */
            uint32_t offset, total; /* of the piece in the message's payload */
            const uint8_t *data;
            size_t len;
        } msg; /* MANIFEST, CHUNK, END */
        struct {
            int32_t status;
            char message[INGEST_WIRE_MESSAGE_MAX + 1];
        } landed;
        struct {
            uint32_t round, count;
            const uint8_t *idx; /* count little-endian u32s: ingest_krec_needed_index */
        } needed;
    } u;
} ingest_krec_body;

/* Encode b's payload into out[0, cap) (*len bytes): INGEST_EINVAL (fields out of bounds) or INGEST_ETOOBIG. */
INGEST_API int ingest_krec_body_encode(ingest_ctx *ctx, const ingest_krec_body *b, const uint32_t *needed_idx,
                                       uint8_t *out, size_t cap, size_t *len);
/* Decode a payload of type (views point into it): 0, or INGEST_ECORRUPT naming the field and offset. */
INGEST_API int ingest_krec_body_decode(ingest_ctx *ctx, unsigned type, const uint8_t *p, size_t len,
                                       ingest_krec_body *b);
/* The device-to-core record type that carries protocol messages of type wtype (0: none does). */
INGEST_API int ingest_krec_msg_type(unsigned wtype);

/* The i-th index of a NEEDED body (i < count). */
INGEST_API uint32_t ingest_krec_needed_index(const ingest_krec_body *b, uint32_t i);

#ifdef __cplusplus
}
#endif
#endif
