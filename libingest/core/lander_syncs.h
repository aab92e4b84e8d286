/*
 * Inside the core side: the syncfs calls of the landers of one core (one
 * bronze filesystem), numbered.  A batch notes the number reached when its
 * last file was written (commit_prepare); a syncfs numbered past it that
 * returned 0 wrote that batch's data, so its commit needs no syncfs of its
 * own before the renames (docs/landing.md, "Making a batch durable").
 * Every lander counts its own until ingest__lander_share_syncs points it at
 * a count shared with the other landers of its core.
 */
#ifndef INGEST_LANDER_SYNCS_H
#define INGEST_LANDER_SYNCS_H

#include "ingest/lander.h"

#include <stdatomic.h>
#include <stdint.h>

typedef struct ingest__syncs {
    atomic_uint_fast64_t started; /* syncfs calls begun: the number of the latest */
    atomic_uint_fast64_t done;    /* the highest number that returned 0 */
    atomic_bool failed;           /* one failed: no batch counts on another's syncfs from then on */
} ingest__syncs;

/* A count with no syncfs yet. */
void ingest__syncs_init(ingest__syncs *sy);
/* Count l's syncfs calls in sy (zeroed, outliving l), shared with the landers of the same bronze filesystem. */
void ingest__lander_share_syncs(ingest_lander *l, ingest__syncs *sy);

#endif
