/*
 * ingest-agent internals shared by the one-shot mode (main.c) and the
 * daemon (daemon*.c): the agent's parts (connection, state, reporting,
 * throttle) and the shipping steps.
 */
#ifndef INGEST_AGENT_H
#define INGEST_AGENT_H

#include "../common/prog.h"

#include <ingest.h>
#include <ingest/filter.h>
#include <ingest/metrics.h>
#include <ingest/journal.h>
#include <ingest/throttle.h>
#include <ingest/edge.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

/*
 * The name an after-ship action gives a file beside it just before it
 * deletes or moves it: this prefix and the 16 hex digits of its inode
 * (daemon_spool.c, claim_file).  A run that stops in between leaves the
 * file under it, for the next run's action to finish: never a file to
 * ship (agent_is_claim_name).
 */
#define AGENT_CLAIM_PREFIX ".ingest-after."
int agent_is_claim_name(const char *path);

#define HANDSHAKE_TIMEOUT_MS 15000
#define STOP_GRACE_S 3 /* a stop waits this long for the core's answers, then cuts the connection */

typedef struct totals {
    /* what went over the link and came of it, kept up by the edge (include/ingest/edge.h):
     * wire bytes, chunks and groups sent, batches acked/failed/abandoned, files and bytes
     * acked, and the wait_want, send and wait_ack seconds of the shipping thread */
    ingest_edge_stats ship;
    uint64_t batches, unchanged;
    /* wall seconds of the shipping thread waiting for the next built batch */
    double wait_build_s;
    double walk_s; /* daemon: seconds of discovery walks */
    double record_s; /* --once: seconds recording acked batches (file table, have-cache, commit) */
    uint64_t bytes_read; /* chunked and hashed into batches */
    uint64_t err_connect, err_session, err_store;
    uint64_t refused_edge; /* files refused at the edge by the receiver's landing rules (landing.c) */
} totals;

/* The agent's metrics (ametrics.c); all NULL when metrics are off. */
typedef struct agent_metrics {
    ingest_metric *info, *files_seen, *files_unchanged, *files_skipped, *files_shipped, *files_refused, *bytes_shipped, *bytes_read,
        *chunks, *chunks_new, *chunks_dedup, *bytes_raw, *bytes_comp, *wire, *batches, *errors, *stage, *queue_files,
        *queue_bytes, *queue_batches, *backpressure, *spool_bytes, *latency, *special;
} agent_metrics;

/* Kinds of entries a walk skips because they are neither regular files nor directories, and
 * SPECIAL_BAD_LINK: symlinks of a source that ships them whose target cannot be shipped. */
enum { SPECIAL_SYMLINK, SPECIAL_FIFO, SPECIAL_SOCKET, SPECIAL_DEVICE, SPECIAL_BAD_LINK, SPECIAL_KINDS };

/* Seconds from a batch's building started to its ack, with its file count:
 * the latency of each of its files (--once summary percentiles). */
typedef struct latency_rec {
    double s;
    uint64_t files;
} latency_rec;

typedef struct agent agent;

/* The connection to the core, while there is one (link != NULL). */
typedef struct agent_net {
    ingest_session *ss;
    int fd;
    ingest_link *link; /* over ss and fd, or over kafka, while connected */
    ingest_edge *edge; /* the protocol's edge side, made on the first connection */
    ingest_kafka_edge *kafka; /* transport: kafka: the producer and reply reader, made on the first connection */
} agent_net;

/* What the agent keeps in state_dir: the file table, have-cache, batch sequence, instance. */
typedef struct agent_state {
    ingest_store *st;
    ingest_havecache *have;
    ingest_filetable *ft;
    /* the batch journal: the daemon's queue; --once journals each batch SENT before it goes, until its ack */
    ingest_journal *j;
    int lockfd;            /* state_dir/lock, held (flock) while the process runs */
    /* The store (file table, have-cache) is used by the builder thread
     * (want_file) and the main thread (record_acked): one at a time. */
    pthread_mutex_t store_lock;
    uint64_t seq;
    char instance[24], prefix[32];
    double instance_at;     /* when agent_take_instance took the instance (0: loaded, or made at start) */
    uint64_t id_taken_seen; /* report.t.ship.batches_id_taken when agent_take_instance last looked */
} agent_state;

/* What the agent tells: totals, metrics, latencies, progress, the daemon's status. */
typedef struct agent_report {
    totals t;
    totals msync; /* t as last added to the metrics */
    ingest_metrics *metrics; /* NULL: off (no metrics.listen, no --stats-interval) */
    agent_metrics m;
    latency_rec *lat;
    size_t nlat, caplat;
    double t0, last_progress;
    int tty;
    /* Called by the shipping steps after each chunk and while waiting (the
     * daemon publishes its status figures); may be NULL. */
    void (*publish)(agent *a);
    /* what the last walk of the sources skipped as not regular files, by SPECIAL_* kind */
    uint64_t special[SPECIAL_KINDS];
} agent_report;

/* throttle.rate and throttle.window. */
typedef struct agent_throttle {
    ingest_throttle *throttle; /* NULL: neither set */
    uint64_t throttle_wait_ms; /* time spent waiting for the throttle */
    int window_closed;         /* the last check found the window closed */
} agent_throttle;

struct agent {
    ingest_agent_config *cfg;
    ingest_ctx *ctx;
    ingest_secret_key key;
    uint8_t receiver_pub[INGEST_PUBKEY_BYTES];
    uint8_t dedup[INGEST_KEY_BYTES];
    ingest_codec *codec;
    /* compression.dictionary, held for offering to the receiver (NULL: none) */
    uint8_t *dict;
    size_t dict_len;
    char dict_name[4200]; /* its file (compression.dictionary, or {state_dir}/auto.zdict) */
    int dict_auto;        /* compression.dictionary was auto at the start (a reload changes it at the next start) */
    struct agent_samples *auto_samples; /* the daemon's, for compression.dictionary auto (autodict.c) */
    struct agent_probe *auto_probe;     /* the daemon's: what that dictionary saves (autodict.c) */
    int all;        /* --all: ship files even when unchanged since their ack */
    int once;       /* --once (set before the state is loaded) */
    /* --once: each source's filter (NULL: no rule), and the files they passed over, by reason */
    ingest_filter **filters;
    uint64_t skipped_filter[INGEST_FILTER_NREASONS];
    uint64_t dirs_not_walked; /* directories the walks could not open or read, a source's own included */
    int daemon;     /* daemon mode: acks are recorded through the journal, not record_acked */
    void *userdata; /* the daemon's state */
    double batch_t0; /* when the batch being shipped began to be built */
    agent_net net;
    ingest_kafka_edge_stats kafka_was; /* the counts of the Kafka clients closed before net.kafka (failed for good) */
    agent_state state;
    agent_report report;
    agent_throttle thr;
    /* the receiver's landing rules (landing.c): known from LANDING or {state_dir}/landing */
    ingest_wire_landing landing;
    int landing_known;
    ingest_sender *landing_snd; /* --once: the pass's sender, told when the rules change */
    ingest_ctx *landing_ctx;    /* its context (the builder thread's, not a->ctx) */
    /* files refused at the edge since build_batch last took them (the daemon marks the journaled
     * version, not the spool copy the sender saw); --once marks at once and commits per pass */
    char **edge_refused;
    size_t nedge_refused, capedge_refused;
    int refuse_uncommitted;
    /* --once: versions refused at the edge on the builder thread, queued (under state.store_lock) for
     * the main thread to mark in the file table (agent_refusals_record): an LMDB write transaction
     * belongs to the thread that began it, and the builder thread must not begin one */
    struct agent_refq {
        char *path;
        ingest_file_state fs;
    } *refq;
    size_t nrefq, caprefq;
};

/* Set by signal handlers (SIGTERM/SIGINT, and SIGHUP: the daemon reloads its config), which may run on any
 * thread, and read by every thread: lock-free atomics (main.c). */
extern atomic_int stopping;
extern atomic_int reload_requested;

/* filters.c: a source's filter (*out NULL when it has no rule; -1 logged), and what it says of a file
 * (INGEST_FILTER_TAKE, or the reason) found at rel under the source's directory dir. */
int agent_filter_create(agent *a, const ingest_source_config *c, ingest_filter **out);
/* A fingerprint of c's filter settings (never 0): the journal's skip records hold the one they were made under. */
uint32_t agent_filter_rules(const ingest_source_config *c);
int agent_filter_check(const ingest_filter *f, const char *dir, const char *rel, const ingest_sender_stat *st,
                       int64_t now_ns);

/* autodict.c: compression.dictionary auto: a->dict from {state_dir}/auto.zdict, trained from the sources'
 * small files when it is not there (none when they are too few); 0, or -1 (logged). */
int agent_dict_auto(agent *a);
/* A dictionary file's bytes (at most INGEST_DICT_MAX_BYTES + 1, malloc'd in *d):
 * 0, or -1 with errno (*d NULL). */
int agent_dict_read(const char *path, uint8_t **d, size_t *n);
/* Compress with d (n bytes, malloc'd: the agent keeps it and offers it as path): 0, or -1 (d freed; ctx says). */
int agent_dict_use(agent *a, uint8_t *d, size_t n, const char *path);
/*
 * The daemon, when its start found too few small files: sample each small file it takes into a batch
 * (dir/rel, size bytes: read whole while the samples have room; 1 taken); ready: enough for a try; again
 * (nothing pending on the connection): train from them, end the connection and edge (the next connection
 * offers it); 1 trained, 0 not yet, -1 failed (logged).  With a dictionary, sample probes one small file in
 * a few (compressed alone with it and without it) and, when it stopped saving, samples the next ones as
 * above for a new one that replaces it.  free: the samples and probes.
 */
/* What the status shows of the dictionary (ingestctl status). */
typedef struct agent_dict_status {
    uint32_t id;          /* 0: none */
    uint64_t bytes;
    int is_auto;          /* compression.dictionary: auto */
    int sampling;         /* taking samples: for a first one, or to replace it */
    int probed;           /* the one in use has a window of probes: */
    double last_pct, best_pct; /* what it saved on the last window, and at best */
    uint64_t retrains;    /* replaced since the start */
} agent_dict_status;
void agent_dict_status_get(const agent *a, agent_dict_status *st);
int agent_dict_auto_sample(agent *a, const char *dir, const char *rel, uint64_t size);
int agent_dict_auto_ready(const agent *a);
int agent_dict_auto_again(agent *a);
void agent_dict_auto_free(agent *a);

/* ametrics.c */
int agent_metrics_init(agent *a);
void agent_metrics_sync(agent *a);
void agent_metrics_latency(agent *a, double seconds, uint64_t files);
/* After a walk of the sources (its sender's stats): keep, log once when they
 * change, and publish the counts of symlinks, FIFOs, sockets and devices it skipped. */
void agent_walk_special(agent *a, const ingest_sender_stats *ss);
/* The name of a SPECIAL_* kind (metrics label, status). */
const char *agent_special_name(int kind);

/* landing.c */
void agent_landing_load(agent *a);
/* Give sender s (whose context is sctx: its errors are said from there) the rules known. */
int agent_landing_apply(agent *a, ingest_sender *s, ingest_ctx *sctx);
void agent_landing_learned(agent *a, const ingest_wire_landing *r);
void agent_landing_forget(agent *a);
void agent_edge_refused_clear(agent *a);
void on_refuse(void *ud, const char *path, const ingest_sender_stat *st, const char *why);
/* --once, on the main thread, state.store_lock held: mark the versions on_refuse queued (the next commit
 * makes them durable; taken in this order, the store lock, then LMDB's writer lock, never the reverse). */
void agent_refusals_record(agent *a);

uint64_t load_seq(const char *state_dir);
int save_seq(const char *state_dir, uint64_t seq);
/* After ACKs: the core answered a batch id as used before for other data (batches_id_taken grew):
 * batch ids made from now on take a new instance, unless that batch's id was made with another prefix
 * than the current one (made_with; NULL: the current).  0 nothing new, 1 taken, -1 not (back off). */
int agent_take_instance(agent *a, const char *made_with);
int load_state(agent *a);
int connect_core(agent *a);
void disconnect_core(agent *a);
/* Close the Kafka client, if any (after disconnect_core): the next connect makes one from a->cfg. */
void agent_kafka_close(agent *a);
/* daemon_ship.c: the edge's on_acked hook in daemon mode (a pending batch's ACK came). */
void dmn_edge_acked(agent *a, ingest_sender_batch *b);
/* Send BATCH_BEGIN, the manifest and MANIFEST_END. */
int send_manifest(agent *a, ingest_sender_batch *b);
/* After send_manifest: 0 acked, 1 abandoned (a file changed), 2 refused, 3 received (pipelined: the edge
 * holds b until its ACK), < 0 connection failure. */
int finish_batch(agent *a, ingest_sender_batch *b);
void on_skip(void *ud, const char *path, int reason);
/* The one message for a directory past INGEST_SENDER_MAX_DEPTH ("{source}/{path}"): from a walk
 * (on_skip, INGEST_SKIP_DEPTH) and from the daemon's watcher. */
void say_too_deep(int level, const char *dir);

/* Make a->throttle from a->cfg (replacing the old one); 0 or -1 (logged). */
int throttle_setup(agent *a);
/* 1 when the throttle window is open now (or none is set); else 0 and, if
 * opens_in_min is not NULL, the minutes until it opens. */
int throttle_window_open(const agent *a, int *opens_in_min);
/* --once: wait (checking SIGTERM) until the window opens; 0 or INGEST_ECLOSED. */
int throttle_wait_window(agent *a);

/* The daemon (no --once): runs until SIGTERM/SIGINT; returns the exit status. */
int daemon_run(agent *a, const char *config_path, const ingest_sender_opts *base);
/* --once, first: the journal's unacknowledged batches shipped the daemon's way (daemon.c).  0 none left,
 * 1 some left, < 0 a local failure; *replayed: those sent before (their ack lost). */
int daemon_replay(agent *a, const ingest_sender_opts *base, uint64_t *replayed);

#endif
