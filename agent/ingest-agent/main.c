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
 * chunks it found stale).
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t stopping;
volatile sig_atomic_t reload_requested;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        reload_requested = 1;
    else
        stopping = 1;
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

int save_seq(const char *state_dir, uint64_t seq)
{
    char p[4096], tmp[4200], line[32];
    snprintf(p, sizeof(p), "%s/next_batch_seq", state_dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    snprintf(line, sizeof(line), "%llu\n", (unsigned long long)seq);
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    const ssize_t n = write(fd, line, strlen(line));
    const int ok = n == (ssize_t)strlen(line) && fsync(fd) == 0;
    close(fd);
    return ok && rename(tmp, p) == 0 ? 0 : -1;
}

/*
 * Batch ids are "{instance}-{seq}": the instance is 16 random hex digits
 * made when the state directory is new, so a device whose state was lost
 * never reuses the id of a batch the core already landed.
 */
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
    if (prog_write_file_atomic(p, line) != 0)
        return -1;
    snprintf(out, cap, "%s", hex);
    return 0;
}

/* ---- progress ------------------------------------------------------------ */

static void progress(agent *a, int final)
{
    if (!a->tty)
        return;
    const double now = prog_now();
    if (!final && now - a->last_progress < 0.25)
        return;
    a->last_progress = now;
    const double secs = now - a->t0 > 1e-9 ? now - a->t0 : 1e-9;
    fprintf(stdout, "\r\033[K%llu files  %.1f MB  %.1f MB/s  wire %.1f MB",
            (unsigned long long)a->t.files, (double)a->t.bytes / 1e6, (double)a->t.bytes / 1e6 / secs,
            (double)(a->t.wire_out + a->t.wire_in) / 1e6);
    if (final)
        fputs("\r\033[K", stdout);
    fflush(stdout);
}

/* ---- throttle ------------------------------------------------------------ */

int throttle_setup(agent *a)
{
    ingest_throttle_destroy(a->throttle);
    a->throttle = NULL;
    if (a->cfg->throttle_rate == 0 && a->cfg->throttle_window[0] == '\0')
        return 0;
    if (ingest_throttle_create(a->ctx, a->cfg->throttle_rate, a->cfg->throttle_window, &a->throttle) < 0) {
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
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Sleep up to ms (at most 100 ms per call, so signals are seen), counting it as throttle wait. */
static void throttle_nap(agent *a, int64_t ms)
{
    if (ms > 100)
        ms = 100;
    const struct timespec ts = { 0, (long)ms * 1000000L };
    const int64_t t0 = mono_ns();
    nanosleep(&ts, NULL);
    a->throttle_wait_ms += (uint64_t)((mono_ns() - t0) / 1000000);
    if (a->publish != NULL)
        a->publish(a);
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
        a->window_closed = 1;
        throttle_nap(a, 100);
    }
    a->window_closed = 0;
    return 0;
}

/*
 * Before a frame of n bytes: wait what the throttle says.  The daemon does
 * not wait for a window that closed mid-batch: the batch is parked
 * (INGEST_ECLOSED, it stays SENT) and replayed when the window opens.
 */
static int throttle_wait(agent *a, uint64_t n)
{
    if (a->throttle == NULL)
        return 0;
    for (;;) {
        if (throttle_interrupted(a))
            return INGEST_ECLOSED;
        if (!throttle_window_open(a, NULL)) {
            a->window_closed = 1;
            if (a->daemon) {
                prog_log(INGEST_LOG_INFO, "throttle.window %s closed during a batch: parking it",
                         a->cfg->throttle_window);
                return INGEST_ECLOSED;
            }
        } else {
            a->window_closed = 0;
        }
        const int64_t ms = ingest_throttle_delay(a->throttle, n, mono_ns(), minute_of_day());
        if (ms <= 0)
            return 0;
        throttle_nap(a, ms);
    }
}

/* ---- sending ------------------------------------------------------------- */

static int send_msg(agent *a, ingest_wire_msg *m, size_t extra)
{
    const int rc = ingest_session_send_msg(a->ss, a->fd, m);
    if (rc < 0) {
        prog_log(INGEST_LOG_ERROR, "send %s: %s: %s", ingest_wire_type_name(m->type), ingest_strerror(rc),
                 ingest_session_send_errmsg(a->ss));
        return rc;
    }
    a->t.wire_out += ingest_wire_encoded_size(m) + FRAME_OVERHEAD + extra;
    return 0;
}

static int recv_msg(agent *a, ingest_wire_msg *m, int timeout_ms)
{
    const int rc = ingest_session_recv_msg(a->ss, a->fd, m, timeout_ms);
    if (rc < 0) {
        prog_log(INGEST_LOG_ERROR, "receive: %s: %s", ingest_strerror(rc), ingest_session_recv_errmsg(a->ss));
        return rc;
    }
    a->t.wire_in += ingest_wire_encoded_size(m) + FRAME_OVERHEAD;
    if (m->type == INGEST_MSG_ERROR) {
        prog_log(INGEST_LOG_ERROR, "receiver reported: %s: %s", ingest_strerror(m->u.error.code),
                 prog_esc(m->u.error.message));
        return m->u.error.code < 0 ? m->u.error.code : INGEST_EPROTO;
    }
    return 0;
}

int send_manifest(agent *a, ingest_sender_batch *b)
{
    const void *mp;
    size_t mlen;
    int rc = ingest_sender_batch_manifest_ex(b, a->pack ? INGEST_SENDER_MANIFEST_NO_HASH : 0u, &mp, &mlen);
    if (rc < 0)
        return rc;
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_BATCH_BEGIN;
    snprintf(m.u.begin.batch_id, sizeof(m.u.begin.batch_id), "%s", ingest_sender_batch_id(b));
    m.u.begin.file_count = (uint32_t)bs.files;
    m.u.begin.chunk_count = (uint32_t)bs.chunks;
    m.u.begin.total_bytes = bs.bytes;

    if ((rc = send_msg(a, &m, 0)) < 0)
        return rc;
    uint32_t parts = 0;
    for (size_t off = 0; off < mlen; off += MANIFEST_PART_MAX, parts++) {
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_MANIFEST_PART;
        m.u.manifest_part.data = (const uint8_t *)mp + off;
        m.u.manifest_part.len = mlen - off < MANIFEST_PART_MAX ? mlen - off : MANIFEST_PART_MAX;
        if (a->pack) {
            /* pack feature: each part travels as an encoded chunk (chunk ids are hex: zstd halves them) */
            size_t n = 0;
            if ((rc = ingest_codec_encode(a->mcodec, m.u.manifest_part.data, m.u.manifest_part.len, a->mbuf,
                                          ingest_codec_bound(MANIFEST_PART_MAX), &n)) < 0) {
                prog_log(INGEST_LOG_ERROR, "batch %s: compressing its manifest: %s", ingest_sender_batch_id(b),
                         ingest_ctx_errmsg(a->ctx));
                return rc;
            }
            m.u.manifest_part.data = a->mbuf;
            m.u.manifest_part.len = n;
        }
        if ((rc = send_msg(a, &m, 0)) < 0)
            return rc;
    }
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_MANIFEST_END;
    m.u.manifest_end.part_count = parts;
    m.u.manifest_end.manifest_bytes = mlen;
    return send_msg(a, &m, 0);
}

/*
 * The encoder thread: re-reads and compresses the wanted chunks of one
 * WANT frame, in order, into a ring of ENC_SLOTS buffers, while the
 * shipping thread encrypts and sends the ones before them, so that two
 * cores work on a batch's chunks (the builder thread, a third, chunks and
 * hashes the next batch).  A slot holds one unit: a chunk, or (with the
 * pack feature) a group of small chunks compressed together.  It stops at
 * the first unit that fails (a file that changed: INGEST_ESTALE) or when
 * told to.
 */
#define ENC_SLOTS 4

typedef struct enc_slot {
    uint8_t *buf;
    size_t n;
    int rc;
    uint32_t pos, count; /* the WANT's positions [pos, pos + count) */
    uint32_t *idx;       /* their chunk indexes (INGEST_SENDER_GROUP_MAX_CHUNKS) */
} enc_slot;

struct encoder {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started, quit;
    /* the job: chunks w->idx[0, count) of b */
    ingest_sender_batch *b;
    const ingest_wire_want *w;
    uint32_t count;
    uint32_t pos;                /* the next WANT position to encode */
    uint32_t produced, consumed; /* units; slots: i % ENC_SLOTS */
    int stop;                    /* the job ends early (a failure, or the shipping thread gave up) */
    int busy;                    /* a job is running */
    int inside;                  /* the thread is encoding a slot (without the lock) */
    enc_slot slot[ENC_SLOTS];
};

/*
 * Encode the unit that starts at WANT position pos into sl: with the pack
 * feature, the small chunks from there on as one group (at most
 * INGEST_WIRE_GROUP_MAX_RAW bytes, capped by chunking.max), else one chunk.
 */
static void encode_unit(agent *a, ingest_sender_batch *b, const ingest_wire_want *w, uint32_t pos, enc_slot *sl)
{
    uint32_t m = 0;
    size_t total = 0;
    while (pos + m < w->count && m < INGEST_SENDER_GROUP_MAX_CHUNKS) {
        const uint32_t idx = ingest_wire_want_index(w, pos + m);
        uint8_t id[INGEST_ID_BYTES];
        uint32_t len = 0;
        uint64_t off = 0;
        ingest_sender_batch_chunk_info(b, idx, id, &len, &off);
        const int small = len <= INGEST_SENDER_GROUP_CHUNK_MAX;
        if (m > 0 && (!small || total + len > INGEST_WIRE_GROUP_MAX_RAW))
            break;
        sl->idx[m++] = idx;
        total += len;
        if (!small || !a->pack)
            break;
    }
    size_t n = 0, taken = 1;
    const int rc = m > 1 ? ingest_sender_batch_group(b, sl->idx, m, INGEST_WIRE_GROUP_MAX_RAW, sl->buf, a->chunkcap,
                                                     &n, &taken)
                         : ingest_sender_batch_chunk(b, sl->idx[0], sl->buf, a->chunkcap, &n);
    sl->n = n;
    sl->rc = rc;
    sl->pos = pos;
    if (rc < 0 && m > 1 && taken < m)
        sl->idx[0] = sl->idx[taken]; /* the chunk that failed, for the log */
    sl->count = rc < 0 ? 1 : (uint32_t)taken;
}

static void *encoder_main(void *arg)
{
    agent *a = arg;
    encoder *e = a->enc;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->quit && !(e->busy && !e->stop && e->pos < e->count && e->produced - e->consumed < ENC_SLOTS))
            pthread_cond_wait(&e->cv, &e->mu);
        if (e->quit)
            break;
        enc_slot *sl = &e->slot[e->produced % ENC_SLOTS];
        ingest_sender_batch *b = e->b;
        const uint32_t pos = e->pos;
        e->inside = 1;
        pthread_mutex_unlock(&e->mu);
        encode_unit(a, b, e->w, pos, sl);
        pthread_mutex_lock(&e->mu);
        e->inside = 0;
        e->pos += sl->count;
        e->produced++;
        if (sl->rc < 0)
            e->stop = 1;
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static void encoder_free(encoder *e)
{
    for (int i = 0; i < ENC_SLOTS; i++) {
        free(e->slot[i].buf);
        free(e->slot[i].idx);
    }
    free(e);
}

static int encoder_start(agent *a)
{
    if (a->enc != NULL)
        return 0;
    encoder *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return INGEST_ENOMEM;
    for (int i = 0; i < ENC_SLOTS; i++)
        if ((e->slot[i].buf = malloc(a->chunkcap)) == NULL ||
            (e->slot[i].idx = malloc(INGEST_SENDER_GROUP_MAX_CHUNKS * sizeof(uint32_t))) == NULL) {
            encoder_free(e);
            return INGEST_ENOMEM;
        }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    a->enc = e;
    if (pthread_create(&e->thread, NULL, encoder_main, a) != 0) {
        a->enc = NULL;
        pthread_cond_destroy(&e->cv);
        pthread_mutex_destroy(&e->mu);
        encoder_free(e);
        return INGEST_ENOMEM;
    }
    e->started = 1;
    return 0;
}

void encoder_stop(agent *a)
{
    encoder *e = a->enc;
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->mu);
    e->quit = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    encoder_free(e);
    a->enc = NULL;
}

/* End the job: no more chunks are produced, and the one in progress is finished. */
static void encoder_end_job(encoder *e)
{
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    while (e->inside)
        pthread_cond_wait(&e->cv, &e->mu);
    e->busy = 0;
    pthread_mutex_unlock(&e->mu);
}

/* Log which file changed under chunk idx. */
static void log_stale(ingest_sender_batch *b, uint32_t idx)
{
    uint64_t fi = 0;
    ingest_sender_file_info info;
    memset(&info, 0, sizeof(info));
    if (ingest_sender_batch_chunk_file(b, idx, &fi) == 0)
        ingest_sender_batch_file(b, fi, &info);
    prog_log(INGEST_LOG_WARN, "batch %s: %s changed while it was being shipped; it will be shipped again",
             ingest_sender_batch_id(b), info.path ? prog_esc(info.path) : "a file");
}

/*
 * Send one encoded unit (data[0, n)): chunk idx[0] alone (count 1, a
 * CHUNK) or the group of chunks idx[0, count) (a CHUNK_GROUP; idx is
 * rewritten in place as little-endian u32s for the wire).
 */
static int send_unit(agent *a, ingest_sender_batch *b, uint32_t *idx, uint32_t count, const uint8_t *data, size_t n,
                     uint32_t *sent)
{
    uint64_t raw = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint8_t id[INGEST_ID_BYTES];
        uint32_t len = 0;
        uint64_t off = 0;
        ingest_sender_batch_chunk_info(b, idx[i], id, &len, &off);
        raw += len;
    }
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    if (count == 1) {
        m.type = INGEST_MSG_CHUNK;
        m.u.chunk.index = idx[0];
        m.u.chunk.data = data;
        m.u.chunk.len = n;
    } else {
        for (uint32_t i = 0; i < count; i++) {
            const uint32_t v = idx[i];
            uint8_t *p = (uint8_t *)&idx[i];
            p[0] = (uint8_t)v;
            p[1] = (uint8_t)(v >> 8);
            p[2] = (uint8_t)(v >> 16);
            p[3] = (uint8_t)(v >> 24);
        }
        m.type = INGEST_MSG_CHUNK_GROUP;
        m.u.group.count = count;
        m.u.group.raw = (const uint8_t *)idx;
        m.u.group.data = data;
        m.u.group.len = n;
    }
    int rc;
    if ((rc = throttle_wait(a, ingest_wire_encoded_size(&m) + FRAME_OVERHEAD)) < 0)
        return rc;
    if ((rc = send_msg(a, &m, 0)) < 0)
        return rc;
    a->t.chunks_sent += count;
    a->t.chunk_bytes_raw += raw;
    a->t.chunk_bytes_sent += n;
    a->t.groups_sent += count > 1;
    *sent += count;
    progress(a, 0);
    agent_metrics_sync(a);
    if (a->publish != NULL)
        a->publish(a);
    return 0;
}

/*
 * Send the chunks of one WANT frame.  A chunk whose file changed since it
 * was chunked cannot be sent: *stale is set and the batch is abandoned.
 * With the encoder thread (more than one chunk wanted) chunks are read and
 * compressed there, a few ahead; else here.
 */
static int send_wanted(agent *a, ingest_sender_batch *b, const ingest_wire_want *w, uint32_t *sent, int *stale)
{
    if (w->count > 1 && encoder_start(a) == 0) {
        encoder *e = a->enc;
        pthread_mutex_lock(&e->mu);
        e->b = b;
        e->w = w;
        e->count = w->count;
        e->pos = 0;
        e->produced = e->consumed = 0;
        e->stop = 0;
        e->busy = 1;
        pthread_cond_broadcast(&e->cv);
        int rc = 0;
        for (uint32_t u = 0; rc == 0 && !stopping; u++) {
            while (e->produced <= u && e->pos < e->count && !e->stop)
                pthread_cond_wait(&e->cv, &e->mu);
            if (e->produced <= u)
                break; /* every unit was sent */
            enc_slot *sl = &e->slot[u % ENC_SLOTS];
            pthread_mutex_unlock(&e->mu);
            if (sl->rc == INGEST_ESTALE) {
                log_stale(b, sl->idx[0]);
                *stale = 1;
            } else if (sl->rc < 0) {
                prog_log(INGEST_LOG_ERROR, "batch %s: chunk %u: %s", ingest_sender_batch_id(b), sl->idx[0],
                         ingest_ctx_errmsg(a->ctx));
                rc = sl->rc;
            } else {
                rc = send_unit(a, b, sl->idx, sl->count, sl->buf, sl->n, sent);
            }
            pthread_mutex_lock(&e->mu);
            e->consumed++;
            pthread_cond_broadcast(&e->cv);
            if (*stale)
                break;
        }
        pthread_mutex_unlock(&e->mu);
        encoder_end_job(e);
        if (rc < 0 || *stale)
            return rc;
        return stopping ? INGEST_ECLOSED : 0;
    }
    for (uint32_t i = 0; i < w->count && !stopping; i++) {
        uint32_t idx = ingest_wire_want_index(w, i);
        size_t n = 0;
        int rc = ingest_sender_batch_chunk(b, idx, a->chunkbuf, a->chunkcap, &n);
        if (rc == INGEST_ESTALE) {
            log_stale(b, idx);
            *stale = 1;
            return 0;
        }
        if (rc < 0) {
            prog_log(INGEST_LOG_ERROR, "batch %s: chunk %u: %s", ingest_sender_batch_id(b), idx,
                     ingest_ctx_errmsg(a->ctx));
            return rc;
        }
        if ((rc = send_unit(a, b, &idx, 1, a->chunkbuf, n, sent)) < 0)
            return rc;
    }
    return stopping ? INGEST_ECLOSED : 0;
}

/* Read WANT frames until one without MORE, sending the chunks of each. */
static int serve_wants(agent *a, ingest_sender_batch *b, ingest_wire_msg *first, uint32_t *sent, int *stale)
{
    ingest_wire_msg m = *first;
    for (;;) {
        if (m.type != INGEST_MSG_WANT || strcmp(m.u.want.batch_id, ingest_sender_batch_id(b)) != 0) {
            prog_log(INGEST_LOG_ERROR, "batch %s: unexpected %s from the receiver", ingest_sender_batch_id(b),
                     ingest_wire_type_name(m.type));
            return INGEST_EPROTO;
        }
        const int more = (m.u.want.flags & INGEST_WANT_MORE) != 0;
        /* The WANT's index list lives in the session's receive buffer: send before the next receive. */
        int rc = send_wanted(a, b, &m.u.want, sent, stale);
        if (rc < 0 || *stale || !more)
            return rc;
        if ((rc = recv_msg(a, &m, ACK_TIMEOUT_MS)) < 0)
            return rc;
    }
}

/*
 * After an ack: record every file of the batch in the file table (so an
 * unchanged file is not shipped again) and its chunks in the have-cache,
 * then commit the store.
 */
static void record_acked(agent *a, ingest_sender_batch *b)
{
    if (a->daemon)
        return; /* the daemon records acks in its journal (daemon.c) */
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    int rc = 0;
    const double t0 = prog_now();
    pthread_mutex_lock(&a->store_lock);
    for (uint64_t i = 0; i < bs.files && rc == 0; i++) {
        ingest_sender_file_info info;
        if (ingest_sender_batch_file(b, i, &info) != 0)
            continue;
        const ingest_file_state fs = { info.size, info.mtime_ns, info.ctime_ns, 0, 0 };
        rc = ingest_filetable_put(a->ft, info.path, &fs);
    }
    for (uint64_t i = 0; i < bs.chunks && rc == 0; i++) {
        uint8_t id[INGEST_ID_BYTES];
        uint32_t len;
        uint64_t off;
        if (ingest_sender_batch_chunk_info(b, i, id, &len, &off) == 0)
            rc = ingest_havecache_add(a->have, id);
    }
    if (rc < 0 || ingest_store_commit(a->st) < 0) {
        a->t.err_store++;
        prog_log(INGEST_LOG_WARN, "state store: %s (files of batch %s may be shipped again)", ingest_ctx_errmsg(a->ctx),
                 ingest_sender_batch_id(b));
    }
    pthread_mutex_unlock(&a->store_lock);
    a->t.record_s += prog_now() - t0;
}

/* The sender's want_file hook: pass over files unchanged since their ack. */
static int want_file(void *ud, const char *path, const ingest_sender_stat *st)
{
    agent *a = ud;
    if (a->metrics != NULL) {
        char name[64];
        const char *slash = strchr(path, '/');
        const size_t n = slash != NULL ? (size_t)(slash - path) : strlen(path);
        snprintf(name, sizeof(name), "%.*s", (int)(n < sizeof(name) ? n : sizeof(name) - 1), path);
        ingest_metric_add(a->m.files_seen, name, 1);
    }
    if (a->all)
        return 1;
    ingest_file_state fs;
    pthread_mutex_lock(&a->store_lock);
    const int found = ingest_filetable_get(a->ft, path, &fs) == 0;
    pthread_mutex_unlock(&a->store_lock);
    if (found && fs.size == st->size && fs.mtime_ns == st->mtime_ns && fs.ctime_ns == st->ctime_ns) {
        a->t.unchanged++;
        if (a->metrics != NULL)
            ingest_metric_add(a->m.files_unchanged, NULL, 1);
        return 0;
    }
    return 1;
}

/*
 * A failure while a batch was open.  The receiver re-derives every chunk
 * id; when it finds one that no longer matches (the file changed after the
 * agent's own checks) it says so in an ERROR frame and closes: then the
 * batch is abandoned and its files shipped again in a later pass (1).
 * Anything else stays a failure (rc).
 */
static int batch_failure(agent *a, ingest_sender_batch *b, int rc)
{
    if (rc != INGEST_EMISMATCH && rc != INGEST_EPROTO) {
        ingest_wire_msg m;
        if (ingest_session_recv_msg(a->ss, a->fd, &m, 2000) == 0 && m.type == INGEST_MSG_ERROR) {
            prog_log(INGEST_LOG_WARN, "receiver reported: %s: %s", ingest_strerror(m.u.error.code),
                     prog_esc(m.u.error.message));
            rc = m.u.error.code;
        }
    }
    if (rc != INGEST_EMISMATCH)
        return rc;
    prog_log(INGEST_LOG_WARN, "batch %s abandoned: a file changed while it was shipped; it will be shipped again",
             ingest_sender_batch_id(b));
    a->t.batches_abandoned++;
    return 1;
}

static int finish_batch_once(agent *a, ingest_sender_batch *b);

/*
 * Ship one batch whose manifest was sent: serve the WANTs, commit, read the
 * ACK.  Returns 0 acked, 1 abandoned (a file changed; ship again later),
 * < 0 failure of the connection, 2 a batch the receiver refused, 3
 * received (pipelined: b is now a->pending, its ACK is read later; the
 * caller must not destroy it).
 */
int finish_batch(agent *a, ingest_sender_batch *b)
{
    const int rc = finish_batch_once(a, b);
    return rc < 0 ? batch_failure(a, b, rc) : rc;
}

/*
 * Account for the ACK m of batch b (sent: chunks sent for it; t0: when its
 * building began): 0 landed (or landed before), 2 refused by the receiver.
 */
static int batch_acked(agent *a, ingest_sender_batch *b, const ingest_wire_msg *m, uint32_t sent, double t0)
{
    const char *id = ingest_sender_batch_id(b);
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    if (m->u.ack.status < 0) {
        prog_log(INGEST_LOG_ERROR, "batch %s refused by the receiver: %s: %s", id, ingest_strerror(m->u.ack.status),
                 prog_esc(m->u.ack.message));
        a->t.batches_failed++;
        return 2;
    }
    a->t.batches_acked++;
    if (a->nlat == a->caplat) {
        const size_t nc = a->caplat ? a->caplat * 2 : 64;
        latency_rec *nl = realloc(a->lat, nc * sizeof(*nl));
        if (nl != NULL) {
            a->lat = nl;
            a->caplat = nc;
        }
    }
    if (a->nlat < a->caplat && t0 > 0)
        a->lat[a->nlat++] = (latency_rec){ prog_now() - t0, bs.files };
    if (!a->daemon && t0 > 0)
        agent_metrics_latency(a, prog_now() - t0, bs.files);
    a->t.files += bs.files;
    a->t.bytes += bs.bytes;
    a->t.chunks += bs.chunks;
    a->t.chunks_dedup += bs.chunks - sent;
    prog_log(INGEST_LOG_DEBUG, "batch %s acked (%s): %llu files, %llu chunks, %u sent", id,
             m->u.ack.status == INGEST_ACK_DUPLICATE ? "already landed" : "landed", (unsigned long long)bs.files,
             (unsigned long long)bs.chunks, sent);
    record_acked(a, b);
    agent_metrics_sync(a);
    return 0;
}

/* m is an ACK: is it the pending batch's? */
static int is_pending_ack(const agent *a, const ingest_wire_msg *m)
{
    return m->type == INGEST_MSG_ACK && a->pending != NULL &&
           strcmp(m->u.ack.batch_id, ingest_sender_batch_id(a->pending)) == 0;
}

/* The pending batch's ACK m: account for it and let the batch go. */
static void pending_acked(agent *a, const ingest_wire_msg *m)
{
    ingest_sender_batch *p = a->pending;
    a->pending = NULL;
    if (batch_acked(a, p, m, a->pending_sent, a->pending_t0) == 2)
        a->pending_refused = 1;
    ingest_sender_batch_destroy(p);
}

/* Read the pending batch's ACK (nothing else may come before it). */
static int wait_pending(agent *a)
{
    while (a->pending != NULL) {
        ingest_wire_msg m;
        const double t = prog_now();
        const int rc = recv_msg(a, &m, ACK_TIMEOUT_MS);
        a->t.wait_ack_s += prog_now() - t;
        if (rc < 0)
            return rc;
        if (!is_pending_ack(a, &m)) {
            prog_log(INGEST_LOG_ERROR, "unexpected %s from the receiver while waiting for the ack of batch %s",
                     ingest_wire_type_name(m.type), ingest_sender_batch_id(a->pending));
            return INGEST_EPROTO;
        }
        pending_acked(a, &m);
    }
    return 0;
}

/* The pending batch was not acknowledged (the connection failed): it is simply shipped again later. */
static void drop_pending(agent *a)
{
    ingest_sender_batch_destroy(a->pending);
    a->pending = NULL;
}

static int finish_batch_once(agent *a, ingest_sender_batch *b)
{
    ingest_wire_msg m;
    uint32_t sent = 0;
    double t = prog_now();
    int stale = 0, rc = recv_msg(a, &m, ACK_TIMEOUT_MS);
    if (rc < 0)
        return rc;
    const char *id = ingest_sender_batch_id(b);
    for (;;) {
        const double now = prog_now();
        if (is_pending_ack(a, &m)) {
            /* the previous batch became durable while this one ships */
            a->t.wait_ack_s += now - t;
            pending_acked(a, &m);
            t = prog_now();
            if ((rc = recv_msg(a, &m, ACK_TIMEOUT_MS)) < 0)
                return rc;
            continue;
        }
        if (m.type == INGEST_MSG_ACK) {
            a->t.wait_ack_s += now - t;
            break;
        }
        if (m.type == INGEST_MSG_RECEIVED) {
            a->t.wait_ack_s += now - t;
            if (!a->pipeline || strcmp(m.u.received.batch_id, id) != 0) {
                prog_log(INGEST_LOG_ERROR, "unexpected RECEIVED for batch %s while %s was open%s",
                         m.u.received.batch_id, id, a->pipeline ? "" : " (pipelining was not agreed)");
                return INGEST_EPROTO;
            }
            /* Everything is in; its ACK comes while the next batch ships.  At most one waits. */
            if ((rc = wait_pending(a)) < 0)
                return rc;
            a->pending = b;
            a->pending_sent = sent;
            a->pending_t0 = a->batch_t0;
            return 3;
        }
        a->t.wait_want_s += now - t;
        rc = serve_wants(a, b, &m, &sent, &stale);
        t = prog_now();
        a->t.send_s += t - now;
        if (rc < 0)
            return rc;
        if (stale) {
            /* The previous batch's ACK first (the receiver is making it durable), then tell the
             * receiver, which drops this batch and closes; the caller reconnects. */
            if ((rc = wait_pending(a)) < 0)
                return rc;
            memset(&m, 0, sizeof(m));
            m.type = INGEST_MSG_ERROR;
            m.u.error.code = INGEST_ESTALE;
            snprintf(m.u.error.message, sizeof(m.u.error.message), "batch %s abandoned: a file changed", id);
            send_msg(a, &m, 0);
            a->t.batches_abandoned++;
            return 1;
        }
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_BATCH_COMMIT;
        snprintf(m.u.commit.batch_id, sizeof(m.u.commit.batch_id), "%s", id);
        m.u.commit.chunks_sent = sent;
        if ((rc = send_msg(a, &m, 0)) < 0)
            return rc;
        if ((rc = recv_msg(a, &m, ACK_TIMEOUT_MS)) < 0)
            return rc;
    }
    if (strcmp(m.u.ack.batch_id, id) != 0) {
        prog_log(INGEST_LOG_ERROR, "ack for batch %s while %s was open", m.u.ack.batch_id, id);
        return INGEST_EPROTO;
    }
    if ((rc = wait_pending(a)) < 0) /* never: the receiver acks in order */
        return rc;
    return batch_acked(a, b, &m, sent, a->batch_t0);
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
    for (size_t i = 0; i < a->nlat; i++)
        total += a->lat[i].files;
    if (total == 0)
        return 0.0;
    qsort(a->lat, a->nlat, sizeof(a->lat[0]), cmp_latency);
    const double want = q * (double)total;
    uint64_t seen = 0;
    for (size_t i = 0; i < a->nlat; i++) {
        seen += a->lat[i].files;
        if ((double)seen >= want)
            return a->lat[i].s;
    }
    return a->lat[a->nlat - 1].s;
}

/*
 * After the handshake, before any batch: offer compression.dictionary to
 * the receiver (docs/protocol.md, "Dictionaries"), send it if asked, and
 * compress with it only when the receiver holds it.  When it cannot be
 * used (an older receiver, or refused) chunks are compressed without it,
 * and the agent says why once.  0, or < 0 when the session failed.
 */
static int offer_dict(agent *a)
{
    if (a->dict == NULL)
        return 0;
    char why[INGEST_WIRE_MESSAGE_MAX + 64] = "";
    ingest_wire_msg m;
    if (!(ingest_session_features(a->ss) & INGEST_SESSION_FEATURE_DICT)) {
        snprintf(why, sizeof(why), "the receiver does not take dictionaries (a version without the dict feature)");
    } else {
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_DICT_OFFER;
        m.u.dict_offer.dict_id = a->dict_id;
        m.u.dict_offer.size = (uint32_t)a->dict_len;
        memcpy(m.u.dict_offer.hash, a->dict_hash, sizeof(m.u.dict_offer.hash));
        int rc = send_msg(a, &m, 0);
        if (rc == 0)
            rc = recv_msg(a, &m, HANDSHAKE_TIMEOUT_MS);
        if (rc < 0)
            return rc;
        if (m.type != INGEST_MSG_DICT_WANT || m.u.dict_want.dict_id != a->dict_id) {
            prog_log(INGEST_LOG_ERROR, "the receiver answered the offer of dictionary %u with %s", (unsigned)a->dict_id,
                     ingest_wire_type_name(m.type));
            return INGEST_EPROTO;
        }
        if (m.u.dict_want.answer == INGEST_DICT_REFUSED) {
            snprintf(why, sizeof(why), "the receiver refused it: %s", prog_esc(m.u.dict_want.message));
        } else if (m.u.dict_want.answer == INGEST_DICT_SEND) {
            /* In slices within the receiver's frame bound (at least 64 bytes: 8 of them the slice's head). */
            const size_t peer = ingest_session_peer_max_payload(a->ss);
            const size_t slice = peer > 1024u * 1024u + 8u ? 1024u * 1024u : peer - 8u;
            for (size_t off = 0; off < a->dict_len; off += slice) {
                memset(&m, 0, sizeof(m));
                m.type = INGEST_MSG_DICT_DATA;
                m.u.dict_data.dict_id = a->dict_id;
                m.u.dict_data.offset = (uint32_t)off;
                m.u.dict_data.data = a->dict + off;
                m.u.dict_data.len = a->dict_len - off < slice ? a->dict_len - off : slice;
                if ((rc = send_msg(a, &m, 0)) < 0)
                    return rc;
            }
            prog_log(INGEST_LOG_INFO, "dictionary %u (%zu bytes) sent to the receiver", (unsigned)a->dict_id,
                     a->dict_len);
        }
    }
    if (why[0] != '\0') {
        if (!a->dict_said)
            prog_log(INGEST_LOG_WARN, "compression.dictionary %s is not used: %s; chunks are compressed without it",
                     a->cfg->compression_dictionary, why);
        a->dict_said = 1;
        return ingest_codec_use_dict(a->codec, 0);
    }
    return ingest_codec_use_dict(a->codec, a->dict_id);
}

int connect_core(agent *a)
{
    char err[512];
    a->fd = prog_connect(a->cfg->core_address, 10000, err, sizeof(err));
    if (a->fd < 0) {
        prog_log(INGEST_LOG_ERROR, "cannot reach the core: %s", err);
        a->t.err_connect++;
        return -1;
    }
    ingest_session_destroy(a->ss);
    a->ss = NULL;
    if (ingest_session_client_create(a->ctx, a->cfg->device_id, &a->key, a->receiver_pub, &a->ss) < 0)
        return -1;
    /* --once pipelines batches across acks; the daemon ships one batch at a time from its journal */
    if (ingest_session_set_features(a->ss, INGEST_SESSION_FEATURE_SHUFFLE2 | INGEST_SESSION_FEATURE_PACK |
                                               (a->daemon ? 0u : INGEST_SESSION_FEATURE_PIPELINE) |
                                               (a->dict != NULL ? INGEST_SESSION_FEATURE_DICT : 0u)) < 0)
        return -1;
    const int rc = ingest_session_handshake_fd(a->ss, a->fd, HANDSHAKE_TIMEOUT_MS);
    if (rc < 0) {
        prog_log(INGEST_LOG_ERROR, "handshake with %s failed: %s: %s", a->cfg->core_address, ingest_strerror(rc),
                 ingest_ctx_errmsg(a->ctx));
        a->t.err_connect++;
        close(a->fd);
        a->fd = -1;
        return -1;
    }
    a->pipeline = (ingest_session_features(a->ss) & INGEST_SESSION_FEATURE_PIPELINE) != 0;
    a->pack = (ingest_session_features(a->ss) & INGEST_SESSION_FEATURE_PACK) != 0;
    if (a->pack && a->mcodec == NULL) {
        /* The manifest's own codec (level 3: a manifest is small and mostly hex) and buffer. */
        if (ingest_codec_create(a->ctx, 3, &a->mcodec) < 0 ||
            (a->mbuf = malloc(ingest_codec_bound(MANIFEST_PART_MAX))) == NULL) {
            prog_log(INGEST_LOG_ERROR, "out of memory for the manifest's compression");
            return -1;
        }
    }
    /* no chunk is being encoded while connecting: batches restart on a new session */
    const unsigned filters =
        (ingest_session_features(a->ss) & INGEST_SESSION_FEATURE_SHUFFLE2) ? INGEST_CODEC_FILTER_SHUFFLE2 : 0u;
    if (ingest_codec_set_filters(a->codec, filters) < 0)
        return -1;
    if (offer_dict(a) != 0) {
        a->t.err_session++;
        close(a->fd);
        a->fd = -1;
        return -1;
    }
    prog_log(INGEST_LOG_DEBUG, "connected to %s (%s%s)", a->cfg->core_address,
             ingest_session_cipher_name(ingest_session_cipher(a->ss)), a->pipeline ? ", pipelined" : "");
    return 0;
}

void disconnect_core(agent *a)
{
    if (a->fd >= 0)
        close(a->fd);
    a->fd = -1;
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
    builder *bl = arg;
    for (;;) {
        ingest_sender_batch *b = NULL;
        const double t0 = prog_now();
        const int rc = ingest_sender_next_batch(bl->snd, &b);
        if (rc == 1 && save_seq(bl->a->cfg->state_dir, ingest_sender_next_seq(bl->snd)) != 0)
            prog_log(INGEST_LOG_WARN, "cannot save the batch sequence in %s: %s", bl->a->cfg->state_dir,
                     strerror(errno));
        pthread_mutex_lock(&bl->lock);
        while (bl->slot != NULL && !bl->quit)
            pthread_cond_wait(&bl->cond, &bl->lock);
        if (bl->quit || rc != 1) {
            if (rc < 0)
                prog_log(INGEST_LOG_ERROR, "scan: %s", ingest_ctx_errmsg(bl->a->ctx));
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
    o->batch_seq = a->seq;
    int rc = ingest_sender_create(a->ctx, o, &bl.snd);
    if (rc < 0) {
        prog_log(INGEST_LOG_ERROR, "%s", ingest_ctx_errmsg(a->ctx));
        return rc;
    }
    if (a->chunkbuf == NULL) {
        a->chunkcap = ingest_sender_chunk_bound(bl.snd);
        a->chunkbuf = malloc(a->chunkcap);
        if (a->chunkbuf == NULL) {
            ingest_sender_destroy(bl.snd);
            return INGEST_ENOMEM;
        }
    }
    if ((rc = ingest_sender_scan(bl.snd)) < 0) {
        ingest_sender_destroy(bl.snd);
        return rc;
    }
    pthread_mutex_init(&bl.lock, NULL);
    pthread_cond_init(&bl.cond, NULL);
    if (pthread_create(&bl.thread, NULL, builder_main, &bl) != 0) {
        ingest_sender_destroy(bl.snd);
        return INGEST_ENOMEM;
    }
    int again = 0, failed = 0;
    for (;;) {
        ingest_sender_batch *b = NULL;
        const double t0 = prog_now();
        const int took = builder_take(&bl, &b);
        a->t.wait_build_s += prog_now() - t0;
        if (took <= 0) {
            rc = took;
            break;
        }
        if (stopping || throttle_wait_window(a) != 0 || (a->fd < 0 && connect_core(a) != 0)) {
            rc = INGEST_ECLOSED;
            ingest_sender_batch_destroy(b);
            break;
        }
        a->t.batches++;
        {
            ingest_sender_batch_stats bs;
            ingest_sender_batch_stats_get(b, &bs);
            a->t.bytes_read += bs.bytes;
        }
        rc = send_manifest(a, b);
        if (rc == 0)
            rc = finish_batch(a, b);
        if (rc < 0)
            a->t.err_session++;
        agent_metrics_sync(a);
        if (rc == 3) {
            rc = 0; /* received; its ACK comes while the next batch ships */
            continue;
        }
        ingest_sender_batch_destroy(b);
        if (rc == 1) {
            again = 1;
            disconnect_core(a);
            rc = 0;
        } else if (rc == 2) {
            failed = 1;
            rc = 0;
        } else if (rc < 0) {
            break;
        }
    }
    if (rc >= 0 && a->pending != NULL && (rc = wait_pending(a)) < 0)
        a->t.err_session++;
    if (a->pending != NULL) {
        prog_log(INGEST_LOG_WARN, "batch %s was received but not acknowledged; it will be shipped again",
                 ingest_sender_batch_id(a->pending));
        drop_pending(a);
    }
    if (a->pending_refused) {
        a->pending_refused = 0;
        failed = 1;
    }
    builder_stop(&bl);
    pthread_cond_destroy(&bl.cond);
    pthread_mutex_destroy(&bl.lock);
    ingest_sender_stats ss;
    ingest_sender_get_stats(bl.snd, &ss);
    if (ss.dropped_changed > 0)
        again = 1;
    a->seq = ingest_sender_next_seq(bl.snd);
    save_seq(a->cfg->state_dir, a->seq);
    ingest_sender_destroy(bl.snd);
    if (rc < 0)
        return rc;
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
    (void)ud;
    static const char *const why[] = { "", "unreadable", "not a regular file", "vanished", "bad name",
                                       "directory unreadable", "changed while chunked", "too many chunks" };
    if (reason == INGEST_SKIP_DEPTH) {
        say_too_deep(INGEST_LOG_WARN, path);
        return;
    }
    prog_log(reason == INGEST_SKIP_SPECIAL ? INGEST_LOG_DEBUG : INGEST_LOG_WARN, "skipped %s: %s", prog_esc(path),
             reason >= 1 && reason <= 7 ? why[reason] : "?");
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
    if (a->cfg->compression_dictionary[0]) {
        /* Kept: it is offered to the receiver on each connection (connect_core). */
        FILE *f = fopen(a->cfg->compression_dictionary, "rb");
        uint8_t *d = malloc(INGEST_DICT_MAX_BYTES + 1u);
        const size_t n = f && d ? fread(d, 1, INGEST_DICT_MAX_BYTES + 1u, f) : 0;
        uint32_t did = 0;
        const int toobig = n > INGEST_DICT_MAX_BYTES;
        const int ok = n > 0 && !toobig && ingest_codec_add_dict(a->codec, d, n, &did) == 0 &&
                       ingest_codec_use_dict(a->codec, did) == 0;
        const int e = errno;
        if (f)
            fclose(f);
        if (!ok) {
            prog_log(INGEST_LOG_ERROR, "compression.dictionary %s: %s", a->cfg->compression_dictionary,
                     !f ? strerror(e) : toobig ? "larger than 4 MiB" : n == 0 ? "empty or unreadable" : ingest_ctx_errmsg(a->ctx));
            free(d);
            return -1;
        }
        a->dict = d;
        a->dict_len = n;
        a->dict_id = did;
        ingest_dict_hash(d, n, a->dict_hash);
    }
    if (mkdir(a->cfg->state_dir, 0700) != 0 && errno != EEXIST) {
        prog_log(INGEST_LOG_ERROR, "state_dir %s: %s", a->cfg->state_dir, strerror(errno));
        return -1;
    }
    ingest_store_opts so = { 0 };
    so.map_size = 1ull << 30;
    if (ingest_store_open(a->ctx, a->cfg->state_dir, &so, &a->st) < 0 ||
        ingest_havecache_open(a->st, a->cfg->havecache_max_entries, &a->have) < 0 ||
        ingest_filetable_open(a->st, &a->ft) < 0) {
        prog_log(INGEST_LOG_ERROR, "state store in %s: %s", a->cfg->state_dir, ingest_ctx_errmsg(a->ctx));
        return -1;
    }
    a->seq = load_seq(a->cfg->state_dir);
    if (load_instance(a->cfg->state_dir, a->instance, sizeof(a->instance)) != 0) {
        prog_log(INGEST_LOG_ERROR, "cannot make %s/instance: %s", a->cfg->state_dir, strerror(errno));
        return -1;
    }
    snprintf(a->prefix, sizeof(a->prefix), "%s-", a->instance);
    return 0;
}

int main(int argc, char **argv)
{
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
    prog_log_init("ingest-agent", INGEST_LOG_INFO);
    agent a;
    memset(&a, 0, sizeof(a));
    a.fd = -1;
    a.all = all;
    pthread_mutex_init(&a.store_lock, NULL);
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
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (!once)
        sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    a.tty = isatty(STDOUT_FILENO);
    int status = 1;
    ingest_sender_source *src = NULL;
    metrics_http *mh = NULL;
    stats_logger *slog = NULL;
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
        mh = metrics_http_start(a.cfg->metrics_listen, a.metrics, mb, sizeof(mb), merr, sizeof(merr));
        if (mh == NULL) {
            prog_log(INGEST_LOG_ERROR, "metrics.listen: %s", merr);
            goto out;
        }
        prog_log(INGEST_LOG_INFO, "metrics on http://%s/metrics", mb);
    }
    if (stats_interval > 0 && (slog = stats_logger_start(a.metrics, stats_interval)) == NULL) {
        prog_log(INGEST_LOG_ERROR, "--stats-interval: cannot start its thread: %s", strerror(errno));
        goto out;
    }
    src = calloc(a.cfg->sources_count, sizeof(*src));
    if (src == NULL)
        goto out;
    for (size_t i = 0; i < a.cfg->sources_count; i++) {
        src[i].name = a.cfg->sources[i].name;
        src[i].path = a.cfg->sources[i].path;
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
    so.want_file = want_file;
    so.batch_prefix = a.prefix;
    /* The receiver re-derives every chunk id; a stat check here saves a hash pass. */
    so.recheck = INGEST_SENDER_RECHECK_STAT;
    so.userdata = &a;
    prog_notify("READY=1"); /* state open: a Type=notify unit is started (docs/operations.md) */
    a.t0 = prog_now();
    if (!once) {
        a.daemon = 1;
        status = daemon_run(&a, config, &so);
        goto out;
    }
    const double cpu0 = prog_cpu_seconds();
    int rc = 0;
    for (int pass = 0; pass < 5; pass++) {
        rc = ship_pass(&a, &so);
        if (rc <= 0)
            break;
        prog_log(INGEST_LOG_INFO, "files changed while shipping; shipping them again (pass %d)", pass + 2);
    }
    disconnect_core(&a);
    progress(&a, 1);
    const double secs = prog_now() - a.t0;
    printf("shipped: files=%llu unchanged=%llu bytes=%llu chunks=%llu chunks_new=%llu chunks_dedup=%llu chunk_bytes=%llu "
           "wire_bytes=%llu batches=%llu seconds=%.3f MB/s=%.1f cpu_seconds=%.3f throttle_wait_seconds=%.3f "
           "chunk_raw_bytes=%llu wait_build_seconds=%.3f wait_want_seconds=%.3f send_seconds=%.3f "
           "wait_ack_seconds=%.3f latency_p50_seconds=%.3f latency_p99_seconds=%.3f chunk_groups=%llu "
           "record_seconds=%.3f\n",
           (unsigned long long)a.t.files, (unsigned long long)a.t.unchanged, (unsigned long long)a.t.bytes,
           (unsigned long long)a.t.chunks,
           (unsigned long long)a.t.chunks_sent, (unsigned long long)a.t.chunks_dedup,
           (unsigned long long)a.t.chunk_bytes_sent, (unsigned long long)(a.t.wire_out + a.t.wire_in),
           (unsigned long long)a.t.batches_acked, secs, secs > 0 ? (double)a.t.bytes / 1e6 / secs : 0.0,
           prog_cpu_seconds() - cpu0, (double)a.throttle_wait_ms / 1000.0,
           (unsigned long long)a.t.chunk_bytes_raw, a.t.wait_build_s, a.t.wait_want_s, a.t.send_s, a.t.wait_ack_s,
           latency_quantile(&a, 0.50), latency_quantile(&a, 0.99), (unsigned long long)a.t.groups_sent, a.t.record_s);
    fflush(stdout);
    if (rc == 0) {
        status = 0;
    } else if (rc == -2 || a.t.batches_failed) {
        fprintf(stderr, "ingest-agent: %llu batch(es) were refused by the receiver; see the log above\n",
                (unsigned long long)a.t.batches_failed);
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
    free(a.lat);
    encoder_stop(&a);
    free(a.chunkbuf);
    ingest_session_destroy(a.ss);
    ingest_filetable_close(a.ft);
    ingest_havecache_close(a.have);
    ingest_store_close(a.st);
    ingest_codec_destroy(a.codec);
    ingest_codec_destroy(a.mcodec);
    free(a.mbuf);
    free(a.dict);
    ingest_throttle_destroy(a.throttle);
    ingest_secret_key_wipe(&a.key);
    ingest_agent_config_free(a.cfg);
    ingest_metrics_destroy(a.metrics);
    ingest_ctx_destroy(a.ctx);
    return status;
}
