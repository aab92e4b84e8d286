/* Helpers shared by the unit tests (linked into every tests/unit binary). */
#ifndef INGEST_TESTKIT_H
#define INGEST_TESTKIT_H

#include <stddef.h>
#include <stdint.h>

#include "ingest.h"

/* An allocator through cmocka (leak-checked) that fails its fail_at-th call (0: never). */
struct failing {
    unsigned count;
    unsigned fail_at;
    unsigned failed;
};

/* A context using that allocator; asserts it could be made. */
ingest_ctx *make_ctx(struct failing *f);

/* xorshift64 step; deterministic pseudo-random bytes from a seed. */
uint64_t rng_next(uint64_t *s);
void gen_random(uint8_t *p, size_t n, uint64_t seed);

/* dir/name holding n pseudo-random bytes of seed (asserts it was written). */
void write_random_file(const char *dir, const char *name, size_t n, uint64_t seed);
/* Remove dir and everything under it (symbolic links not followed). */
void remove_tree(const char *dir);
/*
 * Landed files under bronze: regular files outside _manifests/ that are not
 * temporary (dot) files.  *files (may be NULL) gets how many there are; the
 * result is how many have the bytes of src/NAME, NAME being the landed
 * file's own name (only files named name are compared when name is not NULL).
 */
int count_landed(const char *bronze, const char *src, const char *name, int *files);

#endif
