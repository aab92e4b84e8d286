/*
 * Inside the core side: a test seam of the lander.  A hook set on a lander
 * is called at fixed points of its work, on the thread doing it, with the
 * batch's device: tests hold a batch there (a slow disk, a big manifest)
 * and look at what the others can do meanwhile, or at the core's lock.
 * Never set outside tests; NULL costs one branch.
 */
#ifndef INGEST_LANDER_HOOK_H
#define INGEST_LANDER_HOOK_H

#include "ingest/lander.h"

#include <stdint.h>

enum {
    INGEST__LANDER_HOOK_PARSE = 1, /* ingest_lander_parse, the header read, the files not yet */
    INGEST__LANDER_HOOK_LOOKUP = 2, /* ingest_lander_lookup, with the store's lock held */
    INGEST__LANDER_HOOK_WRITE = 3, /* a chunk is about to be written to its file */
    INGEST__LANDER_HOOK_PLACE = 4, /* the commit: final names checked, no rename yet, the lander's lock held */
    INGEST__LANDER_HOOK_UNDO = 5,  /* an aborted append in place is about to be cut back (its file not opened yet) */
    INGEST__LANDER_HOOK_CREATE = 6, /* a file's directory entered, its temporary file about to be created (or handed
                                     * to the small-file helper); not again when the create is retried */
    INGEST__LANDER_HOOK_PLACED = 7, /* the commit: every file renamed into place, its manifest not written yet; no
                                     * lock held */
};

typedef void (*ingest__lander_hook_fn)(void *ud, const char *device, int phase);

void ingest__lander_set_hook(ingest_lander *l, ingest__lander_hook_fn fn, void *ud);

/* With direct I/O on: the smallest file written with O_DIRECT (at least 4 KiB; LANDER_DIO_MIN by default), so
 * tests can take that path with small files. */
void ingest__lander_set_dio_min(ingest_lander *l, uint64_t bytes);

/* Tests: as a crash of its process would, release the lock the lander's open batch holds on its replace intent
 * (lander_undo.c), so a sweep in this process acts on it. */
void ingest__lander_release_intent(ingest_lander *l);

/* Tests: commit step 4 (the index, after the manifest is in place) fails with INGEST_EIO while on. */
void ingest__lander_set_fail_index(ingest_lander *l, int on);

#endif
