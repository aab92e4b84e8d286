/*
 * Sender internals shared with the edge's encoder threads (ship.c): a
 * batch's chunks re-read and encoded with a reader of the caller's (its
 * open file, buffer, codec and error context), so that several threads
 * encode chunks of one batch at once.  The batch itself is only read.
 */
#ifndef INGEST_SENDER_INT_H
#define INGEST_SENDER_INT_H

#include "../internal.h"
#include "ingest/codec.h"
#include "ingest/sender.h"
#include "../codec_int.h"

typedef struct ingest__sender_reader {
    int fd;          /* the open file, -1: none */
    size_t file;     /* its index in the batch, SIZE_MAX: none */
    uint8_t *raw;    /* raw_cap bytes (chunking.max, or a group's up to 1 MiB), allocated on first use (ctx) */
    size_t raw_cap;
    ingest_codec *codec;
    ingest_ctx *ctx; /* errors of this reader's calls, and raw */
} ingest__sender_reader;

void ingest__sender_reader_init(ingest__sender_reader *r, ingest_codec *codec, ingest_ctx *ctx);
/* Close the open file: before the reader meets another batch. */
void ingest__sender_reader_reset(ingest__sender_reader *r);
void ingest__sender_reader_free(ingest__sender_reader *r);

/* ingest_sender_batch_chunk with reader r and the caller's hint (kept per file by the caller). */
int ingest__sender_batch_chunk_r(ingest_sender_batch *b, ingest__sender_reader *r, uint64_t ci, void *out, size_t cap,
                                 size_t *out_len, ingest_codec_hint *hint);
/* ingest_sender_batch_chunk_delta with reader r (its codec encodes the literal blocks). */
int ingest__sender_batch_chunk_delta_r(ingest_sender_batch *b, ingest__sender_reader *r, uint64_t ci, const uint8_t *key,
                                       const uint8_t *hashes, uint32_t base_len, uint8_t *map, size_t map_cap,
                                       void *out, size_t cap, size_t *out_len, uint32_t *nblocks);
/* How many of idx[0, n) form a group of at most raw_max (<= INGEST_WIRE_GROUP_MAX_RAW) bytes (< 2: none,
 * idx[0] goes alone). */
size_t ingest__sender_batch_group_take(const ingest_sender_batch *b, const uint32_t *idx, size_t n, size_t raw_max);
/* The group idx[0, k), exactly what ingest__sender_batch_group_take gave (>= 2) for INGEST_WIRE_GROUP_MAX_RAW;
 * unlike ingest_sender_batch_group, not capped at chunking.max: cap >= ingest_codec_bound(the group's bytes). */
int ingest__sender_batch_group_r(ingest_sender_batch *b, ingest__sender_reader *r, const uint32_t *idx, size_t k,
                                 void *out, size_t cap, size_t *out_len, size_t *taken);
/* The batch's own reader (ingest_sender_batch_chunk's): one thread at a time. */
ingest__sender_reader *ingest__sender_batch_reader(ingest_sender_batch *b);
/* Every chunk of b is at the core (RECEIVED): the small files' bytes kept for sending go (up to
 * SENDER_SMALL_CACHE per batch, while the batch waits for its ACK), and its reader's buffer and file. */
void ingest__sender_batch_sent(ingest_sender_batch *b);
/* The batch's own adaptive-encoding state: the file its hint is about, and the hint. */
void ingest__sender_batch_hint(ingest_sender_batch *b, uint64_t **file, ingest_codec_hint **hint);

#endif
