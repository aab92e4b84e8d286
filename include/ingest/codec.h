/*
 * Per-chunk compression with zstd, optionally with trained dictionaries.
 *
 * An encoded chunk is self-describing (docs/compression.md):
 *
 *   offset size  field
 *   0      1     format version (1)
 *   1      1     method: 0 raw, 1 zstd, 2 zstd with dictionary
 *   2      1     filter applied before zstd: 0 none, 1 shuffle2 (0 when raw)
 *   3      1     reserved, zero
 *   4      4     dictionary id (0 unless method 2), little-endian
 *   8      4     raw length, little-endian (<= INGEST_CODEC_MAX_RAW)
 *   12     ...   payload (raw bytes, or one zstd frame)
 *
 * A chunk that does not shrink is stored raw.  Decoding bounds the raw
 * length before allocating, checks that the frame decodes to exactly that
 * length and, given the expected id and key, re-derives the chunk id.
 *
 * THREAD SAFETY: a codec is used by one thread at a time (it owns zstd
 * contexts); make one per worker.  ingest_codec_raw_size, ingest_dict_id,
 * ingest_dict_hash and ingest_codec_bound are pure and thread-safe.
 */
#ifndef INGEST_CODEC_H
#define INGEST_CODEC_H

#include "ingest/common.h"
#include "ingest/hash.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INGEST_CODEC_FORMAT 1
#define INGEST_CODEC_HEADER 12
#define INGEST_CODEC_MAX_RAW (64u * 1024u * 1024u)
#define INGEST_CODEC_METHOD_RAW 0
#define INGEST_CODEC_METHOD_ZSTD 1
#define INGEST_CODEC_METHOD_ZSTD_DICT 2
/* Filters (header byte 2); a peer that decodes a filter says so in the session. */
#define INGEST_CODEC_FILTER_NONE 0u
#define INGEST_CODEC_FILTER_SHUFFLE2 1u
#define INGEST_CODEC_FILTERS_ALL 1u
/* Dictionaries larger than this are refused when loaded. */
#define INGEST_DICT_MAX_BYTES (4u * 1024u * 1024u)

typedef struct ingest_codec_s ingest_codec;

/*
 * Create a codec with reused zstd contexts.  level is zstd's level:
 * 1..ZSTD_maxCLevel(), or negative for the fast levels (down to
 * ZSTD_minCLevel(), -131072); 0 means zstd's default (3).  Out of range:
 * INGEST_EINVAL.  The contexts allocate through ctx, which must outlive
 * the codec.
 */
INGEST_API int ingest_codec_create(ingest_ctx *ctx, int level, ingest_codec **out) INGEST_WUR;
INGEST_API void ingest_codec_destroy(ingest_codec *c);

/*
 * Worst-case encoded size of a raw chunk of n bytes: n + INGEST_CODEC_HEADER
 * (a chunk that does not shrink is stored raw).
 */
INGEST_API size_t ingest_codec_bound(size_t n);

/*
 * Register a dictionary (the contents of a file written by
 * ingest_dict_train) for both compression and decompression; its id is
 * returned in *dict_id.  Registering the same dictionary twice is a
 * no-op; other bytes under an id already loaded are INGEST_EMISMATCH
 * (remove that one first).  The
 * bytes are copied.  INGEST_EINVAL if they are not a zstd dictionary with
 * an id, INGEST_ECORRUPT if its tables are malformed, INGEST_ETOOBIG past
 * INGEST_DICT_MAX_BYTES, INGEST_ENOSPC when the codec already holds 64.
 */
INGEST_API int ingest_codec_add_dict(ingest_codec *c, const void *dict, size_t len, uint32_t *dict_id);
/*
 * Like ingest_codec_add_dict, for decompression only and without copying:
 * dict must stay valid and unchanged until the codec is destroyed.  Costs
 * only the dictionary's entropy tables (~27 KiB), so a receiver can load
 * one dictionary into many codecs.  ingest_codec_use_dict refuses it
 * (INGEST_EINVAL).  Registering an id already held is a no-op, whichever
 * way it was loaded: callers that accept dictionaries from several sources
 * keep their ids apart themselves.
 */
INGEST_API int ingest_codec_add_dict_decode_ref(ingest_codec *c, const void *dict, size_t len,
                                                uint32_t *dict_id);
/*
 * Compress with dictionary dict_id from now on (0: no dictionary);
 * INGEST_ENOTFOUND if it was not added, INGEST_EINVAL if it was added for
 * decoding only.
 */
INGEST_API int ingest_codec_use_dict(ingest_codec *c, uint32_t dict_id);
/*
 * Unload dictionary dict_id and free what it took (its slot is free again);
 * if it was in use, the codec compresses without a dictionary from now on.
 * INGEST_ENOTFOUND if it is not loaded.  Not while a codec that follows this
 * one (the edge's encoder threads) may compress with it.
 */
INGEST_API int ingest_codec_remove_dict(ingest_codec *c, uint32_t dict_id);

/*
 * Encode src[0,n) into dst (cap >= ingest_codec_bound(n), else
 * INGEST_EINVAL; n <= INGEST_CODEC_MAX_RAW, else INGEST_ETOOBIG); *out_len
 * set.  src and dst must not overlap.  An empty chunk is a bare header.
 */
INGEST_API int ingest_codec_encode(ingest_codec *c, const void *src, size_t n, void *dst, size_t cap,
                                   size_t *out_len);

/*
 * The filters ingest_codec_encode_adaptive may use: the bits the decoding
 * side handles (INGEST_CODEC_FILTER_SHUFFLE2 is the filter's value as a bit:
 * 1).  Default none.  Unknown bits: INGEST_EINVAL.
 */
INGEST_API int ingest_codec_set_filters(ingest_codec *c, unsigned filters);

/*
 * Per-stream (per-file) state of ingest_codec_encode_adaptive; zero it at
 * the start of each file.
 */
typedef struct ingest_codec_hint {
    unsigned mode;  /* INGEST_CODEC_HINT_* */
    uint32_t left;  /* chunks until the next probe */
} ingest_codec_hint;
#define INGEST_CODEC_HINT_PROBE 0u
#define INGEST_CODEC_HINT_PLAIN 1u
#define INGEST_CODEC_HINT_SHUFFLE2 2u
#define INGEST_CODEC_HINT_STORE 3u

/*
 * Like ingest_codec_encode, choosing per run of chunks (docs/compression.md,
 * "Adaptive encoding"): the first chunk of a file is compressed with zstd
 * alone; when that saves 20% or more the file stays so.  Otherwise, when
 * the shuffle2 filter is allowed and the chunk is 4 KiB or more, it is
 * tried too and kept for the next 64 chunks when it is 10% smaller; else,
 * when zstd saved under 3%, the next 64 chunks are stored raw without
 * trying.  Then it probes again.  hint NULL: ingest_codec_encode.
 */
INGEST_API int ingest_codec_encode_adaptive(ingest_codec *c, const void *src, size_t n, void *dst, size_t cap,
                                            size_t *out_len, ingest_codec_hint *hint);

/*
 * Raw length declared by an encoded chunk, after checking its header:
 * INGEST_ECORRUPT for a short or malformed header, INGEST_EVERSION for an
 * unknown version, INGEST_ETOOBIG past INGEST_CODEC_MAX_RAW.
 */
INGEST_API int ingest_codec_raw_size(const void *src, size_t n, uint32_t *raw_len);

/*
 * Decode an encoded chunk into dst (cap >= its raw length).  When key and
 * expect_id are both non-NULL the chunk id of the result is recomputed and
 * must equal expect_id (INGEST_EMISMATCH otherwise).  An unknown dictionary
 * is INGEST_ENOTFOUND with its id in the detail.  A raw length above cap is
 * INGEST_ETOOBIG; any malformed payload (trailing bytes, frame size or
 * dictionary disagreeing with the header, corrupt frame) INGEST_ECORRUPT.
 * Safe on untrusted input: nothing is allocated from declared lengths.
 * src and dst must not overlap.
 */
INGEST_API int ingest_codec_decode(ingest_codec *c, const void *src, size_t n, void *dst, size_t cap,
                                   size_t *out_len, const uint8_t *key, const uint8_t *expect_id);

/*
 * Train a dictionary from sample buffers (ZDICT) of at most max_bytes and
 * write it, with its id, to *out (allocated through ctx; free with
 * ingest_buf_free).  The id is stored in the dictionary itself; it is
 * derived from the trained content (BLAKE2b), in 32768..2^31-1, so the
 * same samples give the same id.  Needs a few samples of 8+ bytes (ZDICT
 * fails with INGEST_EINVAL otherwise); max_bytes is 256..INGEST_DICT_MAX_BYTES.
 * ZDICT allocates its work memory (about 6 MB) with malloc, not ctx.
 */
INGEST_API int ingest_dict_train(ingest_ctx *ctx, const void *samples, const size_t *sample_sizes,
                                 unsigned nsamples, size_t max_bytes, void **out, size_t *out_len,
                                 uint32_t *dict_id);
/*
 * Like ingest_dict_train, for samples of several kinds (files of different
 * sources or formats): the samples of part 0 come first (part_counts[0] of
 * them), then those of part 1, and so on; nparts is 1..INGEST_DICT_PARTS_MAX
 * and the counts add up to nsamples (else INGEST_EINVAL).  Each part of at
 * least 8 samples gets a share of max_bytes in proportion to its samples
 * among such parts (one whose share would be under 1 KiB does not, and the
 * others' shares grow), trained from its samples alone; the dictionary is
 * those contents one after the other (the part with the most samples
 * last), its entropy tables from all the samples.  Fewer than two such
 * parts (or none ZDICT could train): the same as ingest_dict_train of all
 * the samples.
 * (docs/compression.md, "One dictionary for several kinds of files".)
 */
#define INGEST_DICT_PARTS_MAX 16u
INGEST_API int ingest_dict_train_parts(ingest_ctx *ctx, const void *samples, const size_t *sample_sizes,
                                       unsigned nsamples, const unsigned *part_counts, unsigned nparts,
                                       size_t max_bytes, void **out, size_t *out_len, uint32_t *dict_id);
/* Id of a dictionary (0 if the bytes are not a zstd dictionary). */
INGEST_API uint32_t ingest_dict_id(const void *dict, size_t len);
/*
 * The dictionary's name by content: the unkeyed BLAKE2b-256 of its bytes
 * (the session protocol offers and stores dictionaries by it).  Thread-safe.
 */
#define INGEST_DICT_HASH_BYTES 32
INGEST_API void ingest_dict_hash(const void *dict, size_t len, uint8_t hash[INGEST_DICT_HASH_BYTES]);
/* Free a buffer returned by the library through ctx. */
INGEST_API void ingest_buf_free(ingest_ctx *ctx, void *p);

#ifdef __cplusplus
}
#endif
#endif
