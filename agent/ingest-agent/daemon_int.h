#ifndef INGEST_AGENT_DAEMON_H
#define INGEST_AGENT_DAEMON_H

/*
 * ingest-agent without --once: the edge daemon (docs/operations.md), and
 * the state its parts share.  daemon.c: the loop and configuration;
 * daemon_watch.c: sources, filters, inotify, discovery; daemon_spool.c:
 * the spool and the after-ship actions; daemon_ship.c: the open batch and
 * shipping from the journal; daemon_status.c: the status snapshot.
 *
 * One thread runs a loop (and, while it ships, a builder thread builds the next batch):
 *   - discovery: a walk of the sources whose want_file hook never lets the
 *     sender chunk anything: it only chooses files (filters, unchanged since
 *     their ack, not in flight, stable for `settle`) and appends them to the
 *     open batch, journaled PENDING (include/ingest/journal.h).  Walks run
 *     when inotify reports a change (debounced), when a file still settling
 *     is due, and every rescan_interval as the safety net.
 *   - shipping: the oldest closed batch of the journal is rebuilt from its
 *     file list (ingest_sender_scan_list: same files, same order, same
 *     batch id; a file that changed since it was taken leaves the batch and
 *     settles again), marked SENT, shipped, and marked ACKED together with
 *     the file table; then the after-ship action runs and the record goes
 *     (it stays, retried, while a file to delete or move is open elsewhere).
 *     Pipelined (over TCP): a batch the core answered RECEIVED waits for its
 *     ACK (d->pend, at most INGEST_EDGE_PENDING_MAX) while the next ones are
 *     built and shipped; the ACKs due are read before a walk.  The batch
 *     after the one being shipped is built on a builder thread (d->bld).
 *   - the core unreachable: batches stay queued in the journal (bounded:
 *     when the queue is full discovery stops taking files = backpressure)
 *     and connections are retried with exponential backoff and jitter.
 * Nothing per file is held in RAM beyond the open batch.
 */
#include "agent.h"
#include "../common/status.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sodium.h>
#include <time.h>
#include <unistd.h>

#define DEBOUNCE_MS 200
/* Paths kept for a walk of their own; more than this and the next walk is of everything. */
#define DIRTY_MAX 4096
/* A walk of everything starts no sooner after the last one than this many times its duration. */
#define WALK_SPACING 5.0
#define RESCAN_DEFAULT_MS 60000
#define QUEUE_FILES_DEFAULT 100000
#define QUEUE_BYTES_DEFAULT (4ull << 30)
#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 60000
#define TOO_DEEP_MAX 1024 /* directories past the depth limit remembered (each said once) */
#define VANISH_NAMES 3 /* names of vanished files the grouped log line gives */
#define DEFER_RETRY_S 1.0 /* retry of an after-ship action deferred while the file is open */
#define DEFER_FAIL_MAX_S 64.0 /* retry of one that failed (move_dir unwritable, ...): 1 s, doubling to this */

enum { AFTER_KEEP = 0, AFTER_DELETE = 1, AFTER_MOVE = 2 };

/* Per-source settings of the daemon. */
typedef struct dsource {
    const char *name, *path; /* borrowed from the config */
    size_t name_len;
    int64_t settle_ns;
    int after;               /* AFTER_* */
    const char *move_dir;    /* AFTER_MOVE */
    int move_chain_synced;   /* AFTER_MOVE: move_dir and the directories above it synced this run (sync_move_chain) */
    ingest_filter *filter;   /* NULL: take everything */
    uint32_t filter_rules;   /* fingerprint of its filter settings: a file skipped under others is judged again */
    int spool;               /* spool: copy */
    int missing;             /* its directory is not there: not walked nor watched, checked every walk */
    int root_watched;        /* its directory has an inotify watch */
    uint64_t root_dev, root_ino; /* of the directory watched (dmn_sources_poll: replaced?) */
} dsource;

typedef struct watch {
    int wd;
    size_t src;
    char *rel; /* directory relative to the source, "" for its root */
    uint64_t dev, ino; /* the directory watched (0, 0: not known) */
} watch;

#define RATE_SAMPLES 64
#define RATE_WINDOW_S 5.0

/* One source as the status shows it. */
typedef struct snap_source {
    char *name, *path;
    int spool;
    int missing, watched;
} snap_source;

/*
 * The figures the status thread renders: a copy the main thread publishes
 * (publish()) under the daemon's status lock; the status thread reads only
 * this, under the same lock.
 */
typedef struct snap {
    char device[128], core[256], window[16];
    agent_dict_status dict;
    int connected, watching, backpressure, spool_full, store_full, window_closed;
    snap_source *src;
    size_t nsrc;
    uint64_t q_batches, q_files, q_bytes, queue_files, queue_bytes;
    uint64_t settling;   /* files the last walk found still settling */
    uint64_t spool_bytes, spool_files, spool_quota, spool_room, fs_free;
    char inflight[INGEST_JOURNAL_ID_MAX + 1];
    int64_t last_ack_ns; /* wall clock; 0: none yet */
    uint64_t files_seen, files_taken, bytes_taken, files_shipped, files_refused, bytes_shipped, bytes_read;
    uint64_t walks, path_walks;
    double walk_seconds; /* of the last walk */
    uint64_t file_records, seen_records, pruned;
    uint64_t special[SPECIAL_KINDS]; /* not regular files the last walk skipped, by kind */
    uint64_t chunks_new, chunks_dedup, chunk_bytes_sent, wire_out, wire_in;
    uint64_t batches_acked, batches_replayed, deleted, moved, same_bytes, vanished;
    uint64_t skipped[INGEST_FILTER_NREASONS];
    uint64_t throttle_rate, throttle_wait_ms;
    double started;
    /* wire byte totals sampled at least 0.2 s apart, for the rate */
    double rate_t[RATE_SAMPLES];
    uint64_t rate_w[RATE_SAMPLES];
    size_t rate_n, rate_head;
} snap;

typedef struct daemon {
    agent *a;
    const char *config_path;
    ingest_sender_opts base;
    ingest_sender_source *ssrc;
    dsource *src;
    size_t nsrc;
    ingest_journal *j;   /* the agent's (a->state.j) */
    int once;            /* --once replaying the journal (daemon_replay): no after-ship action, ACKED left */

    int ino;             /* inotify fd, -1 when off */
    int ino_full;        /* watches ran out: rescans only */
    int rewatch;         /* the inotify queue overflowed: the next walk watches every directory again */
    watch *w;
    size_t nw, capw;
    char **deep;         /* directories said to be past the depth limit ("{source}/{path}") */
    size_t ndeep, capdeep;

    uint64_t rescan_ms, max_wait_ms, queue_files, queue_bytes;
    double scan_at;      /* monotonic seconds of the next walk (0: none due) */
    double last_full;    /* time of the last walk */
    double src_poll_at;  /* next dmn_sources_poll */
    /* Paths named by events, or settling, looked at alone (dmn_walk_paths)
     * instead of walking every source: manifest paths, at dirty_at. */
    char **dirty;
    size_t ndirty, capdirty;
    double dirty_at;     /* 0: none due */
    uint64_t path_walks; /* dmn_walk_paths runs */

    /* the open batch: journaled PENDING, still taking files */
    uint64_t open_seq;   /* 0: none */
    double open_at;
    ingest_journal_file *of;
    size_t nof, capof;
    uint64_t of_bytes;
    int of_dirty;        /* files added since it was journaled */
    int of_spooled;      /* the open batch has spool copies not yet synced (dmn_open_journal) */

    uint64_t q_files, q_bytes; /* journaled, not acked (open batch included) */
    int backpressure;
    /* batches the core answered RECEIVED, their ACKs to come (pipelined link; daemon_ship.c), oldest
     * first; none outside dmn_ship_queue */
    struct dship *pend[INGEST_EDGE_PENDING_MAX];
    unsigned npend;
    /* the next journaled batch, built on a thread of its own while one ships (daemon_ship.c); none
     * outside dmn_ship_queue */
    struct dship *bld;
    pthread_t bld_thread;

    double next_connect;
    unsigned backoff_ms;
    uint64_t kept_seq;  /* the spooled batch kept last (keep_spooled), and how many times in a row */
    unsigned kept_n;
    int core_down_logged;

    /* spool: state_dir/spool/{batch seq}/{source name}/{path in the source} */
    char spool_dir[PATH_MAX];
    uint64_t spool_bytes, spool_files, spool_quota;
    /* the room the spool has: min(spool.quota, spool_bytes + the state filesystem's free space less
     * a reserve), sized again at every walk and every drop (dmn_spool_size) */
    uint64_t spool_room, fs_free, fs_reserve, fs_block;
    int spool_full;
    int spool_big_logged;
    uint64_t spool_want;      /* the smallest file the last walk could not spool for want of room */
    uint64_t spool_want_walk; /* ... found by the walk under way (UINT64_MAX: none yet) */
    int spool_nospace;        /* a copy met ENOSPC/EDQUOT: off again only once the free space grew */
    uint64_t nospace_free;    /* the free space then */
    /* the state store could not be written (ENOSPC, EDQUOT, its map full): no new files are taken
     * until a commit goes through with room to spare (dmn_store_check) */
    int store_full;
    double store_try_at; /* while store_full: when the queue may be shipped again, to try an ack (which frees spool) */
    /* the warning was said (and its "off" is owed); when: a store that goes full again at once (its map
     * full while the filesystem has room) is said again at most every STORE_WARN_EVERY_S */
    int store_said;
    double store_said_at;

    /* status */
    status_server *status;
    pthread_mutex_t slock;
    snap sn;             /* guarded by slock */
    uint64_t q_batches, files_seen, files_taken, bytes_taken, bytes_read;
    uint64_t walks;
    double walk_seconds; /* of the last walk */
    char inflight[INGEST_JOURNAL_ID_MAX + 1];
    int64_t last_ack_ns;
    uint64_t file_records, seen_records; /* in the store, counted after each walk */
    double prune_next;   /* records of files gone are dropped after the first walk from then on */
    uint64_t pruned;     /* records dropped so far */

    /* after-ship actions deferred while a file is open elsewhere (ACKED batches kept in the journal) */
    double defer_next;   /* retry those waiting for a writer from then on */
    int defer_pending;   /* one was deferred in this loop: retry in a second */
    int defer_failed;    /* one failed in this loop (not just deferred): retry after defer_fail_s */
    int defer_fail_clean; /* a batch that had failed went through a pass without failing in this loop */
    double defer_fail_s; /* 0 until a pass fails; then 1 s, doubling to DEFER_FAIL_MAX_S; 0 again after one without */
    double fail_next;    /* retry the batches whose actions failed from then on */
    struct dmn_defer { uint64_t seq; int failed; } *defer; /* batches whose deferral was logged, and why */
    size_t ndefer, capdefer;
    int lease_warned;    /* said once: leases unavailable, actions run unchecked */
    char moved_dir[PATH_MAX]; /* after_ship move: the last directory moved into, its names synced up to move_dir */

    /* counters (logged at shutdown) */
    uint64_t skipped[INGEST_FILTER_NREASONS];
    uint64_t shipped_files, files_refused, shipped_bytes, batches_acked, batches_replayed, deleted, moved;
    uint64_t same_bytes; /* versions with a new ctime alone and the bytes shipped: recorded, not shipped */
    /* files gone before they shipped (found by a walk, or missing when a batch was built): dropped,
     * counted, and said in one line per walk or batch (dmn_vanished_say) */
    uint64_t vanished, vanish_round;
    char *vanish_names[VANISH_NAMES];
    uint64_t not_stable; /* files found still settling by the walk under way */
    uint64_t settling;   /* ... by the last walk that ended */
    double now;          /* monotonic, refreshed per loop and per walk */
    int64_t wall_ns;
} daemon_t;


/* Shared by the daemon's parts (each defined in the part its section names). */
int64_t dmn_wall_now_ns(void);
void dmn_schedule_scan(daemon_t *d, double at);
void dmn_sources_free(daemon_t *d);
int dmn_sources_make(daemon_t *d, const ingest_agent_config *cfg, dsource **out, ingest_sender_source **sout);
dsource *dmn_source_of(daemon_t *d, const char *path, const char **rel);
void dmn_watches_clear(daemon_t *d);
void dmn_watches_setup(daemon_t *d);
void dmn_sources_check(daemon_t *d);
void dmn_sources_poll(daemon_t *d);
void dmn_inotify_drain(daemon_t *d);
void dmn_on_skip(void *ud, const char *path, int reason);
void dmn_vanished_say(daemon_t *d, const char *where);
int dmn_walk(daemon_t *d);
/* Look at path (a manifest path) alone at `at` (or earlier); past DIRTY_MAX paths, a walk of everything. */
void dmn_mark_dirty(daemon_t *d, const char *path, double at);
int dmn_walk_paths(daemon_t *d);
/* The status's counts of file records and settle records, read from the store now. */
void dmn_count_records(daemon_t *d);
void dmn_spool_resume_check(daemon_t *d);
void dmn_spool_size(daemon_t *d);
int dmn_spool_nospace(daemon_t *d, const char *path, uint64_t size, int err);
int dmn_store_check(daemon_t *d, int rc, const char *what);
void dmn_store_nospace(daemon_t *d, const char *what, const char *why);
void dmn_spool_drop(daemon_t *d, uint64_t seq);
int dmn_spool_init(daemon_t *d);
int dmn_spool_copy(daemon_t *d, uint64_t seq, const dsource *s, const char *rel, const ingest_sender_stat *st);
void dmn_defer_log_drop(daemon_t *d, uint64_t seq);
/* Acked batch seq is retried now: at most once a second while it waits for a writer, with back-off while
 * its actions fail (both after a restart at once). */
int dmn_defer_due(const daemon_t *d, uint64_t seq);
size_t dmn_after_ship(daemon_t *d, uint64_t seq, const ingest_journal_file *f, size_t n);
void dmn_open_reset(daemon_t *d);
int dmn_open_journal(daemon_t *d);
int dmn_open_close(daemon_t *d);
int dmn_open_add(daemon_t *d, const dsource *s, const char *rel, const char *path, const ingest_sender_stat *st);
void dmn_queue_recount(daemon_t *d);
int dmn_ship_queue(daemon_t *d);
/* The batch being built ahead, if any, goes (it stays journaled as it was). */
void dmn_ship_release(daemon_t *d);
void dmn_snap_sources_free(snap *sn);
void dmn_publish_sources(daemon_t *d);
void dmn_publish(daemon_t *d);
void dmn_publish_hook(agent *a);
void dmn_render(void *ud, int json, char *buf, size_t cap);

#endif
