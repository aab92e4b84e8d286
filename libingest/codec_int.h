/* Codec internals for the edge's encoder threads (edge/sender_int.h). */
#ifndef INGEST_CODEC_INT_H
#define INGEST_CODEC_INT_H

#include "ingest/codec.h"

/* Encode as src does (level, filters, the dictionary in use, borrowed: src must outlive c's use of it). */
void ingest__codec_follow(ingest_codec *c, const ingest_codec *src);
/* 1 when the hint after encoding one more chunk with h is known without encoding it (no probe). */
int ingest__codec_hint_settled(const ingest_codec_hint *h);
/*
 * When the next chunk encoded with h is to be stored raw (no probe due):
 * account for it in h as ingest_codec_encode_adaptive would and return 1;
 * the caller then puts the chunk's n bytes at dst + INGEST_CODEC_HEADER and
 * the header with ingest__codec_put_raw.  Else 0, h unchanged.
 */
int ingest__codec_hint_take_store(ingest_codec_hint *h);
/* The header of a raw chunk of n bytes (n <= INGEST_CODEC_MAX_RAW) at dst[0, INGEST_CODEC_HEADER). */
void ingest__codec_put_raw(uint8_t *dst, size_t n);

#endif
