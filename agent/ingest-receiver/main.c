/*
 * ingest-receiver: the core service.  Accepts authenticated device
 * sessions on TCP and hands each to libingest's core side
 * (include/ingest/core.h), which lands their batches in the bronze tree
 * and acknowledges a batch only once it is durable.  This program keeps
 * the transport's side (listening, admission, the handshake), the state
 * it opens at start (store, index, dictionaries, crash recovery), and its
 * configuration, signals, logs and metrics.
 *
 * Threads: the main thread accepts; each connection has a thread of its
 * own.  Connections that have not authenticated yet are bounded by
 * handshake.max_pending (admit.h: the oldest silent one makes room for a
 * newcomer); authenticated sessions by max_connections.  The store and
 * the index are shared with the core: used here only under its land lock.
 */
#include "../common/http.h"
#include "../common/notify.h"
#include "../common/statslog.h"
#include "../common/prog.h"
#include "admit.h"
#include "rcatalog.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define SESSION_WAIT_S 10 /* an authenticated device waits this long for a max_connections slot */
#define STOP_WAIT_S 10    /* a stop waits this long for the sessions it closed (a batch being made durable) */
#define RECEIVER_TXN_WRITES 16384
/* What the receiver supports, offered in every handshake. */
#define CORE_FEATURES                                                                                  \
    (INGEST_SESSION_FEATURE_PIPELINE | INGEST_SESSION_FEATURE_SHUFFLE2 | INGEST_SESSION_FEATURE_PACK | \
     INGEST_SESSION_FEATURE_DICT | INGEST_SESSION_FEATURE_REFUSE | INGEST_SESSION_FEATURE_LANDING | \
     INGEST_SESSION_FEATURE_WITHDRAW | INGEST_SESSION_FEATURE_DELTA | INGEST_SESSION_FEATURE_PUSH | \
     INGEST_SESSION_FEATURE_RUNS)

/*
 * An authorized-devices set and the connections using it: SIGHUP swaps in a
 * new set, and an old one lives until the last connection that shook hands
 * with it ends (a session borrows its set, include/ingest/session.h).
 */
typedef struct authref {
    ingest_authset *set;
    unsigned refs; /* under server.auth_lock; the server's own is one */
} authref;

typedef struct server {
    ingest_receiver_config *cfg;
    ingest_ctx *ctx; /* of the store and index; used under the core's land lock */
    ingest_secret_key key;
    pthread_mutex_t auth_lock;
    authref *auth;        /* the set new connections shake hands with */
    ingest_ctx *auth_ctx; /* of the sets (their allocator); its messages are the main thread's */
    uint8_t dedup[INGEST_KEY_BYTES];
    ingest_store *st;
    ingest_index *idx;
    ingest_ctx *dicts_ctx; /* of dicts: its log lines at the configured level */
    ingest_dictstore *dicts; /* trained dictionaries devices sent */
    ingest_core *core;
    ingest_catalog *cat; /* landed files, kept current by the landers (rcatalog.h), or NULL */
    atomic_int nconn; /* connection threads, authenticated or not */
    pthread_mutex_t conns_lock;
    struct conn *conns; /* every connection thread's, so a stop can end their sessions */
    admit *adm;       /* connections not authenticated yet */
    pthread_mutex_t sess_lock;
    pthread_cond_t sess_cond;
    unsigned nsessions; /* authenticated sessions, at most max_connections */
    /* Prometheus metrics (docs/operations.md): labelled by device. */
    ingest_metrics *metrics;
    ingest_metric *m_dicts_held;
    ingest_metric *m_conns, *m_refused, *m_dropped, *m_landed, *m_failed, *m_files, *m_bytes, *m_new, *m_known, *m_rewanted,
        *m_wire, *m_written, *m_latency, *m_stage, *m_errors, *m_dicts, *m_krecords, *m_kpauses, *m_kreplies,
        *m_files_refused;
    /* kafka.brokers: the consumer group member, in a thread of its own */
    ingest_core_kafka *kafka;
    pthread_t kafka_thread;
    int kafka_running;
    int append_off; /* intents of appends in place stay (their cut-back failed): none this run */
} server;

static int define_metrics(server *s)
{
    static const double lat[] = { 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60 };
    struct {
        ingest_metric **m;
        int type;
        const char *name, *help, *label;
    } defs[] = {
        { &s->m_conns, INGEST_METRIC_GAUGE, "ingest_receiver_connections", "Open device connections", NULL },
        { &s->m_dicts_held, INGEST_METRIC_GAUGE, "ingest_receiver_dictionaries_held",
          "Stored dictionaries held by sessions (each session's lookups, released when it ends)", NULL },
        { &s->m_refused, INGEST_METRIC_COUNTER, "ingest_receiver_handshakes_refused_total",
          "Handshakes refused (unknown device, bad key, malformed)", NULL },
        { &s->m_dropped, INGEST_METRIC_COUNTER, "ingest_receiver_connections_dropped_total",
          "Connections closed before a session: room (dropped for a newer one, handshake.max_pending), silent (no "
          "byte by handshake.first_byte_timeout), slow (not authenticated by handshake.timeout), busy "
          "(authenticated, max_connections sessions in use), accept (accept failed: out of descriptors)",
          "reason" },
        { &s->m_landed, INGEST_METRIC_COUNTER, "ingest_receiver_batches_landed_total",
          "Batches made durable and acknowledged (replays included)", "device" },
        { &s->m_failed, INGEST_METRIC_COUNTER, "ingest_receiver_batches_failed_total",
          "Batches refused or failed", "device" },
        { &s->m_files, INGEST_METRIC_COUNTER, "ingest_receiver_files_landed_total", "Files landed", "device" },
        { &s->m_files_refused, INGEST_METRIC_COUNTER, "ingest_receiver_files_refused_total",
          "Files refused one by one (their path or their place in the bronze tree); the rest of their batch landed",
          "device" },
        { &s->m_bytes, INGEST_METRIC_COUNTER, "ingest_receiver_bytes_landed_total", "Bytes of files landed",
          "device" },
        { &s->m_new, INGEST_METRIC_COUNTER, "ingest_receiver_chunks_received_total",
          "Chunks received from devices (new to the core)", "device" },
        { &s->m_known, INGEST_METRIC_COUNTER, "ingest_receiver_chunks_known_total",
          "Chunks copied from files landed earlier (deduplicated)", "device" },
        { &s->m_rewanted, INGEST_METRIC_COUNTER, "ingest_receiver_chunks_rewanted_total",
          "Known chunks found stale and asked for again", "device" },
        { &s->m_wire, INGEST_METRIC_COUNTER, "ingest_receiver_chunk_bytes_received_total",
          "Encoded chunk bytes received", "device" },
        { &s->m_written, INGEST_METRIC_COUNTER, "ingest_receiver_bytes_written_total",
          "Bytes written under the bronze root (files and manifests)", "device" },
        { &s->m_krecords, INGEST_METRIC_COUNTER, "ingest_receiver_kafka_records_total",
          "Kafka records consumed, by outcome: ok, forged (does not open under its device's key), unknown_device "
          "(not in authorized_devices), malformed",
          "outcome" },
        { &s->m_kpauses, INGEST_METRIC_COUNTER, "ingest_receiver_kafka_partition_pauses_total",
          "Kafka partitions paused because this device's serve was behind (kafka.device_queue of its records "
          "waiting); the other partitions went on", "device" },
        { &s->m_kreplies, INGEST_METRIC_COUNTER, "ingest_receiver_kafka_replies_undelivered_total",
          "Replies to devices the reply topic did not take, by outcome: again (kept and published again; the "
          "commits wait for it), given_up (refused for good, or too many waiting; its device ships the batch "
          "again after its reply timeout)", "outcome" },
        { &s->m_dicts, INGEST_METRIC_COUNTER, "ingest_receiver_dictionaries_total",
          "Dictionaries devices offered, by result: held (the receiver had it), received (sent, verified and "
          "loaded), refused (bounds)",
          "result" },
    };
    if (ingest_metrics_create(s->ctx, &s->metrics) != 0)
        return -1;
    if (ingest_metric_define(s->metrics, INGEST_METRIC_SECONDS, "ingest_receiver_stage_seconds_total",
                             "Seconds by stage: verify (decrypted chunks decoded and their ids checked, reader "
                             "threads), land (files written and known chunks copied), commit (batches made durable)",
                             "stage", NULL, 0, &s->m_stage) != 0 ||
        ingest_metric_define(s->metrics, INGEST_METRIC_COUNTER, "ingest_receiver_errors_total",
                             "Errors by kind: handshake, protocol (unexpected or malformed message), chunk (a "
                             "chunk that fails its id or cannot be landed), commit (a batch that could not be "
                             "made durable), session (connection lost or timed out mid-batch)",
                             "kind", NULL, 0, &s->m_errors) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++)
        if (ingest_metric_define(s->metrics, defs[i].type, defs[i].name, defs[i].help, defs[i].label, NULL, 0,
                                 defs[i].m) != 0)
            return -1;
    return ingest_metric_define(s->metrics, INGEST_METRIC_HISTOGRAM, "ingest_receiver_batch_seconds",
                                "Seconds from a batch's manifest received to the batch durable", "device", lat,
                                sizeof(lat) / sizeof(lat[0]), &s->m_latency);
}

/* Set by signal handlers, which may run on any thread, and read by every thread: lock-free atomics (C11
 * 7.14.1.1), not volatile sig_atomic_t, which is only for a handler on the thread that reads it. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "signal handlers need lock-free atomics");
static atomic_int stopping, reload_requested, kafka_failed;
static int stop_pipe[2] = { -1, -1 }; /* wakes the accept loop: to stop, or to reload */

static void wake_main(void)
{
    if (stop_pipe[1] >= 0) {
        const char c = 's';
        ssize_t n = write(stop_pipe[1], &c, 1);
        (void)n;
    }
}

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
    wake_main();
}

/* SIGHUP: re-read authorized_devices (auth_reload, in the accept loop). */
static void on_hup(int sig)
{
    (void)sig;
    reload_requested = 1;
    wake_main();
}

/* ---- authorized devices, re-read on SIGHUP -------------------------------- */

/* The current set, with a reference for a connection's handshake and session. */
static authref *auth_get(server *s)
{
    pthread_mutex_lock(&s->auth_lock);
    authref *r = s->auth;
    r->refs++;
    pthread_mutex_unlock(&s->auth_lock);
    return r;
}

static void auth_put(server *s, authref *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&s->auth_lock);
    const unsigned left = --r->refs;
    pthread_mutex_unlock(&s->auth_lock);
    if (left == 0) {
        ingest_authset_destroy(r->set);
        free(r);
    }
}

/* Make set the current one (taken over; destroyed on failure). */
static int auth_install(server *s, ingest_authset *set)
{
    authref *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        ingest_authset_destroy(set);
        return -1;
    }
    r->set = set;
    r->refs = 1;
    pthread_mutex_lock(&s->auth_lock);
    authref *old = s->auth;
    s->auth = r;
    pthread_mutex_unlock(&s->auth_lock);
    auth_put(s, old);
    return 0;
}

/* Why device, authorized in set old, is not the same device in set cur: NULL when it is. */
static const char *auth_changed(const ingest_authset *old, const ingest_authset *cur, const char *device)
{
    uint8_t pk[INGEST_PUBKEY_BYTES], opk[INGEST_PUBKEY_BYTES];
    if (old == cur)
        return NULL;
    if (ingest_authset_lookup(cur, device, strlen(device), pk) != 0)
        return "it is no longer authorized";
    if (ingest_authset_lookup(old, device, strlen(device), opk) != 0 || memcmp(pk, opk, sizeof(pk)) != 0)
        return "it has a new key";
    return NULL;
}

/* Append the ids of a that b lacks to out ("a, b, ..."); returns how many. */
static size_t auth_missing(const ingest_authset *a, const ingest_authset *b, char *out, size_t cap)
{
    size_t n = 0, used = strlen(out);
    const char *id;
    for (size_t i = 0; ingest_authset_entry(a, i, &id, NULL) == 0; i++) {
        if (ingest_authset_lookup(b, id, strlen(id), NULL) == 0)
            continue;
        n++;
        if (used + strlen(id) + 8 < cap)
            used += (size_t)snprintf(out + used, cap - used, "%s%s", n > 1 ? ", " : "", id);
        else if (used + 5 < cap && strcmp(out + used - 3, "...") != 0)
            used += (size_t)snprintf(out + used, cap - used, ", ...");
    }
    return n;
}

static unsigned conns_cut(struct server *s, const ingest_authset *set);

/*
 * SIGHUP: re-read authorized_devices.  New connections shake hands with the
 * new set; the TCP sessions of devices it revokes or gives a new key are cut
 * (conns_cut), and so are the Kafka consumer's serves of them (kserve.c),
 * which looks each record's device up in the new set too.  A file that does not
 * load leaves the set in force as it was, and the log says why.
 */
static void auth_reload(server *s)
{
    ingest_authset *set = NULL;
    const ingest_authset *old = s->auth->set; /* only this thread replaces it */
    if (ingest_authset_load(s->auth_ctx, s->cfg->authorized_devices, &set) < 0) {
        prog_log(INGEST_LOG_ERROR, "SIGHUP: authorized devices not re-read: %s; the devices authorized before (%zu) "
                 "stay authorized", ingest_ctx_errmsg(s->auth_ctx), ingest_authset_count(old));
        return;
    }
    char added[400] = "", removed[400] = "";
    const size_t nadd = auth_missing(set, old, added, sizeof(added));
    const size_t nrem = auth_missing(old, set, removed, sizeof(removed));
    size_t nkey = 0;
    const char *id;
    uint8_t pk[INGEST_PUBKEY_BYTES], opk[INGEST_PUBKEY_BYTES];
    for (size_t i = 0; ingest_authset_entry(set, i, &id, pk) == 0; i++)
        if (ingest_authset_lookup(old, id, strlen(id), opk) == 0 && memcmp(pk, opk, sizeof(pk)) != 0)
            nkey++;
    const size_t count = ingest_authset_count(set);
    if (auth_install(s, set) != 0) {
        prog_log(INGEST_LOG_ERROR, "SIGHUP: authorized devices not re-read: out of memory; the devices authorized "
                 "before stay authorized");
        return;
    }
    const unsigned cut = conns_cut(s, set);
    if (s->kafka != NULL)
        ingest_core_kafka_recheck(s->kafka);
    prog_log(INGEST_LOG_INFO,
             "SIGHUP: authorized devices re-read from %s: %zu device%s, %zu added%s%s%s, %zu removed%s%s%s, %zu "
             "with a new key; %u session%s of those cut",
             s->cfg->authorized_devices, count, count == 1 ? "" : "s", nadd, nadd ? " (" : "", added, nadd ? ")" : "",
             nrem,
             nrem ? " (" : "", removed, nrem ? ")" : "", nkey, cut, cut == 1 ? "" : "s");
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ingest-receiver --config FILE [--check-config] [--rebuild-index] [--ready-file FILE]\n"
               "                       [--stats-interval SECONDS]\n"
               "       ingest-receiver --help-config\n"
               "\n"
               "  --config FILE      the receiver's YAML configuration (docs/config.md)\n"
               "  --check-config     validate the configuration and exit (0 valid, 2 invalid)\n"
               "  --rebuild-index    rebuild the chunk index from the manifests, then serve\n"
               "  --ready-file FILE  once listening, write the bound address (host:port) to FILE (a new\n"
               "                     file renamed over it; a symlink is refused and the receiver stops)\n"
               "  --stats-interval SECONDS\n"
               "                     log the metrics as one JSON line (\"stats {...}\") this often, and at exit\n"
               "  --help-config      list every configuration key\n"
               "\n"
               "SIGTERM or SIGINT stops it; SIGHUP re-reads authorized_devices (docs/operations.md).\n");
}

/* ---- index start-up check ---------------------------------------------- */

/*
 * Open the store and the index.  A store that cannot be opened (corrupt,
 * another format) is removed and rebuilt from the manifests; an empty
 * index beside existing manifests (deleted) is rebuilt too.
 */
static const char *scope_name(int scope)
{
    return scope == INGEST_DEDUP_DEVICE ? "device" : "fleet";
}

/*
 * The chunk index and the catalog are LMDB files mapped in memory: one cut
 * short (a full disk, a bad copy) kills the process with SIGBUS at the
 * first page read past its end, and LMDB cannot tell at open (a healthy
 * file may end before its last page number: pages freed in the
 * transaction that made them are never written).  The guard says so and
 * leaves state_dir/sigbus; this start then removes both, which are caches
 * of the manifests, and makes them again.  0, or -1.
 */
static int sigbus_recover(server *s)
{
    char mark[4096], msg[512];
    snprintf(mark, sizeof(mark), "%s/sigbus", s->cfg->state_dir);
    snprintf(msg, sizeof(msg),
             "ingest-receiver: SIGBUS: a state file mapped in memory is shorter than its pages (the chunk index "
             "%.100s/data.mdb or the catalog in %.100s/_manifests/.catalog cut short, or on a full filesystem?); "
             "the next start makes both again from the manifests",
             s->cfg->state_dir, s->cfg->bronze);
    prog_sigbus_guard(msg, mark);
    if (access(mark, F_OK) != 0)
        return 0;
    prog_log(INGEST_LOG_WARN, "the last run died of SIGBUS reading a state file: the chunk index in %s and the catalog "
             "of %s are made again from the manifests", s->cfg->state_dir, s->cfg->bronze);
    if (ingest_store_wipe(s->ctx, s->cfg->state_dir) < 0) {
        prog_log(INGEST_LOG_ERROR, "chunk index in %s: %s", s->cfg->state_dir, ingest_ctx_errmsg(s->ctx));
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        char p[4096];
        snprintf(p, sizeof(p), "%s/_manifests/.catalog/%s", s->cfg->bronze, i ? "lock.mdb" : "data.mdb");
        if (unlink(p) != 0 && errno != ENOENT) {
            prog_log(INGEST_LOG_ERROR, "remove %s: %s", p, strerror(errno));
            return -1;
        }
    }
    if (unlink(mark) != 0) {
        prog_log(INGEST_LOG_ERROR, "remove %s: %s", mark, strerror(errno));
        return -1;
    }
    return 0;
}

static int open_index(server *s, int force_rebuild)
{
    const char *dir = s->cfg->state_dir, *bronze = s->cfg->bronze;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        prog_log(INGEST_LOG_ERROR, "state_dir %s: %s", dir, strerror(errno));
        return -1;
    }
    int rebuild = force_rebuild;
    /*
     * Larger write transactions than the library's default: a batch's index
     * updates then share pages instead of rewriting them commit after commit
     * (chunk ids are random keys), which keeps the core's write
     * amplification low; the price is up to tens of MB of dirty pages
     * while a big batch commits.
     */
    ingest_store_opts so;
    memset(&so, 0, sizeof(so));
    so.txn_max_writes = RECEIVER_TXN_WRITES;
    /* The index is a cache of the manifests: its writes wait in memory and
     * reach the disk together (see flush_index); a crash is caught up. */
    so.defer_max_writes = s->cfg->index_flush_entries;
    int rc = ingest_store_open(s->ctx, dir, &so, &s->st);
    if (rc == 0)
        rc = ingest_index_open(s->st, bronze, &s->idx);
    if (rc < 0) {
        prog_log(INGEST_LOG_WARN, "chunk index in %s is unusable (%s: %s); rebuilding it from the manifests",
                 dir, ingest_strerror(rc), ingest_ctx_errmsg(s->ctx));
        ingest_index_close(s->idx);
        s->idx = NULL;
        ingest_store_close(s->st);
        s->st = NULL;
        ingest_store_wipe(s->ctx, dir);
        rc = ingest_store_open(s->ctx, dir, &so, &s->st);
        if (rc == 0)
            rc = ingest_index_open(s->st, bronze, &s->idx);
        if (rc < 0) {
            prog_log(INGEST_LOG_ERROR, "cannot create the chunk index in %s: %s", dir, ingest_ctx_errmsg(s->ctx));
            return -1;
        }
        rebuild = 1;
    }
    /*
     * dedup.scope decides how chunk entries are keyed: an index built for
     * the other scope loses its chunk entries and is rebuilt from the
     * manifests in this one (never a mix of the two).
     */
    const int scope = s->cfg->dedup_scope, had = ingest_index_scope(s->idx);
    const int fresh = rebuild || ingest_index_rebuild_needed(s->idx) == 1; /* logged below */
    rc = ingest_index_set_scope(s->idx, scope);
    if (rc < 0) {
        prog_log(INGEST_LOG_ERROR, "chunk index in %s: cannot set dedup.scope: %s", dir, ingest_ctx_errmsg(s->ctx));
        return -1;
    }
    if (rc == 1 && !fresh) {
        prog_log(INGEST_LOG_WARN,
                 "chunk index in %s was built for dedup.scope %s, the config says %s: rebuilding it from %s/_manifests",
                 dir, scope_name(had), scope_name(scope), bronze);
        rebuild = 1;
    }
    if (!rebuild && ingest_index_rebuild_needed(s->idx) == 1) {
        prog_log(INGEST_LOG_INFO, "chunk index in %s is new or was not completed; building it from %s/_manifests",
                 dir, bronze);
        rebuild = 1;
    }
    if (rebuild) {
        ingest_index_stats stats;
        memset(&stats, 0, sizeof(stats));
        const double t0 = prog_now();
        rc = ingest_index_rebuild(s->idx, &stats);
        if (rc < 0) {
            prog_log(INGEST_LOG_ERROR, "index rebuild failed: %s", ingest_ctx_errmsg(s->ctx));
            return -1;
        }
        prog_log(INGEST_LOG_INFO,
                 "index rebuilt from the manifests in %.2fs (dedup.scope %s): %llu files, %llu chunks, %llu batches, "
                 "%llu stale, %llu bad",
                 prog_now() - t0, scope_name(scope), (unsigned long long)stats.files, (unsigned long long)stats.chunks,
                 (unsigned long long)stats.batches, (unsigned long long)stats.stale,
                 (unsigned long long)stats.bad);
    }
    return 0;
}

/* ---- temporary files left by a crash ------------------------------------ */

/*
 * A crash (kill, power cut) leaves the temporary files of unfinished
 * batches under bronze; ingest_lander_sweep removes them, and only them
 * (docs/landing.md).  It runs at start-up only when the previous run did
 * not stop cleanly (the marker file RUNNING_MARKER in state_dir is still
 * there), so a clean restart does not walk a large bronze tree.
 */
#define RUNNING_MARKER "receiver.running"

/*
 * One receiver per state_dir: a second one (started by mistake, by hand
 * beside the service, or by a second unit) would take the first one's
 * marker for a crash's and sweep its temporary files out of bronze, cut
 * back its appends in place, and share its index.  So the state_dir's
 * "lock" file is locked (flock, exclusive) before anything else, and held
 * until the process ends.  The descriptor, or -1 logged.
 */
static int lock_state_dir(const server *s)
{
    const char *dir = s->cfg->state_dir;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        prog_log(INGEST_LOG_ERROR, "state_dir %s: %s", dir, strerror(errno));
        return -1;
    }
    return prog_lock_state_dir(dir, "ingest-receiver: one receiver per state_dir (this one stops, and touches "
                                    "nothing of bronze)");
}

/* Remove what a crashed run left under bronze, if the previous run crashed: 1 if it did, -1 on failure. */
static int sweep_after_crash(server *s)
{
    char marker[4200];
    snprintf(marker, sizeof(marker), "%s/%s", s->cfg->state_dir, RUNNING_MARKER);
    struct stat mst;
    if (stat(marker, &mst) != 0)
        return 0;
    const double t0 = prog_now();
    uint64_t swept = 0, failed = 0;
    if (ingest_lander_sweep(s->ctx, s->cfg->bronze, &swept, &failed) < 0) {
        prog_log(INGEST_LOG_ERROR, "sweep of %s: %s", s->cfg->bronze, ingest_ctx_errmsg(s->ctx));
        return -1;
    }
    /* what the crashed run made and never synced (a directory whose parent it had not fsynced yet, found
     * existing now and so never synced by this run) is made durable before anything relies on it */
    const char *both[2] = { s->cfg->bronze, s->cfg->state_dir };
    for (int i = 0; i < 2; i++) {
        const int fd = open(both[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || syncfs(fd) != 0) {
            prog_log(INGEST_LOG_ERROR, "after the crash: syncfs of %s: %s", both[i], strerror(errno));
            if (fd >= 0)
                close(fd);
            return -1;
        }
        close(fd);
    }
    prog_log(INGEST_LOG_INFO,
             "previous run did not stop cleanly: removed %llu temporary files of unfinished batches from %s "
             "in %.2fs%s",
             (unsigned long long)swept, s->cfg->bronze, prog_now() - t0,
             failed ? " (some could not be removed)" : "");
    return 1;
}

/*
 * After a crash: the index entries not yet flushed were lost; add back
 * those of every batch whose manifest is there but which the index does
 * not mark landed.
 */
static int catch_up_index(server *s)
{
    ingest_index_stats st;
    const double t0 = prog_now();
    if (ingest_index_catch_up(s->idx, &st) < 0) {
        prog_log(INGEST_LOG_ERROR, "index catch-up failed: %s", ingest_ctx_errmsg(s->ctx));
        return -1;
    }
    prog_log(INGEST_LOG_INFO,
             "index caught up from the manifests in %.2fs: %llu batches, %llu files, %llu chunks added, "
             "%llu stale, %llu bad",
             prog_now() - t0, (unsigned long long)st.batches, (unsigned long long)st.files,
             (unsigned long long)st.chunks, (unsigned long long)st.stale, (unsigned long long)st.bad);
    return 0;
}

/*
 * Write the index entries waiting in memory when the oldest is older than
 * index.flush_interval (force: whatever their age).  Under the land lock: no
 * lander has a store transaction open then (not forced: only if the lock
 * is free).  0, or -1 logged.
 */
static int flush_index(server *s, int force)
{
    int rc = 0;
    /* the periodic check does not queue behind a lander: it tries again in a second */
    if (force)
        ingest_core_lock(s->core);
    else if (ingest_core_trylock(s->core) != 0)
        return 0;
    double age = 0;
    const size_t n = ingest_store_deferred(s->st, &age);
    if (n > 0 && (force || age * 1000.0 >= (double)s->cfg->index_flush_interval_ms)) {
        const double t0 = prog_now();
        rc = ingest_store_flush(s->st);
        if (rc < 0)
            prog_log(INGEST_LOG_ERROR, "index flush of %zu entries failed: %s", n, ingest_ctx_errmsg(s->ctx));
        else
            prog_log(INGEST_LOG_DEBUG, "index: %zu entries written in %.3fs", n, prog_now() - t0);
    }
    ingest_core_unlock(s->core);
    return rc < 0 ? -1 : 0;
}

/*
 * Set (durably: the index's writes wait in memory, and only this marker
 * makes the next start catch them up after a power cut) or clear the
 * marker.  0, or -1 logged.
 */
static int running_marker(server *s, int set)
{
    char marker[4200];
    snprintf(marker, sizeof(marker), "%s/%s", s->cfg->state_dir, RUNNING_MARKER);
    if (set ? prog_write_file_durable(marker, "running\n") != 0 : unlink(marker) != 0 && errno != ENOENT) {
        prog_log(set ? INGEST_LOG_ERROR : INGEST_LOG_WARN, "%s: %s", marker, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- one connection ---------------------------------------------------- */

typedef struct conn {
    server *srv;
    struct conn *next, *prev; /* in srv->conns, under conns_lock */
    int fd;
    char peer[96]; /* "host:port": h[64] + ":" + pt[16] */
    admit_entry ae;  /* while it has not authenticated */
    double t_accept; /* prog_now() at accept */
    /* once authenticated (under conns_lock): its device and the set it shook hands with, so that a SIGHUP
     * that revokes the device or gives it a new key cuts the session */
    char device[INGEST_DEVICE_ID_MAX + 1];
    const ingest_authset *auth; /* NULL before, once cut, and once serve let go of the set */
    atomic_int cut;             /* cut by a SIGHUP (conns_cut) */
} conn;

/* Refusals come in floods (a scan, a connection flood): per kind, 5 lines at once, then one per 10 s. */
static prog_ratelimit rl_handshake = { 10, 5, 0, 0, 0 }, rl_dropped = { 10, 5, 0, 0, 0 },
                      rl_busy = { 10, 5, 0, 0, 0 }, rl_accept = { 10, 5, 0, 0, 0 };

/*
 * Until the HELLO's first byte (handshake.first_byte_timeout), then the
 * handshake (handshake.timeout from accept): 0 when c authenticated, -1
 * (logged, counted) otherwise.  Leaves the admission table either way.
 */
static int authenticate(conn *c, ingest_session *ss, ingest_ctx *ctx)
{
    server *s = c->srv;
    const double deadline = c->t_accept + (double)s->cfg->handshake_timeout_ms / 1000.0;
    double first = c->t_accept + (double)s->cfg->handshake_first_byte_ms / 1000.0;
    if (first > deadline)
        first = deadline;
    struct pollfd p = { c->fd, POLLIN, 0 };
    int pr;
    do {
        const double left = first - prog_now();
        pr = poll(&p, 1, left > 0 ? (int)(left * 1000.0) + 1 : 0);
    } while (pr < 0 && errno == EINTR);
    int rc = INGEST_ETIMEDOUT;
    if (pr > 0) {
        admit_spoke(s->adm, &c->ae);
        const double left = deadline - prog_now();
        rc = ingest_session_handshake_fd(ss, c->fd, left > 0.001 ? (int)(left * 1000.0) : 1);
    }
    const int dropped = admit_leave(s->adm, &c->ae);
    if (rc == 0)
        return 0;
    if (dropped) /* counted and logged when it was dropped */
        return -1;
    if (pr <= 0) {
        ingest_metric_add(s->m_dropped, "silent", 1);
        prog_log_limited(&rl_dropped, INGEST_LOG_WARN,
                         "connection from %s closed: no byte within handshake.first_byte_timeout (%llu ms)", c->peer,
                         (unsigned long long)s->cfg->handshake_first_byte_ms);
        return -1;
    }
    const char *id = ingest_session_peer_id(ss);
    if (rc == INGEST_ETIMEDOUT)
        ingest_metric_add(s->m_dropped, "slow", 1);
    ingest_metric_add(s->m_refused, NULL, 1);
    ingest_metric_add(s->m_errors, "handshake", 1);
    prog_log_limited(&rl_handshake, INGEST_LOG_WARN, "handshake from %s%s%s refused: %s: %s", c->peer,
                     id && *id ? " device " : "", id ? id : "", ingest_strerror(rc), ingest_ctx_errmsg(ctx));
    return -1;
}

/* Take one of max_connections session slots for c, waiting up to SESSION_WAIT_S (not once c is cut):
 * 0, or -1. */
static int session_claim(server *s, conn *c)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += SESSION_WAIT_S;
    pthread_mutex_lock(&s->sess_lock);
    int rc = 0;
    while (s->nsessions >= s->cfg->max_connections && rc == 0)
        if (stopping || atomic_load(&c->cut) ||
            pthread_cond_timedwait(&s->sess_cond, &s->sess_lock, &until) == ETIMEDOUT)
            rc = -1;
    if (rc == 0)
        s->nsessions++;
    pthread_mutex_unlock(&s->sess_lock);
    return rc;
}

static void session_release(server *s)
{
    pthread_mutex_lock(&s->sess_lock);
    s->nsessions--;
    pthread_cond_signal(&s->sess_cond);
    pthread_mutex_unlock(&s->sess_lock);
}

/* Log a session cut because a SIGHUP revoked its device or gave it a new key. */
static void conn_cut_log(const conn *c, const char *why)
{
    prog_log(INGEST_LOG_WARN, "SIGHUP: the session of device %s from %s is cut: %s (a batch in progress is not "
             "acknowledged)", c->device, c->peer, why);
}

/*
 * c authenticated as device with set: recorded for conns_cut.  A SIGHUP that replaced the set meanwhile
 * (its conns_cut ran before this) is applied here: -1 when the device is no longer the same one.
 */
static int conn_authenticated(conn *c, const char *device, const ingest_authset *set)
{
    server *s = c->srv;
    pthread_mutex_lock(&s->conns_lock);
    snprintf(c->device, sizeof(c->device), "%s", device);
    pthread_mutex_lock(&s->auth_lock);
    const char *why = auth_changed(set, s->auth->set, device);
    pthread_mutex_unlock(&s->auth_lock);
    c->auth = why == NULL ? set : NULL;
    if (why != NULL)
        conn_cut_log(c, why);
    pthread_mutex_unlock(&s->conns_lock);
    return why != NULL ? -1 : 0;
}

/* After a SIGHUP installed set: cut (shut down) the sessions of devices it revokes or gives a new key. */
static unsigned conns_cut(server *s, const ingest_authset *set)
{
    unsigned n = 0;
    pthread_mutex_lock(&s->conns_lock); /* a connection thread closes its fd only after leaving the list */
    for (conn *c = s->conns; c != NULL; c = c->next) {
        const char *why = c->auth != NULL ? auth_changed(c->auth, set, c->device) : NULL;
        if (why == NULL)
            continue;
        conn_cut_log(c, why);
        shutdown(c->fd, SHUT_RDWR);
        atomic_store(&c->cut, 1);
        c->auth = NULL; /* (cut once) */
        n++;
    }
    pthread_mutex_unlock(&s->conns_lock);
    if (n > 0) { /* a cut connection waiting for a session slot gives up at once */
        pthread_mutex_lock(&s->sess_lock);
        pthread_cond_broadcast(&s->sess_cond);
        pthread_mutex_unlock(&s->sess_lock);
    }
    return n;
}

/*
 * A connection: the handshake, a session slot, then the core serves the
 * device over a tcp link until it goes (include/ingest/core.h).
 */
static void serve(conn *c)
{
    server *s = c->srv;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_session *ss = NULL;
    ingest_link *link = NULL;
    authref *auth = NULL;
    int in_session = 0;
    if (ctx == NULL)
        goto out;
    ingest_ctx_set_log(ctx, prog_lib_log, NULL, prog_log_level() >= INGEST_LOG_DEBUG ? INGEST_LOG_DEBUG : INGEST_LOG_WARN);
    auth = auth_get(s); /* kept while the session lives: it borrows the set */
    if (ingest_session_server_create(ctx, &s->key, auth->set, &ss) < 0 ||
        ingest_session_set_features(ss, CORE_FEATURES) < 0 ||
        /* tests only: behave as a receiver of protocol version 1 (tests/integration/test_push.sh) */
        (getenv("INGEST_TEST_PROTOCOL_V1") != NULL && ingest_session_set_max_version(ss, 1) < 0))
        goto out;
    if (authenticate(c, ss, ctx) != 0)
        goto out;
    const char *device = ingest_session_peer_id(ss);
    if (conn_authenticated(c, device, auth->set) != 0)
        goto out;
    if (ingest_link_tcp_create(ctx, ss, c->fd, c->peer, &link) < 0)
        goto out;
    if (session_claim(s, c) != 0) {
        if (atomic_load(&c->cut))
            goto out; /* (logged by the cut) */
        char why[160];
        snprintf(why, sizeof(why), "receiver busy: all %u sessions (max_connections) are in use; try again later",
                 s->cfg->max_connections);
        ingest_metric_add(s->m_dropped, "busy", 1);
        prog_log_limited(&rl_busy, INGEST_LOG_WARN, "device %s from %s refused: %s", device, c->peer, why);
        ingest_wire_msg m;
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_ERROR;
        m.u.error.code = INGEST_EBUSY;
        snprintf(m.u.error.message, sizeof(m.u.error.message), "%s", why);
        (void)ingest_link_send(link, &m);
        goto out;
    }
    in_session = 1;
    (void)ingest_core_serve(s->core, link, device); /* logged and counted there */
out:
    ingest_link_destroy(link);
    ingest_session_destroy(ss);
    pthread_mutex_lock(&s->conns_lock); /* (conns_cut reads the set) */
    c->auth = NULL;
    pthread_mutex_unlock(&s->conns_lock);
    auth_put(s, auth);
    ingest_ctx_destroy(ctx);
    if (in_session)
        session_release(s);
}

static void *conn_thread(void *arg)
{
    (void)pthread_setname_np(pthread_self(), "ingest-conn"); /* docs/architecture.md "Threads" */
    conn *c = arg;
    serve(c);
    admit_leave(c->srv->adm, &c->ae); /* before the close: a dropped entry's fd is shut down under its lock */
    server *s = c->srv;
    pthread_mutex_lock(&s->conns_lock); /* before the close: a stop shuts the fd down under this lock */
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&s->conns_lock);
    close(c->fd);
    c->srv->nconn--;
    free(c);
    return NULL;
}

/* ---- main -------------------------------------------------------------- */

/* Shut every connection's socket down (how: SHUT_RD or SHUT_RDWR); returns how many there were. */
static unsigned close_conns(server *s, int how)
{
    unsigned n = 0;
    pthread_mutex_lock(&s->conns_lock); /* a connection thread closes its fd only after leaving the list */
    for (conn *c = s->conns; c != NULL; c = c->next, n++)
        shutdown(c->fd, how);
    pthread_mutex_unlock(&s->conns_lock);
    return n;
}

/* Wait until every connection thread ended, at most seconds. */
static void wait_conns(server *s, int seconds)
{
    for (int i = 0; i < seconds * 100 && s->nconn > 0; i++)
        usleep(10000);
}

/*
 * Every connection costs descriptors: a waiting one its socket, a session
 * its socket and up to ~8 files of its two landers.  Raise the soft limit
 * to the hard one, and refuse to start when even that cannot hold the
 * configured connections (accept would then fail with EMFILE under load).
 */
static int check_fd_limit(const ingest_receiver_config *cfg)
{
    const uint64_t need = (uint64_t)cfg->handshake_max_pending + (uint64_t)cfg->max_connections * 10u + 64u;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    if (rl.rlim_cur < rl.rlim_max && rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need * 2 ? rl.rlim_max : (rlim_t)(need * 2);
        (void)setrlimit(RLIMIT_NOFILE, &rl);
        (void)getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        prog_log(INGEST_LOG_ERROR,
                 "max_connections %u and handshake.max_pending %u need up to %llu open files; the limit is %llu "
                 "(raise it, e.g. LimitNOFILE= in the unit, or lower them)",
                 cfg->max_connections, cfg->handshake_max_pending, (unsigned long long)need,
                 (unsigned long long)rl.rlim_cur);
        return -1;
    }
    return 0;
}

static int load_keys(server *s)
{
    ingest_authset *set = NULL;
    if (ingest_secret_key_load(s->ctx, s->cfg->key, &s->key) < 0 ||
        ingest_authset_load(s->auth_ctx, s->cfg->authorized_devices, &set) < 0 ||
        ingest_dedup_key_load(s->ctx, s->cfg->dedup_key, s->dedup) < 0) {
        prog_log(INGEST_LOG_ERROR, "%s",
                 set == NULL && ingest_ctx_errmsg(s->auth_ctx)[0] ? ingest_ctx_errmsg(s->auth_ctx)
                                                                   : ingest_ctx_errmsg(s->ctx));
        ingest_authset_destroy(set);
        return -1;
    }
    if (auth_install(s, set) != 0) {
        prog_log(INGEST_LOG_ERROR, "out of memory");
        return -1;
    }
    return 0;
}

/* The dictionaries devices sent, in {state_dir}/dicts: 0, or -1 logged. */
static int open_dicts(server *s)
{
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s/dicts", s->cfg->state_dir);
    if ((s->dicts_ctx = ingest_ctx_create(NULL)) == NULL)
        return -1;
    ingest_ctx_set_log(s->dicts_ctx, prog_lib_log, NULL, s->cfg->log_level);
    if (ingest_dictstore_open(s->dicts_ctx, dir, &s->dicts) < 0) {
        prog_log(INGEST_LOG_ERROR, "%s", ingest_ctx_errmsg(s->dicts_ctx));
        return -1;
    }
    ingest_dictstore_set_held_metric(s->dicts, s->m_dicts_held);
    return 0;
}

/* The consumer group's lookup of a device's key in the current authorized devices. */
static int kafka_device_key(void *ud, const char *device, uint8_t pk[INGEST_PUBKEY_BYTES])
{
    server *s = ud;
    authref *r = auth_get(s);
    const int rc = ingest_authset_lookup(r->set, device, strlen(device), pk);
    auth_put(s, r);
    return rc == 0 ? 0 : -1;
}

static void *kafka_main(void *arg)
{
    (void)pthread_setname_np(pthread_self(), "ingest-kafka"); /* docs/architecture.md "Threads" */
    server *s = arg;
    if (ingest_core_kafka_run(s->kafka) < 0 && !stopping) {
        /* started again by its supervisor (Restart=on-failure), it joins the group anew */
        prog_log(INGEST_LOG_ERROR, "kafka: the consumer stopped on a failure: the receiver stops (exit 1)");
        kafka_failed = 1;
        stopping = 1;
        wake_main();
    }
    return NULL;
}

/* kafka.brokers: join the receivers' group (docs/kafka.md): 0, or -1 logged. */
static int start_kafka(server *s)
{
    if (s->cfg->kafka_brokers[0] == '\0')
        return 0;
    const ingest_core_kafka_opts o = {
        .kc = { .brokers = s->cfg->kafka_brokers, .topic = s->cfg->kafka_topic,
                .reply_topic = s->cfg->kafka_reply_topic, .group = s->cfg->kafka_group,
                .props = (const char *const *)s->cfg->kafka_properties,
                .nprops = s->cfg->kafka_properties_count },
        .key = &s->key,
        .device_key = kafka_device_key,
        .ud = s,
        .records = s->m_krecords,
        .pauses = s->m_kpauses,
        .replies = s->m_kreplies,
        .queue_max = (size_t)s->cfg->kafka_device_queue,
        /* tests only: "DEVICE:PATH" or "*:PATH", tests/integration/test_kafka_stall.sh, test_kafka_coop.sh */
        .test_serve_pause = getenv("INGEST_TEST_KAFKA_SERVE_PAUSE"),
    };
    if (ingest_core_kafka_create(s->core, &o, &s->kafka) < 0) {
        prog_log(INGEST_LOG_ERROR, "%s", ingest_ctx_errmsg(s->ctx));
        return -1;
    }
    if (pthread_create(&s->kafka_thread, NULL, kafka_main, s) != 0) {
        prog_log(INGEST_LOG_ERROR, "kafka: cannot start its thread");
        return -1;
    }
    s->kafka_running = 1;
    return 0;
}

/* End the group membership: batches being landed finish, offsets are committed. */
static void stop_kafka(server *s)
{
    if (s->kafka_running) {
        ingest_core_kafka_stop(s->kafka);
        pthread_join(s->kafka_thread, NULL);
        s->kafka_running = 0;
    }
    ingest_core_kafka_destroy(s->kafka);
    s->kafka = NULL;
}

/* The core side that serves every authenticated device: 0, or -1 logged. */
static int make_core(server *s)
{
    const ingest_core_metrics cm = {
        .conns = s->m_conns, .landed = s->m_landed, .failed = s->m_failed, .files = s->m_files,
        .bytes = s->m_bytes, .chunks_new = s->m_new, .chunks_known = s->m_known, .rewanted = s->m_rewanted,
        .wire = s->m_wire, .written = s->m_written, .latency = s->m_latency, .stage = s->m_stage,
        .errors = s->m_errors, .dicts = s->m_dicts, .files_refused = s->m_files_refused,
    };
    const ingest_core_opts o = {
        .store = s->st,
        .index = s->idx,
        .dicts = s->dicts,
        .catalog = s->cat,
        .bronze = s->cfg->bronze,
        .layout = s->cfg->layout,
        .dedup_key = s->dedup,
        .direct_io = s->cfg->direct_io,
        .append_in_place = s->cfg->append_in_place && !s->append_off,
        .idle_timeout_ms = (int)(s->cfg->idle_timeout_ms > 0x7fffffff ? 0x7fffffff : s->cfg->idle_timeout_ms),
        .features = CORE_FEATURES,
        .queue_budget = (size_t)s->cfg->queue_budget,
        .test_ack_delay_ms = getenv("INGEST_TEST_ACK_DELAY_MS") ? atoi(getenv("INGEST_TEST_ACK_DELAY_MS")) : 0,
        .test_placed_pause_ms =
            getenv("INGEST_TEST_PLACED_PAUSE_MS") ? atoi(getenv("INGEST_TEST_PLACED_PAUSE_MS")) : 0,
        .log = prog_lib_log,
        .log_level = s->cfg->log_level,
        .lib_log_level = s->cfg->log_level >= INGEST_LOG_DEBUG ? INGEST_LOG_DEBUG : INGEST_LOG_WARN,
        .metrics = &cm,
    };
    if (ingest_core_create(s->ctx, &o, &s->core) < 0) {
        prog_log(INGEST_LOG_ERROR, "%s", ingest_ctx_errmsg(s->ctx));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    prog_malloc_tune(); /* before any large allocation */
    const char *config = NULL, *ready = NULL;
    int check = 0, rebuild = 0;
    double stats_interval = 0;
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' }, { "check-config", no_argument, NULL, 'k' },
        { "rebuild-index", no_argument, NULL, 'r' }, { "ready-file", required_argument, NULL, 'R' },
        { "help", no_argument, NULL, 'h' },          { "help-config", no_argument, NULL, 'H' },
        { "version", no_argument, NULL, 'V' },       { "stats-interval", required_argument, NULL, 's' },
        { NULL, 0, NULL, 0 },
    };
    int o;
    while ((o = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        switch (o) {
        case 'c': config = optarg; break;
        case 's':
            if ((stats_interval = stats_interval_parse(optarg)) < 0) {
                fprintf(stderr, "ingest-receiver: --stats-interval %s: expected seconds, more than 0 and at most 86400\n",
                        optarg);
                return 2;
            }
            break;
        case 'k': check = 1; break;
        case 'r': rebuild = 1; break;
        case 'R': ready = optarg; break;
        case 'h': usage(stdout); return 0;
        case 'H': prog_print_config_keys(INGEST_CONFIG_RECEIVER, "ingest-receiver"); return 0;
        case 'V': printf("ingest-receiver %s\n", ingest_version_string()); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (config == NULL || optind != argc) {
        usage(stderr);
        return 2;
    }
    prog_log_init("ingest-receiver", INGEST_LOG_INFO);
    /* First of all: a peer that resets (a device, a metrics client) must never kill us, crash recovery included. */
    signal(SIGPIPE, SIG_IGN);
    server s;
    memset(&s, 0, sizeof(s));
    /* SIGHUP re-reads authorized_devices: never let it kill us, even while starting (handled once serving). */
    struct sigaction hup;
    memset(&hup, 0, sizeof(hup));
    hup.sa_handler = on_hup;
    sigaction(SIGHUP, &hup, NULL);
    pthread_mutex_init(&s.auth_lock, NULL);
    pthread_mutex_init(&s.sess_lock, NULL);
    pthread_mutex_init(&s.conns_lock, NULL);
    pthread_cond_init(&s.sess_cond, NULL);
    s.ctx = ingest_ctx_create(NULL);
    s.auth_ctx = ingest_ctx_create(NULL);
    if (s.ctx == NULL || s.auth_ctx == NULL) {
        ingest_ctx_destroy(s.ctx);
        ingest_ctx_destroy(s.auth_ctx);
        return 1;
    }
    if (ingest_receiver_config_load(s.ctx, config, &s.cfg) < 0) {
        fprintf(stderr, "ingest-receiver: %s\n", ingest_ctx_errmsg(s.ctx));
        ingest_ctx_destroy(s.ctx);
        ingest_ctx_destroy(s.auth_ctx);
        return 2;
    }
    if (check) {
        printf("%s: ok\n", config);
        ingest_receiver_config_free(s.cfg);
        ingest_ctx_destroy(s.ctx);
        ingest_ctx_destroy(s.auth_ctx);
        return 0;
    }
    prog_log_set_level(s.cfg->log_level);
    ingest_ctx_set_log(s.ctx, prog_lib_log, NULL, s.cfg->log_level >= INGEST_LOG_DEBUG ? INGEST_LOG_DEBUG : INGEST_LOG_WARN);
    int status = 1, lfd = -1, ready_failed = 0;
    stats_logger *slog = NULL;
    metrics_http *mh = NULL;
    const int state_lock = lock_state_dir(&s);
    if (state_lock < 0 || load_keys(&s) != 0)
        goto out;
    if ((s.adm = admit_create(s.cfg->handshake_max_pending, s.cfg->handshake_max_per_address)) == NULL)
        goto out;
    if (check_fd_limit(s.cfg) != 0)
        goto out;
    struct stat bst;
    if (stat(s.cfg->bronze, &bst) != 0 || !S_ISDIR(bst.st_mode)) {
        prog_log(INGEST_LOG_ERROR, "bronze %s: not a directory", s.cfg->bronze);
        goto out;
    }
    if (sigbus_recover(&s) != 0)
        goto out;
    if (define_metrics(&s) != 0 || open_index(&s, rebuild) != 0 || open_dicts(&s) != 0)
        goto out;
    if (s.cfg->metrics_listen[0] != '\0') {
        char mb[300], merr[512];
        mh = metrics_http_start(s.cfg->metrics_listen, s.metrics, mb, sizeof(mb), merr, sizeof(merr));
        if (mh == NULL) {
            prog_log(INGEST_LOG_ERROR, "metrics.listen: %s", merr);
            goto out;
        }
        prog_log(INGEST_LOG_INFO, "metrics on http://%s/metrics", mb);
    }
    if (stats_interval > 0 && (slog = stats_logger_start(s.metrics, stats_interval)) == NULL) {
        prog_log(INGEST_LOG_ERROR, "--stats-interval: cannot start its thread: %s", strerror(errno));
        goto out;
    }
    /* appends in place a crash or a failed cut-back left: cut back now, whether the last run crashed or not */
    uint64_t app_cut = 0, app_left = 0;
    if (ingest_lander_sweep_appends(s.ctx, s.cfg->bronze, &app_cut, &app_left) < 0) {
        prog_log(INGEST_LOG_ERROR, "sweep of the appends in place under %s: %s", s.cfg->bronze,
                 ingest_ctx_errmsg(s.ctx));
        goto out;
    }
    if (app_left > 0 && s.cfg->append_in_place) {
        s.append_off = 1;
        prog_log(INGEST_LOG_WARN,
                 "%llu files appended in place could not be cut back to their landed length (see above): appending "
                 "in place is off for this run (growing files are written whole), and the next start tries again",
                 (unsigned long long)app_left);
    }
    const int crashed = sweep_after_crash(&s);
    if (crashed < 0 || (crashed && catch_up_index(&s) != 0))
        goto out;
    s.cat = rcatalog_open(s.cfg->bronze);
    /* (before the Kafka thread, which may wake the main loop; never blocking the waker) */
    if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        goto out;
    if (make_core(&s) != 0 || running_marker(&s, 1) != 0 || start_kafka(&s) != 0)
        goto out;
    char bound[300], err[512];
    lfd = prog_listen(s.cfg->listen, bound, sizeof(bound), err, sizeof(err));
    if (lfd < 0) {
        prog_log(INGEST_LOG_ERROR, "%s", err);
        goto out;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    prog_log(INGEST_LOG_INFO, "listening on %s; bronze %s; %zu authorized devices", bound, s.cfg->bronze,
             ingest_authset_count(s.auth->set));
    if (ready != NULL) {
        char line[320];
        snprintf(line, sizeof(line), "%s\n", bound);
        if (prog_write_file_atomic(ready, line) != 0) {
            const int e = errno;
            prog_log(INGEST_LOG_ERROR, "--ready-file %s: %s; stopping", ready,
                     e == ELOOP ? "a symbolic link: refusing to write through it (remove it, or name a file)"
                                : strerror(e));
            stopping = 1;
            ready_failed = 1;
        }
    }
    prog_notify("READY=1"); /* listening: a Type=notify unit is started (docs/operations.md) */
    while (!stopping) {
        struct pollfd p[2] = { { lfd, POLLIN, 0 }, { stop_pipe[0], POLLIN, 0 } };
        const int pr = poll(p, 2, 1000);
        if (pr < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents) {
            char drain[64];
            ssize_t n = read(stop_pipe[0], drain, sizeof(drain));
            (void)n;
            if (stopping)
                break;
        }
        if (reload_requested) {
            reload_requested = 0;
            auth_reload(&s);
        }
        (void)flush_index(&s, 0);
        if (p[1].revents)
            continue;
        if (pr == 0)
            continue;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        const int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* the connection stays queued; retrying at once would spin */
                ingest_metric_add(s.m_dropped, "accept", 1);
                prog_log_limited(&rl_accept, INGEST_LOG_WARN, "accept: %s; pausing accepts for 100 ms",
                                 strerror(errno));
                struct pollfd sp = { stop_pipe[0], POLLIN, 0 };
                (void)poll(&sp, 1, 100);
            }
            continue;
        }
        conn *c = calloc(1, sizeof(*c));
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->srv = &s;
        c->fd = fd;
        c->t_accept = prog_now();
        char h[64] = "?", pt[16] = "?";
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), pt, sizeof(pt), NI_NUMERICHOST | NI_NUMERICSERV);
        snprintf(c->peer, sizeof(c->peer), "%s:%s", h, pt);
        c->ae.fd = fd;
        snprintf(c->ae.addr, sizeof(c->ae.addr), "%s", h);
        char dropped[64];
        admit_enter(s.adm, &c->ae, dropped, sizeof(dropped));
        if (dropped[0] != '\0') {
            ingest_metric_add(s.m_dropped, "room", 1);
            prog_log_limited(&rl_dropped, INGEST_LOG_WARN,
                             "unauthenticated connection from %s dropped to make room for one from %s (%u waiting; "
                             "handshake.max_pending %u, per address %u)",
                             dropped, h, admit_count(s.adm), s.cfg->handshake_max_pending,
                             s.cfg->handshake_max_per_address);
        }
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* a session thread runs the handshake and ingest_core_serve: the core's stack size, not 8 MiB
         * (docs/architecture.md, "Connection model") */
        pthread_attr_setstacksize(&attr, ingest_core_thread_stack());
        s.nconn++;
        pthread_mutex_lock(&s.conns_lock);
        c->prev = NULL;
        c->next = s.conns;
        if (s.conns != NULL)
            s.conns->prev = c;
        s.conns = c;
        pthread_mutex_unlock(&s.conns_lock);
        if (pthread_create(&t, &attr, conn_thread, c) != 0) {
            s.nconn--;
            pthread_mutex_lock(&s.conns_lock);
            s.conns = c->next;
            if (s.conns != NULL)
                s.conns->prev = NULL;
            pthread_mutex_unlock(&s.conns_lock);
            admit_leave(s.adm, &c->ae);
            close(fd);
            free(c);
        }
        pthread_attr_destroy(&attr);
    }
    stop_kafka(&s); /* its serves end first: a batch being made durable is finished */
    ingest_core_stop(s.core);
    ingest_core_stats cst;
    ingest_core_stats_get(s.core, &cst);
    prog_log(INGEST_LOG_INFO, "stopping: %llu batches landed, %llu failed", (unsigned long long)cst.batches_landed,
             (unsigned long long)cst.batches_failed);
    close(lfd);
    lfd = -1;
    admit_drop_all(s.adm); /* nothing to finish before a session */
    /* Close the sessions now, without waiting for their devices: their
     * sockets are shut down for reading, so a session waiting for its
     * device's next message ends at once and a batch still arriving is cut
     * (its device sends it again); a batch being made durable is finished
     * and its ack still goes out (the write side stays open).  A connection
     * waiting for a session slot gives up. */
    const unsigned closed = close_conns(&s, SHUT_RD);
    pthread_mutex_lock(&s.sess_lock);
    pthread_cond_broadcast(&s.sess_cond);
    pthread_mutex_unlock(&s.sess_lock);
    wait_conns(&s, STOP_WAIT_S);
    if (s.nconn > 0) { /* one blocked on a write (a device that does not read): cut it */
        (void)close_conns(&s, SHUT_RDWR);
        wait_conns(&s, STOP_WAIT_S / 2);
    }
    /* A batch still landing would leave temporary files, an index not
     * flushed would miss entries: keep the marker (the next start sweeps
     * and catches up). */
    if (s.nconn == 0 && flush_index(&s, 1) == 0 && running_marker(&s, 0) == 0)
        prog_log(INGEST_LOG_INFO,
                 "stopped cleanly: device connections closed: %u; chunk index flushed, crash marker removed", closed);
    else if (s.nconn > 0)
        prog_log(INGEST_LOG_WARN,
                 "%d connections did not end: the chunk index is not flushed and the crash marker stays (the next "
                 "start recovers as after a crash)",
                 (int)s.nconn);
    stats_logger_stop(slog);
    slog = NULL;
    metrics_http_stop(mh);
    mh = NULL;
    status = ready_failed || kafka_failed ? 1 : 0;
out:
    stats_logger_stop(slog);
    metrics_http_stop(mh); /* (a start that failed after it began serving /metrics: before the metrics go) */
    stop_kafka(&s);
    if (lfd >= 0)
        close(lfd);
    if (s.nconn == 0) {
        ingest_index_close(s.idx);
        ingest_store_close(s.st);
        ingest_core_destroy(s.core);
        rcatalog_close(s.cat);
        ingest_dictstore_close(s.dicts);
        ingest_ctx_destroy(s.dicts_ctx);
        ingest_metrics_destroy(s.metrics);
        auth_put(&s, s.auth);
        ingest_ctx_destroy(s.auth_ctx);
        ingest_receiver_config_free(s.cfg);
        ingest_secret_key_wipe(&s.key);
        admit_destroy(s.adm);
        ingest_ctx_destroy(s.ctx);
    }
    if (state_lock >= 0)
        close(state_lock); /* last: the store is closed */
    return status;
}
