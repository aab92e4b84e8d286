/*
 * ingest-receiver: the core service.  Accepts authenticated device
 * sessions on TCP, lands their batches in the bronze tree through the
 * lander, and acknowledges a batch only once it is durable.
 *
 * Threads: the main thread accepts; each connection has a thread of its
 * own.  Connections that have not authenticated yet are bounded by
 * handshake.max_pending (admit.h: the oldest silent one makes room for a
 * newcomer); authenticated sessions by max_connections.  The store, the chunk index and the
 * landers share one LMDB environment, so every call into landing holds
 * land_lock; network waits never do.
 */
#include "../common/http.h"
#include "../common/statslog.h"
#include "../common/prog.h"
#include "admit.h"
#include "dicts.h"
#include "rcatalog.h"

#include <errno.h>
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

#define MANIFEST_MAX (64u * 1024u * 1024u) /* bytes of one batch manifest (~800k chunks) */
#define SESSION_WAIT_S 10 /* an authenticated device waits this long for a max_connections slot */
#define RECEIVER_TXN_WRITES 16384

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
    ingest_ctx *ctx; /* of the store, index and codec; used under land_lock */
    ingest_secret_key key;
    pthread_mutex_t auth_lock;
    authref *auth;        /* the set new connections shake hands with */
    ingest_ctx *auth_ctx; /* of the sets (their allocator); its messages are the main thread's */
    uint8_t dedup[INGEST_KEY_BYTES];
    ingest_store *st;
    ingest_index *idx;
    dictstore *dicts; /* trained dictionaries devices sent (dicts.h) */
    ingest_catalog *cat; /* landed files, kept current by the landers (rcatalog.h), or NULL */
    pthread_mutex_t land_lock;
    atomic_int nconn; /* connection threads, authenticated or not */
    pthread_mutex_t conns_lock;
    struct conn *conns; /* every connection thread's, so a stop can end their sessions */
    admit *adm;       /* connections not authenticated yet */
    pthread_mutex_t sess_lock;
    pthread_cond_t sess_cond;
    unsigned nsessions; /* authenticated sessions, at most max_connections */
    /* Devices with a connection being served: one connection per device at
     * a time, so a batch replayed on a new connection never meets the old
     * connection still landing or finishing it (same temporary names). */
    pthread_mutex_t dev_lock;
    pthread_cond_t dev_cond;
    char (*active)[INGEST_DEVICE_ID_MAX + 1];
    size_t nactive;
    atomic_ullong batches_landed, batches_failed, chunks_received, bytes_received;
    /* Prometheus metrics (docs/operations.md): labelled by device. */
    ingest_metrics *metrics;
    ingest_metric *m_conns, *m_refused, *m_dropped, *m_landed, *m_failed, *m_files, *m_bytes, *m_new, *m_known, *m_rewanted,
        *m_wire, *m_written, *m_latency, *m_stage, *m_errors, *m_dicts;
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

static volatile sig_atomic_t stopping, reload_requested;
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

/*
 * SIGHUP: re-read authorized_devices.  New connections shake hands with the
 * new set; sessions already authenticated go on (a revoked device's open
 * session ends when it disconnects or idles out).  A file that does not
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
    prog_log(INGEST_LOG_INFO,
             "SIGHUP: authorized devices re-read from %s: %zu device%s, %zu added%s%s%s, %zu removed%s%s%s, %zu "
             "with a new key; sessions already open go on",
             s->cfg->authorized_devices, count, count == 1 ? "" : "s", nadd, nadd ? " (" : "", added, nadd ? ")" : "",
             nrem,
             nrem ? " (" : "", removed, nrem ? ")" : "", nkey);
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
 * index.flush_interval (force: whatever their age).  Under land_lock: no
 * lander has a store transaction open then (not forced: only if the lock
 * is free).  0, or -1 logged.
 */
static int flush_index(server *s, int force)
{
    int rc = 0;
    /* the periodic check does not queue behind a lander: it tries again in a second */
    if (force)
        pthread_mutex_lock(&s->land_lock);
    else if (pthread_mutex_trylock(&s->land_lock) != 0)
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
    pthread_mutex_unlock(&s->land_lock);
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

/* Take one of max_connections session slots, waiting up to SESSION_WAIT_S: 0, or -1. */
static int session_claim(server *s)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += SESSION_WAIT_S;
    pthread_mutex_lock(&s->sess_lock);
    int rc = 0;
    while (s->nsessions >= s->cfg->max_connections && rc == 0)
        if (stopping || pthread_cond_timedwait(&s->sess_cond, &s->sess_lock, &until) == ETIMEDOUT)
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

typedef struct u32vec {
    uint32_t *v;
    size_t n, cap;
} u32vec;

static int u32vec_push(u32vec *a, const uint32_t *v, size_t n)
{
    if (n == 0) /* v may be NULL then; memcpy(NULL, NULL, 0) is undefined */
        return 0;
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 1024;
        while (cap < a->n + n)
            cap *= 2;
        uint32_t *p = realloc(a->v, cap * sizeof(*p));
        if (p == NULL)
            return -1;
        a->v = p;
        a->cap = cap;
    }
    memcpy(a->v + a->n, v, n * sizeof(*v));
    a->n += n;
    return 0;
}

static int cmp_u32(const void *a, const void *b)
{
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/*
 * The sending side of a connection: the connection's thread and its
 * committer thread both send (WANTs, RECEIVED; ACKs), one at a time.
 */
typedef struct sendside {
    ingest_session *ss;
    int fd;
    pthread_mutex_t mu;
} sendside;

static int link_send(sendside *lk, const ingest_wire_msg *m)
{
    pthread_mutex_lock(&lk->mu);
    const int rc = ingest_session_send_msg(lk->ss, lk->fd, m);
    pthread_mutex_unlock(&lk->mu);
    return rc;
}

/* Send the indexes as WANT frames (sorted, deduplicated), MORE on all but the last. */
static int send_wants(sendside *lk, const char *batch, u32vec *w)
{
    if (w->n > 1) /* w->v is NULL while nothing was pushed; qsort(NULL, 0) is undefined */
        qsort(w->v, w->n, sizeof(uint32_t), cmp_u32);
    size_t n = 0;
    for (size_t i = 0; i < w->n; i++)
        if (n == 0 || w->v[i] != w->v[n - 1])
            w->v[n++] = w->v[i];
    w->n = n;
    const size_t per = (INGEST_WIRE_MAX_PAYLOAD - 256) / 4;
    size_t off = 0;
    do {
        const size_t k = w->n - off < per ? w->n - off : per;
        ingest_wire_msg m;
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_WANT;
        snprintf(m.u.want.batch_id, sizeof(m.u.want.batch_id), "%s", batch);
        m.u.want.count = (uint32_t)k;
        m.u.want.idx = w->v + off;
        m.u.want.flags = off + k < w->n ? INGEST_WANT_MORE : 0;
        const int rc = link_send(lk, &m);
        if (rc < 0)
            return rc;
        off += k;
    } while (off < w->n);
    return 0;
}

static int send_ack(sendside *lk, const char *batch, int status, const char *msg)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_ACK;
    snprintf(m.u.ack.batch_id, sizeof(m.u.ack.batch_id), "%s", batch);
    m.u.ack.status = status;
    snprintf(m.u.ack.message, sizeof(m.u.ack.message), "%s", msg);
    return link_send(lk, &m);
}

static int send_received(sendside *lk, const char *batch)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_RECEIVED;
    snprintf(m.u.received.batch_id, sizeof(m.u.received.batch_id), "%s", batch);
    return link_send(lk, &m);
}

static int send_error(sendside *lk, int code, const char *msg)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_ERROR;
    m.u.error.code = code;
    snprintf(m.u.error.message, sizeof(m.u.error.message), "%s", msg);
    return link_send(lk, &m);
}

/* Collect the lander's re-wants into w (caller holds land_lock). */
static int collect_rewants(ingest_lander_batch *b, u32vec *w)
{
    const uint32_t *idx;
    size_t n;
    ingest_lander_rewants(b, &idx, &n);
    return n ? u32vec_push(w, idx, n) : 0;
}

/* ---- the reader thread of a connection ---------------------------------- */

/*
 * Each connection has two threads: the reader receives and opens frames,
 * and decodes and verifies each CHUNK against the id the manifest gives it
 * (the costly part: decompression and the chunk ids); the connection's own thread
 * lands what the reader queues and sends the replies.  The session allows
 * exactly that: one receiving and one sending thread.  The queue is
 * bounded by bytes, so a fast device cannot make the receiver buffer more
 * than READQ_MAX per connection.
 */
#define READQ_MAX (16u * 1024u * 1024u)

typedef struct qitem {
    struct qitem *next;
    ingest_wire_msg m;  /* the message; for MANIFEST_PART and CHUNK the bytes are in data */
    int rc;             /* < 0: the receive failed (m unused) */
    char why[512];      /* the receive failure's detail */
    int verified;       /* CHUNK: data holds the decoded chunk, verified against id */
    uint8_t id[INGEST_ID_BYTES]; /* CHUNK, verified: the id it was checked against */
    uint64_t gen;       /* CHUNK: the batch generation published when it arrived (0: none) */
    int last;           /* the reader's end marker: nothing follows */
    size_t enc_len;     /* CHUNK: encoded size as received */
    size_t len;         /* bytes in data */
    uint8_t data[];
} qitem;

typedef struct readq {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    qitem *head, *tail;
    size_t bytes;
    int quit, ended;
    ingest_lander_batch *batch; /* the open batch, for the expected chunk ids */
    uint64_t gen;               /* its generation: counts publications, 0 while none is open */
    ingest_session *ss;
    int fd, idle_ms;
    ingest_codec *codec;        /* the reader's own decoder */
    ingest_ctx *ctx;            /* codec's */
    int pack;                   /* the pack feature was agreed */
    /* CHUNK_GROUP scratch: the decoded bytes, and the expected ids and lengths */
    uint8_t *gbuf, *gids;
    uint32_t *glens;
    int decoding;               /* the reader is decoding with codec (dictionaries are added only when not) */
    const uint8_t *key;
    ingest_metric *stage;       /* verify seconds */
} readq;

static void readq_push(readq *q, qitem *it)
{
    pthread_mutex_lock(&q->lock);
    while (q->bytes > READQ_MAX && !q->quit)
        pthread_cond_wait(&q->cond, &q->lock);
    it->next = NULL;
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    q->bytes += it->len + sizeof(*it);
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

static qitem *readq_pop(readq *q)
{
    pthread_mutex_lock(&q->lock);
    while (q->head == NULL)
        pthread_cond_wait(&q->cond, &q->lock);
    qitem *it = q->head;
    q->head = it->next;
    if (q->head == NULL)
        q->tail = NULL;
    q->bytes -= it->len + sizeof(*it);
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
    return it;
}

/*
 * Publish (or withdraw, with NULL) the open batch to the reader, once its
 * WANT is about to be sent: a CHUNK read before that was sent before the
 * WANT asked for it.  Returns the generation chunks of this batch carry.
 */
static uint64_t readq_set_batch(readq *q, ingest_lander_batch *b)
{
    static atomic_ullong gens;
    pthread_mutex_lock(&q->lock);
    q->batch = b;
    q->gen = b != NULL ? ++gens : 0;
    const uint64_t g = q->gen;
    pthread_mutex_unlock(&q->lock);
    return g;
}

static qitem *item_new(size_t len)
{
    qitem *it = malloc(sizeof(*it) + len);
    if (it != NULL) {
        memset(it, 0, sizeof(*it));
        it->len = len;
    }
    return it;
}

/* Mark the reader as decoding with its codec (dict_load waits) or not. */
static void reader_decoding(readq *q, int on)
{
    pthread_mutex_lock(&q->lock);
    q->decoding = on;
    if (!on)
        pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

/*
 * A CHUNK_GROUP: decode it once, verify each chunk's id over its slice and
 * queue each as a verified CHUNK, so the landing sees what it would have
 * seen from one CHUNK per index.  A group that cannot be checked (no open
 * batch, an index past the batch, lengths past INGEST_WIRE_GROUP_MAX_RAW,
 * a bad frame, an id mismatch) is queued as one failed CHUNK_GROUP item
 * naming why.  Returns -1 only when out of memory.
 */
static int read_group(readq *q, const ingest_wire_msg *m)
{
    const ingest_wire_chunk_group *g = &m->u.group;
    const double t0 = prog_now();
    char why[256] = "";
    size_t total = 0;
    uint32_t bad = ingest_wire_group_index(g, 0);
    pthread_mutex_lock(&q->lock);
    const uint64_t gen = q->gen;
    int ok = q->batch != NULL;
    q->decoding = 1;
    for (uint32_t i = 0; ok && i < g->count; i++) {
        const uint32_t idx = ingest_wire_group_index(g, i);
        if (ingest_lander_chunk_expect(q->batch, idx, q->gids + (size_t)i * INGEST_ID_BYTES, &q->glens[i]) != 0) {
            snprintf(why, sizeof(why), "chunk %u is past the batch's chunk list", idx);
            bad = idx;
            ok = 0;
        } else if ((total += q->glens[i]) > INGEST_WIRE_GROUP_MAX_RAW) {
            snprintf(why, sizeof(why), "the group holds more than %u bytes", INGEST_WIRE_GROUP_MAX_RAW);
            ok = 0;
        }
    }
    pthread_mutex_unlock(&q->lock);
    if (!ok && why[0] == '\0')
        snprintf(why, sizeof(why), "CHUNK sent before the WANT that asks for it");
    size_t got = 0;
    int rc;
    if (ok && (rc = ingest_codec_decode(q->codec, g->data, g->len, q->gbuf, total, &got, NULL, NULL)) < 0) {
        snprintf(why, sizeof(why), "%s: %s", ingest_strerror(rc), ingest_ctx_errmsg(q->ctx));
        ok = 0;
    } else if (ok && got != total) {
        snprintf(why, sizeof(why), "decodes to %zu bytes, its chunks hold %zu", got, total);
        ok = 0;
    }
    reader_decoding(q, 0);
    size_t at = 0;
    for (uint32_t i = 0; ok && i < g->count; at += q->glens[i], i++) {
        uint8_t id[INGEST_ID_BYTES];
        ingest_chunk_id(q->key, q->gbuf + at, q->glens[i], id);
        if (memcmp(id, q->gids + (size_t)i * INGEST_ID_BYTES, INGEST_ID_BYTES) != 0) {
            bad = ingest_wire_group_index(g, i);
            snprintf(why, sizeof(why), "chunk %u does not match its id in the manifest", bad);
            ok = 0;
        }
    }
    if (!ok) {
        qitem *it = item_new(0);
        if (it == NULL)
            return -1;
        it->m.type = INGEST_MSG_CHUNK_GROUP;
        it->m.u.chunk.index = bad;
        it->gen = gen;
        snprintf(it->why, sizeof(it->why), "%s", why);
        readq_push(q, it);
        return 0;
    }
    ingest_metric_add_seconds(q->stage, "verify", prog_now() - t0);
    /* The group's wire bytes are shared among its chunks by length. */
    size_t enc_left = g->len;
    at = 0;
    for (uint32_t i = 0; i < g->count; at += q->glens[i], i++) {
        qitem *it = item_new(q->glens[i]);
        if (it == NULL)
            return -1;
        memcpy(it->data, q->gbuf + at, q->glens[i]);
        it->verified = 1;
        memcpy(it->id, q->gids + (size_t)i * INGEST_ID_BYTES, INGEST_ID_BYTES);
        it->m.type = INGEST_MSG_CHUNK;
        it->m.u.chunk.index = ingest_wire_group_index(g, i);
        it->gen = gen;
        const size_t share = i + 1 == g->count ? enc_left : (size_t)((uint64_t)g->len * q->glens[i] / total);
        it->enc_len = share < enc_left ? share : enc_left;
        enc_left -= it->enc_len;
        readq_push(q, it);
    }
    return 0;
}

static void *reader_main(void *arg)
{
    readq *q = arg;
    for (;;) {
        ingest_wire_msg m;
        const int rc = ingest_session_recv_msg(q->ss, q->fd, &m, q->idle_ms);
        qitem *it = NULL;
        if (rc < 0) {
            it = item_new(0);
            if (it == NULL)
                break;
            it->rc = rc;
            snprintf(it->why, sizeof(it->why), "%s", ingest_session_recv_errmsg(q->ss));
        } else if (m.type == INGEST_MSG_CHUNK) {
            uint8_t id[INGEST_ID_BYTES];
            uint32_t len = 0;
            pthread_mutex_lock(&q->lock);
            const int known = q->batch != NULL && ingest_lander_chunk_expect(q->batch, m.u.chunk.index, id, &len) == 0;
            const uint64_t gen = q->gen;
            q->decoding = known;
            pthread_mutex_unlock(&q->lock);
            size_t got = 0;
            const double t0 = prog_now();
            const int ok = known && (it = item_new(len)) != NULL &&
                           ingest_codec_decode(q->codec, m.u.chunk.data, m.u.chunk.len, it->data, len, &got, q->key,
                                               id) == 0 &&
                           got == len;
            if (known) {
                pthread_mutex_lock(&q->lock);
                q->decoding = 0;
                pthread_cond_broadcast(&q->cond);
                pthread_mutex_unlock(&q->lock);
            }
            if (ok) {
                it->verified = 1;
                memcpy(it->id, id, sizeof(it->id));
                ingest_metric_add_seconds(q->stage, "verify", prog_now() - t0);
            } else {
                /* Not verifiable here: the lander decodes it and names what is wrong. */
                free(it);
                if ((it = item_new(m.u.chunk.len)) == NULL)
                    break;
                memcpy(it->data, m.u.chunk.data, m.u.chunk.len);
            }
            it->m = m;
            it->gen = gen;
            it->enc_len = m.u.chunk.len;
            it->m.u.chunk.data = NULL;
        } else if (m.type == INGEST_MSG_CHUNK_GROUP && q->pack) {
            if (read_group(q, &m) != 0)
                break;
            continue;
        } else if (m.type == INGEST_MSG_MANIFEST_PART && q->pack) {
            /* An encoded chunk holding the manifest slice, at most INGEST_WIRE_MANIFEST_PART_MAX_RAW decoded. */
            uint32_t raw = 0;
            size_t got = 0;
            char why[256] = "";
            int drc = ingest_codec_raw_size(m.u.manifest_part.data, m.u.manifest_part.len, &raw);
            if (drc == 0 && raw > INGEST_WIRE_MANIFEST_PART_MAX_RAW) {
                drc = INGEST_ECORRUPT;
                snprintf(why, sizeof(why), "MANIFEST_PART: decodes to %" PRIu32 " bytes, more than %u", raw,
                         INGEST_WIRE_MANIFEST_PART_MAX_RAW);
            }
            if (drc == 0 && (it = item_new(raw)) == NULL)
                break;
            if (drc == 0) {
                reader_decoding(q, 1);
                if ((drc = ingest_codec_decode(q->codec, m.u.manifest_part.data, m.u.manifest_part.len, it->data, raw,
                                               &got, NULL, NULL)) == 0 && got != raw)
                    drc = INGEST_ECORRUPT;
                if (drc < 0 && why[0] == '\0')
                    snprintf(why, sizeof(why), "MANIFEST_PART: %s: %s", ingest_strerror(drc), ingest_ctx_errmsg(q->ctx));
                reader_decoding(q, 0);
            }
            if (drc < 0) {
                free(it);
                if ((it = item_new(0)) == NULL)
                    break;
                it->rc = INGEST_ECORRUPT;
                snprintf(it->why, sizeof(it->why), "%s", why);
            } else {
                it->m = m;
                it->m.u.manifest_part.data = it->data;
                it->m.u.manifest_part.len = raw;
            }
        } else if (m.type == INGEST_MSG_MANIFEST_PART) {
            if ((it = item_new(m.u.manifest_part.len)) == NULL)
                break;
            memcpy(it->data, m.u.manifest_part.data, m.u.manifest_part.len);
            it->m = m;
            it->m.u.manifest_part.data = it->data;
        } else if (m.type == INGEST_MSG_DICT_DATA) {
            if ((it = item_new(m.u.dict_data.len)) == NULL)
                break;
            memcpy(it->data, m.u.dict_data.data, m.u.dict_data.len);
            it->m = m;
            it->m.u.dict_data.data = it->data;
        } else {
            if ((it = item_new(0)) == NULL)
                break;
            it->m = m;
        }
        readq_push(q, it);
        if (rc < 0 || q->quit)
            break;
    }
    pthread_mutex_lock(&q->lock);
    q->ended = 1;
    pthread_mutex_unlock(&q->lock);
    /* An end marker, so the lander thread never waits on a queue nobody fills. */
    qitem *end = item_new(0);
    if (end != NULL) {
        end->rc = INGEST_ECLOSED;
        end->last = 1;
        snprintf(end->why, sizeof(end->why), "connection closed");
        readq_push(q, end);
    }
    return NULL;
}

/* ---- one connection per device ------------------------------------------------ */

#define DEVICE_WAIT_S 30

/* Wait (at most DEVICE_WAIT_S) until no other connection serves device, then claim it: 0, or -1. */
static int device_claim(server *s, const char *device)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += DEVICE_WAIT_S;
    pthread_mutex_lock(&s->dev_lock);
    for (;;) {
        size_t i = 0;
        while (i < s->nactive && strcmp(s->active[i], device) != 0)
            i++;
        if (i == s->nactive)
            break;
        if (stopping || pthread_cond_timedwait(&s->dev_cond, &s->dev_lock, &until) == ETIMEDOUT) {
            pthread_mutex_unlock(&s->dev_lock);
            return -1;
        }
    }
    snprintf(s->active[s->nactive++], sizeof(s->active[0]), "%s", device);
    pthread_mutex_unlock(&s->dev_lock);
    return 0;
}

static void device_release(server *s, const char *device)
{
    pthread_mutex_lock(&s->dev_lock);
    for (size_t i = 0; i < s->nactive; i++)
        if (strcmp(s->active[i], device) == 0) {
            memmove(s->active[i], s->active[i + 1], (s->nactive - i - 1) * sizeof(s->active[0]));
            s->nactive--;
            break;
        }
    pthread_cond_broadcast(&s->dev_cond);
    pthread_mutex_unlock(&s->dev_lock);
}

/* ---- making batches durable ------------------------------------------------ */

/* The land_lock is let go while the lander waits for the disk. */
static void land_unlock(void *ud) { pthread_mutex_unlock(&((server *)ud)->land_lock); }
static void land_lock(void *ud) { pthread_mutex_lock(&((server *)ud)->land_lock); }

/*
 * Finish a prepared batch (called with land_lock held; returns with it
 * held): make it durable, count it, log it, and fill ack/why for the ACK.
 */
static int finish_batch(server *s, ingest_lander_batch *b, ingest_ctx *lctx, const char *device, const char *batch,
                        double batch_t0, char *why, size_t whycap)
{
    const double t0 = prog_now();
    const ingest_lander_lock lk = { land_unlock, land_lock, s };
    const int rc = ingest_lander_commit_finish(b, &lk);
    snprintf(why, whycap, "%s", ingest_ctx_errmsg(lctx));
    ingest_lander_stats st;
    ingest_lander_batch_stats(b, &st);
    ingest_metric_add_seconds(s->m_stage, "commit", prog_now() - t0);
    if (rc < 0) {
        ingest_metric_add(s->m_errors, "commit", 1);
        prog_log(INGEST_LOG_WARN, "device %s batch %s failed: %s: %s", device, batch, ingest_strerror(rc), why);
        s->batches_failed++;
        ingest_metric_add(s->m_failed, device, 1);
        return rc;
    }
    s->batches_landed++;
    ingest_metric_add(s->m_landed, device, 1);
    ingest_metric_add(s->m_files, device, st.files);
    ingest_metric_add(s->m_bytes, device, st.bytes);
    ingest_metric_add(s->m_new, device, st.chunks_new);
    ingest_metric_add(s->m_known, device, st.chunks_known);
    ingest_metric_add(s->m_rewanted, device, st.chunks_rewanted);
    ingest_metric_add(s->m_wire, device, st.bytes_received);
    ingest_metric_add(s->m_written, device, st.bytes_written);
    ingest_metric_observe(s->m_latency, device, prog_now() - batch_t0);
    prog_log(INGEST_LOG_INFO,
             "device %s batch %s landed: %llu files, %llu bytes, %llu chunks new, %llu known, %llu re-asked, "
             "commit %.3fs",
             device, batch, (unsigned long long)st.files, (unsigned long long)st.bytes,
             (unsigned long long)st.chunks_new, (unsigned long long)st.chunks_known,
             (unsigned long long)st.chunks_rewanted, prog_now() - t0);
    return 0;
}

/*
 * A connection's committer thread (pipelined connections): makes the
 * prepared batch durable and sends its ACK while the connection's thread
 * receives the next batch.  One batch at a time: the connection's thread
 * waits for it to be idle before it hands over the next one (so ACKs go
 * out in batch order, each before the next RECEIVED) and before it sends
 * an ACK itself.
 */
typedef struct committer {
    server *s;
    sendside *lk;
    const char *device;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started, quit, busy;
    ingest_lander_batch *b;
    ingest_ctx *lctx;
    char batch[INGEST_WIRE_BATCH_ID_MAX + 1];
    double t0;
} committer;

static void *committer_main(void *arg)
{
    committer *cm = arg;
    server *s = cm->s;
    pthread_mutex_lock(&cm->mu);
    for (;;) {
        while (!cm->busy && !cm->quit)
            pthread_cond_wait(&cm->cv, &cm->mu);
        if (!cm->busy)
            break;
        pthread_mutex_unlock(&cm->mu);
        char why[INGEST_WIRE_MESSAGE_MAX];
        pthread_mutex_lock(&s->land_lock);
        const int rc = finish_batch(s, cm->b, cm->lctx, cm->device, cm->batch, cm->t0, why, sizeof(why));
        pthread_mutex_unlock(&s->land_lock);
        /* A lost connection loses only the ACK: the batch is durable, a resend is acked as a duplicate. */
        (void)send_ack(cm->lk, cm->batch, rc < 0 ? rc : INGEST_ACK_LANDED, rc < 0 ? why : "landed");
        pthread_mutex_lock(&s->land_lock);
        ingest_lander_batch_destroy(cm->b);
        pthread_mutex_unlock(&s->land_lock);
        pthread_mutex_lock(&cm->mu);
        cm->b = NULL;
        cm->busy = 0;
        pthread_cond_broadcast(&cm->cv);
    }
    pthread_mutex_unlock(&cm->mu);
    return NULL;
}

static void committer_wait_idle(committer *cm)
{
    if (!cm->started)
        return;
    pthread_mutex_lock(&cm->mu);
    while (cm->busy)
        pthread_cond_wait(&cm->cv, &cm->mu);
    pthread_mutex_unlock(&cm->mu);
}

/* Hand a prepared batch over (the committer is idle); 0, or -1 when its thread cannot start. */
static int committer_give(committer *cm, ingest_lander_batch *b, ingest_ctx *lctx, const char *batch, double t0)
{
    if (!cm->started) {
        pthread_mutex_init(&cm->mu, NULL);
        pthread_cond_init(&cm->cv, NULL);
        if (pthread_create(&cm->thread, NULL, committer_main, cm) != 0) {
            pthread_cond_destroy(&cm->cv);
            pthread_mutex_destroy(&cm->mu);
            return -1;
        }
        cm->started = 1;
    }
    pthread_mutex_lock(&cm->mu);
    cm->b = b;
    cm->lctx = lctx;
    snprintf(cm->batch, sizeof(cm->batch), "%s", batch);
    cm->t0 = t0;
    cm->busy = 1;
    pthread_cond_broadcast(&cm->cv);
    pthread_mutex_unlock(&cm->mu);
    return 0;
}

/* Let the batch in hand finish (its ACK is sent if the connection still stands), then end the thread. */
static void committer_stop(committer *cm)
{
    if (!cm->started)
        return;
    pthread_mutex_lock(&cm->mu);
    cm->quit = 1;
    pthread_cond_broadcast(&cm->cv);
    pthread_mutex_unlock(&cm->mu);
    pthread_join(cm->thread, NULL);
    pthread_cond_destroy(&cm->cv);
    pthread_mutex_destroy(&cm->mu);
    cm->started = 0;
}

/* ---- the dictionaries of a connection ------------------------------------- */

/*
 * A connection decodes with the dictionaries its own device offered on it,
 * and only those: each connection has its own codecs (the reader's and the
 * landers'), loaded by reference with bytes held by the store or by the
 * connection.  So two devices whose different dictionaries share an id
 * (ids are 31 bits) never decode each other's chunks, and no device can
 * replace a dictionary another one relies on.
 */
#define SESSION_DICTS_MAX 8

typedef struct conn_dicts {
    struct {
        uint32_t id;
        uint8_t hash[INGEST_DICT_HASH_BYTES];
    } d[SESSION_DICTS_MAX]; /* accepted on this session */
    unsigned n;
    uint8_t *own[SESSION_DICTS_MAX]; /* bytes received on this connection: the codecs refer to them */
    unsigned nown;
    int receiving;                   /* a DICT_WANT SEND was answered: DICT_DATA of offer comes */
    ingest_wire_dict_offer offer;
    uint8_t *buf;                    /* what came of it so far */
    uint32_t got;
} conn_dicts;

/* Load a dictionary (bytes outlive the codecs) into the reader's codec and the landers': 0, or a code with why. */
static int dict_load(readq *q, ingest_codec *const lc[2], ingest_ctx *ctx, const uint8_t *bytes, size_t len,
                     char *why, size_t cap)
{
    pthread_mutex_lock(&q->lock);
    while (q->decoding) /* the reader uses its codec without the lock */
        pthread_cond_wait(&q->cond, &q->lock);
    int rc = ingest_codec_add_dict_decode_ref(q->codec, bytes, len, NULL);
    if (rc < 0) /* read while the reader cannot write ctx: it is not decoding */
        snprintf(why, cap, "%s", ingest_ctx_errmsg(ctx));
    pthread_mutex_unlock(&q->lock);
    for (int i = 0; i < 2 && rc == 0; i++) /* landers decode only on the connection's thread: this one */
        if ((rc = ingest_codec_add_dict_decode_ref(lc[i], bytes, len, NULL)) < 0)
            snprintf(why, cap, "%s", "cannot load it for landing (out of memory?)");
    return rc;
}

static void dict_accept(conn_dicts *cd, uint32_t id, const uint8_t hash[INGEST_DICT_HASH_BYTES])
{
    cd->d[cd->n].id = id;
    memcpy(cd->d[cd->n].hash, hash, INGEST_DICT_HASH_BYTES);
    cd->n++;
}

/* Answer a DICT_OFFER (no batch is open, the committer is idle). */
static int dict_offer(server *s, conn_dicts *cd, readq *q, ingest_codec *const lc[2], ingest_ctx *ctx, sendside *lk,
                      const char *device, const ingest_wire_dict_offer *o)
{
    ingest_wire_msg a;
    memset(&a, 0, sizeof(a));
    a.type = INGEST_MSG_DICT_WANT;
    a.u.dict_want.dict_id = o->dict_id;
    a.u.dict_want.answer = INGEST_DICT_REFUSED;
    char *why = a.u.dict_want.message;
    const size_t whycap = sizeof(a.u.dict_want.message);
    char hex[2 * INGEST_DICT_HASH_BYTES + 1];
    ingest_to_hex(o->hash, INGEST_DICT_HASH_BYTES, hex);
    unsigned i = 0;
    while (i < cd->n && cd->d[i].id != o->dict_id)
        i++;
    if (i < cd->n) {
        if (memcmp(cd->d[i].hash, o->hash, INGEST_DICT_HASH_BYTES) == 0)
            a.u.dict_want.answer = INGEST_DICT_HAVE;
        else
            snprintf(why, whycap, "dictionary id %u already names another dictionary on this session",
                     (unsigned)o->dict_id);
    } else if (cd->n == SESSION_DICTS_MAX) {
        snprintf(why, whycap, "at most %d dictionaries per session", SESSION_DICTS_MAX);
    } else {
        const uint8_t *bytes = dictstore_find(s->dicts, o->hash, o->size);
        if (bytes == NULL) {
            a.u.dict_want.answer = INGEST_DICT_SEND;
            cd->receiving = 1;
            cd->offer = *o;
            cd->got = 0;
        } else if (ingest_dict_id(bytes, o->size) != o->dict_id) {
            snprintf(why, whycap, "the dictionary with this hash has id %u, not %u", ingest_dict_id(bytes, o->size),
                     (unsigned)o->dict_id);
        } else if (dict_load(q, lc, ctx, bytes, o->size, why, whycap) == 0) {
            dict_accept(cd, o->dict_id, o->hash);
            a.u.dict_want.answer = INGEST_DICT_HAVE;
        }
    }
    if (a.u.dict_want.answer == INGEST_DICT_HAVE) {
        ingest_metric_add(s->m_dicts, "held", 1);
        prog_log(INGEST_LOG_INFO, "device %s: dictionary %u (%.16s) offered: held already", device,
                 (unsigned)o->dict_id, hex);
    } else if (a.u.dict_want.answer == INGEST_DICT_SEND) {
        prog_log(INGEST_LOG_INFO, "device %s: dictionary %u (%.16s, %u bytes) offered: asking for it", device,
                 (unsigned)o->dict_id, hex, (unsigned)o->size);
    } else {
        ingest_metric_add(s->m_dicts, "refused", 1);
        prog_log(INGEST_LOG_WARN, "device %s: dictionary %u (%.16s) offered: refused: %s", device,
                 (unsigned)o->dict_id, hex, why);
    }
    return link_send(lk, &a);
}

/*
 * A DICT_DATA slice: 0 (more to come, or the dictionary is verified,
 * loaded and stored), or a code for an ERROR with why (nothing stored).
 */
static int dict_data(server *s, conn_dicts *cd, readq *q, ingest_codec *const lc[2], ingest_ctx *ctx, const char *device,
                     const ingest_wire_dict_data *d, char *why, size_t cap)
{
    const ingest_wire_dict_offer *o = &cd->offer;
    if (!cd->receiving || d->dict_id != o->dict_id || d->offset != cd->got || d->len > o->size - cd->got) {
        snprintf(why, cap, "DICT_DATA of dictionary %u, %zu bytes at offset %u, was not asked for", (unsigned)d->dict_id,
                 d->len, (unsigned)d->offset);
        return INGEST_EPROTO;
    }
    uint8_t *p = realloc(cd->buf, cd->got + d->len); /* grows with what came, never to a declared size */
    if (p == NULL) {
        snprintf(why, cap, "out of memory for dictionary %u", (unsigned)o->dict_id);
        return INGEST_ENOMEM;
    }
    cd->buf = p;
    memcpy(cd->buf + cd->got, d->data, d->len);
    cd->got += (uint32_t)d->len;
    if (cd->got < o->size)
        return 0;
    uint8_t *bytes = cd->buf;
    cd->buf = NULL;
    cd->got = 0;
    cd->receiving = 0;
    uint8_t h[INGEST_DICT_HASH_BYTES];
    ingest_dict_hash(bytes, o->size, h);
    if (ingest_dict_id(bytes, o->size) != o->dict_id) {
        snprintf(why, cap, "the dictionary sent has id %u, offered as %u", ingest_dict_id(bytes, o->size),
                 (unsigned)o->dict_id);
        free(bytes);
        return INGEST_EMISMATCH;
    }
    if (memcmp(h, o->hash, sizeof(h)) != 0) {
        snprintf(why, cap, "the bytes of dictionary %u do not have the offered hash", (unsigned)o->dict_id);
        free(bytes);
        return INGEST_EMISMATCH;
    }
    cd->own[cd->nown++] = bytes; /* from here the codecs may refer to them */
    char lwhy[512];
    if (dict_load(q, lc, ctx, bytes, o->size, lwhy, sizeof(lwhy)) != 0) {
        snprintf(why, cap, "dictionary %u is not usable: %s", (unsigned)o->dict_id, lwhy);
        return INGEST_ECORRUPT;
    }
    dict_accept(cd, o->dict_id, o->hash);
    ingest_metric_add(s->m_dicts, "received", 1);
    char hex[2 * INGEST_DICT_HASH_BYTES + 1];
    ingest_to_hex(o->hash, INGEST_DICT_HASH_BYTES, hex);
    if (dictstore_add(s->dicts, o->hash, bytes, o->size, lwhy, sizeof(lwhy)) == 0)
        prog_log(INGEST_LOG_INFO, "device %s: dictionary %u (%.16s, %u bytes) received and stored", device,
                 (unsigned)o->dict_id, hex, (unsigned)o->size);
    else
        prog_log(INGEST_LOG_WARN, "device %s: dictionary %u (%.16s) received, used on this session only: %s", device,
                 (unsigned)o->dict_id, hex, lwhy);
    return 0;
}

/* The open batch failed: count it, withdraw it from the reader and let it go. */
static void drop_failed_batch(server *s, readq *q, ingest_lander_batch **b, const char *device)
{
    s->batches_failed++;
    ingest_metric_add(s->m_failed, device, 1);
    readq_set_batch(q, NULL);
    pthread_mutex_lock(&s->land_lock);
    ingest_lander_batch_destroy(*b);
    pthread_mutex_unlock(&s->land_lock);
    *b = NULL;
}

static void serve(conn *c)
{
    server *s = c->srv;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_session *ss = NULL;
    authref *auth = NULL;
    /* Two landers, each with its own context, used in turn: while the
     * committer thread finishes a batch of one, the next batch lands on the
     * other (pipelined connections). */
    ingest_lander *landers[2] = { NULL, NULL };
    ingest_ctx *lctx[2] = { NULL, NULL };
    int k = 0;
    ingest_lander_batch *b = NULL;
    sendside lk = { NULL, c->fd, PTHREAD_MUTEX_INITIALIZER };
    committer cm;
    memset(&cm, 0, sizeof(cm));
    uint8_t *manifest = NULL;
    size_t mlen = 0, mcap = 0;
    u32vec wants = { 0 };
    char batch[INGEST_WIRE_BATCH_ID_MAX + 1] = "";
    char device[INGEST_DEVICE_ID_MAX + 1] = "";
    uint32_t parts = 0;
    readq q;
    memset(&q, 0, sizeof(q));
    pthread_mutex_init(&q.lock, NULL);
    pthread_cond_init(&q.cond, NULL);
    int reader_started = 0, reader_done = 0, counted = 0, claimed = 0, in_session = 0;
    double batch_t0 = 0;
    uint64_t gen = 0; /* of the open batch as published to the reader */
    pthread_t reader;
    qitem *it = NULL;
    /* The landers' decoders (one each: a lander's errors name the codec's detail from its own context):
     * this connection's dictionaries only. */
    ingest_codec *lcodec[2] = { NULL, NULL };
    conn_dicts cd;
    memset(&cd, 0, sizeof(cd));
    if (ctx == NULL)
        goto out;
    ingest_ctx_set_log(ctx, prog_lib_log, NULL, prog_log_level() >= INGEST_LOG_DEBUG ? INGEST_LOG_DEBUG : INGEST_LOG_WARN);
    auth = auth_get(s); /* kept while the session lives: it borrows the set */
    if (ingest_session_server_create(ctx, &s->key, auth->set, &ss) < 0 ||
        ingest_session_set_features(ss, INGEST_SESSION_FEATURE_PIPELINE | INGEST_SESSION_FEATURE_SHUFFLE2 |
                                            INGEST_SESSION_FEATURE_PACK | INGEST_SESSION_FEATURE_DICT) < 0)
        goto out;
    lk.ss = ss;
    int rc;
    if (authenticate(c, ss, ctx) != 0)
        goto out;
    snprintf(device, sizeof(device), "%s", ingest_session_peer_id(ss));
    if (session_claim(s) != 0) {
        char why[160];
        snprintf(why, sizeof(why), "receiver busy: all %u sessions (max_connections) are in use; try again later",
                 s->cfg->max_connections);
        ingest_metric_add(s->m_dropped, "busy", 1);
        prog_log_limited(&rl_busy, INGEST_LOG_WARN, "device %s from %s refused: %s", device, c->peer, why);
        send_error(&lk, INGEST_EBUSY, why);
        goto out;
    }
    in_session = 1;
    if (device_claim(s, device) != 0) {
        prog_log(INGEST_LOG_WARN, "device %s from %s: its previous connection is still being served after %d s; closing",
                 device, c->peer, DEVICE_WAIT_S);
        goto out;
    }
    claimed = 1;
    ingest_metric_add(s->m_conns, NULL, 1);
    counted = 1;
    const int pipelined = (ingest_session_features(ss) & INGEST_SESSION_FEATURE_PIPELINE) != 0;
    prog_log(INGEST_LOG_INFO, "device %s connected from %s (%s%s)", device, c->peer,
             ingest_session_cipher_name(ingest_session_cipher(ss)), pipelined ? ", pipelined" : "");
    cm.s = s;
    cm.lk = &lk;
    cm.device = device;
    for (int i = 0; i < 2; i++) {
        if ((lctx[i] = ingest_ctx_create(NULL)) == NULL)
            goto out;
        ingest_ctx_set_log(lctx[i], prog_lib_log, NULL,
                           prog_log_level() >= INGEST_LOG_DEBUG ? INGEST_LOG_DEBUG : INGEST_LOG_WARN);
        rc = ingest_codec_create(lctx[i], 1, &lcodec[i]);
        pthread_mutex_lock(&s->land_lock);
        if (rc == 0)
            rc = ingest_lander_create(lctx[i], s->st, s->idx, s->cfg->bronze, s->cfg->layout, s->dedup, lcodec[i],
                                      &landers[i]);
        if (rc == 0)
            rc = ingest_lander_set_direct_io(landers[i], s->cfg->direct_io);
        if (rc == 0)
            ingest_lander_set_catalog(landers[i], s->cat);
        pthread_mutex_unlock(&s->land_lock);
        if (rc < 0) {
            prog_log(INGEST_LOG_ERROR, "device %s: cannot start landing: %s", device, ingest_ctx_errmsg(lctx[i]));
            goto out;
        }
    }
    const int idle = (int)(s->cfg->idle_timeout_ms > 0x7fffffff ? 0x7fffffff : s->cfg->idle_timeout_ms);
    q.ss = ss;
    q.fd = c->fd;
    q.idle_ms = idle;
    q.key = s->dedup;
    q.stage = s->m_stage;
    q.ctx = ctx;
    q.pack = (ingest_session_features(ss) & INGEST_SESSION_FEATURE_PACK) != 0;
    if (q.pack && ((q.gbuf = malloc(INGEST_WIRE_GROUP_MAX_RAW)) == NULL ||
                   (q.gids = malloc((size_t)INGEST_WIRE_GROUP_MAX_CHUNKS * INGEST_ID_BYTES)) == NULL ||
                   (q.glens = malloc(INGEST_WIRE_GROUP_MAX_CHUNKS * sizeof(uint32_t))) == NULL)) {
        prog_log(INGEST_LOG_ERROR, "device %s: out of memory for its reader", device);
        goto out;
    }
    if (ingest_codec_create(ctx, 1, &q.codec) < 0 || pthread_create(&reader, NULL, reader_main, &q) != 0) {
        prog_log(INGEST_LOG_ERROR, "device %s: cannot start its reader: %s", device, ingest_ctx_errmsg(ctx));
        goto out;
    }
    reader_started = 1;
    for (;;) {
        free(it);
        it = readq_pop(&q);
        reader_done |= it->last;
        rc = it->rc;
        if (rc == INGEST_ETIMEDOUT) {
            prog_log(INGEST_LOG_INFO, "device %s idle for %d ms; closing", device, idle);
            break;
        }
        if (rc == INGEST_ECLOSED && b == NULL && mlen == 0) {
            prog_log(INGEST_LOG_INFO, "device %s disconnected", device);
            break;
        }
        if (rc < 0) {
            ingest_metric_add(s->m_errors, rc == INGEST_ECORRUPT || rc == INGEST_EPROTO ? "protocol" : "session", 1);
            prog_log(INGEST_LOG_WARN, "device %s: %s: %s%s", device, ingest_strerror(rc), it->why,
                     b ? "; batch abandoned" : "");
            if (rc == INGEST_ECORRUPT)
                send_error(&lk, rc, it->why);
            break;
        }
        const ingest_wire_msg m = it->m;
        switch (m.type) {
        case INGEST_MSG_PING: {
            ingest_wire_msg p = m;
            p.type = INGEST_MSG_PONG;
            rc = link_send(&lk, &p);
            break;
        }
        case INGEST_MSG_DICT_OFFER:
            if (!(ingest_session_features(ss) & INGEST_SESSION_FEATURE_DICT) || b != NULL || batch[0] != '\0' ||
                cd.receiving) {
                rc = INGEST_EPROTO;
                break;
            }
            committer_wait_idle(&cm); /* the last batch's ACK goes first */
            rc = dict_offer(s, &cd, &q, lcodec, ctx, &lk, device, &m.u.dict_offer);
            break;
        case INGEST_MSG_DICT_DATA: {
            char why[INGEST_WIRE_MESSAGE_MAX];
            if (!(ingest_session_features(ss) & INGEST_SESSION_FEATURE_DICT)) {
                rc = INGEST_EPROTO;
                break;
            }
            rc = dict_data(s, &cd, &q, lcodec, ctx, device, &m.u.dict_data, why, sizeof(why));
            if (rc < 0) {
                prog_log(INGEST_LOG_WARN, "device %s: %s: %s; nothing stored, closing", device, ingest_strerror(rc),
                         why);
                ingest_metric_add(s->m_errors, "protocol", 1);
                send_error(&lk, rc, why);
                goto out;
            }
            break;
        }
        case INGEST_MSG_BATCH_BEGIN:
            if (b != NULL || cd.receiving) {
                rc = INGEST_EPROTO;
                break;
            }
            snprintf(batch, sizeof(batch), "%s", m.u.begin.batch_id);
            mlen = 0;
            parts = 0;
            break;
        case INGEST_MSG_MANIFEST_PART:
            if (batch[0] == '\0' || b != NULL || m.u.manifest_part.len > MANIFEST_MAX - mlen) {
                rc = INGEST_EPROTO;
                break;
            }
            if (mlen + m.u.manifest_part.len > mcap) {
                size_t cap = mcap ? mcap : 1 << 16;
                while (cap < mlen + m.u.manifest_part.len)
                    cap *= 2;
                uint8_t *p = realloc(manifest, cap);
                if (p == NULL) {
                    rc = INGEST_ENOMEM;
                    break;
                }
                manifest = p;
                mcap = cap;
            }
            memcpy(manifest + mlen, m.u.manifest_part.data, m.u.manifest_part.len);
            mlen += m.u.manifest_part.len;
            parts++;
            break;
        case INGEST_MSG_MANIFEST_END: {
            if (batch[0] == '\0' || b != NULL || m.u.manifest_end.part_count != parts ||
                m.u.manifest_end.manifest_bytes != mlen) {
                rc = INGEST_EPROTO;
                break;
            }
            batch_t0 = prog_now();
            pthread_mutex_lock(&s->land_lock);
            rc = ingest_lander_begin(landers[k], device, manifest, mlen, &b);
            char why[INGEST_WIRE_MESSAGE_MAX];
            snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(lctx[k]));
            wants.n = 0;
            if (rc == 0) {
                const uint32_t *idx;
                size_t n;
                ingest_lander_wants(b, &idx, &n);
                if (u32vec_push(&wants, idx, n) != 0 || ingest_lander_advance(b) < 0 ||
                    collect_rewants(b, &wants) != 0) {
                    rc = INGEST_ENOMEM;
                    snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(lctx[k]));
                }
            }
            pthread_mutex_unlock(&s->land_lock);
            mlen = 0;
            if (rc == INGEST_LANDER_ALREADY) {
                prog_log(INGEST_LOG_INFO, "device %s batch %s was landed before; acknowledged again", device, batch);
                ingest_metric_add(s->m_landed, device, 1);
                committer_wait_idle(&cm); /* ACKs in batch order */
                rc = send_ack(&lk, batch, INGEST_ACK_DUPLICATE, "already landed");
                batch[0] = '\0';
                break;
            }
            if (rc < 0) {
                prog_log(INGEST_LOG_WARN, "device %s batch %s refused: %s: %s", device, batch, ingest_strerror(rc),
                         why);
                s->batches_failed++;
                ingest_metric_add(s->m_failed, device, 1);
                ingest_lander_batch_destroy(b);
                b = NULL;
                committer_wait_idle(&cm);
                rc = send_ack(&lk, batch, rc, why);
                batch[0] = '\0';
                break;
            }
            prog_log(INGEST_LOG_DEBUG, "device %s batch %s: %u chunks, %zu wanted", device, batch,
                     ingest_lander_batch_chunks(b), wants.n);
            gen = readq_set_batch(&q, b);
            rc = send_wants(&lk, batch, &wants);
            wants.n = 0; /* from here on: re-wants not sent yet (found while chunks arrive) */
            break;
        }
        case INGEST_MSG_CHUNK: {
            if (b == NULL) {
                rc = INGEST_EPROTO;
                break;
            }
            if (it->gen != gen) {
                /* read before this batch's WANT was sent: nobody asked for it */
                const char *why = "CHUNK sent before the WANT that asks for it";
                prog_log(INGEST_LOG_WARN, "device %s batch %s: chunk %u: %s; closing", device, batch,
                         m.u.chunk.index, why);
                ingest_metric_add(s->m_errors, "protocol", 1);
                send_error(&lk, INGEST_EPROTO, why);
                goto out;
            }
            const double tl = prog_now();
            pthread_mutex_lock(&s->land_lock);
            rc = it->verified ? ingest_lander_put_verified(b, m.u.chunk.index, it->data, it->len, it->enc_len, it->id)
                              : ingest_lander_put_chunk(b, m.u.chunk.index, it->data, it->enc_len);
            if (rc == 0)
                rc = collect_rewants(b, &wants) == 0 ? 0 : INGEST_ENOMEM;
            char why[INGEST_WIRE_MESSAGE_MAX];
            snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(lctx[k]));
            pthread_mutex_unlock(&s->land_lock);
            ingest_metric_add_seconds(s->m_stage, "land", prog_now() - tl);
            s->chunks_received++;
            s->bytes_received += it->enc_len;
            if (rc < 0) {
                prog_log(INGEST_LOG_WARN, "device %s batch %s failed: chunk %u: %s: %s", device, batch,
                         m.u.chunk.index, ingest_strerror(rc), why);
                ingest_metric_add(s->m_errors, "chunk", 1);
                drop_failed_batch(s, &q, &b, device);
                send_error(&lk, rc, why);
                goto out;
            }
            break;
        }
        case INGEST_MSG_CHUNK_GROUP: {
            /* only a group the reader could not check comes here (or one sent without the pack feature) */
            if (b == NULL || !q.pack) {
                rc = INGEST_EPROTO;
                break;
            }
            const char *why = it->gen != gen ? "CHUNK sent before the WANT that asks for it" : it->why;
            prog_log(INGEST_LOG_WARN, "device %s batch %s failed: chunk group at chunk %u: %s; closing", device,
                     batch, m.u.chunk.index, why);
            ingest_metric_add(s->m_errors, it->gen != gen ? "protocol" : "chunk", 1);
            drop_failed_batch(s, &q, &b, device);
            char msg[INGEST_WIRE_MESSAGE_MAX];
            snprintf(msg, sizeof(msg), "chunk group at chunk %u: %s", m.u.chunk.index, why);
            send_error(&lk, it->gen != gen ? INGEST_EPROTO : INGEST_ECORRUPT, msg);
            goto out;
        }
        case INGEST_MSG_BATCH_COMMIT: {
            if (b == NULL || strcmp(m.u.commit.batch_id, batch) != 0) {
                rc = INGEST_EPROTO;
                break;
            }
            const double t0 = prog_now();
            pthread_mutex_lock(&s->land_lock);
            /* wants holds the re-wants collected while chunks arrived: they were not sent yet */
            rc = ingest_lander_commit_prepare(b);
            if (rc == INGEST_EBUSY && collect_rewants(b, &wants) != 0)
                rc = INGEST_ENOMEM;
            char why[INGEST_WIRE_MESSAGE_MAX];
            snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(lctx[k]));
            ingest_metric_add_seconds(s->m_stage, "commit", prog_now() - t0); /* finish_batch counts its own */
            int finished = 0; /* finish_batch ran (and counted a failure itself) */
            if (rc == 0 && !pipelined) {
                rc = finish_batch(s, b, lctx[k], device, batch, batch_t0, why, sizeof(why));
                finished = 1;
            }
            pthread_mutex_unlock(&s->land_lock);
            if (rc == INGEST_EBUSY && wants.n > 0) {
                prog_log(INGEST_LOG_INFO, "device %s batch %s: %zu known chunks were stale; asking for them",
                         device, batch, wants.n);
                rc = send_wants(&lk, batch, &wants);
                wants.n = 0;
                break;
            }
            wants.n = 0;
            readq_set_batch(&q, NULL);
            if (rc == 0 && pipelined) {
                /* Everything is in: the committer makes it durable and acks it while the next batch comes. */
                committer_wait_idle(&cm);
                if (committer_give(&cm, b, lctx[k], batch, batch_t0) == 0) {
                    b = NULL;
                    k ^= 1;
                    rc = send_received(&lk, batch);
                    batch[0] = '\0';
                    break;
                }
                pthread_mutex_lock(&s->land_lock);
                rc = finish_batch(s, b, lctx[k], device, batch, batch_t0, why, sizeof(why));
                pthread_mutex_unlock(&s->land_lock);
                finished = 1;
            }
            if (rc < 0) {
                if (!finished) {
                    prog_log(INGEST_LOG_WARN, "device %s batch %s failed: %s: %s", device, batch,
                             ingest_strerror(rc), why);
                    s->batches_failed++;
                    ingest_metric_add(s->m_failed, device, 1);
                    ingest_metric_add(s->m_errors, "commit", 1);
                }
                committer_wait_idle(&cm);
                rc = send_ack(&lk, batch, rc, why);
            } else {
                committer_wait_idle(&cm);
                rc = send_ack(&lk, batch, INGEST_ACK_LANDED, "landed");
            }
            pthread_mutex_lock(&s->land_lock);
            ingest_lander_batch_destroy(b);
            pthread_mutex_unlock(&s->land_lock);
            b = NULL;
            batch[0] = '\0';
            break;
        }
        case INGEST_MSG_ERROR:
            prog_log(INGEST_LOG_WARN, "device %s reported: %s: %s", device, ingest_strerror(m.u.error.code),
                     prog_esc(m.u.error.message));
            goto out;
        default:
            rc = INGEST_EPROTO;
            break;
        }
        if (rc == INGEST_EPROTO) {
            ingest_metric_add(s->m_errors, "protocol", 1);
            prog_log(INGEST_LOG_WARN, "device %s: unexpected %s message; closing", device,
                     ingest_wire_type_name(m.type));
            send_error(&lk, rc, "unexpected message");
            break;
        }
        if (rc < 0) {
            prog_log(INGEST_LOG_WARN, "device %s: %s: %s", device, ingest_strerror(rc),
                     ingest_session_send_errmsg(ss));
            break;
        }
    }
out:
    committer_stop(&cm); /* its batch is made durable and acked first */
    if (counted)
        ingest_metric_add(s->m_conns, NULL, (uint64_t)-1);
    free(it);
    if (reader_started) {
        /* Stop the reader: no more frames are read once the socket is shut down. */
        pthread_mutex_lock(&q.lock);
        q.quit = 1;
        pthread_cond_broadcast(&q.cond);
        pthread_mutex_unlock(&q.lock);
        shutdown(c->fd, SHUT_RDWR);
        while (!reader_done) { /* drain until the reader's end marker */
            qitem *d = readq_pop(&q);
            reader_done = d->last;
            free(d);
        }
        pthread_join(reader, NULL);
    }
    readq_set_batch(&q, NULL);
    ingest_codec_destroy(q.codec);
    free(q.gbuf);
    free(q.gids);
    free(q.glens);
    pthread_cond_destroy(&q.cond);
    pthread_mutex_destroy(&q.lock);
    if (b != NULL) {
        pthread_mutex_lock(&s->land_lock);
        ingest_lander_batch_destroy(b);
        pthread_mutex_unlock(&s->land_lock);
    }
    for (int i = 0; i < 2; i++) {
        if (landers[i] != NULL) {
            pthread_mutex_lock(&s->land_lock);
            ingest_lander_destroy(landers[i]);
            pthread_mutex_unlock(&s->land_lock);
        }
        ingest_codec_destroy(lcodec[i]); /* after its lander; before its context and the dictionary bytes */
        ingest_ctx_destroy(lctx[i]);
    }
    for (unsigned i = 0; i < cd.nown; i++)
        free(cd.own[i]);
    free(cd.buf);
    free(manifest);
    free(wants.v);
    pthread_mutex_destroy(&lk.mu);
    ingest_session_destroy(ss);
    auth_put(s, auth);
    ingest_ctx_destroy(ctx);
    if (claimed)
        device_release(s, device);
    if (in_session)
        session_release(s);
}

static void *conn_thread(void *arg)
{
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

int main(int argc, char **argv)
{
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
    pthread_mutex_init(&s.land_lock, NULL);
    pthread_mutex_init(&s.auth_lock, NULL);
    pthread_mutex_init(&s.sess_lock, NULL);
    pthread_mutex_init(&s.conns_lock, NULL);
    pthread_cond_init(&s.sess_cond, NULL);
    pthread_mutex_init(&s.dev_lock, NULL);
    pthread_cond_init(&s.dev_cond, NULL);
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
    if (load_keys(&s) != 0)
        goto out;
    if ((s.active = calloc(s.cfg->max_connections ? s.cfg->max_connections : 1, sizeof(*s.active))) == NULL ||
        (s.adm = admit_create(s.cfg->handshake_max_pending, s.cfg->handshake_max_per_address)) == NULL)
        goto out;
    if (check_fd_limit(s.cfg) != 0)
        goto out;
    struct stat bst;
    if (stat(s.cfg->bronze, &bst) != 0 || !S_ISDIR(bst.st_mode)) {
        prog_log(INGEST_LOG_ERROR, "bronze %s: not a directory", s.cfg->bronze);
        goto out;
    }
    if (define_metrics(&s) != 0 || open_index(&s, rebuild) != 0 || (s.dicts = dictstore_open(s.cfg->state_dir)) == NULL)
        goto out;
    metrics_http *mh = NULL;
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
        metrics_http_stop(mh);
        goto out;
    }
    const int crashed = sweep_after_crash(&s);
    if (crashed < 0 || (crashed && catch_up_index(&s) != 0))
        goto out;
    s.cat = rcatalog_open(s.cfg->bronze);
    if (running_marker(&s, 1) != 0)
        goto out;
    char bound[300], err[512];
    lfd = prog_listen(s.cfg->listen, bound, sizeof(bound), err, sizeof(err));
    if (lfd < 0) {
        prog_log(INGEST_LOG_ERROR, "%s", err);
        goto out;
    }
    if (pipe(stop_pipe) != 0)
        goto out;
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
    prog_log(INGEST_LOG_INFO, "stopping: %llu batches landed, %llu failed", (unsigned long long)s.batches_landed,
             (unsigned long long)s.batches_failed);
    close(lfd);
    lfd = -1;
    admit_drop_all(s.adm); /* nothing to finish before a session */
    /* Let connections finish their current step; unacknowledged batches are simply re-sent. */
    for (int i = 0; i < 100 && s.nconn > 0; i++)
        usleep(20000);
    /* Then end the sessions still open (idle devices): their readers see the
     * end, a batch being made durable is finished and acked first. */
    pthread_mutex_lock(&s.conns_lock);
    for (conn *c = s.conns; c != NULL; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_unlock(&s.conns_lock);
    for (int i = 0; i < 500 && s.nconn > 0; i++)
        usleep(20000);
    /* A batch still landing would leave temporary files, an index not
     * flushed would miss entries: keep the marker (the next start sweeps
     * and catches up). */
    if (s.nconn == 0 && flush_index(&s, 1) == 0)
        running_marker(&s, 0);
    stats_logger_stop(slog);
    slog = NULL;
    metrics_http_stop(mh);
    status = ready_failed ? 1 : 0;
out:
    stats_logger_stop(slog);
    if (lfd >= 0)
        close(lfd);
    if (s.nconn == 0) {
        ingest_index_close(s.idx);
        ingest_store_close(s.st);
        rcatalog_close(s.cat);
        dictstore_close(s.dicts);
        ingest_metrics_destroy(s.metrics);
        auth_put(&s, s.auth);
        ingest_ctx_destroy(s.auth_ctx);
        ingest_receiver_config_free(s.cfg);
        ingest_secret_key_wipe(&s.key);
        free(s.active);
        admit_destroy(s.adm);
        ingest_ctx_destroy(s.ctx);
    }
    return status;
}
