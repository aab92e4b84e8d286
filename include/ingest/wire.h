/*
 * Wire protocol messages (docs/protocol.md).
 *
 * Every message travels inside one encrypted session frame (session.h).  The
 * plaintext of a frame is an 8-byte header followed by the payload:
 *
 *   offset size  field
 *   0      1     type (INGEST_MSG_*)
 *   1      1     version (INGEST_WIRE_VERSION)
 *   2      2     flags, little-endian (0; reserved)
 *   4      4     payload length, little-endian (<= the session's bound)
 *
 * The encoders and decoders here deal with the payload of each type.  Every
 * integer is little-endian.  A string is a u16 length followed by that many
 * bytes (no NUL byte; no terminator on the wire).
 *
 * UNTRUSTED INPUT: the decoders accept arbitrary bytes; every length is
 * checked against the payload and its own bound, trailing bytes are an
 * error, and nothing is allocated.  Decoded byte views (manifest parts,
 * chunk data, dictionary slices, WANT indexes, delta hashes and maps) point into the payload buffer and are valid as
 * long as it is.
 *
 * THREAD SAFETY: all functions here are thread-safe (no shared state); ctx
 * is used only to record an error detail.
 */
#ifndef INGEST_WIRE_H
#define INGEST_WIRE_H

#include "ingest/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INGEST_WIRE_VERSION 1
#define INGEST_WIRE_HDR_BYTES 8
/* Default bound of a frame's payload; both sides enforce it. */
#define INGEST_WIRE_MAX_PAYLOAD (4u * 1024u * 1024u)
/* Highest bound a session may be configured with (a 64 MiB chunk, encoded). */
#define INGEST_WIRE_MAX_PAYLOAD_HIGHEST (80u * 1024u * 1024u)
#define INGEST_WIRE_BATCH_ID_MAX 128  /* bytes; [A-Za-z0-9._-] */
#define INGEST_WIRE_MESSAGE_MAX 1024  /* bytes of an ACK/ERROR message */
#define INGEST_WIRE_LAYOUT_MAX 1024   /* bytes of LANDING's layout (the receiver's `layout` key) */
#define INGEST_WIRE_LANDING_PATH_MAX 4095 /* LANDING's path max: at most PATH_MAX - 1 */
#define INGEST_WIRE_LANDING_NAME_MAX 255  /* LANDING's name max: at most NAME_MAX */

/* Message types.  0 is never valid. */
enum {
    INGEST_MSG_BATCH_BEGIN = 1,   /* agent -> receiver */
    INGEST_MSG_MANIFEST_PART = 2, /* agent -> receiver */
    INGEST_MSG_MANIFEST_END = 3,  /* agent -> receiver */
    INGEST_MSG_WANT = 4,          /* receiver -> agent */
    INGEST_MSG_CHUNK = 5,         /* agent -> receiver */
    INGEST_MSG_BATCH_COMMIT = 6,  /* agent -> receiver */
    INGEST_MSG_ACK = 7,           /* receiver -> agent */
    INGEST_MSG_ERROR = 8,         /* either way; the sender closes after it */
    INGEST_MSG_PING = 9,          /* either way */
    INGEST_MSG_PONG = 10,         /* answer to PING */
    INGEST_MSG_RECEIVED = 11,     /* receiver -> agent; only with INGEST_SESSION_FEATURE_PIPELINE */
    INGEST_MSG_CHUNK_GROUP = 12,  /* agent -> receiver; only with INGEST_SESSION_FEATURE_PACK */
    INGEST_MSG_DICT_OFFER = 13,   /* agent -> receiver; only with INGEST_SESSION_FEATURE_DICT */
    INGEST_MSG_DICT_WANT = 14,    /* receiver -> agent; answer to DICT_OFFER */
    INGEST_MSG_DICT_DATA = 15,    /* agent -> receiver; a slice of a dictionary the receiver asked for */
    INGEST_MSG_FILE_REFUSED = 16, /* receiver -> agent; only with INGEST_SESSION_FEATURE_REFUSE */
    INGEST_MSG_LANDING = 17,      /* receiver -> agent, first after the handshake; only with INGEST_SESSION_FEATURE_LANDING */
    INGEST_MSG_FILE_WITHDRAWN = 18, /* agent -> receiver; only with INGEST_SESSION_FEATURE_WITHDRAW */
    INGEST_MSG_DELTA_BASE = 19,     /* receiver -> agent, before the WANT; only with INGEST_SESSION_FEATURE_DELTA */
    INGEST_MSG_CHUNK_DELTA = 20,    /* agent -> receiver; answer to a DELTA_BASE; only with INGEST_SESSION_FEATURE_DELTA */
    INGEST_MSG_CHUNK_RUN = 21,      /* agent -> receiver; a CHUNK_GROUP of consecutive indexes; only with INGEST_SESSION_FEATURE_RUNS */
    INGEST_MSG_TYPE_LAST = 21,
};

/* CHUNK_GROUP bounds: chunks in one group, and bytes they hold decoded. */
#define INGEST_WIRE_GROUP_MAX_CHUNKS 4096u
#define INGEST_WIRE_GROUP_MAX_RAW (1024u * 1024u)
/* With INGEST_SESSION_FEATURE_PUSH: the largest file whose chunks a wire manifest may list without ids. */
#define INGEST_WIRE_PUSH_FILE_MAX (32u * 1024u)
/* With INGEST_SESSION_FEATURE_PACK: decoded bytes of one MANIFEST_PART. */
#define INGEST_WIRE_MANIFEST_PART_MAX_RAW (4u * 1024u * 1024u)

/* WANT flag: more WANT frames for the same batch follow. */
#define INGEST_WANT_MORE 0x01u
/* WANT flag (only with INGEST_SESSION_FEATURE_RUNS): the indexes travel as runs (first, n). */
#define INGEST_WANT_RUNS 0x02u

/*
 * Dictionaries (INGEST_SESSION_FEATURE_DICT, docs/protocol.md): a
 * dictionary travels as DICT_DATA slices of at most its size, which is
 * 1..INGEST_WIRE_DICT_MAX bytes (= INGEST_DICT_MAX_BYTES, codec.h); its
 * hash is the unkeyed BLAKE2b-256 of its bytes (ingest_dict_hash).
 */
#define INGEST_WIRE_DICT_MAX (4u * 1024u * 1024u)
#define INGEST_WIRE_DICT_HASH_BYTES 32
/* DICT_WANT answers. */
enum {
    INGEST_DICT_HAVE = 0,    /* the receiver holds it: chunks may use it */
    INGEST_DICT_SEND = 1,    /* send it (DICT_DATA), then chunks may use it */
    INGEST_DICT_REFUSED = 2, /* do not use it on this session (message says why) */
};

/* ACK status values (other negative values are INGEST_E* codes). */
enum {
    INGEST_ACK_LANDED = 0,    /* batch landed and durable */
    INGEST_ACK_DUPLICATE = 1, /* batch was already landed earlier; durable */
};

/* The frame header (the first 8 bytes of a frame's plaintext). */
typedef struct ingest_wire_hdr {
    uint8_t type;
    uint8_t version;
    uint16_t flags;
    uint32_t length;
} ingest_wire_hdr;

/* A static name of a message type ("BATCH_BEGIN"), or "UNKNOWN". */
INGEST_API const char *ingest_wire_type_name(unsigned type);

/* Write the 8-byte header. */
INGEST_API void ingest_wire_hdr_encode(const ingest_wire_hdr *h, uint8_t out[INGEST_WIRE_HDR_BYTES]);
/*
 * Parse and check a header: known type (else INGEST_EPROTO), version
 * INGEST_WIRE_VERSION (else INGEST_EVERSION), flags 0 (else INGEST_EPROTO),
 * length <= max_payload (else INGEST_ETOOBIG).
 */
INGEST_API int ingest_wire_hdr_decode(ingest_ctx *ctx, const uint8_t in[INGEST_WIRE_HDR_BYTES],
                                      size_t max_payload, ingest_wire_hdr *h);

typedef struct ingest_wire_batch_begin {
    char batch_id[INGEST_WIRE_BATCH_ID_MAX + 1];
    uint32_t file_count;
    uint32_t chunk_count; /* entries of the batch's ordered chunk list */
    uint64_t total_bytes; /* sum of the file sizes */
} ingest_wire_batch_begin;

typedef struct ingest_wire_bytes {
    const uint8_t *data;
    size_t len;
} ingest_wire_bytes;

typedef struct ingest_wire_manifest_end {
    uint32_t part_count;     /* MANIFEST_PART frames sent for this batch */
    uint64_t manifest_bytes; /* their total length */
} ingest_wire_manifest_end;

typedef struct ingest_wire_want {
    char batch_id[INGEST_WIRE_BATCH_ID_MAX + 1];
    uint8_t flags;        /* INGEST_WANT_MORE, INGEST_WANT_RUNS */
    /* Without INGEST_WANT_RUNS: count indexes, raw count little-endian u32,
     * strictly increasing (ingest_wire_want_index).  With it: count runs,
     * raw count pairs of u32 (first, n >= 1), each run starting past the
     * previous one's end (ingest_wire_want_run); idx then holds 2 * count
     * u32 when encoding. */
    uint32_t count;
    const uint8_t *raw;
    const uint32_t *idx;  /* encode only: the indexes, or the runs' pairs (raw is ignored) */
} ingest_wire_want;

typedef struct ingest_wire_chunk {
    uint32_t index;      /* into the batch's ordered chunk list */
    const uint8_t *data; /* an encoded chunk (codec.h) */
    size_t len;
} ingest_wire_chunk;

/*
 * CHUNK_GROUP: several chunks of the open batch in one encoded chunk
 * (codec.h) whose decoded bytes are the chunks at the given indexes,
 * concatenated in index order; their lengths are the manifest's.
 */
typedef struct ingest_wire_chunk_group {
    uint32_t count;      /* 1..INGEST_WIRE_GROUP_MAX_CHUNKS */
    /* CHUNK_GROUP: count little-endian u32 indexes, strictly increasing.
     * CHUNK_RUN: NULL, the indexes are first .. first + count - 1. */
    const uint8_t *raw;
    uint32_t first;
    const uint8_t *data; /* the encoded chunk */
    size_t len;
} ingest_wire_chunk_group;

typedef struct ingest_wire_batch_commit {
    char batch_id[INGEST_WIRE_BATCH_ID_MAX + 1];
    uint32_t chunks_sent; /* CHUNK frames sent for this batch */
} ingest_wire_batch_commit;

typedef struct ingest_wire_ack {
    char batch_id[INGEST_WIRE_BATCH_ID_MAX + 1];
    int32_t status; /* INGEST_ACK_* or a negative INGEST_E* code */
    char message[INGEST_WIRE_MESSAGE_MAX + 1];
} ingest_wire_ack;

/*
 * RECEIVED: every chunk of the batch is in, no more WANTs for it; the ACK
 * follows once it is durable.  Encoded like the batch id of ACK.  The codec
 * does not check the session's features: only a receiver that agreed to
 * INGEST_SESSION_FEATURE_PIPELINE may send it, and the programs check that.
 */
typedef struct ingest_wire_received {
    char batch_id[INGEST_WIRE_BATCH_ID_MAX + 1];
} ingest_wire_received;

/*
 * FILE_REFUSED: one file of the batch the receiver does not land (the rest
 * of the batch does), sent before the batch's ACK.  file_index is its
 * position in the batch manifest (0-based); code a negative INGEST_E*
 * code; message says why (never empty).
 */
typedef struct ingest_wire_file_refused {
    char batch_id[INGEST_WIRE_BATCH_ID_MAX + 1];
    uint32_t file_index;
    int32_t code;
    char message[INGEST_WIRE_MESSAGE_MAX + 1];
} ingest_wire_file_refused;

/*
 * LANDING: how the receiver names this device's files in the bronze tree,
 * so that the agent refuses before reading what the core would refuse
 * (docs/protocol.md, "Landing rules").  Its layout as configured
 * (placeholders unexpanded, at most INGEST_WIRE_LAYOUT_MAX bytes, no NUL),
 * the longest landed path in bytes (1..4095) and the longest path
 * component (1..255).  The codec bounds the fields; the agent checks the
 * layout against the layout rule before it uses it.
 */
typedef struct ingest_wire_landing {
    uint32_t path_max;
    uint32_t name_max;
    char layout[INGEST_WIRE_LAYOUT_MAX + 1];
} ingest_wire_landing;

/*
 * FILE_WITHDRAWN: one file of the open batch the agent takes back after its
 * WANT (the file vanished at the edge before its chunks could be read):
 * the receiver does not wait for the chunks only that file needs, lands
 * the rest, records the file as refused with the message (never empty)
 * and answers with FILE_REFUSED for it before the ACK.  Encoded like
 * FILE_REFUSED; code a negative INGEST_E* code (INGEST_ENOTFOUND: vanished).
 */
typedef ingest_wire_file_refused ingest_wire_file_withdrawn;
/* The message of a FILE_WITHDRAWN, and of the refusal the receiver records and tells for it. */
#define INGEST_WIRE_WITHDRAWN_REASON "vanished at the edge while its batch was being shipped"

/* DICT_OFFER: a dictionary the device wants to compress chunks with. */
typedef struct ingest_wire_dict_offer {
    uint32_t dict_id; /* the id in its header (ingest_dict_id), non-zero */
    uint32_t size;    /* its bytes, 1..INGEST_WIRE_DICT_MAX */
    uint8_t hash[INGEST_WIRE_DICT_HASH_BYTES];
} ingest_wire_dict_offer;

/* DICT_WANT: the receiver's answer to the DICT_OFFER of dict_id. */
typedef struct ingest_wire_dict_want {
    uint32_t dict_id;
    uint8_t answer; /* INGEST_DICT_HAVE, _SEND or _REFUSED */
    char message[INGEST_WIRE_MESSAGE_MAX + 1];
} ingest_wire_dict_want;

/* DICT_DATA: bytes [offset, offset + len) of the dictionary dict_id. */
typedef struct ingest_wire_dict_data {
    uint32_t dict_id;
    uint32_t offset;     /* < INGEST_WIRE_DICT_MAX; offset + len <= INGEST_WIRE_DICT_MAX */
    const uint8_t *data; /* len >= 1 bytes */
    size_t len;
} ingest_wire_dict_data;

typedef struct ingest_wire_error {
    int32_t code; /* negative INGEST_E* code */
    char message[INGEST_WIRE_MESSAGE_MAX + 1];
} ingest_wire_error;

typedef struct ingest_wire_ping {
    uint64_t nonce; /* echoed by PONG */
} ingest_wire_ping;

/*
 * Delta chunks (INGEST_SESSION_FEATURE_DELTA, docs/compression.md): a
 * chunk's predecessor (the bytes at the same offset in the landed previous
 * version of its file, at most as many as the chunk has) is cut into
 * blocks of INGEST_WIRE_DELTA_BLOCK bytes (the last one shorter), each
 * described by its 8-byte keyed hash (crypto_shorthash, SipHash-2-4, with
 * the batch's random key).  A predecessor has 1..INGEST_WIRE_DELTA_MAX
 * bytes; a delta chunk 1..INGEST_WIRE_DELTA_MAX_BLOCKS blocks.
 */
#define INGEST_WIRE_DELTA_BLOCK 1024u
#define INGEST_WIRE_DELTA_MAX (64u * 1024u * 1024u)
#define INGEST_WIRE_DELTA_MAX_BLOCKS (INGEST_WIRE_DELTA_MAX / INGEST_WIRE_DELTA_BLOCK)
#define INGEST_WIRE_DELTA_KEY_BYTES 16
#define INGEST_WIRE_DELTA_HASH_BYTES 8

/* Blocks of n bytes (0 for 0). */
#define INGEST_WIRE_DELTA_BLOCKS(n) (((n) + INGEST_WIRE_DELTA_BLOCK - 1) / INGEST_WIRE_DELTA_BLOCK)

/*
 * DELTA_BASE: the predecessor of wanted chunk index: its length base_len
 * and the hash of each of its INGEST_WIRE_DELTA_BLOCKS(base_len) blocks
 * (hashes: that many times INGEST_WIRE_DELTA_HASH_BYTES bytes).
 */
typedef struct ingest_wire_delta_base {
    uint32_t index;
    uint32_t base_len; /* 1..INGEST_WIRE_DELTA_MAX */
    uint8_t key[INGEST_WIRE_DELTA_KEY_BYTES];
    const uint8_t *hashes;
} ingest_wire_delta_base;

/*
 * CHUNK_DELTA: chunk index rebuilt from its predecessor: it has nblocks
 * blocks (1..INGEST_WIRE_DELTA_MAX_BLOCKS; the receiver checks them
 * against the chunk's length in the manifest); bit j of map (byte j / 8,
 * bit j % 8; (nblocks + 7) / 8 bytes, unused bits 0) set: block j is the
 * predecessor's block j, else its bytes are literal.  data: an encoded
 * chunk (codec.h) whose decoded bytes are the literal blocks in order, or
 * nothing (len 0) when every block is copied.
 */
typedef struct ingest_wire_chunk_delta {
    uint32_t index;
    uint32_t nblocks;
    const uint8_t *map;
    const uint8_t *data;
    size_t len;
} ingest_wire_chunk_delta;

/* Any message: type selects the member of u. */
typedef struct ingest_wire_msg {
    uint8_t type;
    union {
        ingest_wire_batch_begin begin;
        ingest_wire_bytes manifest_part;
        ingest_wire_manifest_end manifest_end;
        ingest_wire_want want;
        ingest_wire_chunk chunk;
        ingest_wire_chunk_group group;
        ingest_wire_batch_commit commit;
        ingest_wire_ack ack;
        ingest_wire_received received;
        ingest_wire_error error;
        ingest_wire_ping ping; /* PING and PONG */
        ingest_wire_dict_offer dict_offer;
        ingest_wire_dict_want dict_want;
        ingest_wire_dict_data dict_data;
        ingest_wire_file_refused refused;
        ingest_wire_landing landing;
        ingest_wire_file_withdrawn withdrawn;
        ingest_wire_delta_base delta_base;
        ingest_wire_chunk_delta delta;
    } u;
} ingest_wire_msg;

/* Index i (< w->count) of a decoded WANT. */
INGEST_API uint32_t ingest_wire_want_index(const ingest_wire_want *w, uint32_t i);
/* Run k (< w->count) of a WANT with INGEST_WANT_RUNS (decoded or for encoding). */
INGEST_API void ingest_wire_want_run(const ingest_wire_want *w, uint32_t k, uint32_t *first, uint32_t *n);
/* Index i (< g->count) of a CHUNK_GROUP or CHUNK_RUN. */
INGEST_API uint32_t ingest_wire_group_index(const ingest_wire_chunk_group *g, uint32_t i);

/*
 * Encoded payload size of m, or 0 when m is invalid (bad type, string too
 * long, etc.).
 */
INGEST_API size_t ingest_wire_encoded_size(const ingest_wire_msg *m);

/*
 * Encode the payload of m into out[0,cap): *len gets the size.  Checks the
 * fields as the decoder would (INGEST_EINVAL with a reason); INGEST_ETOOBIG
 * when cap or INGEST_WIRE_MAX_PAYLOAD_HIGHEST is too small.
 */
INGEST_API int ingest_wire_encode(ingest_ctx *ctx, const ingest_wire_msg *m, uint8_t *out, size_t cap,
                                  size_t *len);

/*
 * Encode only the fixed part of m, without the trailing bytes of a
 * MANIFEST_PART, CHUNK or DICT_DATA, the index array and bytes of a
 * CHUNK_GROUP, the hashes of a DELTA_BASE or the map and bytes of a
 * CHUNK_DELTA (which are then sent from their own buffers, see
 * ingest_session_send_msg).  For the other types this is ingest_wire_encode.
 */
INGEST_API int ingest_wire_encode_head(ingest_ctx *ctx, const ingest_wire_msg *m, uint8_t *out, size_t cap,
                                       size_t *len);

/*
 * Decode the payload of a message of the given type.  Returns 0,
 * INGEST_EPROTO for an unknown type, or INGEST_ECORRUPT naming the type and
 * the field and offset that is wrong.  Views point into payload.
 */
INGEST_API int ingest_wire_decode(ingest_ctx *ctx, unsigned type, const uint8_t *payload, size_t len,
                                  ingest_wire_msg *m);

/* A batch or device id is 1..128 bytes of [A-Za-z0-9._-]: 1 if valid. */
INGEST_API int ingest_wire_id_valid(const char *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif
