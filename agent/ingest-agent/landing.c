/*
 * The receiver's landing rules at the agent (docs/protocol.md, "Landing
 * rules"): learned from LANDING on each connection, kept in
 * {state_dir}/landing so that batches built before the next connection
 * (the daemon's, the next --once run's) use them, and applied to the
 * senders, which refuse before reading a file what the core would refuse.
 *
 * {state_dir}/landing: one line "ingest-landing 1 PATH_MAX NAME_MAX LEN",
 * then LEN bytes of layout and a newline.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LANDING_FILE "landing"
#define LANDING_FILE_MAX (64 + INGEST_WIRE_LAYOUT_MAX + 2)

static int landing_path(const agent *a, char *p, size_t cap)
{
    return (size_t)snprintf(p, cap, "%s/" LANDING_FILE, a->cfg->state_dir) < cap ? 0 : -1;
}

/* Parse the file's bytes into *r: 0, or -1 with why[cap]. */
static int landing_parse(const char *buf, size_t n, ingest_wire_landing *r, char *why, size_t cap)
{
    const char *nl = memchr(buf, '\n', n);
    if (nl == NULL) {
        snprintf(why, cap, "no header line in its %zu bytes", n);
        return -1;
    }
    char head[80];
    const size_t hl = (size_t)(nl - buf);
    if (hl >= sizeof head) {
        snprintf(why, cap, "header line of %zu bytes (at most %zu)", hl, sizeof head - 1);
        return -1;
    }
    memcpy(head, buf, hl);
    head[hl] = '\0';
    unsigned pm = 0, nm = 0, len = 0, ver = 0;
    char end = 0;
    if (sscanf(head, "ingest-landing %u %u %u %u%c", &ver, &pm, &nm, &len, &end) != 4 || ver != 1) {
        snprintf(why, cap, "header \"%.60s\" is not \"ingest-landing 1 PATH_MAX NAME_MAX LEN\"", head);
        return -1;
    }
    if (pm == 0 || pm > INGEST_WIRE_LANDING_PATH_MAX || nm == 0 || nm > INGEST_WIRE_LANDING_NAME_MAX || len == 0 ||
        len > INGEST_WIRE_LAYOUT_MAX) {
        snprintf(why, cap, "path max %u (1..%d), name max %u (1..%d) or layout of %u bytes (1..%d) out of range", pm,
                 INGEST_WIRE_LANDING_PATH_MAX, nm, INGEST_WIRE_LANDING_NAME_MAX, len, INGEST_WIRE_LAYOUT_MAX);
        return -1;
    }
    const size_t rest = n - hl - 1;
    if (rest != (size_t)len + 1 || buf[hl + 1 + len] != '\n' || memchr(nl + 1, '\0', len) != NULL) {
        snprintf(why, cap, "after the header: %zu bytes, not a layout of %u bytes without NUL and a newline", rest,
                 len);
        return -1;
    }
    memset(r, 0, sizeof(*r));
    r->path_max = pm;
    r->name_max = nm;
    memcpy(r->layout, nl + 1, len);
    r->layout[len] = '\0';
    return 0;
}

void agent_landing_load(agent *a)
{
    char p[4096], why[200];
    if (landing_path(a, p, sizeof p) != 0)
        return;
    const int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno != ENOENT)
            prog_log(INGEST_LOG_WARN, "%s: %s; the receiver's landing rules are learned again on connecting",
                     prog_esc(p), strerror(errno));
        return;
    }
    char buf[LANDING_FILE_MAX + 1];
    size_t n = 0;
    for (;;) {
        const ssize_t r = read(fd, buf + n, sizeof buf - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n == sizeof buf)
            break;
    }
    close(fd);
    ingest_wire_landing r;
    if (n > LANDING_FILE_MAX) {
        snprintf(why, sizeof why, "more than %d bytes", LANDING_FILE_MAX);
    } else if (landing_parse(buf, n, &r, why, sizeof why) == 0) {
        a->landing = r;
        a->landing_known = 1;
        return;
    }
    prog_log(INGEST_LOG_WARN, "%s: %s; ignored (the receiver's landing rules are learned again on connecting)",
             prog_esc(p), why);
}

static int landing_save(agent *a)
{
    char p[4096], buf[LANDING_FILE_MAX + 1];
    if (landing_path(a, p, sizeof p) != 0)
        return -1;
    const size_t len = strlen(a->landing.layout);
    int n = snprintf(buf, sizeof buf, "ingest-landing 1 %u %u %zu\n", (unsigned)a->landing.path_max,
                     (unsigned)a->landing.name_max, len);
    memcpy(buf + n, a->landing.layout, len);
    n += (int)len;
    buf[n++] = '\n';
    buf[n] = '\0';
    return prog_write_file_durable(p, buf); /* the file, its rename and its directory: a cut keeps the rules */
}

int agent_landing_apply(agent *a, ingest_sender *s, ingest_ctx *sctx)
{
    if (!a->landing_known || s == NULL)
        return 0;
    if (ingest_sender_set_landing(s, a->landing.layout, a->landing.path_max, a->landing.name_max) < 0) {
        prog_log(INGEST_LOG_WARN, "the receiver's landing rules are not used: %s", ingest_ctx_errmsg(sctx));
        a->landing_known = 0;
        return -1;
    }
    return 0;
}

void agent_landing_learned(agent *a, const ingest_wire_landing *r)
{
    const int same = a->landing_known && a->landing.path_max == r->path_max && a->landing.name_max == r->name_max &&
                     strcmp(a->landing.layout, r->layout) == 0;
    a->landing = *r;
    a->landing_known = 1;
    (void)agent_landing_apply(a, a->landing_snd, a->landing_ctx);
    if (same)
        return;
    prog_log(INGEST_LOG_DEBUG, "the receiver's landing rules: layout \"%s\", paths up to %u bytes, names up to %u",
             prog_esc(r->layout), (unsigned)r->path_max, (unsigned)r->name_max);
    if (landing_save(a) != 0)
        prog_log(INGEST_LOG_WARN, "cannot keep the receiver's landing rules in %s: %s (used until the agent stops)",
                 prog_esc(a->cfg->state_dir), strerror(errno));
}

/* A connection without the landing feature (an older receiver, Kafka): no rules at the edge. */
void agent_landing_forget(agent *a)
{
    char p[4096];
    a->landing_known = 0;
    if (a->landing_snd != NULL && ingest_sender_set_landing(a->landing_snd, NULL, 0, 0) < 0)
        prog_log(INGEST_LOG_WARN, "%s", ingest_ctx_errmsg(a->landing_ctx)); /* forgetting cannot fail */
    if (landing_path(a, p, sizeof p) == 0 && unlink(p) != 0 && errno != ENOENT)
        prog_log(INGEST_LOG_WARN, "%s: %s", prog_esc(p), strerror(errno));
}

void agent_edge_refused_clear(agent *a)
{
    for (size_t i = 0; i < a->nedge_refused; i++)
        free(a->edge_refused[i]);
    a->nedge_refused = 0;
}

/*
 * The senders' on_refuse: the file's version is refused at the edge.  It is
 * logged once and counted with the core's refusals.  --once marks its file
 * table entry at once (INGEST_FILE_STATE_REFUSED: not tried again until it
 * changes; committed with the next ack or at the end of the pass); the
 * daemon keeps the path for build_batch, which marks the journaled version
 * (the sender may have read a spool copy, whose ctime differs) and leaves it
 * out of the after-ship list.
 */
void on_refuse(void *ud, const char *path, const ingest_sender_stat *st, const char *why)
{
    agent *a = ud;
    /* why names the file (shortened, as the core names it) */
    prog_log(INGEST_LOG_WARN, "refused at the edge by the receiver's landing rules (not sent until it changes): %s",
             prog_esc(why));
    __atomic_fetch_add(&a->report.t.refused_edge, 1, __ATOMIC_RELAXED);
    if (a->daemon) {
        if (a->nedge_refused == a->capedge_refused) {
            const size_t cap = a->capedge_refused ? a->capedge_refused * 2 : 8;
            char **n = realloc(a->edge_refused, cap * sizeof(*n));
            if (n == NULL)
                return; /* not marked: the file is found, and refused, again */
            a->edge_refused = n;
            a->capedge_refused = cap;
        }
        if ((a->edge_refused[a->nedge_refused] = strdup(path)) != NULL)
            a->nedge_refused++;
        return;
    }
    /* on the builder thread: queued for the main thread, which owns the store's write transactions */
    const ingest_file_state rs = { st->size, st->mtime_ns, st->ctime_ns, INGEST_FILE_STATE_REFUSED, 0 };
    int queued = 0;
    pthread_mutex_lock(&a->state.store_lock);
    if (a->nrefq == a->caprefq) {
        const size_t cap = a->caprefq ? a->caprefq * 2 : 8;
        struct agent_refq *n = realloc(a->refq, cap * sizeof(*n));
        if (n != NULL) {
            a->refq = n;
            a->caprefq = cap;
        }
    }
    if (a->nrefq < a->caprefq && (a->refq[a->nrefq].path = strdup(path)) != NULL) {
        a->refq[a->nrefq++].fs = rs;
        queued = 1;
    }
    pthread_mutex_unlock(&a->state.store_lock);
    if (!queued)
        prog_log(INGEST_LOG_WARN, "out of memory: %s is not marked refused (tried again on the next run)",
                 prog_esc(path));
}

void agent_refusals_record(agent *a)
{
    for (size_t i = 0; i < a->nrefq; i++) {
        const int rc = ingest_filetable_put(a->state.ft, a->refq[i].path, &a->refq[i].fs);
        if (rc == 0)
            a->refuse_uncommitted = 1;
        else
            prog_log(INGEST_LOG_WARN, "state store: %s (%s is tried again on the next run)", ingest_ctx_errmsg(a->ctx),
                     prog_esc(a->refq[i].path));
        free(a->refq[i].path);
    }
    a->nrefq = 0;
}
