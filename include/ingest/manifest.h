/*
 * Batch manifests: JSON Lines, one header line per batch, then one line per
 * file, with continuation lines for long chunk lists so that no line (and no
 * reader buffer) grows with the file size.  Written by the receiver under
 * {bronze}/_manifests/{device}/{batch}.jsonl; they are the record of what
 * landed and the source from which the chunk index is rebuilt.  The exact
 * format is in docs/manifest.md.
 *
 * The reader takes untrusted input: every length is bounded before
 * allocation, and a malformed line fails with INGEST_ECORRUPT and a detail
 * naming the line and column.
 */
#ifndef INGEST_MANIFEST_H
#define INGEST_MANIFEST_H

#include "ingest/common.h"
#include "ingest/hash.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * 2: the hashes are chunk id format 2 (HMAC-SHA256, docs/chunking.md);
 * format 1 carried keyed BLAKE2b-256 ids and is refused.
 */
#define INGEST_MANIFEST_FORMAT 2
#define INGEST_MANIFEST_PATH_MAX 4096        /* bytes of a relative path */
#define INGEST_MANIFEST_NAME_MAX 128         /* device and batch names */
#define INGEST_MANIFEST_CHUNKS_PER_LINE 1024 /* chunks on one line */
#define INGEST_MANIFEST_LINE_MAX (256u * 1024u)
#define INGEST_MANIFEST_REFUSED_MAX 1024      /* bytes of a refusal reason */

typedef struct ingest_manifest_chunk {
    uint8_t id[INGEST_ID_BYTES];
    uint32_t len;
} ingest_manifest_chunk;

enum {
    INGEST_MREC_HEADER = 1, /* batch header: the first line */
    INGEST_MREC_FILE = 2,   /* a file, with the first part of its chunk list */
    INGEST_MREC_CHUNKS = 3, /* more chunks of the preceding file */
};

typedef struct ingest_manifest_rec {
    int type;
    /* INGEST_MREC_HEADER */
    uint32_t format;       /* INGEST_MANIFEST_FORMAT */
    const char *device;
    const char *batch;
    uint64_t nfiles;       /* file records that follow */
    uint64_t total_bytes;  /* sum of file sizes */
    int64_t created_ns;    /* unix time the batch landed */
    /* "digest" (optional, wire manifests with pushed chunks): keyed over each
     * file's path and whole-file hash in order (ingest_manifest_digest_*);
     * the receiver compares a replay with the landed batch by it.  Writer:
     * written when has_digest; reader: has_digest says it was there. */
    int has_digest;
    uint8_t digest[INGEST_ID_BYTES];
    /* INGEST_MREC_FILE */
    const char *path;      /* relative path under the source (any bytes but NUL; see docs) */
    const char *landed;    /* path relative to the bronze root ("" when unknown) */
    uint64_t size;
    int64_t mtime_ns;
    uint32_t mode;
    uint64_t version;      /* version of this path at the core, from 1; 0: not assigned yet */
    uint8_t hash[INGEST_ID_BYTES]; /* whole-file HMAC-SHA256 over the chunk ids */
    /* The record has no "hash" (writer: leave it out; reader: it was left
     * out, allowed only with INGEST_MANIFEST_READ_HASH_OPTIONAL; hash is
     * then zero).  Only a manifest on the wire may omit it: the receiver
     * derives it from the chunk ids and lands it in full. */
    int omit_hash;
    /* Writer: chunks of at most push_max bytes are written as [length],
     * without their id ("pushed", a wire manifest only, with omit_hash;
     * docs/manifest.md).  Reader: with INGEST_MANIFEST_READ_ID_OPTIONAL such
     * a chunk reads with an all-zero id, and npushed counts them on the line. */
    uint32_t push_max;
    uint32_t npushed;
    uint64_t nchunks_total;        /* chunks of the whole file */
    /* A file of the batch the core did not land (written by the core only):
     * why, 1..INGEST_MANIFEST_REFUSED_MAX bytes; landed is "" and version 0.
     * NULL for a landed file.  Readers of landed files skip these. */
    const char *refused;
    /* INGEST_MREC_FILE and INGEST_MREC_CHUNKS */
    const ingest_manifest_chunk *chunks;
    uint32_t nchunks;      /* on this line */
} ingest_manifest_rec;

typedef struct ingest_manifest_reader_s ingest_manifest_reader;

/* Read a manifest file, or a buffer (not copied: it must outlive the reader). */
INGEST_API int ingest_manifest_reader_open(ingest_ctx *ctx, const char *path,
                                           ingest_manifest_reader **out) INGEST_WUR;
INGEST_API int ingest_manifest_reader_mem(ingest_ctx *ctx, const void *buf, size_t len,
                                          ingest_manifest_reader **out) INGEST_WUR;
INGEST_API void ingest_manifest_reader_close(ingest_manifest_reader *r);
/* Reader flags (ingest_manifest_reader_set_flags; 0 by default). */
#define INGEST_MANIFEST_READ_HASH_OPTIONAL 0x1u /* a file record may lack "hash" (rec.omit_hash) */
#define INGEST_MANIFEST_READ_ID_OPTIONAL 0x2u   /* a chunk may be [length] without its id (pushed: id all zero) */
INGEST_API void ingest_manifest_reader_set_flags(ingest_manifest_reader *r, unsigned flags);
/*
 * Next record: 1 with *rec valid until the next call, 0 at the end, < 0 on
 * malformed input (detail names the line and column).  The record sequence
 * is checked: a header first, then files each followed by exactly enough
 * CHUNKS records to reach nchunks_total, and as many files as announced.
 */
INGEST_API int ingest_manifest_reader_next(ingest_manifest_reader *r, ingest_manifest_rec *rec);

/*
 * The header's "digest" (docs/manifest.md): an ingest_filehash keyed with
 * the fleet's dedup key (ingest_filehash_init), fed each file in manifest
 * order with this call (its path's length as 4 bytes little-endian, the
 * path, its 32-byte whole-file hash), then ingest_filehash_final.
 */
INGEST_API void ingest_manifest_digest_add(ingest_filehash *h, const char *path, const uint8_t hash[INGEST_ID_BYTES]);

/*
 * Writer: formats records into memory; the caller writes the bytes out
 * (ingest_manifest_writer_data) and may reset between flushes.
 */
typedef struct ingest_manifest_writer_s ingest_manifest_writer;
INGEST_API int ingest_manifest_writer_create(ingest_ctx *ctx, ingest_manifest_writer **out) INGEST_WUR;
INGEST_API void ingest_manifest_writer_destroy(ingest_manifest_writer *w);
/*
 * Append the header line (type HEADER; format 0 or 1, written as 1) or a
 * file's lines (type FILE: rec->chunks holds all of the file's rec->nchunks
 * chunks and the writer splits them into continuation lines;
 * nchunks_total is 0 or equal to nchunks; landed NULL means "").  The
 * record is checked with the reader's rules (names, paths, chunk lengths
 * 1..64 MiB summing to size, a header first, no more files or bytes than
 * it announced): INGEST_EINVAL with a detail, and nothing is appended.
 * INGEST_ETOOBIG when the buffer would pass 1 GiB (reset it after each
 * flush).
 */
INGEST_API int ingest_manifest_writer_add(ingest_manifest_writer *w, const ingest_manifest_rec *rec);
INGEST_API const void *ingest_manifest_writer_data(const ingest_manifest_writer *w, size_t *len);
/* Drop the formatted bytes (after the caller wrote them out); the record
 * sequence state (header seen, files and bytes so far) is kept. */
INGEST_API void ingest_manifest_writer_reset(ingest_manifest_writer *w);
/*
 * Check that the manifest is complete: a header was added, and the files
 * added match its nfiles and total_bytes.  0 or INGEST_EINVAL (detail).
 * Call it before publishing the manifest.
 */
INGEST_API int ingest_manifest_writer_finish(const ingest_manifest_writer *w) INGEST_WUR;

#ifdef __cplusplus
}
#endif
#endif
