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

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Directories of bronze whose own names are known durable: a set of keyed hashes of their paths. */
#define INGEST__DURABLE_DIRS 1024u

typedef struct ingest__syncs {
    atomic_uint_fast64_t started; /* syncfs calls begun: the number of the latest */
    atomic_uint_fast64_t done;    /* the highest number that returned 0 */
    atomic_bool failed;           /* one failed: no batch counts on another's syncfs from then on */
    /*
     * The directories whose name in their parent a lander made durable (an fsync of the parent after it
     * existed) since the start: a batch that lands into a directory it did not make syncs the parents of
     * the ones not in here (docs/landing.md, "Commit").  Emptied when full; a directory a lander removes
     * leaves it (made again later, its name is new), and a removal makes the marks of the batches that
     * looked before it void (dir_gen): what they found durable may be what was removed.
     */
    pthread_mutex_t dir_mu;
    uint8_t dir_key[16];
    uint64_t dir_gen; /* removals so far */
    uint32_t ndirs;
    uint64_t dirs[INGEST__DURABLE_DIRS]; /* open addressing; 0: empty */
} ingest__syncs;

/* A count with no syncfs yet, and no directory known durable. */
void ingest__syncs_init(ingest__syncs *sy);
void ingest__syncs_destroy(ingest__syncs *sy);
/* Is the name of directory dir (bronze-relative, not "") known durable? */
bool ingest__syncs_dir_durable(ingest__syncs *sy, const char *dir);
/* The number of removals so far, read before looking (ingest__syncs_dir_durable) for a later mark. */
uint64_t ingest__syncs_dir_gen(ingest__syncs *sy);
/* dir's name was made durable, as found when the removals numbered gen: not taken when one came since. */
void ingest__syncs_dir_mark(ingest__syncs *sy, const char *dir, uint64_t gen);
/* Directory dir is being (or was) removed: it is not known durable, and the marks of those who looked before
 * are void.  Called before the removal and after it. */
void ingest__syncs_dir_forget(ingest__syncs *sy, const char *dir);
/* Count l's syncfs calls in sy (zeroed, outliving l), shared with the landers of the same bronze filesystem. */
void ingest__lander_share_syncs(ingest_lander *l, ingest__syncs *sy);

#endif
