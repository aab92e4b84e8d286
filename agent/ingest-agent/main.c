/*
 * ingest-agent: the edge program.  With --once it ships every regular file
 * under the configured sources to the core, waits for every batch's ack,
 * prints a one-line summary and exits: 0 when everything was acknowledged,
 * 1 otherwise (the reason is logged), 2 for a usage or configuration error.
 *
 * Per batch (docs/protocol.md): BATCH_BEGIN, the manifest, MANIFEST_END;
 * the receiver answers WANT; the wanted chunks are re-read, re-checked,
 * compressed and sent in manifest order; BATCH_COMMIT; then, while the
 * receiver makes the batch durable, the next batch is chunked and hashed,
 * and only then is the ACK read (the receiver may first ask again for
 * chunks it found stale).  Each batch is journaled SENT before its
 * manifest goes out and its record goes with its ACK, so a batch whose
 * ACK was lost is replayed under its id by the next run, before anything
 * else (daemon_replay: the daemon's shipping).
 */
#include "agent.h"
#include "../common/http.h"
#include "../common/notify.h"
#include "../common/statslog.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "signal handlers need lock-free atomics");
atomic_int stopping;
atomic_int reload_requested;
/* The socket of the connection to the core, or -1.  A stop gives the core STOP_GRACE_S to answer what it
 * was asked (an ACK of a batch it landed is recorded, its after_ship done), then shuts the socket down
 * (SIGALRM), so that a core that does not answer (the handshake, a WANT, an ACK) holds a stop up no
 * longer; the batch in flight stays journaled and is replayed at the next start.  A second stop signal
 * does not wait. */
static atomic_int core_fd = -1;

static void cut_core(void)
{
    const int fd = atomic_load(&core_fd);
    if (fd >= 0)
        (void)shutdown(fd, SHUT_RDWR);
}

/* The thread that set the handlers (main's): a signal caught on another thread is passed on to it, so
 * the handler never runs beside disconnect_core, which clears core_fd and closes it on that thread (the
 * descriptor could otherwise be reused by another thread before cut_core shuts it down). */
static pthread_t signal_thread;

static void on_signal(int sig)
{
    if (!pthread_equal(pthread_self(), signal_thread)) {
        const int saved = errno;
        (void)pthread_kill(signal_thread, sig); /* async-signal-safe (signal-safety(7)) */
        errno = saved;
        return;
    }
    if (sig == SIGHUP) {
        reload_requested = 1;
        return;
    }
    const int saved = errno;
    if (sig == SIGALRM || stopping)
        cut_core();
    else
        alarm(STOP_GRACE_S);
    if (sig != SIGALRM)
        stopping = 1;
    errno = saved;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ingest-agent --config FILE [--once [--all]] [--stats-interval SECONDS] [--check-config]\n"
               "       ingest-agent --help-config\n"
               "\n"
               "  --config FILE    the agent's YAML configuration (docs/config.md)\n"
               "  (no --once)      run as the edge daemon until SIGTERM/SIGINT; SIGHUP reloads FILE\n"
               "  --once           ship every file present under the sources, wait for the acks, exit\n"
               "  --all            ship files even when unchanged since their last acknowledged ship\n"
               "  --stats-interval SECONDS\n"
               "                   log the metrics as one JSON line (\"stats {...}\") this often, and at exit\n"
               "  --check-config   validate the configuration and exit (0 valid, 2 invalid)\n"
               "  --help-config    list every configuration key\n");
}

/* ---- state: the batch sequence survives restarts ---------------------- */

uint64_t load_seq(const char *state_dir)
{
    char p[4096], buf[64] = "";
    snprintf(p, sizeof(p), "%s/next_batch_seq", state_dir);
    FILE *f = fopen(p, "r");
    if (f == NULL)
        return 1;
    const int ok = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    char *end;
    const unsigned long long v = ok ? strtoull(buf, &end, 10) : 0;
    return v ? v : 1;
}

/*
 * Durable before a batch of that number is made: the file and the rename
 * (the directory fsynced too).  A power cut that brought back an older
 * number would give a new batch the id of one the core already landed,
 * and the core would acknowledge it as a duplicate without landing it.
 */
int save_seq(const char *state_dir, uint64_t seq)
{
    char p[4096], line[32];
    snprintf(p, sizeof(p), "%s/next_batch_seq", state_dir);
    snprintf(line, sizeof(line), "%llu\n", (unsigned long long)seq);
    return prog_write_file_durable(p, line);
}

/*
 * Batch ids are "{instance}-{seq}": the instance is 16 random hex digits
 * made when the state directory is new, so a device whose state was lost
 * never reuses the id of a batch the core already landed.
 */
static int make_instance(const char *state_dir, char *out, size_t cap);

static int load_instance(const char *state_dir, char *out, size_t cap)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s/instance", state_dir);
    FILE *f = fopen(p, "r");
    if (f != NULL) {
        char buf[64] = "";
        const int ok = fgets(buf, sizeof(buf), f) != NULL;
        fclose(f);
        buf[strcspn(buf, "\n")] = '\0';
        if (ok && strlen(buf) == 16 && strspn(buf, "0123456789abcdef") == 16 && cap > 16) {
            memcpy(out, buf, 17);
            return 0;
        }
        prog_log(INGEST_LOG_WARN, "%s is malformed; making a new instance id", p);
    }
    return make_instance(state_dir, out, cap);
}

/* A new random instance, durable in state_dir/instance before any batch id is made with it. */
static int make_instance(const char *state_dir, char *out, size_t cap)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s/instance", state_dir);
    unsigned char r[8];
    const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, r, sizeof(r)) != (ssize_t)sizeof(r)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    char hex[17];
    ingest_to_hex(r, sizeof(r), hex);
    char line[32];
    snprintf(line, sizeof(line), "%s\n", hex);
    if (prog_write_file_durable(p, line) != 0) /* before any batch id made with it */
        return -1;
    snprintf(out, cap, "%s", hex);
    return 0;
}

/*
 * The core answered a batch INGEST_EBATCHID (the edge counts them in
 * batches_id_taken): it landed that id before, with other data.  Batch
 * numbers went back (state_dir restored from an older copy, or an image
 * flashed again), and every batch numbered up to what the core saw would
 * collide.  Batch ids made from now on take a new instance.  made_with:
 * the prefix the answered batch's id was made with (NULL: the current
 * one); a batch of an earlier instance needs no new one.  0 nothing new
 * (or none needed), 1 a new instance, -1 none taken: a batch of the
 * current instance answered so less than a minute after it was taken (a
 * core that keeps answering so is not obeyed in a loop: the caller backs
 * off), or it could not be saved (logged).
 */
#define INSTANCE_RETAKE_S 60.0

int agent_take_instance(agent *a, const char *made_with)
{
    const uint64_t n = a->report.t.ship.batches_id_taken;
    if (n == a->state.id_taken_seen)
        return 0;
    a->state.id_taken_seen = n;
    if (made_with != NULL && strcmp(made_with, a->state.prefix) != 0)
        return 0; /* made under an earlier instance: this one is new already */
    const double now = prog_now();
    if (a->state.instance_at > 0 && now - a->state.instance_at < INSTANCE_RETAKE_S) {
        prog_log(INGEST_LOG_WARN, "the receiver answered a batch id of instance %s (taken %.0f s ago) as used before: "
                 "not taking another one yet", a->state.instance, now - a->state.instance_at);
        return -1;
    }
    char old[sizeof(a->state.instance)], fresh[sizeof(a->state.instance)];
    snprintf(old, sizeof(old), "%s", a->state.instance);
    if (make_instance(a->cfg->state_dir, fresh, sizeof(fresh)) != 0) {
        prog_log(INGEST_LOG_ERROR, "cannot make a new %s/instance: %s", a->cfg->state_dir, strerror(errno));
        return -1;
    }
    memcpy(a->state.instance, fresh, sizeof(fresh));
    snprintf(a->state.prefix, sizeof(a->state.prefix), "%s-", a->state.instance);
    a->state.instance_at = now;
    prog_log(INGEST_LOG_WARN, "the receiver landed batch ids of this device before with other data: state_dir is "
             "older than what the core holds (restored from a copy? or another device runs with this device's id, "
             "key and state, a cloned image: their files would land in one tree); batch ids are made with a new "
             "instance, %s (was %s)", a->state.instance, old);
    return 1;
}

/* ---- progress ------------------------------------------------------------ */

static void progress(agent *a, int final)
{
    if (!a->report.tty)
        return;
    const double now = prog_now();
    if (!final && now - a->report.last_progress < 0.25)
        return;
    a->report.last_progress = now;
    const double secs = now - a->report.t0 > 1e-9 ? now - a->report.t0 : 1e-9;
    fprintf(stdout, "\r\033[K%llu files  %.1f MB  %.1f MB/s  wire %.1f MB",
            (unsigned long long)a->report.t.ship.files, (double)a->report.t.ship.bytes / 1e6, (double)a->report.t.ship.bytes / 1e6 / secs,
            (double)(a->report.t.ship.wire_out + a->report.t.ship.wire_in) / 1e6);
    if (final)
        fputs("\r\033[K", stdout);
    fflush(stdout);
}

/* ---- throttle ------------------------------------------------------------ */

int throttle_setup(agent *a)
{
    ingest_throttle_destroy(a->thr.throttle);
    a->thr.throttle = NULL;
    if (a->cfg->throttle_rate == 0 && a->cfg->throttle_window[0] == '\0')
        return 0;
    if (ingest_throttle_create(a->ctx, a->cfg->throttle_rate, a->cfg->throttle_window, &a->thr.throttle) < 0) {
        prog_log(INGEST_LOG_ERROR, "%s", ingest_ctx_errmsg(a->ctx));
        return -1;
    }
    return 0;
}

static int minute_of_day(void)
{
    const time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm) == NULL)
        return 0;
    return tm.tm_hour * 60 + tm.tm_min;
}

int throttle_window_open(const agent *a, int *opens_in_min)
{
    const int s = a->cfg->throttle_window_start, e = a->cfg->throttle_window_end;
    if (s < 0 || e < 0)
        return 1;
    const int m = minute_of_day();
    const int inside = s < e ? (m >= s && m < e) : (m >= s || m < e);
    if (!inside && opens_in_min != NULL)
        *opens_in_min = (s - m + 1440) % 1440;
    return inside;
}

static int64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return ingest_time_ns(&t);
}

/* Sleep up to ms (at most 100 ms per call, so signals are seen), counting it as throttle wait. */
static void throttle_nap(agent *a, int64_t ms)
{
    if (ms > 100)
        ms = 100;
    const struct timespec ts = { 0, (long)ms * 1000000L };
    const int64_t t0 = mono_ns();
    nanosleep(&ts, NULL);
    a->thr.throttle_wait_ms += (uint64_t)((mono_ns() - t0) / 1000000);
    if (a->report.publish != NULL)
        a->report.publish(a);
}

static int throttle_interrupted(const agent *a)
{
    return stopping || (a->daemon && reload_requested);
}

int throttle_wait_window(agent *a)
{
    int logged = 0, in = 0;
    while (!throttle_window_open(a, &in)) {
        if (throttle_interrupted(a))
            return INGEST_ECLOSED;
        if (!logged) {
            prog_log(INGEST_LOG_INFO, "throttle.window %s is closed: waiting %d min for it to open",
                     a->cfg->throttle_window, in);
            disconnect_core(a); /* between batches: the core would time the idle connection out */
        }
        logged = 1;
        a->thr.window_closed = 1;
        throttle_nap(a, 100);
    }
    a->thr.window_closed = 0;
    return 0;
}

/*
 * Before a frame of n bytes: wait what the throttle says.  The daemon does
 * not wait for a window that closed mid-batch: the batch is parked
 * (INGEST_ECLOSED, it stays SENT) and replayed when the window opens.
 */
static int throttle_wait(agent *a, uint64_t n)
{
    if (a->thr.throttle == NULL)
        return 0;
    for (;;) {
        if (throttle_interrupted(a))
            return INGEST_ECLOSED;
        if (!throttle_window_open(a, NULL)) {
            a->thr.window_closed = 1;
            if (a->daemon) {
                prog_log(INGEST_LOG_INFO, "throttle.window %s closed during a batch: parking it",
                         a->cfg->throttle_window);
                return INGEST_ECLOSED;
            }
        } else {
            a->thr.window_closed = 0;
        }
        const int64_t ms = ingest_throttle_delay(a->thr.throttle, n, mono_ns(), minute_of_day());
        if (ms <= 0)
            return 0;
        throttle_nap(a, ms);
    }
}

/* ---- shipping: libingest's edge side (include/ingest/edge.h) ------------- */

/* The edge's hooks: the throttle, progress and metrics, what an ack records, SIGTERM. */
static int hook_before_send(void *ud, uint64_t bytes)
{
    return throttle_wait(ud, bytes);
}

static void hook_progress(void *ud)
{
    agent *a = ud;
    progress(a, 0);
    agent_metrics_sync(a);
    if (a->report.publish != NULL)
        a->report.publish(a);
}

static int hook_stopping(void *ud)
{
    (void)ud;
    return stopping != 0;
}

static void record_acked(agent *a, ingest_sender_batch *b);

static void hook_acked(void *ud, ingest_sender_batch *b, uint32_t sent, double t0)
{
    agent *a = ud;
    (void)sent;
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    if (a->report.nlat == a->report.caplat) {
        const size_t nc = a->report.caplat ? a->report.caplat * 2 : 64;
        latency_rec *nl = realloc(a->report.lat, nc * sizeof(*nl));
        if (nl != NULL) {
            a->report.lat = nl;
            a->report.caplat = nc;
        }
    }
    if (a->report.nlat < a->report.caplat && t0 > 0)
        a->report.lat[a->report.nlat++] = (latency_rec){ prog_now() - t0, bs.files };
    if (!a->daemon && t0 > 0)
        agent_metrics_latency(a, prog_now() - t0, bs.files);
    record_acked(a, b);
}

/*
 * The edge's fresh hook (batch.push_max): 1 when this device never shipped
 * the path (no file-table entry), so that a small file is pushed only the
 * first time; shipped again (touched, --all) it keeps its ids.
 */
static int path_fresh(void *ud, const char *path)
{
    agent *a = ud;
    ingest_file_state fs;
    pthread_mutex_lock(&a->state.store_lock);
    const int found = ingest_filetable_get(a->state.ft, path, &fs) == 0;
    pthread_mutex_unlock(&a->state.store_lock);
    return !found;
}

/* The edge, made on first use (chunks up to chunking.max). */
static int make_edge(agent *a)
{
    if (a->net.edge != NULL)
        return 0;
    const uint32_t max = a->cfg->chunking.max ? a->cfg->chunking.max : INGEST_CHUNK_MAX_DEFAULT;
    const ingest_edge_opts o = {
        .codec = a->codec,
        .chunk_cap = ingest_codec_bound(max),
        .encoders = (unsigned)a->cfg->compression_encoders,
        .push_max = (uint32_t)a->cfg->batch_push_max,
        .fresh = path_fresh,
        .dict = a->dict,
        .dict_len = a->dict_len,
        .dict_name = a->dict_name,
        .stats = &a->report.t.ship,
        .userdata = a,
        .before_send = hook_before_send,
        .on_progress = hook_progress,
        .on_acked = hook_acked,
        .stopping = hook_stopping,
        .log = prog_lib_log,
        .log_level = prog_log_level(),
        .test_pause_file = getenv("INGEST_TEST_SHIP_PAUSE"), /* tests only: tests/integration/test_daemon_withdraw.sh */
        /* tests only (tests/integration/test_kafka.sh): the warning of a silent core sooner than a minute */
        .quiet_warn_ms = getenv("INGEST_TEST_QUIET_WARN_MS") ? atoi(getenv("INGEST_TEST_QUIET_WARN_MS")) : 0,
    };
    if (ingest_edge_create(a->ctx, &o, &a->net.edge) < 0) {
        prog_log(INGEST_LOG_ERROR, "%s", ingest_ctx_errmsg(a->ctx));
        return -1;
    }
    return 0;
}

int send_manifest(agent *a, ingest_sender_batch *b)
{
    return ingest_edge_send_manifest(a->net.edge, b);
}

int finish_batch(agent *a, ingest_sender_batch *b)
{
    return ingest_edge_finish_batch(a->net.edge, b, a->batch_t0);
}

/* --once: the journal's seq of batch b (its id is "{prefix}{seq}"). */
static uint64_t batch_seq(const agent *a, const ingest_sender_batch *b)
{
    const char *id = ingest_sender_batch_id(b);
    const size_t pl = strlen(a->state.prefix);
    return strncmp(id, a->state.prefix, pl) == 0 ? strtoull(id + pl, NULL, 10) : 0;
}

/*
 * --once: journal b SENT (its files as built) before its manifest goes out,
 * as the daemon does, so that when its ACK is lost (the receiver made it
 * durable, then the connection or the receiver died) the next run replays
 * it under the same batch id (daemon_replay) and the core answers a
 * duplicate, instead of landing its files a second time in a new batch.
 * 0, or < 0 (logged: the batch is not sent).
 */
static int journal_sent(agent *a, ingest_sender_batch *b)
{
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    ingest_journal_file *f = calloc(bs.files ? bs.files : 1, sizeof(*f));
    if (f == NULL)
        return INGEST_ENOMEM;
    size_t n = 0;
    for (uint64_t i = 0; i < bs.files; i++) {
        ingest_sender_file_info info;
        if (ingest_sender_batch_file(b, i, &info) != 0)
            continue;
        f[n++] = (ingest_journal_file){ info.path, info.size, info.mtime_ns, info.ctime_ns, info.ino };
    }
    const uint64_t seq = batch_seq(a, b);
    pthread_mutex_lock(&a->state.store_lock);
    agent_refusals_record(a); /* the marks the builder queued go with this commit */
    const int rc = ingest_journal_add_sent(a->state.j, seq, ingest_sender_batch_id(b), f, n);
    pthread_mutex_unlock(&a->state.store_lock);
    free(f);
    if (rc < 0) {
        a->report.t.err_store++;
        prog_log(INGEST_LOG_ERROR, "journal: batch %s: %s", ingest_sender_batch_id(b), ingest_ctx_errmsg(a->ctx));
    }
    return rc;
}

/* --once: batch seq is not at the core (refused, abandoned, not landed): its record goes, its files are found again. */
static void journal_drop(agent *a, uint64_t seq)
{
    pthread_mutex_lock(&a->state.store_lock);
    const int rc = ingest_journal_remove(a->state.j, seq);
    pthread_mutex_unlock(&a->state.store_lock);
    if (rc < 0 && rc != INGEST_ENOTFOUND) {
        a->report.t.err_store++;
        prog_log(INGEST_LOG_WARN, "journal: %s (the batch is replayed by the next run)", ingest_ctx_errmsg(a->ctx));
    }
}

/* --once: is the batch of journal seq one the edge holds as pending? */
static bool edge_holds(const agent *a, uint64_t seq)
{
    for (unsigned i = 0; a->net.edge != NULL && i < INGEST_EDGE_PENDING_MAX; i++) {
        const ingest_sender_batch *p = ingest_edge_pending_at(a->net.edge, i);
        if (p != NULL && batch_seq(a, p) == seq)
            return true;
    }
    return false;
}

/*
 * --once: pend[] are the batches the edge held as pending (RECEIVED, their
 * ACKs to come; 0: none).  Once the edge holds one no more, its ACK came: a
 * landed one took its record with it (record_acked); a refusal or "not
 * landed" left it, and it goes now.  While the edge still holds it (the
 * link failed) it stays SENT, for the next run to replay.
 */
static void pending_settled(agent *a, uint64_t pend[INGEST_EDGE_PENDING_MAX])
{
    for (unsigned i = 0; i < INGEST_EDGE_PENDING_MAX; i++) {
        if (pend[i] == 0 || edge_holds(a, pend[i]))
            continue;
        journal_drop(a, pend[i]);
        pend[i] = 0;
    }
}

/*
 * After an ack: record every file of the batch in the file table (so an
 * unchanged file is not shipped again) and, over Kafka, its chunks in the
 * have-cache, and remove the batch's journal record, in one commit.  Over
 * TCP nothing reads the have-cache (the core's WANT is the authority), so
 * its writes, a random-key B-tree insert per chunk, are not made.
 */
static void record_acked(agent *a, ingest_sender_batch *b)
{
    if (a->daemon) {
        dmn_edge_acked(a, b); /* the daemon records acks in its journal (daemon_ship.c) */
        return;
    }
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    int rc = 0;
    const double t0 = prog_now();
    pthread_mutex_lock(&a->state.store_lock);
    for (uint64_t i = 0; i < bs.files && rc == 0; i++) {
        ingest_sender_file_info info;
        if (ingest_sender_batch_file(b, i, &info) != 0)
            continue;
        const ingest_file_state fs = { info.size, info.mtime_ns, info.ctime_ns, 0, 0 };
        rc = ingest_filetable_put(a->state.ft, info.path, &fs);
    }
    const uint64_t have = a->cfg->transport == INGEST_TRANSPORT_KAFKA ? bs.chunks : 0;
    for (uint64_t i = 0; i < have && rc == 0; i++) {
        uint8_t id[INGEST_ID_BYTES];
        uint32_t len;
        uint64_t off;
        if (ingest_sender_batch_chunk_info(b, i, id, &len, &off) == 0)
            rc = ingest_havecache_add(a->state.have, id);
    }
    if (rc == 0) {
        rc = ingest_journal_remove(a->state.j, batch_seq(a, b)); /* commits */
        if (rc == INGEST_ENOTFOUND)
            rc = ingest_store_commit(a->state.st);
    }
    if (rc < 0) {
        a->report.t.err_store++;
        prog_log(INGEST_LOG_WARN, "state store: %s (files of batch %s may be shipped again)", ingest_ctx_errmsg(a->ctx),
                 ingest_sender_batch_id(b));
    } else {
        a->refuse_uncommitted = 0; /* marks of files refused at the edge went with it */
    }
    pthread_mutex_unlock(&a->state.store_lock);
    a->report.t.record_s += prog_now() - t0;
}

int agent_is_claim_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *b = slash != NULL ? slash + 1 : path;
    const size_t n = sizeof(AGENT_CLAIM_PREFIX) - 1;
    if (strncmp(b, AGENT_CLAIM_PREFIX, n) != 0 || strlen(b + n) != 16)
        return 0;
    for (b += n; *b != '\0'; b++)
        if (!((*b >= '0' && *b <= '9') || (*b >= 'a' && *b <= 'f')))
            return 0;
    return 1;
}

/* The sender's want_file hook: pass over files unchanged since their ack, and files an after-ship action
 * holds under its claim name. */
static int want_file(void *ud, const char *path, const ingest_sender_stat *st)
{
    agent *a = ud;
    if (agent_is_claim_name(path))
        return 0;
    if (a->report.metrics != NULL) {
        char name[64];
        const char *slash = strchr(path, '/');
        const size_t n = slash != NULL ? (size_t)(slash - path) : strlen(path);
        snprintf(name, sizeof(name), "%.*s", (int)(n < sizeof(name) ? n : sizeof(name) - 1), path);
        ingest_metric_add(a->report.m.files_seen, name, 1);
    }
    if (a->filters != NULL) {
        for (size_t i = 0; i < a->cfg->sources_count; i++) {
            const ingest_source_config *c = &a->cfg->sources[i];
            const size_t nl = strlen(c->name);
            if (a->filters[i] == NULL || strncmp(path, c->name, nl) != 0 || path[nl] != '/')
                continue;
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            const int r = agent_filter_check(a->filters[i], c->path, path + nl + 1, st,
                                             ingest_time_ns(&now));
            if (r == INGEST_FILTER_TAKE)
                break;
            if (r > 0 && r < INGEST_FILTER_NREASONS) {
                a->skipped_filter[r]++;
                if (a->report.metrics != NULL)
                    ingest_metric_add(a->report.m.files_skipped, ingest_filter_reason_name(r), 1);
            }
            prog_log(INGEST_LOG_DEBUG, "skipped %s: filter %s", prog_esc(path), ingest_filter_reason_name(r));
            return 0;
        }
    }
    if (a->all)
        return 1;
    ingest_file_state fs;
    pthread_mutex_lock(&a->state.store_lock);
    const int found = ingest_filetable_get(a->state.ft, path, &fs) == 0;
    pthread_mutex_unlock(&a->state.store_lock);
    if (found && fs.size == st->size && fs.mtime_ns == st->mtime_ns && fs.ctime_ns == st->ctime_ns) {
        a->report.t.unchanged++;
        if (a->report.metrics != NULL)
            ingest_metric_add(a->report.m.files_unchanged, NULL, 1);
        return 0;
    }
    return 1;
}

static int cmp_latency(const void *x, const void *y)
{
    const double a = ((const latency_rec *)x)->s, b = ((const latency_rec *)y)->s;
    return a < b ? -1 : a > b;
}

/* The q-quantile (0..1) of the files' latencies (each file has its batch's), 0 without any. */
static double latency_quantile(agent *a, double q)
{
    uint64_t total = 0;
    for (size_t i = 0; i < a->report.nlat; i++)
        total += a->report.lat[i].files;
    if (total == 0)
        return 0.0;
    qsort(a->report.lat, a->report.nlat, sizeof(a->report.lat[0]), cmp_latency);
    const double want = q * (double)total;
    uint64_t seen = 0;
    for (size_t i = 0; i < a->report.nlat; i++) {
        seen += a->report.lat[i].files;
        if ((double)seen >= want)
            return a->report.lat[i].s;
    }
    return a->report.lat[a->report.nlat - 1].s;
}

/* The have-cache as the Kafka link sees it (docs/kafka.md): what the core is known to hold. */
static int kafka_have(void *ud, const uint8_t id[INGEST_ID_BYTES])
{
    agent *a = ud;
    pthread_mutex_lock(&a->state.store_lock);
    const int r = ingest_havecache_has(a->state.have, id);
    pthread_mutex_unlock(&a->state.store_lock);
    return r;
}

static void kafka_held(void *ud, const uint8_t id[INGEST_ID_BYTES])
{
    agent *a = ud;
    pthread_mutex_lock(&a->state.store_lock);
    if (ingest_havecache_add(a->state.have, id) < 0 || ingest_store_commit(a->state.st) < 0)
        a->report.t.err_store++;
    pthread_mutex_unlock(&a->state.store_lock);
}

static void kafka_unheld(void *ud, const uint8_t id[INGEST_ID_BYTES])
{
    agent *a = ud;
    pthread_mutex_lock(&a->state.store_lock);
    if (ingest_havecache_del(a->state.have, id) < 0 || ingest_store_commit(a->state.st) < 0)
        a->report.t.err_store++;
    pthread_mutex_unlock(&a->state.store_lock);
}

/* The counts of this run's Kafka clients: those closed before (a->kafka_was) and the current one's. */
static void kafka_stats_add(agent *a, ingest_kafka_edge_stats *to)
{
    *to = a->kafka_was;
    if (a->net.kafka == NULL)
        return;
    ingest_kafka_edge_stats ks;
    ingest_kafka_edge_stats_get(a->net.kafka, &ks);
    to->produced += ks.produced;
    to->delivered += ks.delivered;
    to->failed += ks.failed;
    to->replies += ks.replies;
    to->replies_bad += ks.replies_bad;
}

/* Close the Kafka client (its counts kept): the next connect makes a new one from the configuration. */
void agent_kafka_close(agent *a)
{
    if (a->net.kafka == NULL)
        return;
    kafka_stats_add(a, &a->kafka_was);
    ingest_kafka_edge_close(a->net.kafka); /* waits up to 5 s for records still queued */
    a->net.kafka = NULL;
}

/* transport: kafka: the producer (made once, again after it failed for good) and a link over it. */
static int connect_kafka(agent *a)
{
    char fatal[400];
    if (a->net.kafka != NULL && ingest_kafka_edge_failed(a->net.kafka, fatal, sizeof(fatal))) {
        /* an idempotent producer that failed for good refuses every record: a new client publishes again
         * (the batches not acknowledged are in the journal and go again) */
        prog_log(INGEST_LOG_WARN, "kafka: the producer failed for good (%s); starting a new one", fatal);
        agent_kafka_close(a);
    }
    if (a->net.kafka == NULL) {
        const ingest_kafka_edge_opts ko = {
            .kc = { .brokers = a->cfg->kafka_brokers, .topic = a->cfg->kafka_topic,
                    .reply_topic = a->cfg->kafka_reply_topic,
                    .props = (const char *const *)a->cfg->kafka_properties,
                    .nprops = a->cfg->kafka_properties_count },
            .device = a->cfg->device_id,
            .log = prog_lib_log,
            .log_level = prog_log_level(),
        };
        if (ingest_kafka_edge_open(a->ctx, &ko, &a->net.kafka) < 0) {
            prog_log(INGEST_LOG_ERROR, "cannot reach Kafka at %s: %s", a->cfg->kafka_brokers,
                     ingest_ctx_errmsg(a->ctx));
            a->report.t.err_connect++;
            return -1;
        }
    }
    ingest_krec_keys keys;
    if (ingest_krec_keys_device(&a->key, a->receiver_pub, &keys) < 0) {
        prog_log(INGEST_LOG_ERROR, "kafka: the device and receiver keys do not make record keys");
        return -1;
    }
    const ingest_klink_edge_opts lo = {
        .device = a->cfg->device_id,
        .keys = &keys,
        /* over Kafka the daemon ships one batch at a time from its journal; --once pipelines */
        .features = a->daemon ? 0u : INGEST_SESSION_FEATURE_PIPELINE,
        .have = kafka_have,
        .held = kafka_held,
        .unheld = kafka_unheld,
        .ud = a,
    };
    const int rc = ingest_kafka_edge_link(a->net.kafka, &lo, &a->net.link);
    ingest_krec_keys_wipe(&keys);
    if (rc < 0 || ingest_edge_attach(a->net.edge, a->net.link) < 0) {
        prog_log(INGEST_LOG_ERROR, "%s", ingest_ctx_errmsg(a->ctx));
        disconnect_core(a);
        return -1;
    }
    agent_landing_forget(a); /* no landing rules over Kafka: the core alone refuses */
    if (a->dict != NULL)
        (void)ingest_edge_offer_dict(a->net.edge); /* no dict feature over Kafka: says why, once */
    prog_log(INGEST_LOG_DEBUG, "shipping through Kafka at %s, topic %s", a->cfg->kafka_brokers, a->cfg->kafka_topic);
    return 0;
}

int connect_core(agent *a)
{
    char err[512];
    if (make_edge(a) != 0)
        return -1;
    if (a->cfg->transport == INGEST_TRANSPORT_KAFKA)
        return connect_kafka(a);
    /* both --once and the daemon pipeline batches across acks (docs/protocol.md) */
    unsigned features = INGEST_SESSION_FEATURE_SHUFFLE2 | INGEST_SESSION_FEATURE_PACK | INGEST_SESSION_FEATURE_REFUSE |
                        INGEST_SESSION_FEATURE_LANDING | INGEST_SESSION_FEATURE_WITHDRAW |
                        INGEST_SESSION_FEATURE_DELTA | INGEST_SESSION_FEATURE_PIPELINE |
                        (a->dict != NULL ? INGEST_SESSION_FEATURE_DICT : 0u) |
                        INGEST_SESSION_FEATURE_RUNS | (a->cfg->batch_push_max > 0 ? INGEST_SESSION_FEATURE_PUSH : 0u);
    int rc;
    for (;;) {
        a->net.fd = prog_connect(a->cfg->core_address, 10000, err, sizeof(err));
        if (a->net.fd < 0) {
            prog_log(INGEST_LOG_ERROR, "cannot reach the core: %s", err);
            a->report.t.err_connect++;
            return -1;
        }
        atomic_store(&core_fd, a->net.fd);
        if (stopping) /* (a stop that came before the store) */
            (void)shutdown(a->net.fd, SHUT_RDWR);
        ingest_session_destroy(a->net.ss);
        a->net.ss = NULL;
        if (ingest_session_client_create(a->ctx, a->cfg->device_id, &a->key, a->receiver_pub, &a->net.ss) < 0 ||
            ingest_session_set_features(a->net.ss, features) < 0) {
            disconnect_core(a);
            return -1;
        }
        rc = ingest_session_handshake_fd(a->net.ss, a->net.fd, HANDSHAKE_TIMEOUT_MS);
        if (rc != INGEST_EVERSION || (features & ~INGEST_SESSION_FEATURES_V1) == 0)
            break;
        /* A receiver of protocol version 1 (it takes no feature past the first byte): again without those. */
        prog_log(INGEST_LOG_INFO, "the receiver at %s speaks protocol version 1: connecting again without pushed "
                 "chunks and index runs (%s)", a->cfg->core_address, ingest_ctx_errmsg(a->ctx));
        disconnect_core(a);
        features &= INGEST_SESSION_FEATURES_V1;
    }
    if (rc < 0 && stopping) {
        prog_log(INGEST_LOG_INFO, "stopping: the handshake with %s was cut", a->cfg->core_address);
        disconnect_core(a);
        return -1;
    }
    if (rc < 0) {
        prog_log(INGEST_LOG_ERROR, "handshake with %s failed: %s: %s", a->cfg->core_address, ingest_strerror(rc),
                 ingest_ctx_errmsg(a->ctx));
        a->report.t.err_connect++;
        disconnect_core(a);
        return -1;
    }
    if (ingest_link_tcp_create(a->ctx, a->net.ss, a->net.fd, a->cfg->core_address, &a->net.link) < 0 ||
        ingest_edge_attach(a->net.edge, a->net.link) < 0) {
        prog_log(INGEST_LOG_ERROR, "%s", ingest_ctx_errmsg(a->ctx));
        disconnect_core(a);
        return -1;
    }
    ingest_wire_landing lr;
    if ((rc = ingest_edge_landing_rules(a->net.edge, &lr)) < 0) {
        a->report.t.err_session++;
        disconnect_core(a);
        return -1;
    }
    if (rc == 1)
        agent_landing_learned(a, &lr);
    else
        agent_landing_forget(a); /* a receiver without the feature: the core alone refuses */
    if ((rc = ingest_edge_offer_dict(a->net.edge)) != 0) {
        a->report.t.err_session++;
        disconnect_core(a);
        return -1;
    }
    prog_log(INGEST_LOG_DEBUG, "connected to %s (%s%s)", a->cfg->core_address, a->net.link->detail,
             (a->net.link->features & INGEST_SESSION_FEATURE_PIPELINE) ? ", pipelined" : "");
    return 0;
}

void disconnect_core(agent *a)
{
    atomic_store(&core_fd, -1);
    if (a->net.edge != NULL)
        ingest_edge_detach(a->net.edge);
    ingest_kafka_edge_unlink(a->net.kafka);
    ingest_link_destroy(a->net.link);
    a->net.link = NULL;
    if (a->net.fd >= 0)
        close(a->net.fd);
    a->net.fd = -1;
}

/*
 * One pass over every source.  Returns 0 when every batch was acked, 1
 * when some batch was abandoned because a file changed (run another pass),
 * < 0 on failure.
 */
/*
 * The builder thread: walks the sources and builds (chunks and hashes) the
 * next batch while the main thread ships the current one, one batch ahead
 * at most.  It owns the sender; the main thread only uses the batches it
 * hands over (their chunks are encoded with the agent's codec, which the
 * builder never touches).
 */
typedef struct builder {
    agent *a;
    ingest_sender *snd;
    ingest_ctx *ctx; /* snd's context */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    ingest_sender_batch *slot; /* the batch handed over, or NULL */
    int done;                  /* the walk ended: 0 fine, < 0 failed */
    double slot_t0;            /* when the batch in slot began to be built */
    int rc;
    int quit;                  /* set by the main thread: stop building */
} builder;

static void *builder_main(void *arg)
{
    (void)pthread_setname_np(pthread_self(), "ingest-build"); /* docs/architecture.md "Threads" */
    builder *bl = arg;
    for (;;) {
        ingest_sender_batch *b = NULL;
        const double t0 = prog_now();
        int rc = ingest_sender_next_batch(bl->snd, &b);
        if (rc == 1 && save_seq(bl->a->cfg->state_dir, ingest_sender_next_seq(bl->snd)) != 0) {
            /* never send a batch whose number a later run could give again (the core would take that
             * batch for this one, already landed, and acknowledge it without landing it) */
            prog_log(INGEST_LOG_ERROR, "cannot save the batch sequence in %s: %s; stopping before its batch",
                     bl->a->cfg->state_dir, strerror(errno));
            rc = INGEST_EIO;
        }
        pthread_mutex_lock(&bl->lock);
        while (bl->slot != NULL && !bl->quit)
            pthread_cond_wait(&bl->cond, &bl->lock);
        if (bl->quit || rc != 1) {
            if (rc < 0 && rc != INGEST_EIO)
                prog_log(INGEST_LOG_ERROR, "scan: %s", ingest_ctx_errmsg(bl->ctx));
            bl->done = 1;
            bl->rc = rc < 0 ? rc : 0;
            pthread_cond_broadcast(&bl->cond);
            pthread_mutex_unlock(&bl->lock);
            ingest_sender_batch_destroy(b);
            return NULL;
        }
        bl->slot = b;
        bl->slot_t0 = t0;
        pthread_cond_broadcast(&bl->cond);
        pthread_mutex_unlock(&bl->lock);
    }
}

/* The next built batch (1), or the end of the walk (0), or its failure (< 0). */
static int builder_take(builder *bl, ingest_sender_batch **out)
{
    pthread_mutex_lock(&bl->lock);
    while (bl->slot == NULL && !bl->done)
        pthread_cond_wait(&bl->cond, &bl->lock);
    *out = bl->slot;
    bl->a->batch_t0 = bl->slot_t0;
    bl->slot = NULL;
    const int rc = *out != NULL ? 1 : bl->rc;
    pthread_cond_broadcast(&bl->cond);
    pthread_mutex_unlock(&bl->lock);
    return rc;
}

static void builder_stop(builder *bl)
{
    pthread_mutex_lock(&bl->lock);
    bl->quit = 1;
    pthread_cond_broadcast(&bl->cond);
    pthread_mutex_unlock(&bl->lock);
    pthread_join(bl->thread, NULL);
    ingest_sender_batch_destroy(bl->slot);
    bl->slot = NULL;
}

/*
 * One pass over every source.  Returns 0 when every batch was acked, 1
 * when some batch was abandoned because a file changed (run another pass),
 * < 0 on failure.
 */
static int ship_pass(agent *a, ingest_sender_opts *o)
{
    builder bl;
    memset(&bl, 0, sizeof(bl));
    bl.a = a;
    o->batch_seq = a->state.seq;
    if (a->landing_known && a->net.link == NULL && a->cfg->transport != INGEST_TRANSPORT_KAFKA &&
        connect_core(a) != 0)
        /* Rules kept from an earlier run are used only once the receiver confirmed them on this
         * connection (they may have changed): connect first; unreachable, the core refuses alone. */
        a->landing_known = 0;
    /* The sender's own context: the builder thread's errors (and those of reading its batches at send
     * time, encoder 0's) never mix with the shipping thread's (a->ctx). */
    if ((bl.ctx = ingest_ctx_create(NULL)) == NULL)
        return INGEST_ENOMEM;
    ingest_ctx_set_log(bl.ctx, prog_lib_log, NULL,
                       a->cfg->log_level >= INGEST_LOG_DEBUG ? INGEST_LOG_DEBUG : INGEST_LOG_WARN);
    int rc = ingest_sender_create(bl.ctx, o, &bl.snd);
    if (rc < 0) {
        prog_log(INGEST_LOG_ERROR, "%s", ingest_ctx_errmsg(bl.ctx));
        ingest_ctx_destroy(bl.ctx);
        return rc;
    }
    (void)agent_landing_apply(a, bl.snd, bl.ctx);
    if ((rc = ingest_sender_scan(bl.snd)) < 0) {
        ingest_sender_destroy(bl.snd);
        ingest_ctx_destroy(bl.ctx);
        return rc;
    }
    a->landing_snd = bl.snd; /* rules learned on connecting apply to the batches built after */
    a->landing_ctx = bl.ctx;
    pthread_mutex_init(&bl.lock, NULL);
    pthread_cond_init(&bl.cond, NULL);
    if (pthread_create(&bl.thread, NULL, builder_main, &bl) != 0) {
        a->landing_snd = NULL;
        a->landing_ctx = NULL;
        ingest_sender_destroy(bl.snd);
        ingest_ctx_destroy(bl.ctx);
        return INGEST_ENOMEM;
    }
    int again = 0, failed = 0;
    uint64_t pend[INGEST_EDGE_PENDING_MAX] = { 0 }; /* batches received and waiting for their ACKs (pending_settled) */
    const uint64_t failed_before = a->report.t.ship.batches_failed;
    const uint64_t abandoned_before = a->report.t.ship.batches_abandoned;
    const uint64_t taken_before = a->report.t.ship.batches_id_taken;
    for (;;) {
        if (a->report.t.ship.batches_id_taken > taken_before) {
            /* the core landed one of this pass's batch ids before: the ones after it were numbered on from
             * the same point and would collide too.  The pass ends; the next one numbers from a new instance */
            rc = 0;
            break;
        }
        ingest_sender_batch *b = NULL;
        const double t0 = prog_now();
        const int took = builder_take(&bl, &b);
        a->report.t.wait_build_s += prog_now() - t0;
        if (took <= 0) {
            rc = took;
            break;
        }
        if (stopping || throttle_wait_window(a) != 0 || (a->net.link == NULL && connect_core(a) != 0)) {
            rc = INGEST_ECLOSED;
            ingest_sender_batch_destroy(b);
            break;
        }
        a->report.t.batches++;
        {
            ingest_sender_batch_stats bs;
            ingest_sender_batch_stats_get(b, &bs);
            a->report.t.bytes_read += bs.bytes;
        }
        const uint64_t seq = batch_seq(a, b);
        if ((rc = journal_sent(a, b)) < 0) {
            ingest_sender_batch_destroy(b);
            break;
        }
        rc = send_manifest(a, b);
        if (rc == 0)
            rc = finish_batch(a, b);
        if (rc < 0)
            a->report.t.err_session++;
        agent_metrics_sync(a);
        pending_settled(a, pend);
        if (rc == 3) {
            rc = 0; /* received; its ACK comes while the next batches ship */
            for (unsigned i = 0; i < INGEST_EDGE_PENDING_MAX; i++)
                if (pend[i] == 0) { /* the edge holds at most as many: one is free */
                    pend[i] = seq;
                    break;
                }
            continue;
        }
        ingest_sender_batch_destroy(b);
        if (rc == 1 || rc == 2) /* abandoned or refused: not at the core (a failed link leaves it SENT) */
            journal_drop(a, seq);
        if (rc == 1) {
            again = 1;
            /* batches received before this one may still wait for their ACKs: leaving the connection drops
             * them from the edge, not from the journal (SENT): the next pass replays them under their ids */
            for (unsigned i = 0; a->net.edge != NULL && i < INGEST_EDGE_PENDING_MAX; i++) {
                const ingest_sender_batch *p = ingest_edge_pending_at(a->net.edge, i);
                if (p != NULL)
                    prog_log(INGEST_LOG_INFO, "batch %s was received but not acknowledged; it stays journaled and "
                             "is replayed before the next pass", ingest_sender_batch_id(p));
            }
            memset(pend, 0, sizeof(pend));
            disconnect_core(a);
            rc = 0;
        } else if (rc == 2) {
            failed = 1;
            rc = 0;
        } else if (rc < 0) {
            break;
        }
    }
    if (rc >= 0 && a->net.edge != NULL && ingest_edge_pending(a->net.edge) != NULL &&
        (rc = ingest_edge_wait_pending(a->net.edge)) < 0)
        a->report.t.err_session++;
    pending_settled(a, pend);
    if (a->net.edge != NULL && ingest_edge_pending(a->net.edge) != NULL) {
        for (unsigned i = 0; i < INGEST_EDGE_PENDING_MAX; i++) {
            const ingest_sender_batch *p = ingest_edge_pending_at(a->net.edge, i);
            if (p != NULL)
                prog_log(INGEST_LOG_WARN,
                         "batch %s was received but not acknowledged; it stays journaled: the next run replays it "
                         "under its id",
                         ingest_sender_batch_id(p));
        }
        disconnect_core(a); /* drops them */
    }
    if (a->report.t.ship.batches_failed > failed_before) /* refused, pipelined ones included */
        failed = 1;
    if (a->report.t.ship.batches_abandoned > abandoned_before) /* to ship again: a file changed, or chunks needed */
        again = 1;
    builder_stop(&bl);
    pthread_cond_destroy(&bl.cond);
    pthread_mutex_destroy(&bl.lock);
    ingest_sender_stats ss;
    ingest_sender_get_stats(bl.snd, &ss);
    agent_walk_special(a, &ss);
    if (ss.dropped_changed > 0)
        again = 1;
    a->state.seq = ingest_sender_next_seq(bl.snd);
    save_seq(a->cfg->state_dir, a->state.seq);
    a->landing_snd = NULL;
    a->landing_ctx = NULL;
    ingest_sender_destroy(bl.snd); /* every batch of it went before (acked, or dropped with the link) */
    ingest_ctx_destroy(bl.ctx);
    pthread_mutex_lock(&a->state.store_lock);
    agent_refusals_record(a); /* the builder stopped: what it queued last */
    if (a->refuse_uncommitted && ingest_store_commit(a->state.st) < 0) /* marks of files refused at the edge */
        prog_log(INGEST_LOG_WARN, "state store: %s (the files refused at the edge are tried again next time)",
                 ingest_ctx_errmsg(a->ctx));
    a->refuse_uncommitted = 0;
    pthread_mutex_unlock(&a->state.store_lock);
    const int taken = agent_take_instance(a, NULL); /* (this pass's batches were made with the current one) */
    if (rc < 0)
        return rc;
    if (taken < 0)
        failed = 1;
    else if (taken > 0)
        again = 1;
    if (failed)
        return -2;
    return again;
}

void say_too_deep(int level, const char *dir)
{
    prog_log(level, "%s: directory more than %d levels below its source: neither walked nor watched, nothing under "
             "it is shipped", prog_esc(dir), INGEST_SENDER_MAX_DEPTH);
}

void on_skip(void *ud, const char *path, int reason)
{
    agent *a = ud;
    if (reason == INGEST_SKIP_DIR)
        a->dirs_not_walked++; /* (--once: not everything was shipped) */
    static const char *const why[] = { "", "unreadable", "not a regular file", "vanished", "bad name",
                                       "directory could not be opened or read", "changed while chunked", "too many chunks",
                                       "directory too deep", "symlink target cannot be shipped" };
    if (reason == INGEST_SKIP_DEPTH) {
        say_too_deep(INGEST_LOG_WARN, path);
        return;
    }
    if (reason == INGEST_SKIP_REFUSED)
        return; /* on_refuse said it, with the rule */
    prog_log(reason == INGEST_SKIP_SPECIAL ? INGEST_LOG_DEBUG : INGEST_LOG_WARN, "skipped %s: %s", prog_esc(path),
             reason >= 1 && reason <= INGEST_SKIP_LINK ? why[reason] : "?");
}

int load_state(agent *a)
{
    if (ingest_secret_key_load(a->ctx, a->cfg->device_key, &a->key) < 0 ||
        ingest_public_key_load(a->ctx, a->cfg->core_receiver_key, a->receiver_pub) < 0 ||
        ingest_dedup_key_load(a->ctx, a->cfg->dedup_key, a->dedup) < 0) {
        prog_log(INGEST_LOG_ERROR, "%s", ingest_ctx_errmsg(a->ctx));
        return -1;
    }
    if (ingest_codec_create(a->ctx, a->cfg->compression_level, &a->codec) < 0) {
        prog_log(INGEST_LOG_ERROR, "%s", ingest_ctx_errmsg(a->ctx));
        return -1;
    }
    if (a->cfg->compression_dictionary[0] && strcmp(a->cfg->compression_dictionary, "auto") != 0) {
        /* Kept: it is offered to the receiver on each connection (connect_core). */
        const char *path = a->cfg->compression_dictionary;
        uint8_t *d = NULL;
        size_t n = 0;
        const char *why = agent_dict_read(path, &d, &n) != 0 ? strerror(errno)
                          : n > INGEST_DICT_MAX_BYTES            ? "larger than 4 MiB"
                          : n == 0                               ? "empty or unreadable"
                                                                 : NULL;
        if (why != NULL)
            free(d);
        else if (agent_dict_use(a, d, n, path) != 0) /* (d freed) */
            why = ingest_ctx_errmsg(a->ctx);
        if (why != NULL) {
            prog_log(INGEST_LOG_ERROR, "compression.dictionary %s: %s", path, why);
            return -1;
        }
    }
    if (mkdir(a->cfg->state_dir, 0700) != 0 && errno != EEXIST) {
        prog_log(INGEST_LOG_ERROR, "state_dir %s: %s", a->cfg->state_dir, strerror(errno));
        return -1;
    }
    /* one agent per state_dir: two (the daemon and a --once, say) would hand out the same batch numbers for
     * different data and replay each other's batches; the lock goes with the process */
    const int lfd = prog_lock_state_dir(a->cfg->state_dir, "ingest-agent (a daemon or another --once): one agent "
                                                            "per state_dir");
    if (lfd < 0)
        return -1;
    a->state.lockfd = lfd;
    ingest_store_opts so = { 0 };
    so.map_size = 1ull << 30;
    if (ingest_store_open(a->ctx, a->cfg->state_dir, &so, &a->state.st) < 0 ||
        ingest_havecache_open(a->state.st, a->cfg->havecache_max_entries, &a->state.have) < 0 ||
        ingest_filetable_open(a->state.st, &a->state.ft) < 0 ||
        ingest_journal_open(a->state.st, a->state.ft, &a->state.j) < 0) {
        prog_log(INGEST_LOG_ERROR, "state store in %s: %s", a->cfg->state_dir, ingest_ctx_errmsg(a->ctx));
        return -1;
    }
    {
        /* a run killed before it made all it wrote in state_dir durable (a spool directory, a name whose
         * directory it had not fsynced yet): durable now, before this run relies on finding it again */
        const int sfd = open(a->cfg->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (sfd < 0 || syncfs(sfd) != 0)
            prog_log(INGEST_LOG_WARN, "state_dir %s: syncfs: %s", a->cfg->state_dir, strerror(errno));
        if (sfd >= 0)
            close(sfd);
    }
    a->state.seq = load_seq(a->cfg->state_dir);
    /* batch ids stay unique: continue after the last journaled batch */
    uint64_t last = 0, s = 0;
    while (ingest_journal_next(a->state.j, s, &s) == 1)
        last = s;
    if (a->state.seq <= last)
        a->state.seq = last + 1;
    if (load_instance(a->cfg->state_dir, a->state.instance, sizeof(a->state.instance)) != 0) {
        prog_log(INGEST_LOG_ERROR, "cannot make %s/instance: %s", a->cfg->state_dir, strerror(errno));
        return -1;
    }
    snprintf(a->state.prefix, sizeof(a->state.prefix), "%s-", a->state.instance);
    agent_landing_load(a);
    a->dict_auto = strcmp(a->cfg->compression_dictionary, "auto") == 0;
    if (a->dict_auto && agent_dict_auto(a) < 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    prog_malloc_tune(); /* before any large allocation */
    prog_sigbus_guard("ingest-agent: SIGBUS: a state file mapped in memory is shorter than its pages (state_dir's "
                      "data.mdb cut short by a full disk or a bad copy?): the file table and the batch journal in it "
                      "are damaged; restore state_dir or start with an empty one (files are then shipped again, "
                      "their chunks known to the core)",
                      NULL);
    const char *config = NULL;
    int once = 0, check = 0, all = 0;
    double stats_interval = 0;
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' }, { "once", no_argument, NULL, 'o' },
        { "check-config", no_argument, NULL, 'k' }, { "help", no_argument, NULL, 'h' },
        { "help-config", no_argument, NULL, 'H' },  { "version", no_argument, NULL, 'V' },
        { "all", no_argument, NULL, 'a' },          { "stats-interval", required_argument, NULL, 's' },
        { NULL, 0, NULL, 0 },
    };
    int o;
    while ((o = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        switch (o) {
        case 'c': config = optarg; break;
        case 'o': once = 1; break;
        case 'a': all = 1; break;
        case 's':
            if ((stats_interval = stats_interval_parse(optarg)) < 0) {
                fprintf(stderr, "ingest-agent: --stats-interval %s: expected seconds, more than 0 and at most 86400\n",
                        optarg);
                return 2;
            }
            break;
        case 'k': check = 1; break;
        case 'h': usage(stdout); return 0;
        case 'H': prog_print_config_keys(INGEST_CONFIG_AGENT, "ingest-agent"); return 0;
        case 'V': printf("ingest-agent %s\n", ingest_version_string()); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (config == NULL || optind != argc) {
        usage(stderr);
        return 2;
    }
    if (all && !once && !check) {
        fprintf(stderr, "ingest-agent: --all goes with --once (a daemon ships what changed; touch files to ship "
                        "them again)\n");
        return 2;
    }
    prog_log_init("ingest-agent", INGEST_LOG_INFO);
    agent a;
    memset(&a, 0, sizeof(a));
    a.net.fd = -1;
    a.all = all;
    pthread_mutex_init(&a.state.store_lock, NULL);
    a.ctx = ingest_ctx_create(NULL);
    if (a.ctx == NULL)
        return 1;
    if (ingest_agent_config_load(a.ctx, config, &a.cfg) < 0) {
        fprintf(stderr, "ingest-agent: %s\n", ingest_ctx_errmsg(a.ctx));
        ingest_ctx_destroy(a.ctx);
        return 2;
    }
    if (check) {
        printf("%s: ok\n", config);
        ingest_agent_config_free(a.cfg);
        ingest_ctx_destroy(a.ctx);
        return 0;
    }
    prog_log_set_level(a.cfg->log_level);
    ingest_ctx_set_log(a.ctx, prog_lib_log, NULL, a.cfg->log_level >= INGEST_LOG_DEBUG ? INGEST_LOG_DEBUG : INGEST_LOG_WARN);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    signal_thread = pthread_self();
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (!once)
        sigaction(SIGHUP, &sa, NULL);
    sa.sa_flags = SA_RESTART; /* (it only cuts the core's socket: no call need see it) */
    sigaction(SIGALRM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    a.report.tty = isatty(STDOUT_FILENO);
    int status = 1;
    ingest_sender_source *src = NULL;
    metrics_http *mh = NULL;
    stats_logger *slog = NULL;
    a.once = once;
    if (load_state(&a) != 0 || throttle_setup(&a) != 0)
        goto out;
    if (a.cfg->metrics_listen[0] != '\0' || stats_interval > 0) {
        if (agent_metrics_init(&a) != 0) {
            prog_log(INGEST_LOG_ERROR, "metrics: %s", ingest_ctx_errmsg(a.ctx));
            goto out;
        }
    }
    if (a.cfg->metrics_listen[0] != '\0') {
        char mb[128], merr[256];
        mh = metrics_http_start(a.cfg->metrics_listen, a.report.metrics, mb, sizeof(mb), merr, sizeof(merr));
        if (mh == NULL) {
            prog_log(INGEST_LOG_ERROR, "metrics.listen: %s", merr);
            goto out;
        }
        prog_log(INGEST_LOG_INFO, "metrics on http://%s/metrics", mb);
    }
    if (stats_interval > 0 && (slog = stats_logger_start(a.report.metrics, stats_interval)) == NULL) {
        prog_log(INGEST_LOG_ERROR, "--stats-interval: cannot start its thread: %s", strerror(errno));
        goto out;
    }
    src = calloc(a.cfg->sources_count, sizeof(*src));
    if (src == NULL)
        goto out;
    for (size_t i = 0; i < a.cfg->sources_count; i++) {
        src[i].name = a.cfg->sources[i].name;
        src[i].path = a.cfg->sources[i].path;
        src[i].symlinks = a.cfg->sources[i].symlinks == INGEST_SYMLINKS_SHIP ? INGEST_SENDER_SYMLINKS_SHIP
                                                                             : INGEST_SENDER_SYMLINKS_SKIP;
    }
    ingest_sender_opts so;
    memset(&so, 0, sizeof(so));
    so.device = a.cfg->device_id;
    so.dedup_key = a.dedup;
    so.chunking = a.cfg->chunking;
    so.codec = a.codec;
    so.sources = src;
    so.nsources = a.cfg->sources_count;
    so.max_files = a.cfg->batch_max_files;
    so.max_bytes = a.cfg->batch_max_bytes;
    so.on_skip = on_skip;
    so.on_refuse = on_refuse;
    so.want_file = want_file;
    so.batch_prefix = a.state.prefix;
    /* The receiver re-derives every chunk id; a stat check here saves a hash pass. */
    so.recheck = INGEST_SENDER_RECHECK_STAT;
    so.userdata = &a;
    prog_notify("READY=1"); /* state open: a Type=notify unit is started (docs/operations.md) */
    a.report.t0 = prog_now();
    if (!once) {
        a.daemon = 1;
        status = daemon_run(&a, config, &so);
        goto out;
    }
    a.filters = calloc(a.cfg->sources_count ? a.cfg->sources_count : 1, sizeof(*a.filters));
    if (a.filters == NULL)
        goto out;
    for (size_t i = 0; i < a.cfg->sources_count; i++)
        if (agent_filter_create(&a, &a.cfg->sources[i], &a.filters[i]) < 0)
            goto out;
    const double cpu0 = prog_cpu_seconds();
    for (size_t i = 0; i < a.cfg->sources_count; i++) {
        /* a source that is not there (a typo, a disk not mounted) is said as such, with its path, and the
         * run does not end in success (the walk goes on with the others) */
        struct stat sb;
        const char *sp = a.cfg->sources[i].path;
        if (stat(sp, &sb) != 0 && errno == ENOENT)
            prog_log(INGEST_LOG_ERROR, "source %s: %s does not exist", a.cfg->sources[i].name, prog_esc(sp));
        else if (stat(sp, &sb) != 0)
            prog_log(INGEST_LOG_ERROR, "source %s: %s: %s", a.cfg->sources[i].name, prog_esc(sp), strerror(errno));
        else if (!S_ISDIR(sb.st_mode))
            prog_log(INGEST_LOG_ERROR, "source %s: %s is not a directory", a.cfg->sources[i].name, prog_esc(sp));
    }
    /* batches an earlier run sent whose ACK never came (and the daemon's queue) go first, under their ids */
    uint64_t replayed = 0;
    const int replay_rc = daemon_replay(&a, &so, &replayed);
    /* not all of them: a walk now could ship their files again in new batches */
    int rc = replay_rc > 0 ? INGEST_ECLOSED : replay_rc;
    for (int pass = 0; pass < 5 && replay_rc == 0; pass++) {
        if (pass > 0) {
            /* a batch a pass left journaled (received, its ACK lost when the pass gave up its connection)
             * goes first, under its id: the next walk would otherwise ship its files again */
            uint64_t more = 0;
            const int r = daemon_replay(&a, &so, &more);
            replayed += more;
            if (r != 0) {
                rc = r > 0 ? INGEST_ECLOSED : r;
                break;
            }
        }
        const double inst_at = a.state.instance_at;
        rc = ship_pass(&a, &so);
        if (rc <= 0)
            break;
        if (a.state.instance_at != inst_at)
            prog_log(INGEST_LOG_INFO, "shipping again under the new instance (pass %d)", pass + 2);
        else
            prog_log(INGEST_LOG_INFO, "files changed while shipping; shipping them again (pass %d)", pass + 2);
    }
    disconnect_core(&a);
    progress(&a, 1);
    const double secs = prog_now() - a.report.t0;
    printf("shipped: files=%llu unchanged=%llu bytes=%llu chunks=%llu chunks_new=%llu chunks_dedup=%llu chunk_bytes=%llu "
           "wire_bytes=%llu batches=%llu seconds=%.3f MB/s=%.1f cpu_seconds=%.3f throttle_wait_seconds=%.3f "
           "chunk_raw_bytes=%llu wait_build_seconds=%.3f wait_want_seconds=%.3f send_seconds=%.3f "
           "wait_ack_seconds=%.3f latency_p50_seconds=%.3f latency_p99_seconds=%.3f chunk_groups=%llu "
           "record_seconds=%.3f files_refused=%llu skipped_symlinks=%llu skipped_fifos=%llu skipped_sockets=%llu "
           "skipped_devices=%llu skipped_bad_links=%llu files_refused_edge=%llu batches_replayed=%llu "
           "chunk_deltas=%llu skipped_include=%llu skipped_exclude=%llu skipped_min_size=%llu skipped_max_size=%llu "
           "skipped_max_age=%llu skipped_sample=%llu skipped_prefix=%llu\n",
           (unsigned long long)a.report.t.ship.files, (unsigned long long)a.report.t.unchanged, (unsigned long long)a.report.t.ship.bytes,
           (unsigned long long)a.report.t.ship.chunks,
           (unsigned long long)a.report.t.ship.chunks_sent, (unsigned long long)a.report.t.ship.chunks_dedup,
           (unsigned long long)a.report.t.ship.chunk_bytes_sent, (unsigned long long)(a.report.t.ship.wire_out + a.report.t.ship.wire_in),
           (unsigned long long)a.report.t.ship.batches_acked, secs, secs > 0 ? (double)a.report.t.ship.bytes / 1e6 / secs : 0.0,
           prog_cpu_seconds() - cpu0, (double)a.thr.throttle_wait_ms / 1000.0,
           (unsigned long long)a.report.t.ship.chunk_bytes_raw, a.report.t.wait_build_s, a.report.t.ship.wait_want_s, a.report.t.ship.send_s, a.report.t.ship.wait_ack_s,
           latency_quantile(&a, 0.50), latency_quantile(&a, 0.99), (unsigned long long)a.report.t.ship.groups_sent, a.report.t.record_s,
           (unsigned long long)(a.report.t.ship.files_refused + a.report.t.refused_edge),
           (unsigned long long)a.report.special[SPECIAL_SYMLINK], (unsigned long long)a.report.special[SPECIAL_FIFO],
           (unsigned long long)a.report.special[SPECIAL_SOCKET], (unsigned long long)a.report.special[SPECIAL_DEVICE],
           (unsigned long long)a.report.special[SPECIAL_BAD_LINK], (unsigned long long)a.report.t.refused_edge,
           (unsigned long long)replayed, (unsigned long long)a.report.t.ship.chunks_delta,
           (unsigned long long)a.skipped_filter[INGEST_FILTER_INCLUDE], (unsigned long long)a.skipped_filter[INGEST_FILTER_EXCLUDE],
           (unsigned long long)a.skipped_filter[INGEST_FILTER_MIN_SIZE], (unsigned long long)a.skipped_filter[INGEST_FILTER_MAX_SIZE],
           (unsigned long long)a.skipped_filter[INGEST_FILTER_MAX_AGE], (unsigned long long)a.skipped_filter[INGEST_FILTER_SAMPLE],
           (unsigned long long)a.skipped_filter[INGEST_FILTER_PREFIX]);
    fflush(stdout);
    if (rc == 0 && a.report.t.ship.files_refused + a.report.t.refused_edge > 0) {
        fprintf(stderr,
                "ingest-agent: %llu file(s) were refused one by one, %llu of them at the edge by the receiver's "
                "landing rules (logged above); the rest landed; they are not sent again until they change\n",
                (unsigned long long)(a.report.t.ship.files_refused + a.report.t.refused_edge),
                (unsigned long long)a.report.t.refused_edge);
        status = 3;
    } else if (rc == 0 && a.dirs_not_walked > 0) {
        fprintf(stderr,
                "ingest-agent: %llu director%s could not be walked (a source missing or unreadable: logged above); "
                "what the walk reached was shipped\n",
                (unsigned long long)a.dirs_not_walked, a.dirs_not_walked == 1 ? "y" : "ies");
        status = 1;
    } else if (rc == 0) {
        status = 0;
    } else if (rc == -2 || a.report.t.ship.batches_failed) {
        fprintf(stderr, "ingest-agent: %llu batch(es) were refused by the receiver; see the log above\n",
                (unsigned long long)a.report.t.ship.batches_failed);
    } else if (rc > 0) {
        fprintf(stderr, "ingest-agent: files kept changing while they were shipped; not everything was acknowledged\n");
    } else {
        fprintf(stderr, "ingest-agent: stopped before every batch was acknowledged (%s)\n", ingest_strerror(rc));
    }
out:
    agent_metrics_sync(&a);
    stats_logger_stop(slog);
    metrics_http_stop(mh);
    free(src);
    for (size_t i = 0; a.filters != NULL && i < a.cfg->sources_count; i++)
        ingest_filter_destroy(a.filters[i]);
    free(a.filters);
    free(a.report.lat);
    disconnect_core(&a);
    ingest_edge_destroy(a.net.edge); /* before the codec it borrows */
    if (a.net.kafka != NULL || a.kafka_was.produced > 0) {
        ingest_kafka_edge_stats ks;
        kafka_stats_add(&a, &ks);
        prog_log(INGEST_LOG_INFO, "kafka: %llu records produced, %llu delivered, %llu failed; %llu replies",
                 (unsigned long long)ks.produced, (unsigned long long)ks.delivered, (unsigned long long)ks.failed,
                 (unsigned long long)ks.replies);
    }
    ingest_kafka_edge_close(a.net.kafka); /* waits for records still queued */
    ingest_session_destroy(a.net.ss);
    ingest_journal_close(a.state.j);
    ingest_filetable_close(a.state.ft);
    ingest_havecache_close(a.state.have);
    ingest_store_close(a.state.st);
    ingest_codec_destroy(a.codec);
    free(a.dict);
    agent_dict_auto_free(&a);
    agent_edge_refused_clear(&a);
    free(a.edge_refused);
    for (size_t i = 0; i < a.nrefq; i++) /* queued and not recorded (a pass that failed): found again */
        free(a.refq[i].path);
    free(a.refq);
    ingest_throttle_destroy(a.thr.throttle);
    ingest_secret_key_wipe(&a.key);
    ingest_agent_config_free(a.cfg);
    ingest_metrics_destroy(a.report.metrics);
    ingest_ctx_destroy(a.ctx);
    return status;
}
