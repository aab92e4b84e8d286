/*
 * The receiver's dictionary store (docs/compression.md, "Dictionaries"):
 * the trained zstd dictionaries devices sent, kept in
 * {state_dir}/dicts/{hash}.zdict, where {hash} is the 64 hex digits of the
 * dictionary's unkeyed BLAKE2b-256 (ingest_dict_hash).  Content-addressed,
 * so a file is checked against its own name, and out of the bronze tree
 * devices write into.
 *
 * In memory the store holds every dictionary it loaded or received, found
 * by hash; an entry is never removed while the store is open, so the bytes
 * a lookup returns stay valid (codecs load them by reference) until
 * dictstore_close.  Bounds: DICTSTORE_MAX dictionaries and
 * DICTSTORE_MAX_BYTES in all.
 *
 * THREAD SAFETY: every function may be called from any thread.
 */
#ifndef INGEST_RECEIVER_DICTS_H
#define INGEST_RECEIVER_DICTS_H

#include <ingest.h>

#include <stddef.h>
#include <stdint.h>

#define DICTSTORE_MAX 64                           /* the codec's own limit per codec */
#define DICTSTORE_MAX_BYTES (64u * 1024u * 1024u) /* in memory and on disk */

typedef struct dictstore dictstore;

/*
 * Open (creating {state_dir}/dicts, mode 0700) and load every stored
 * dictionary, in name order: a file that is not one (wrong size, bytes not
 * matching its name, no dictionary id, malformed tables), or past the
 * bounds, is logged by name and skipped (never deleted: a device that
 * offers it again re-sends it and its file is replaced).  Temporary files
 * a crash left are removed.  NULL (logged) when the directory cannot be
 * made or read.
 */
dictstore *dictstore_open(const char *state_dir);
void dictstore_close(dictstore *ds);
unsigned dictstore_count(dictstore *ds);

/* The bytes of the dictionary named hash, of exactly len bytes, or NULL. */
const uint8_t *dictstore_find(dictstore *ds, const uint8_t hash[INGEST_DICT_HASH_BYTES], size_t len);

/*
 * Keep a verified dictionary (bytes checked against hash by the caller):
 * write it durably (temporary file, fsync, rename, fsync of the
 * directory), then hold a copy.  0 (also when it is held already), or -1
 * with the reason in why: the store is full, or the write failed.
 */
int dictstore_add(dictstore *ds, const uint8_t hash[INGEST_DICT_HASH_BYTES], const uint8_t *bytes, size_t len,
                  char *why, size_t whycap);

#endif
