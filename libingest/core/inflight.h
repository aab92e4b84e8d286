#ifndef INGEST_CORE_INFLIGHT_H
#define INGEST_CORE_INFLIGHT_H
/*
 * Chunks some batch is receiving and has not landed yet, shared by every
 * lander of one index (fleet scale, issue 14): a later batch that needs the
 * same chunk does not ask its device for it, but copies it once the first
 * batch has landed it (docs/landing.md, "Chunks in flight").  Memory only;
 * every call under the land lock (the lock of the store and index).  In the
 * index's dedup scope: with scope device, only a batch of the same device
 * counts.  At most INGEST__INFLIGHT_MAX entries: past that, chunks are
 * simply not shared.
 */
#include "ingest/index.h"

#define INGEST__INFLIGHT_MAX (1u << 20)

/* The batch (its opaque owner token) receiving chunk id, or NULL. */
const void *ingest__inflight_owner(ingest_index *idx, const char *device, const uint8_t id[INGEST_ID_BYTES]);
/* owner receives id from now on: 1 registered, 0 another owner has it or the table is full, INGEST_ENOMEM. */
int ingest__inflight_add(ingest_index *idx, const char *device, const uint8_t id[INGEST_ID_BYTES], const void *owner);
/* owner no longer receives id (landed, or its batch ended); nothing if another owner has it. */
void ingest__inflight_del(ingest_index *idx, const char *device, const uint8_t id[INGEST_ID_BYTES], const void *owner);
/* Entries registered (tests). */
size_t ingest__inflight_count(const ingest_index *idx);
#endif
