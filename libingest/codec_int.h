/* Codec internals for the edge's encoder threads (edge/sender_int.h). */
#ifndef INGEST_CODEC_INT_H
#define INGEST_CODEC_INT_H

#include "ingest/codec.h"

/* Encode as src does (level, filters, the dictionary in use, borrowed: src must outlive c's use of it). */
void ingest__codec_follow(ingest_codec *c, const ingest_codec *src);
/* 1 when the hint after encoding one more chunk with h is known without encoding it (no probe). */
int ingest__codec_hint_settled(const ingest_codec_hint *h);

#endif
