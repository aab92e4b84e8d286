/* The edge daemon's open batch and its shipping from the journal (daemon_int.h). */
#include "daemon_int.h"

/* ---- the open batch ------------------------------------------------------- */

void dmn_open_reset(daemon_t *d)
{
    for (size_t i = 0; i < d->nof; i++)
        free((char *)d->of[i].path);
    d->nof = 0;
    d->of_bytes = 0;
    d->open_seq = 0;
    d->of_dirty = 0;
    d->of_spooled = 0;
}

/* Journal the open batch's file list (PENDING). */
int dmn_open_journal(daemon_t *d)
{
    if (d->open_seq == 0 || !d->of_dirty || d->nof == 0)
        return 0;
    char id[INGEST_JOURNAL_ID_MAX + 1];
    snprintf(id, sizeof(id), "%s%06llu", d->a->state.prefix, (unsigned long long)d->open_seq);
    /* the spool copies are fsynced one by one; their names (and directories) become durable here, once
     * per batch, before the journal names them (a power cut must not leave a batch without its copies) */
    for (size_t i = 0; i < d->nsrc && d->of_spooled; i++) {
        if (!d->src[i].spool)
            continue;
        const int fd = open(d->spool_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        const int r = fd >= 0 ? syncfs(fd) : -1;
        const int e = errno;
        if (fd >= 0)
            close(fd);
        if (r != 0) {
            prog_log(INGEST_LOG_ERROR, "spool %s: syncfs: %s; the batch is not journaled", d->spool_dir, strerror(e));
            return -1;
        }
        break;
    }
    if (dmn_store_check(d, ingest_journal_add(d->j, d->open_seq, id, d->of, d->nof), "journal") < 0)
        return -1;
    d->of_dirty = 0;
    d->of_spooled = 0;
    return 0;
}

int dmn_open_close(daemon_t *d)
{
    const int rc = dmn_open_journal(d);
    if (d->open_seq != 0 && d->nof == 0)
        dmn_spool_drop(d, d->open_seq); /* never journaled: nothing may stay in its spool */
    if (d->open_seq != 0)
        prog_log(INGEST_LOG_DEBUG, "batch %s%06llu closed: %zu files, %llu bytes", d->a->state.prefix,
                 (unsigned long long)d->open_seq, d->nof, (unsigned long long)d->of_bytes);
    const int journaled = d->open_seq != 0 && d->nof > 0 && rc == 0;
    dmn_open_reset(d);
    if (journaled)
        dmn_queue_recount(d); /* the status counts it among the queued batches from now on */
    return rc;
}

int dmn_open_add(daemon_t *d, const dsource *s, const char *rel, const char *path, const ingest_sender_stat *st)
{
    const uint64_t maxf = d->a->cfg->batch_max_files, maxb = d->a->cfg->batch_max_bytes;
    if (d->open_seq != 0 && (d->nof >= maxf || (d->nof > 0 && d->of_bytes + st->size > maxb)))
        if (dmn_open_close(d) < 0)
            return -1;
    if (d->open_seq == 0) {
        d->open_seq = d->a->state.seq++;
        if (save_seq(d->a->cfg->state_dir, d->a->state.seq) != 0) {
            if (errno == ENOSPC || errno == EDQUOT) { /* backpressure (said once): not taken, a later walk tries */
                dmn_store_nospace(d, "state_dir/next_batch_seq", strerror(errno));
                d->a->state.seq--;
                d->open_seq = 0;
                return 0;
            }
            prog_log(INGEST_LOG_ERROR, "cannot save the batch sequence in %s: %s", d->a->cfg->state_dir,
                     strerror(errno));
            return -1;
        }
        d->open_at = d->now;
    }
    if (s->spool) {
        const int c = dmn_spool_copy(d, d->open_seq, s, rel, st);
        if (c != 0) {
            if (c == 1) /* changed meanwhile (2: no room, backpressure) */
                dmn_schedule_scan(d, d->now + DEBOUNCE_MS / 1000.0);
            return 0; /* not taken now; a later walk tries again */
        }
        d->of_spooled = 1;
    }
    if (d->nof == d->capof) {
        const size_t nc = d->capof ? d->capof * 2 : 256;
        ingest_journal_file *nf = realloc(d->of, nc * sizeof(*nf));
        if (nf == NULL)
            return -1;
        d->of = nf;
        d->capof = nc;
    }
    char *p = strdup(path);
    if (p == NULL)
        return -1;
    d->of[d->nof].path = p;
    d->of[d->nof].size = st->size;
    d->of[d->nof].mtime_ns = st->mtime_ns;
    d->of[d->nof].ctime_ns = st->ctime_ns;
    d->of[d->nof].ino = st->ino;
    d->nof++;
    d->of_bytes += st->size;
    d->of_dirty = 1;
    d->q_files++;
    d->q_bytes += st->size;
    d->files_taken++;
    d->bytes_taken += st->size;
    if (d->nof >= maxf || d->of_bytes >= maxb)
        return dmn_open_close(d);
    return 0;
}

/* ---- shipping ----------------------------------------------------------------- */

/*
 * Wait before the next connection, doubling from BACKOFF_MIN_MS to
 * BACKOFF_MAX_MS: a failed connect (what: "core unreachable"), or a link
 * that failed or a batch the core failed (what says so; the core's reason
 * was logged by the edge).  Only an acknowledged batch sets it back
 * (record_ack): a core that takes the connection and fails the batch each
 * time (bronze full) is not sent the batch again twice a second for ever.
 */
static void backoff(daemon_t *d, const char *what)
{
    if (stopping)
        return; /* (a connection cut by the stop) */
    d->backoff_ms = d->backoff_ms == 0 ? BACKOFF_MIN_MS : d->backoff_ms * 2;
    if (d->backoff_ms > BACKOFF_MAX_MS)
        d->backoff_ms = BACKOFF_MAX_MS;
    /* jitter: 50%..100% of the step */
    const double ms = d->backoff_ms * (0.5 + 0.5 * (double)rand() / RAND_MAX);
    d->next_connect = d->now + ms / 1000.0;
    prog_log(INGEST_LOG_WARN, "%s; next attempt in %.1f s (%llu files, %llu bytes queued)", what, ms / 1000.0,
             (unsigned long long)d->q_files, (unsigned long long)d->q_bytes);
}

static int files_differ(const ingest_journal_batch *jb, const ingest_journal_file *f, size_t n)
{
    if (n != jb->nfiles)
        return 1;
    for (size_t i = 0; i < n; i++)
        if (strcmp(f[i].path, jb->files[i].path) != 0 || f[i].size != jb->files[i].size ||
            f[i].mtime_ns != jb->files[i].mtime_ns || f[i].ctime_ns != jb->files[i].ctime_ns)
            return 1;
    return 0;
}

void dmn_queue_recount(daemon_t *d)
{
    uint64_t nb = 0;
    if (ingest_journal_queued(d->j, &nb, &d->q_files, &d->q_bytes) < 0)
        return;
    d->q_batches = nb;
    if (d->backpressure && d->q_files < d->queue_files && d->q_bytes < d->queue_bytes) {
        prog_log(INGEST_LOG_INFO, "backpressure off: %llu files, %llu bytes queued", (unsigned long long)d->q_files,
                 (unsigned long long)d->q_bytes);
        d->backpressure = 0;
        dmn_schedule_scan(d, d->now);
    }
}

static int forget(daemon_t *d, uint64_t seq)
{
    const int rc = ingest_journal_remove(d->j, seq);
    if (rc < 0)
        prog_log(INGEST_LOG_ERROR, "journal: %s", ingest_ctx_errmsg(d->a->ctx));
    else
        dmn_spool_drop(d, seq); /* after the ack (or the drop) is journaled */
    dmn_queue_recount(d);
    return rc;
}

/* A file built into a batch is the version taken (journaled); an inode of 0 is unknown (older records). */
static int same_as_taken(const ingest_journal_file *taken, const ingest_journal_file *built)
{
    return taken->size == built->size && taken->mtime_ns == built->mtime_ns && taken->ctime_ns == built->ctime_ns &&
           (taken->ino == 0 || taken->ino == built->ino);
}

/* A dship's build records what the sender said (replayed on the daemon's thread): skips and refusals. */
typedef struct brec {
    char *path;
    int reason; /* INGEST_SKIP_*, or -1: refused at the edge */
    ingest_sender_stat st;
    char *why;
} brec;

/*
 * A journaled batch being shipped: what ship_one built for it.  On a
 * pipelined link it is kept, once the core answered RECEIVED, until its
 * ACK came (d->pend, oldest first, as the edge holds the batches).
 */
typedef struct dship {
    uint64_t seq;
    ingest_journal_batch *jb;
    const char **paths;
    ingest_journal_file *got; /* the versions built into the batch (their paths point into b) */
    size_t ngot;
    ingest_sender_source *bsrc;
    char **spooled;
    ingest_sender *s;
    ingest_sender_batch *b;     /* ours to destroy unless edge_owned */
    int edge_owned;             /* the edge holds b as pending (it destroys it when the ACK comes) */
    int acked;                  /* the ACK was recorded: the after-ship action runs once b is gone */
    int rc;                     /* of recording the ACK from the edge's hook (< 0: a local failure) */
    ingest_journal_file *after; /* with files refused: the after-ship list without them */
    size_t nafter;
    char **eref; /* the files refused at the edge when it was built (a->edge_refused then) */
    size_t neref;
    /* the build (build_run, on the builder thread or not): its result, what the sender said meanwhile */
    size_t npaths;
    int build_rc;
    char build_err[512];
    brec *rec;
    size_t nrec, caprec;
    int rec_lost; /* a record could not be kept (no memory) */
    /* the prefix its id is built from (taken on the main thread: a new instance may come meanwhile): a
     * SENT batch's own (a replay keeps its id), else the instance's now; id: a PENDING batch's new id */
    char prefix[INGEST_JOURNAL_ID_MAX + 1], id[INGEST_JOURNAL_ID_MAX + 1];
    /* the sender's context: its messages (building on the builder thread, reading at send time on an
     * encoder thread) are its own, never mixed with the daemon's (a->ctx) */
    ingest_ctx *ctx;
} dship;

static int brec_add(dship *x, const char *path, int reason, const ingest_sender_stat *st, const char *why)
{
    if (x->nrec == x->caprec) {
        const size_t nc = x->caprec ? x->caprec * 2 : 8;
        brec *n = realloc(x->rec, nc * sizeof(*n));
        if (n == NULL) {
            x->rec_lost = 1;
            return -1;
        }
        x->rec = n;
        x->caprec = nc;
    }
    brec *r = &x->rec[x->nrec];
    memset(r, 0, sizeof(*r));
    r->reason = reason;
    if (st != NULL)
        r->st = *st;
    if ((r->path = strdup(path)) == NULL || (why != NULL && (r->why = strdup(why)) == NULL)) {
        free(r->path);
        x->rec_lost = 1;
        return -1;
    }
    x->nrec++;
    return 0;
}

static void brec_clear(dship *x)
{
    for (size_t i = 0; i < x->nrec; i++) {
        free(x->rec[i].path);
        free(x->rec[i].why);
    }
    x->nrec = 0;
}

static void rec_skip(void *ud, const char *path, int reason)
{
    (void)brec_add(ud, path, reason, NULL, NULL);
}

static void rec_refuse(void *ud, const char *path, const ingest_sender_stat *st, const char *why)
{
    (void)brec_add(ud, path, -1, st, why);
}

/*
 * Build x's journaled batch from x->paths[0, x->npaths) (its files, or the
 * part of them still to ship, in its order): 1 with x->s, x->b and
 * x->got[0, x->ngot) (the versions chunked; their paths point into x->b),
 * 0 when none of the files is left, < 0 a failure (its message in
 * x->build_err).  Touches nothing of the daemon's but a->landing (read;
 * set only on connecting, never while a build runs): it may run on the
 * builder thread; what the sender says goes to x (brec_add), its errors to
 * x->ctx.
 */
static int build_batch(daemon_t *d, dship *x)
{
    agent *a = d->a;
    const ingest_journal_batch *jb = x->jb;
    ingest_journal_file *got = x->got;
    ingest_sender_opts o = d->base;
    o.want_file = NULL;
    o.on_skip = rec_skip; /* a file gone since it was taken: counted, said once per batch (replayed) */
    o.on_refuse = rec_refuse;
    o.userdata = x;
    o.sources = x->bsrc;
    o.batch_prefix = x->prefix;
    o.batch_seq = jb->seq;
    o.max_files = x->npaths;
    o.max_bytes = UINT64_MAX / 4;
    x->ngot = 0;
    int rc = ingest_sender_create(x->ctx, &o, &x->s);
    if (rc == 0)
        (void)agent_landing_apply(a, x->s, x->ctx);
    if (rc == 0)
        rc = ingest_sender_scan_list(x->s, x->paths, x->npaths);
    if (rc == 0)
        rc = ingest_sender_next_batch(x->s, &x->b);
    if (rc < 0) {
        snprintf(x->build_err, sizeof(x->build_err), "%s", ingest_ctx_errmsg(x->ctx));
        return rc;
    }
    if (rc == 0)
        return 0;
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(x->b, &bs);
    for (uint64_t i = 0; i < bs.files; i++) {
        ingest_sender_file_info info;
        if (ingest_sender_batch_file(x->b, i, &info) != 0)
            continue;
        got[x->ngot].path = info.path;
        got[x->ngot].size = info.size;
        got[x->ngot].mtime_ns = info.mtime_ns;
        got[x->ngot].ctime_ns = info.ctime_ns;
        got[x->ngot].ino = info.ino;
        x->ngot++;
    }
    /* A spool copy has its own ctime and inode: the version shipped is the original's (journaled) one. */
    for (size_t i = 0, k = 0; i < x->ngot && k < jb->nfiles; i++) {
        while (k < jb->nfiles && strcmp(jb->files[k].path, got[i].path) != 0)
            k++;
        const char *rel = NULL;
        const dsource *src = k < jb->nfiles ? dmn_source_of(d, got[i].path, &rel) : NULL;
        if (src != NULL && x->spooled[src - d->src] != NULL && got[i].size == jb->files[k].size &&
            got[i].mtime_ns == jb->files[k].mtime_ns) {
            got[i].ctime_ns = jb->files[k].ctime_ns;
            got[i].ino = jb->files[k].ino;
        }
        if (k < jb->nfiles)
            k++;
    }
    return 1;
}

/*
 * The files of jb that changed since they were taken (size, mtime, ctime
 * or inode differ between got, as just built, and the journal) leave the
 * batch: paths[0, *n) becomes the files still as taken, and the number of
 * files that left is returned.  They go back to discovery, which sees them
 * settle again before taking them: a batch never carries a version of a
 * file that did not settle (the file may have been taken between two
 * writes of a writer that paused, and written again while the batch
 * waited for batch.max_wait or for the core).
 */
static size_t drop_changed(const ingest_journal_batch *jb, const ingest_journal_file *got, size_t ngot,
                           const char **paths, size_t *n)
{
    size_t keep = 0, changed = 0;
    for (size_t i = 0, k = 0; i < ngot; i++) {
        while (k < jb->nfiles && strcmp(jb->files[k].path, got[i].path) != 0)
            k++;
        if (k < jb->nfiles && same_as_taken(&jb->files[k], &got[i])) {
            paths[keep++] = jb->files[k].path;
        } else {
            changed++;
            prog_log(INGEST_LOG_INFO, "batch %s: %s changed since it was taken; it leaves the batch and settles again",
                     jb->id, prog_esc(got[i].path));
        }
        if (k < jb->nfiles)
            k++;
    }
    *n = keep;
    return changed;
}

/* Files of jb not in got[0, n) start settling afresh when discovery sees them again. */
static void resettle_missing(daemon_t *d, const dship *x, const ingest_journal_file *got, size_t n)
{
    const ingest_journal_batch *jb = x->jb;
    int any = 0, now = 0;
    for (size_t i = 0, k = 0; i < jb->nfiles; i++) {
        if (k < n && strcmp(jb->files[i].path, got[k].path) == 0) {
            k++;
            continue;
        }
        (void)ingest_journal_forget_seen(d->j, jb->files[i].path);
        any = 1;
        /* One that could not be read (no permission, an I/O error) is taken again by the next periodic walk
         * (rescan_interval) or when it is written again: a walk at once would take it, fail and walk again
         * without end, every file of the tree looked at each time.  One that changed or went is looked at
         * now. */
        int unreadable = 0;
        for (size_t r = 0; r < x->nrec && !unreadable; r++)
            unreadable = x->rec[r].reason == INGEST_SKIP_UNREADABLE &&
                         strcmp(x->rec[r].path, jb->files[i].path) == 0;
        now |= !unreadable;
    }
    if (any)
        (void)dmn_store_check(d, ingest_journal_flush(d->j), "state store");
    if (now)
        dmn_schedule_scan(d, d->now);
}

/*
 * The after-ship action of acked batch jb, then its record goes.  While a
 * file's action is deferred (some process has it open) the ACKED record
 * stays in the journal and is retried (ship_queue, at most once a second,
 * and after a restart); its spool copies go at once.
 */
static int finish_acked(daemon_t *d, const ingest_journal_batch *jb, const ingest_journal_file *files, size_t n)
{
    if (d->once) {
        /* --once runs no after-ship action: a batch that needs one (the daemon queued it, --once replayed
         * it) stays ACKED, and the daemon finishes it when it starts; the others go */
        for (size_t i = 0; i < n; i++) {
            const char *rel = NULL;
            const dsource *s = dmn_source_of(d, files[i].path, &rel);
            if (s != NULL && s->after != AFTER_KEEP)
                return 0;
        }
        return forget(d, jb->seq);
    }
    if (dmn_after_ship(d, jb->seq, files, n) == 0) {
        dmn_defer_log_drop(d, jb->seq);
        return forget(d, jb->seq);
    }
    dmn_spool_drop(d, jb->seq);
    d->defer_pending = 1;
    return 0;
}

/* x's batch and sender go (they hold its files open: a lease is refused while any descriptor is open, ours
 * too), then an acked batch's after-ship action runs and x goes. */
static int dship_end(daemon_t *d, dship *x)
{
    int rc = 0;
    if (!x->edge_owned)
        ingest_sender_batch_destroy(x->b);
    ingest_sender_destroy(x->s);
    if (x->ctx != NULL)
        ingest_ctx_destroy(x->ctx); /* after the batch: the edge destroyed a pending one before settle */
    /* the journaled versions are those shipped (a file that changed left the batch), or files now gone */
    if (x->acked)
        rc = x->after != NULL ? finish_acked(d, x->jb, x->after, x->nafter)
                              : finish_acked(d, x->jb, x->jb->files, x->jb->nfiles);
    free(x->after);
    brec_clear(x);
    free(x->rec);
    for (size_t i = 0; i < x->neref; i++)
        free(x->eref[i]);
    free(x->eref);
    for (size_t i = 0; x->spooled != NULL && i < d->nsrc; i++)
        free(x->spooled[i]);
    free(x->spooled);
    free(x->bsrc);
    free(x->paths);
    free(x->got);
    ingest_journal_batch_free(d->j, x->jb);
    free(x);
    return rc;
}

/*
 * Batch b of x was acknowledged as landed (or landed before): its refused
 * files are marked, the batch is journaled ACKED with the file table, and
 * x->acked set (the after-ship action is dship_end's).  0, or < 0 when
 * the journal could not record it (the batch is shipped again later: the
 * core answers a duplicate).
 */
static int record_ack(daemon_t *d, dship *x, ingest_sender_batch *b)
{
    agent *a = d->a;
    const ingest_journal_batch *jb = x->jb;
    ingest_journal_file *got = x->got;
    size_t ngot = x->ngot;
    uint64_t withdrawn = 0, withdrawn_bytes = 0;
    int rc = 0;
    d->last_ack_ns = dmn_wall_now_ns();
    d->backoff_ms = 0; /* progress: a failure after it starts the back-off afresh */
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs); /* the refusals came with the answer */
    if (bs.refused > 0 || x->neref > 0) {
        /* A file the core refused alone stays where it is (no after-ship action) and counts as
         * shipped: it is not sent again until it changes.  got[i] is file i of the batch.  Its file
         * table entry says so (INGEST_FILE_STATE_REFUSED, in the store transaction of the ack), so
         * the after-ship pass skips it whenever it runs (now, deferred, after a restart); the list
         * for now (jb's files, whose paths outlive the batch) leaves it out too. */
        size_t keep = 0, nafter = 0;
        x->after = calloc(jb->nfiles ? jb->nfiles : 1, sizeof(*x->after));
        if (x->after == NULL)
            return INGEST_ENOMEM;
        for (size_t k = 0; k < jb->nfiles; k++) {
            int refused = 0;
            for (size_t i = 0; i < ngot && !refused; i++) {
                ingest_sender_file_info fi;
                refused = ingest_sender_batch_file(b, i, &fi) == 0 && fi.refused != NULL &&
                          strcmp(fi.path, jb->files[k].path) == 0;
            }
            for (size_t r = 0; r < x->neref && !refused; r++)
                refused = strcmp(x->eref[r], jb->files[k].path) == 0; /* refused at the edge */
            if (!refused)
                x->after[nafter++] = jb->files[k];
        }
        /* vanished while the batch was shipped: withdrawn by the edge; not shipped */
        for (size_t i = 0; i < ngot; i++) {
            ingest_sender_file_info fi;
            if (ingest_sender_batch_file(b, i, &fi) == 0 && fi.refused != NULL) {
                if (ingest_edge_file_withdrawn(&fi)) {
                    /* it never landed: no file table entry, so the file, should it come back (moved
                     * away and back, or copied with its mtime), is found and shipped like a new one */
                    withdrawn++;
                    withdrawn_bytes += fi.size;
                    if ((rc = ingest_filetable_del(a->state.ft, got[i].path)) < 0 && rc != INGEST_ENOTFOUND) {
                        prog_log(INGEST_LOG_ERROR, "state store: %s", ingest_ctx_errmsg(a->ctx));
                        return rc;
                    }
                    rc = 0;
                    continue;
                }
                const ingest_file_state rs = { got[i].size, got[i].mtime_ns, got[i].ctime_ns,
                                               INGEST_FILE_STATE_REFUSED, 0 };
                if ((rc = ingest_filetable_put(a->state.ft, got[i].path, &rs)) < 0) {
                    prog_log(INGEST_LOG_ERROR, "state store: %s", ingest_ctx_errmsg(a->ctx));
                    return rc;
                }
                continue; /* set_state records the others */
            }
            got[keep++] = got[i];
        }
        ngot = keep;
        x->ngot = keep;
        x->nafter = nafter;
        d->files_refused += bs.refused - withdrawn;
        d->vanished += withdrawn;
        if (withdrawn > 0 && a->report.metrics != NULL)
            ingest_metric_add(a->report.m.files_skipped, "vanished", withdrawn);
    }
    if ((rc = dmn_store_check(d, ingest_journal_set_state(d->j, x->seq, INGEST_JOURNAL_ACKED, got, ngot),
                              "journal")) < 0)
        return rc; /* the batch is shipped again later: the core answers a duplicate */
    /* the shipped versions' whole-file hashes: a later change of ctime alone is compared against them */
    for (uint64_t i = 0; i < bs.files; i++) {
        ingest_sender_file_info info;
        if (ingest_sender_batch_file(b, i, &info) == 0 &&
            !ingest_edge_file_withdrawn(&info)) /* a withdrawn file has no entry */
            (void)ingest_filetable_set_hash(a->state.ft, info.path, info.hash);
    }
    /* the have-cache is read over Kafka only (over TCP the core's WANT is the authority) */
    const uint64_t have = a->cfg->transport == INGEST_TRANSPORT_KAFKA ? bs.chunks : 0;
    for (uint64_t i = 0; i < have; i++) {
        uint8_t id[INGEST_ID_BYTES];
        uint32_t len;
        uint64_t off;
        if (ingest_sender_batch_chunk_info(b, i, id, &len, &off) == 0 && ingest_havecache_add(a->state.have, id) < 0)
            break;
    }
    (void)dmn_store_check(d, ingest_store_commit(a->state.st), "state store");
    agent_metrics_latency(a, (double)(dmn_wall_now_ns() - jb->created_ns) / 1e9, bs.files);
    d->batches_acked++;
    d->shipped_files += bs.files - withdrawn;
    d->shipped_bytes += bs.bytes - withdrawn_bytes;
    prog_log(INGEST_LOG_INFO, "batch %s acked: %llu files, %llu bytes", jb->id,
             (unsigned long long)(bs.files - withdrawn), (unsigned long long)(bs.bytes - withdrawn_bytes));
    x->acked = 1;
    return 0;
}

/* The edge's on_acked hook (main.c): a pending batch's ACK came (a batch acknowledged at once is
 * recorded by ship_one when finish_batch returns). */
void dmn_edge_acked(agent *a, ingest_sender_batch *b)
{
    daemon_t *d = a->userdata;
    for (unsigned i = 0; d != NULL && i < d->npend; i++) {
        dship *x = d->pend[i];
        if (x->b != b || !x->edge_owned)
            continue;
        x->rc = record_ack(d, x, b);
        x->b = NULL; /* the edge destroys it now */
        return;
    }
}

/* 1 when batch seq has spool copies (state_dir/spool/{seq} is there). */
static int spooled(const daemon_t *d, uint64_t seq)
{
    char p[PATH_MAX];
    struct stat st;
    return (size_t)snprintf(p, sizeof(p), "%s/%llu", d->spool_dir, (unsigned long long)seq) < sizeof(p) &&
           lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* 1 for a whole-batch refusal whose cause passes at the core (room, a bronze writable again, load). */
static int refusal_passes(int code)
{
    return code == INGEST_EIO || code == INGEST_ENOSPC || code == INGEST_EBUSY || code == INGEST_ETIMEDOUT ||
           code == INGEST_ENOMEM;
}

/*
 * Batch seq (journaled as id), not landed, has spool copies: they may be
 * the only copies left (the originals rotated away), so it is kept when
 * the cause passes (abandoned: refusal 0; refused for a reason that
 * passes) and goes again under its id, never forgotten with them.  The
 * same batch kept again and again waits a growing back-off (a topic that
 * keeps dropping its records).  1 kept, 0 not (forget it), < 0 a journal
 * failure.
 */
static int keep_spooled(daemon_t *d, uint64_t seq, const char *id, int refusal)
{
    if (!spooled(d, seq) || (refusal != 0 && !refusal_passes(refusal)))
        return 0;
    d->kept_n = d->kept_seq == seq ? d->kept_n + 1 : 1;
    d->kept_seq = seq;
    const int rc = ingest_journal_renew(d->j, seq, id);
    if (rc < 0) {
        prog_log(INGEST_LOG_ERROR, "journal: %s", ingest_ctx_errmsg(d->a->ctx));
        return rc;
    }
    dmn_queue_recount(d);
    if ((refusal != 0 || d->kept_n > 3) && !stopping && !reload_requested)
        backoff(d, "batch not landed (its reason above): kept with its spool copies, it goes again");
    else
        prog_log(INGEST_LOG_INFO, "batch %s not landed: kept with its spool copies, it goes again", id);
    return 1;
}

/*
 * After each call that may read ACKs of pending batches: a batch the edge
 * holds no more had its ACK.  Landed: its after-ship action runs.  Not
 * landed (refused, or not landed over Kafka: the edge logged why): its
 * record goes and its files are found again, as for a batch refused at
 * once.  link_gone: the edge dropped what it held (the connection failed
 * or was closed): those batches stay journaled SENT and are replayed
 * under their ids.  Returns 0, or the first local failure (< 0).
 */
static int settle(daemon_t *d, int link_gone)
{
    int rc = 0;
    unsigned keep = 0;
    for (unsigned i = 0; i < d->npend; i++) {
        dship *x = d->pend[i];
        int held = 0;
        for (unsigned k = 0; x->b != NULL && d->a->net.edge != NULL && k < INGEST_EDGE_PENDING_MAX; k++)
            held |= ingest_edge_pending_at(d->a->net.edge, k) == x->b;
        if (held && !link_gone) {
            d->pend[keep++] = x;
            continue;
        }
        int r = x->rc;
        if (x->b != NULL && !link_gone) { /* not landed: the ACK said why */
            int f = keep_spooled(d, x->seq, x->jb->id, d->a->report.t.ship.last_refusal);
            if (f == 0) {
                f = forget(d, x->seq);
                dmn_schedule_scan(d, d->now);
            }
            if (r == 0 && f < 0)
                r = f;
        }
        x->b = NULL;
        const int e = dship_end(d, x);
        if (r == 0)
            r = e;
        if (rc == 0 && r < 0)
            rc = r;
    }
    d->npend = keep;
    return rc;
}

/* Close the connection: pending batches stay journaled SENT (replayed under their ids). */
static void dmn_disconnect(daemon_t *d)
{
    (void)settle(d, 0); /* those whose ACKs came first */
    disconnect_core(d->a);
    (void)settle(d, 1);
}

/* Read the pending batches' ACKs: 0, 1 the connection failed (they stay SENT), < 0 a local failure. */
static void drop_prebuilt(daemon_t *d);
static int drain(daemon_t *d)
{
    if (d->npend == 0)
        return 0;
    if (d->a->net.edge == NULL || ingest_edge_wait_pending(d->a->net.edge) < 0) {
        drop_prebuilt(d);
        dmn_disconnect(d);
        if (!stopping && !reload_requested)
            backoff(d, "the connection to the core failed, or the core failed a batch, before the acks of the "
                       "batches sent");
        return 1;
    }
    return settle(d, 0);
}

/*
 * Set up the build of journaled batch jb (PENDING or SENT, seq): *out
 * with its paths and sources (a spooled source is read from the spool).
 * 0, or < 0 (jb freed).
 */
static int prepare_start(daemon_t *d, uint64_t seq, ingest_journal_batch *jb, dship **out)
{
    dship *x = calloc(1, sizeof(*x));
    *out = NULL;
    if (x == NULL) {
        ingest_journal_batch_free(d->j, jb);
        return INGEST_ENOMEM;
    }
    x->seq = seq;
    x->jb = jb;
    if ((x->ctx = ingest_ctx_create(NULL)) == NULL) {
        (void)dship_end(d, x);
        return INGEST_ENOMEM;
    }
    ingest_ctx_set_log(x->ctx, prog_lib_log, NULL,
                       d->a->cfg->log_level >= INGEST_LOG_DEBUG ? INGEST_LOG_DEBUG : INGEST_LOG_WARN);
    x->paths = calloc(jb->nfiles ? jb->nfiles : 1, sizeof(*x->paths));
    x->got = calloc(jb->nfiles ? jb->nfiles : 1, sizeof(*x->got));
    x->bsrc = calloc(d->nsrc, sizeof(*x->bsrc));
    x->spooled = calloc(d->nsrc, sizeof(*x->spooled));
    if (x->paths == NULL || x->got == NULL || x->bsrc == NULL || x->spooled == NULL) {
        (void)dship_end(d, x);
        return INGEST_ENOMEM;
    }
    for (size_t i = 0; i < d->nsrc; i++) {
        x->bsrc[i] = d->ssrc[i];
        char sp[PATH_MAX];
        struct stat st;
        if ((size_t)snprintf(sp, sizeof(sp), "%s/%llu/%s", d->spool_dir, (unsigned long long)seq, d->src[i].name) <
                sizeof(sp) &&
            lstat(sp, &st) == 0 && S_ISDIR(st.st_mode)) {
            if ((x->spooled[i] = strdup(sp)) == NULL) {
                (void)dship_end(d, x);
                return INGEST_ENOMEM;
            }
            x->bsrc[i].path = x->spooled[i];
        }
    }
    x->npaths = jb->nfiles;
    for (size_t i = 0; i < jb->nfiles; i++)
        x->paths[i] = jb->files[i].path;
    snprintf(x->prefix, sizeof(x->prefix), "%s", d->a->state.prefix);
    if (jb->state == INGEST_JOURNAL_SENT) {
        /* a replay goes under its id, whatever the instance is now: "{prefix}{seq, at least 6 digits}" */
        char num[24];
        const size_t nl = (size_t)snprintf(num, sizeof(num), "%06llu", (unsigned long long)seq);
        const size_t il = strlen(jb->id);
        if (il > nl && strcmp(jb->id + il - nl, num) == 0)
            snprintf(x->prefix, sizeof(x->prefix), "%.*s", (int)(il - nl), jb->id);
    }
    *out = x;
    return 0;
}

/*
 * Build x from its files as they were taken (x->build_rc as build_batch
 * returns); each round drops at least one file that changed, so this
 * ends.  Touches only x (and reads the daemon's sources): the builder
 * thread runs it for the next batch while the daemon ships one.
 */
static void build_run(daemon_t *d, dship *x)
{
    int rc;
    for (;;) {
        brec_clear(x); /* what the last round said is what counts */
        rc = build_batch(d, x);
        if (rc <= 0 || drop_changed(x->jb, x->got, x->ngot, x->paths, &x->npaths) == 0)
            break;
        ingest_sender_batch_destroy(x->b);
        ingest_sender_destroy(x->s);
        x->b = NULL;
        x->s = NULL;
        x->ngot = 0;
        if (x->npaths == 0) {
            rc = 0;
            break;
        }
    }
    ingest_sender_trim(x->s); /* the batch stays; the walk's and chunking's buffers and threads go */
    x->build_rc = rc;
}

/*
 * On the daemon's thread, after build_run: what the sender said is said
 * (vanished files counted, refusals marked), the journal follows the build.
 * 1 with x ready to send, 0 nothing to send (none of its files is left, or
 * it was rebuilt under another id: its record went), < 0 a local failure;
 * x is gone unless 1.
 */
static int prepare_finish(daemon_t *d, dship *x)
{
    agent *a = d->a;
    ingest_journal_batch *jb = x->jb;
    const uint64_t seq = x->seq;
    int rc = x->build_rc;
    agent_edge_refused_clear(a);
    for (size_t i = 0; i < x->nrec; i++) {
        const brec *r = &x->rec[i];
        if (r->reason < 0)
            on_refuse(a, r->path, &r->st, r->why != NULL ? r->why : r->path);
        else
            dmn_on_skip(a, r->path, r->reason);
    }
    if (x->rec_lost)
        prog_log(INGEST_LOG_WARN, "batch %s: out of memory: files skipped or refused while it was built are not all "
                 "said", jb->id);
    if (rc < 0)
        prog_log(INGEST_LOG_ERROR, "batch %s: %s", jb->id, x->build_err);
    /* Files refused at the edge (on_refuse): their journaled version is marked refused (the sender may
     * have read a spool copy, whose ctime differs), so discovery passes them over until they change and
     * no after-ship action touches them; without the mark the batch does not go. */
    for (size_t r = 0; r < a->nedge_refused && rc >= 0; r++) {
        for (size_t k = 0; k < jb->nfiles; k++) {
            if (strcmp(jb->files[k].path, a->edge_refused[r]) != 0)
                continue;
            const ingest_file_state rs = { jb->files[k].size, jb->files[k].mtime_ns, jb->files[k].ctime_ns,
                                           INGEST_FILE_STATE_REFUSED, 0 };
            const int mrc = ingest_filetable_put(a->state.ft, jb->files[k].path, &rs);
            if (mrc < 0) {
                prog_log(INGEST_LOG_ERROR, "batch %s: state store: %s", jb->id, ingest_ctx_errmsg(a->ctx));
                rc = mrc;
            }
            break;
        }
    }
    {
        char where[INGEST_JOURNAL_ID_MAX + 16];
        snprintf(where, sizeof(where), "batch %s", jb->id);
        dmn_vanished_say(d, where);
    }
    if (rc < 0)
        goto out;
    resettle_missing(d, x, x->got, x->ngot);
    /* the files refused at the edge while building it: its ACK may come after the next batch was built */
    if (rc > 0 && a->nedge_refused > 0) {
        if ((x->eref = calloc(a->nedge_refused, sizeof(*x->eref))) == NULL) {
            rc = INGEST_ENOMEM;
            goto out;
        }
        for (; x->neref < a->nedge_refused; x->neref++)
            if ((x->eref[x->neref] = strdup(a->edge_refused[x->neref])) == NULL) {
                rc = INGEST_ENOMEM;
                goto out;
            }
    }
    if (rc == 0) {
        prog_log(INGEST_LOG_INFO, "batch %s: none of its %zu files is left to ship", jb->id, jb->nfiles);
        rc = forget(d, seq);
        goto out;
    }
    if (strcmp(ingest_sender_batch_id(x->b), jb->id) != 0 && jb->state == INGEST_JOURNAL_PENDING) {
        /* journaled under an earlier instance (agent_take_instance), never sent: it goes under its new id */
        snprintf(x->id, sizeof(x->id), "%s", ingest_sender_batch_id(x->b));
        prog_log(INGEST_LOG_DEBUG, "batch %s goes as %s (a new instance)", jb->id, x->id);
        if ((rc = ingest_journal_add(d->j, seq, x->id, x->got, x->ngot)) < 0) {
            prog_log(INGEST_LOG_ERROR, "journal: %s", ingest_ctx_errmsg(a->ctx));
            goto out;
        }
        jb->id = x->id;
        dmn_queue_recount(d);
    }
    if (strcmp(ingest_sender_batch_id(x->b), jb->id) != 0) {
        prog_log(INGEST_LOG_ERROR, "batch %s rebuilt as %s: dropped (its files will be found again)", jb->id,
                 ingest_sender_batch_id(x->b));
        rc = forget(d, seq);
        goto out;
    }
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(x->b, &bs);
    d->bytes_read += bs.bytes;
    a->report.t.bytes_read += bs.bytes;
    if (files_differ(jb, x->got, x->ngot)) {
        if (jb->state == INGEST_JOURNAL_PENDING) {
            /* never sent: record what will really go, so a replay after a crash is the same batch */
            if ((rc = ingest_journal_add(d->j, seq, jb->id, x->got, x->ngot)) < 0) {
                prog_log(INGEST_LOG_ERROR, "journal: %s", ingest_ctx_errmsg(a->ctx));
                goto out;
            }
            dmn_queue_recount(d);
        } else {
            prog_log(INGEST_LOG_WARN,
                     "batch %s: replaying %zu of its %zu files (the others changed or vanished since it was sent)",
                     jb->id, x->ngot, jb->nfiles);
        }
    }
    return 1;
out:
    {
        const int e = dship_end(d, x);
        if (rc == 0)
            rc = e;
    }
    return rc;
}

/* ---- the builder thread: the next journaled batch is built while one ships ---------- */

static void *builder_main(void *arg)
{
    (void)pthread_setname_np(pthread_self(), "ingest-build"); /* docs/architecture.md "Threads" */
    daemon_t *d = arg;
    dship *x = d->bld;
    build_run(d, x);
    prog_log(INGEST_LOG_DEBUG, "batch %s built ahead: %zu of its %zu files", x->jb->id, x->ngot, x->jb->nfiles);
    return NULL;
}

/* The build ahead, if any, ends and goes unsent: its batch stays journaled as it was, and is built again. */
static void drop_prebuilt(daemon_t *d)
{
    if (d->bld == NULL)
        return;
    pthread_join(d->bld_thread, NULL);
    (void)dship_end(d, d->bld);
    d->bld = NULL;
}

/* Start building the batch after seq (not the open one, not one acked) on the builder thread. */
static void build_ahead(daemon_t *d, uint64_t seq)
{
    if (d->bld != NULL || stopping || reload_requested)
        return;
    do {
        if (ingest_journal_next(d->j, seq, &seq) <= 0)
            return;
    } while (seq == d->open_seq);
    ingest_journal_batch *jb = NULL;
    if (ingest_journal_get(d->j, seq, &jb) < 0)
        return; /* ship_one says why, when it comes to it */
    if (jb->state == INGEST_JOURNAL_ACKED) {
        ingest_journal_batch_free(d->j, jb);
        return;
    }
    dship *x = NULL;
    if (prepare_start(d, seq, jb, &x) < 0)
        return;
    d->bld = x;
    if (pthread_create(&d->bld_thread, NULL, builder_main, d) != 0) {
        d->bld = NULL;
        (void)dship_end(d, x); /* built on this thread when its turn comes */
    }
}

void dmn_ship_release(daemon_t *d)
{
    drop_prebuilt(d);
}

/*
 * Batch x was answered INGEST_EBATCHID: take a new instance (unless x was
 * made under an earlier one) and journal x again, PENDING, under the id
 * of now.  0 renewed (the queue ships it next), 1 not (the instance was
 * not taken: the caller handles x as refused), < 0 a journal failure.
 */
static int renew_batch(daemon_t *d, dship *x)
{
    agent *a = d->a;
    if (agent_take_instance(a, x->prefix) < 0)
        return 1;
    char id[INGEST_JOURNAL_ID_MAX + 1];
    snprintf(id, sizeof(id), "%s%06llu", a->state.prefix, (unsigned long long)x->seq);
    const int rc = ingest_journal_renew(d->j, x->seq, id);
    if (rc < 0) {
        prog_log(INGEST_LOG_ERROR, "journal: %s", ingest_ctx_errmsg(a->ctx));
        return rc;
    }
    prog_log(INGEST_LOG_INFO, "batch %s goes again as %s", x->jb->id, id);
    dmn_queue_recount(d);
    return 0;
}

/*
 * Ship journaled batch seq.  Returns 0 done (acked, received and pending
 * in d->pend, or dropped and its files left to discovery), 1 the
 * connection failed (the batch stays queued), 2 journaled again under a
 * new id (renew_batch: ship seq again), < 0 a local failure.  The
 * batch after it is built on the builder thread meanwhile (build_ahead).
 */
static int ship_one(daemon_t *d, uint64_t seq)
{
    agent *a = d->a;
    dship *x = NULL;
    int rc;
    if (d->bld != NULL && d->bld->seq == seq && a->net.link != NULL) {
        pthread_join(d->bld_thread, NULL); /* built while the batch before was shipped */
        x = d->bld;
        d->bld = NULL;
    } else {
        drop_prebuilt(d);
        ingest_journal_batch *jb = NULL;
        rc = ingest_journal_get(d->j, seq, &jb);
        if (rc < 0) {
            prog_log(INGEST_LOG_ERROR, "journal: batch %llu: %s", (unsigned long long)seq, ingest_ctx_errmsg(a->ctx));
            return rc == INGEST_ECORRUPT ? forget(d, seq) : rc;
        }
        if (jb->state == INGEST_JOURNAL_ACKED) {
            /* acked before a restart, or a file's after-ship action deferred: (re)try, at most once a second;
             * --once leaves it to the daemon */
            rc = dmn_defer_due(d, seq) && !d->once ? finish_acked(d, jb, jb->files, jb->nfiles) : 0;
            ingest_journal_batch_free(d->j, jb);
            return rc;
        }
        if (a->net.link == NULL) {
            if (d->now < d->next_connect) {
                ingest_journal_batch_free(d->j, jb);
                return 1;
            }
            if (connect_core(a) != 0) {
                backoff(d, "core unreachable");
                ingest_journal_batch_free(d->j, jb);
                return 1;
            }
            if (d->backoff_ms)
                prog_log(INGEST_LOG_INFO, "connected to the core again");
        }
        if ((rc = prepare_start(d, seq, jb, &x)) < 0)
            return rc;
        build_run(d, x);
    }
    if ((rc = prepare_finish(d, x)) <= 0)
        return rc;
    ingest_sender_batch *b = x->b;
    const ingest_journal_batch *jb = x->jb;
    if (jb->state == INGEST_JOURNAL_SENT) {
        d->batches_replayed++;
        prog_log(INGEST_LOG_INFO, "batch %s: replaying it under its id (sent before, its ack never came)", jb->id);
    } else if ((rc = ingest_journal_set_state(d->j, seq, INGEST_JOURNAL_SENT, NULL, 0)) < 0) {
        prog_log(INGEST_LOG_ERROR, "journal: %s", ingest_ctx_errmsg(a->ctx));
        (void)dship_end(d, x);
        return rc;
    }
    a->report.t.batches++;
    snprintf(d->inflight, sizeof(d->inflight), "%s", jb->id);
    dmn_publish(d);
    build_ahead(d, seq);
    const uint64_t taken0 = a->report.t.ship.batches_id_taken;
    a->report.t.ship.last_refusal = 0; /* this batch's, if refused */
    rc = send_manifest(a, b);
    if (rc == 0)
        rc = finish_batch(a, b);
    d->inflight[0] = '\0';
    if (rc == 1 && a->report.t.ship.batches_id_taken > taken0) {
        /* its id was landed before with other data (the edge said so): the batch goes again as it is, its
         * files and spool copies kept (a spooled file may have no other copy left), under a new id */
        drop_prebuilt(d); /* built under the instance of then */
        dmn_disconnect(d);
        rc = renew_batch(d, x);
        if (rc <= 0) {
            const int e = dship_end(d, x);
            return rc < 0 ? rc : e < 0 ? e : 2;
        }
        rc = 2; /* not renewed: as a refusal (back-off, its files found again) */
        a->report.t.ship.last_refusal = INGEST_EBATCHID;
    }
    if (rc == 3) {
        /* received: its ACK comes while the next batches ship (the edge holds it, dmn_edge_acked) */
        rc = settle(d, 0); /* the ACKs of earlier ones may have come meanwhile */
        x->edge_owned = 1;
        d->pend[d->npend++] = x; /* as the edge: at most INGEST_EDGE_PENDING_MAX */
        x = NULL;
    } else if (rc == 0) {
        rc = settle(d, 0);
        const int r = record_ack(d, x, b);
        if (rc == 0)
            rc = r;
    } else if ((rc == 1 || rc == 2) && spooled(d, seq) &&
               (rc == 1 || a->report.t.ship.last_refusal == INGEST_EBATCHID ||
                refusal_passes(a->report.t.ship.last_refusal))) {
        /* abandoned, refused for a reason that passes (bronze full or read-only at the core), or its id
         * answered as used again within the minute: kept with its spool copies (keep_spooled), it goes
         * again first (a refusal after the back-off); later batches wait behind it */
        drop_prebuilt(d);
        dmn_disconnect(d);
        const int k = keep_spooled(d, seq, jb->id,
                                   rc == 1 ? 0 : a->report.t.ship.last_refusal == INGEST_EBATCHID
                                                     ? INGEST_EBUSY
                                                     : a->report.t.ship.last_refusal);
        rc = k < 0 ? k : 2;
        if (rc == 2) {
            const int e = dship_end(d, x);
            return e < 0 ? e : 2;
        }
    } else if (rc == 1 || rc == 2) {
        /* abandoned (a file changed) or refused: its files go back to discovery; a refusal waits the
         * back-off first (a bronze the core cannot write refuses every batch: not ten times a second) */
        drop_prebuilt(d);
        dmn_disconnect(d);
        if (rc == 2 && !stopping && !reload_requested)
            backoff(d, "batch refused by the core (its reason above): its files are taken again");
        if (spooled(d, seq))
            prog_log(INGEST_LOG_WARN, "batch %s: refused for good (%s): its spool copies go with it; files whose "
                     "originals are gone are lost", jb->id, ingest_strerror(a->report.t.ship.last_refusal));
        rc = forget(d, seq);
        dmn_schedule_scan(d, d->now);
    } else {
        drop_prebuilt(d);
        dmn_disconnect(d);
        if (!stopping && !reload_requested && !a->thr.window_closed)
            backoff(d, "batch not acknowledged: the connection to the core failed, or the core failed the batch");
        rc = 1;
    }
    if (x != NULL) {
        const int e = dship_end(d, x);
        if (rc == 0)
            rc = e;
    }
    return rc;
}

#define STORE_RETRY_S 10.0

/* Ship the queue, oldest first, until it is empty (0), the core fails (1) or a walk is due.  On a
 * pipelined link up to INGEST_EDGE_PENDING_MAX batches wait for their ACKs while the next ones ship;
 * their ACKs are read before it returns. */
int dmn_ship_queue(daemon_t *d)
{
    uint64_t seq = 0;
    for (;;) {
        if (stopping || reload_requested) {
            drop_prebuilt(d);
            return drain(d);
        }
        d->now = prog_now();
        /* store_full: an ack could not be recorded, so shipping waits for room (dmn_store_check) but
         * tries again every STORE_RETRY_S: an ack that goes through frees its spool copies, which may be
         * what the store needs; one that does not leaves the batch journaled (the core answers the
         * next try as a duplicate) */
        if (d->store_full) {
            if (d->now < d->store_try_at) {
                drop_prebuilt(d);
                return drain(d);
            }
            d->store_try_at = d->now + STORE_RETRY_S;
        }
        if (!d->once && d->scan_at != 0 && d->now >= d->scan_at) {
            drop_prebuilt(d);
            return drain(d); /* (--once's replay ships the whole queue: it walks the sources after) */
        }
        const int r = ingest_journal_next(d->j, seq, &seq);
        if (r <= 0) {
            drop_prebuilt(d);
            const int dr = drain(d);
            return r < 0 ? r : dr;
        }
        if (seq == d->open_seq)
            continue;
        int in = 0;
        if (!throttle_window_open(d->a, &in)) {
            if (!d->a->thr.window_closed)
                prog_log(INGEST_LOG_INFO, "throttle.window %s is closed: nothing is sent for %d min (%llu files queued)",
                         d->a->cfg->throttle_window, in, (unsigned long long)d->q_files);
            d->a->thr.window_closed = 1;
            drop_prebuilt(d);
            dmn_disconnect(d);
            return 0;
        }
        if (d->a->thr.window_closed)
            prog_log(INGEST_LOG_INFO, "throttle.window %s is open: shipping", d->a->cfg->throttle_window);
        d->a->thr.window_closed = 0;
        const int rc = ship_one(d, seq);
        if (rc == 2) {
            seq--; /* journaled again under a new id: it goes next */
            continue;
        }
        if (rc != 0) {
            drop_prebuilt(d);
            if (rc < 0)
                dmn_disconnect(d); /* pending batches stay SENT: replayed */
            return rc;
        }
    }
}
