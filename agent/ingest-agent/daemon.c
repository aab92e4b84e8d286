/* The edge daemon's loop and its configuration reload (daemon_int.h). */
#include "daemon_int.h"

int64_t dmn_wall_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return ingest_time_ns(&t);
}

void dmn_schedule_scan(daemon_t *d, double at)
{
    if (d->scan_at == 0 || at < d->scan_at)
        d->scan_at = at;
}

/* ---- configuration ------------------------------------------------------------ */

static void apply_config(daemon_t *d)
{
    const ingest_agent_config *cfg = d->a->cfg;
    d->base.sources = d->ssrc;
    d->base.nsources = d->nsrc;
    d->base.device = cfg->device_id;
    d->base.on_refuse = on_refuse;
    d->base.chunking = cfg->chunking;
    d->base.max_files = cfg->batch_max_files;
    d->base.max_bytes = cfg->batch_max_bytes;
    d->max_wait_ms = cfg->batch_max_wait_ms;
    d->rescan_ms = cfg->rescan_interval_ms ? cfg->rescan_interval_ms : RESCAN_DEFAULT_MS;
    d->queue_files = cfg->queue_max_files ? cfg->queue_max_files : QUEUE_FILES_DEFAULT;
    d->queue_bytes = cfg->queue_max_bytes ? cfg->queue_max_bytes : QUEUE_BYTES_DEFAULT;
    d->spool_quota = cfg->spool_quota;
}

static int str_differ(const char *x, const char *y)
{
    return strcmp(x != NULL ? x : "", y != NULL ? y : "") != 0;
}

/* 1 when the transport or any kafka.* setting differs between o and n. */
static int kafka_differ(const ingest_agent_config *o, const ingest_agent_config *n)
{
    if (o->transport != n->transport || str_differ(o->kafka_brokers, n->kafka_brokers) ||
        str_differ(o->kafka_topic, n->kafka_topic) || str_differ(o->kafka_reply_topic, n->kafka_reply_topic) ||
        o->kafka_properties_count != n->kafka_properties_count)
        return 1;
    for (size_t i = 0; i < o->kafka_properties_count; i++)
        if (str_differ(o->kafka_properties[i], n->kafka_properties[i]))
            return 1;
    return 0;
}

/*
 * Settings read once, at the start (keys, codec, the edge's buffers, the
 * status and metrics endpoints): a reload that changes them says so, and
 * the numbers stay as they are in force (n takes o's), so that what the
 * daemon uses agrees with itself until the restart.
 */
static void keep_start_settings(const ingest_agent_config *o, ingest_agent_config *n)
{
    char what[512] = "";
    size_t w = 0;
#define START_SETTING(cond, name)                                                                                  \
    do {                                                                                                           \
        if ((cond) && w < sizeof(what))                                                                            \
            w += (size_t)snprintf(what + w, sizeof(what) - w, "%s%s", w ? ", " : "", name);                       \
    } while (0)
    START_SETTING(str_differ(o->device_key, n->device_key), "device.key");
    START_SETTING(str_differ(o->core_receiver_key, n->core_receiver_key), "core.receiver_key");
    START_SETTING(str_differ(o->dedup_key, n->dedup_key), "dedup_key");
    START_SETTING(o->chunking.min != n->chunking.min || o->chunking.avg != n->chunking.avg ||
                      o->chunking.max != n->chunking.max,
                  "chunking");
    START_SETTING(o->compression_level != n->compression_level, "compression.level");
    START_SETTING(o->compression_encoders != n->compression_encoders, "compression.encoders");
    START_SETTING(str_differ(o->compression_dictionary, n->compression_dictionary), "compression.dictionary");
    START_SETTING(o->batch_push_max != n->batch_push_max, "batch.push_max");
    START_SETTING(o->havecache_max_entries != n->havecache_max_entries, "havecache.max_entries");
    START_SETTING(str_differ(o->metrics_listen, n->metrics_listen), "metrics.listen");
    START_SETTING(str_differ(o->status_socket, n->status_socket), "status.socket");
#undef START_SETTING
    n->chunking = o->chunking;
    n->compression_level = o->compression_level;
    n->compression_encoders = o->compression_encoders;
    n->batch_push_max = o->batch_push_max;
    n->havecache_max_entries = o->havecache_max_entries;
    if (w > 0)
        prog_log(INGEST_LOG_WARN, "config reload: %s changed: read only at the start, so the change takes effect at "
                 "the next start (the rest of the configuration is applied now)", what);
}

static void reload(daemon_t *d)
{
    reload_requested = 0;
    agent *a = d->a;
    ingest_agent_config *ncfg = NULL;
    if (ingest_agent_config_load(a->ctx, d->config_path, &ncfg) < 0) {
        prog_log(INGEST_LOG_ERROR, "config reload rejected: %s; the current configuration stays in force",
                 ingest_ctx_errmsg(a->ctx));
        return;
    }
    if (strcmp(ncfg->device_id, a->cfg->device_id) != 0 || strcmp(ncfg->state_dir, a->cfg->state_dir) != 0) {
        prog_log(INGEST_LOG_ERROR, "config reload rejected: device.id and state_dir cannot change while running; "
                                   "the current configuration stays in force");
        ingest_agent_config_free(ncfg);
        return;
    }
    dsource *ns = NULL;
    ingest_sender_source *nss = NULL;
    if (dmn_sources_make(d, ncfg, &ns, &nss) < 0) {
        prog_log(INGEST_LOG_ERROR, "config reload rejected: the sources could not be set up");
        ingest_agent_config_free(ncfg);
        return;
    }
    keep_start_settings(a->cfg, ncfg);
    /* the open batch is journaled under the old sources: close it */
    dmn_open_close(d);
    const int kafka_changed = kafka_differ(a->cfg, ncfg);
    if (kafka_changed || strcmp(ncfg->core_address, a->cfg->core_address) != 0)
        disconnect_core(a); /* a batch sent and not acknowledged stays journaled: it goes again on the new link */
    if (kafka_changed) {
        agent_kafka_close(a);
        prog_log(INGEST_LOG_INFO, "config reload: the transport or kafka settings changed: the next connection uses "
                 "them");
    }
    dmn_sources_free(d);
    ingest_agent_config_free(a->cfg);
    a->cfg = ncfg;
    d->src = ns;
    d->ssrc = nss;
    d->nsrc = ncfg->sources_count;
    apply_config(d);
    if (throttle_setup(a) != 0)
        prog_log(INGEST_LOG_ERROR, "throttle: the new settings could not be applied; sending unthrottled");
    a->thr.window_closed = 0;
    dmn_spool_resume_check(d);
    dmn_publish_sources(d);
    prog_log_set_level(ncfg->log_level);
    dmn_watches_setup(d);
    dmn_schedule_scan(d, d->now);
    prog_log(INGEST_LOG_INFO, "configuration reloaded from %s (%zu sources)", d->config_path, d->nsrc);
}

/* ---- setting up and tearing down -------------------------------------------------- */

/* d over agent a: its sources, the journal (a->state.j), the spool.  0, or -1 (logged); then daemon_free(d). */
static int daemon_setup(daemon_t *d, agent *a, const char *config_path, const ingest_sender_opts *base)
{
    memset(d, 0, sizeof(*d));
    d->a = a;
    d->config_path = config_path;
    d->base = *base;
    d->ino = -1;
    d->j = a->state.j;
    a->userdata = d;
    pthread_mutex_init(&d->slock, NULL);
    d->sn.started = prog_now();
    if (dmn_sources_make(d, a->cfg, &d->src, &d->ssrc) < 0)
        return -1;
    d->nsrc = a->cfg->sources_count;
    apply_config(d);
    d->base.userdata = a;
    dmn_queue_recount(d);
    if (d->q_files)
        prog_log(INGEST_LOG_INFO, "resuming: %llu files, %llu bytes queued in the journal",
                 (unsigned long long)d->q_files, (unsigned long long)d->q_bytes);
    if (dmn_spool_init(d) != 0)
        return -1;
    if (d->spool_files)
        prog_log(INGEST_LOG_INFO, "spool: %llu files, %llu bytes waiting to ship", (unsigned long long)d->spool_files,
                 (unsigned long long)d->spool_bytes);
    d->now = prog_now();
    return 0;
}

static void daemon_free(daemon_t *d)
{
    dmn_ship_release(d);
    dmn_open_reset(d);
    for (size_t i = 0; i < VANISH_NAMES; i++)
        free(d->vanish_names[i]);
    free(d->of);
    free(d->defer);
    for (size_t i = 0; i < d->ndirty; i++)
        free(d->dirty[i]);
    free(d->dirty);
    dmn_watches_clear(d);
    free(d->w);
    for (size_t i = 0; i < d->ndeep; i++)
        free(d->deep[i]);
    free(d->deep);
    if (d->ino >= 0)
        close(d->ino);
    dmn_sources_free(d);
    dmn_snap_sources_free(&d->sn);
    pthread_mutex_destroy(&d->slock);
    d->a->userdata = NULL;
}

/*
 * --once, before its walk: ship the journal's batches not acknowledged yet
 * (sent by an earlier run whose ACK never came, or queued by the daemon)
 * the daemon's way: built one at a time, pipelined, under their own batch ids
 * (the core acknowledges one it landed before as a duplicate), a file that
 * changed since leaving its batch (the walk that follows ships its new
 * version).  No after-ship action runs (--once runs none), and a batch
 * whose after-ship action the daemon deferred (ACKED) is left to the
 * daemon.  0 when none is left, 1 when some are (the core unreachable, a
 * stop), < 0 a local failure; *replayed: how many had been sent before.
 */
int daemon_replay(agent *a, const ingest_sender_opts *base, uint64_t *replayed)
{
    uint64_t nb = 0, nf = 0, nbytes = 0;
    *replayed = 0;
    if (ingest_journal_queued(a->state.j, &nb, &nf, &nbytes) < 0) {
        prog_log(INGEST_LOG_ERROR, "journal: %s", ingest_ctx_errmsg(a->ctx));
        return -1;
    }
    if (nb == 0)
        return 0;
    daemon_t d;
    int rc = daemon_setup(&d, a, NULL, base);
    if (rc == 0) {
        d.once = 1;
        prog_log(INGEST_LOG_INFO, "%llu batches (%llu files) journaled and not acknowledged: shipping them first",
                 (unsigned long long)nb, (unsigned long long)nf);
        disconnect_core(a); /* the daemon's connection (over Kafka: unpipelined) */
        a->daemon = 1;
        rc = throttle_wait_window(a) == 0 ? dmn_ship_queue(&d) : 1;
        disconnect_core(a);
        a->daemon = 0;
        *replayed = d.batches_replayed;
        if (rc == 0 && ingest_journal_queued(a->state.j, &nb, &nf, &nbytes) == 0 && nb > 0)
            rc = 1;
    }
    daemon_free(&d);
    return rc;
}

/* ---- the loop --------------------------------------------------------------------- */

int daemon_run(agent *a, const char *config_path, const ingest_sender_opts *base)
{
    daemon_t d;
    int status = 1;
    srand((unsigned)(getpid() ^ (unsigned)dmn_wall_now_ns()));
    /* A process opening a file while the after-ship action holds its lease sends us SIGIO (default: exit);
     * it just waits until the lease goes, a moment later. */
    signal(SIGIO, SIG_IGN);
    if (daemon_setup(&d, a, config_path, base) != 0)
        goto out;
    d.ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (d.ino < 0)
        prog_log(INGEST_LOG_WARN, "inotify unavailable (%s): rescans only", strerror(errno));
    d.now = prog_now();
    dmn_watches_setup(&d);
    dmn_publish_sources(&d);
    dmn_publish(&d);
    a->report.publish = dmn_publish_hook;
    {
        char err[512];
        d.status = status_server_start(a->cfg->status_socket, dmn_render, &d, err, sizeof(err));
        if (d.status == NULL)
            prog_log(INGEST_LOG_ERROR, "%s: ingestctl status will not answer", err);
    }
    prog_log(INGEST_LOG_INFO, "running: %zu sources, %zu directories watched, rescan every %llu ms", d.nsrc, d.nw,
             (unsigned long long)d.rescan_ms);
    dmn_schedule_scan(&d, d.now);
    while (!stopping) {
        d.now = prog_now();
        if (reload_requested)
            reload(&d);
        if (d.ino >= 0) {
            dmn_inotify_drain(&d);
            dmn_sources_poll(&d);
        }
        if (d.now - d.last_full >= d.rescan_ms / 1000.0)
            dmn_schedule_scan(&d, d.now);
        /* a walk of everything at most every WALK_SPACING times its own duration (a slow tree is not walked
         * back to back); the files events name are looked at alone meanwhile */
        if (d.scan_at != 0 && d.walks > 0 && d.scan_at < d.last_full + WALK_SPACING * d.walk_seconds)
            d.scan_at = d.last_full + WALK_SPACING * d.walk_seconds;
        if (d.scan_at != 0 && d.now >= d.scan_at) {
            if (dmn_walk(&d) < 0 && stopping)
                break;
            d.now = prog_now();
        } else if (d.dirty_at != 0 && d.now >= d.dirty_at) {
            if (dmn_walk_paths(&d) < 0 && stopping)
                break;
            d.now = prog_now();
        }
        if (d.open_seq != 0 && (d.now - d.open_at) * 1000.0 >= (double)d.max_wait_ms)
            dmn_open_close(&d);
        const uint64_t shipped_before = d.shipped_files;
        const int shipped = dmn_ship_queue(&d);
        if (shipped < 0)
            prog_log(INGEST_LOG_ERROR, "shipping failed; retrying");
        if (d.shipped_files != shipped_before)
            dmn_count_records(&d); /* the status's file records, as the acks left them */
        if (d.npend == 0 && agent_dict_auto_ready(a))
            (void)agent_dict_auto_again(a); /* compression.dictionary auto, none at the start: enough small files came */
        if (d.defer_pending)
            d.defer_next = d.now + DEFER_RETRY_S;
        /* a failed action (not one waiting for a writer) is retried less and less often, and from 1 s again
         * once one that had failed went through */
        if (d.defer_failed) {
            d.defer_fail_s = d.defer_fail_s == 0.0                  ? DEFER_RETRY_S
                             : d.defer_fail_s * 2.0 > DEFER_FAIL_MAX_S ? DEFER_FAIL_MAX_S
                                                                       : d.defer_fail_s * 2.0;
            d.fail_next = d.now + d.defer_fail_s;
        } else if (d.defer_fail_clean) {
            d.defer_fail_s = 0.0;
        }
        d.defer_pending = d.defer_failed = d.defer_fail_clean = 0;
        dmn_publish(&d);
        /* sleep until something is due */
        d.now = prog_now();
        double until = d.now + 1.0;
        if (d.scan_at != 0 && d.scan_at < until)
            until = d.scan_at;
        if (d.dirty_at != 0 && d.dirty_at < until)
            until = d.dirty_at;
        if (d.open_seq != 0 && d.open_at + d.max_wait_ms / 1000.0 < until)
            until = d.open_at + d.max_wait_ms / 1000.0;
        if (d.q_files > d.nof && a->net.link == NULL && d.next_connect < until && !a->thr.window_closed)
            until = d.next_connect;
        if (d.q_files > d.nof && a->net.link != NULL && shipped == 0 && !a->thr.window_closed && !d.store_full)
            until = d.now; /* more to ship */
        int ms = (int)((until - d.now) * 1000.0);
        if (ms < 0)
            ms = 0;
        if (shipped < 0 && ms < 1000)
            ms = 1000;
        if (ms > 0 && !stopping && !reload_requested) {
            struct pollfd p = { d.ino, POLLIN, 0 };
            poll(&p, d.ino >= 0 ? 1 : 0, ms);
        }
    }
    /* Shutdown: the open batch is journaled PENDING, an interrupted batch stays SENT: both resume. */
    dmn_open_journal(&d);
    status = 0;
out:
    status_server_stop(d.status);
    a->report.publish = NULL;
    if (ingest_store_commit(a->state.st) < 0) {
        prog_log(INGEST_LOG_ERROR, "state store: %s", ingest_ctx_errmsg(a->ctx));
        status = 1;
    }
    disconnect_core(a);
    dmn_queue_recount(&d);
    prog_log(INGEST_LOG_INFO,
             "stopped: shipped files=%llu bytes=%llu batches=%llu replayed=%llu; queued files=%llu bytes=%llu; "
             "after_ship deleted=%llu moved=%llu; vanished=%llu; skipped include=%llu exclude=%llu min_size=%llu max_size=%llu "
             "max_age=%llu sample=%llu prefix=%llu",
             (unsigned long long)d.shipped_files, (unsigned long long)d.shipped_bytes,
             (unsigned long long)d.batches_acked, (unsigned long long)d.batches_replayed,
             (unsigned long long)d.q_files, (unsigned long long)d.q_bytes, (unsigned long long)d.deleted,
             (unsigned long long)d.moved, (unsigned long long)d.vanished,
             (unsigned long long)d.skipped[INGEST_FILTER_INCLUDE],
             (unsigned long long)d.skipped[INGEST_FILTER_EXCLUDE], (unsigned long long)d.skipped[INGEST_FILTER_MIN_SIZE],
             (unsigned long long)d.skipped[INGEST_FILTER_MAX_SIZE], (unsigned long long)d.skipped[INGEST_FILTER_MAX_AGE],
             (unsigned long long)d.skipped[INGEST_FILTER_SAMPLE], (unsigned long long)d.skipped[INGEST_FILTER_PREFIX]);
    printf("stopped: files=%llu bytes=%llu batches=%llu replayed=%llu queued_files=%llu deleted=%llu moved=%llu "
           "skipped_include=%llu skipped_exclude=%llu skipped_min_size=%llu skipped_max_size=%llu "
           "skipped_max_age=%llu skipped_sample=%llu skipped_prefix=%llu files_refused=%llu skipped_symlinks=%llu "
           "skipped_fifos=%llu skipped_sockets=%llu skipped_devices=%llu skipped_bad_links=%llu files_refused_edge=%llu "
           "files_vanished=%llu\n",
           (unsigned long long)d.shipped_files, (unsigned long long)d.shipped_bytes,
           (unsigned long long)d.batches_acked, (unsigned long long)d.batches_replayed,
           (unsigned long long)d.q_files, (unsigned long long)d.deleted, (unsigned long long)d.moved,
           (unsigned long long)d.skipped[INGEST_FILTER_INCLUDE], (unsigned long long)d.skipped[INGEST_FILTER_EXCLUDE],
           (unsigned long long)d.skipped[INGEST_FILTER_MIN_SIZE], (unsigned long long)d.skipped[INGEST_FILTER_MAX_SIZE],
           (unsigned long long)d.skipped[INGEST_FILTER_MAX_AGE], (unsigned long long)d.skipped[INGEST_FILTER_SAMPLE],
           (unsigned long long)d.skipped[INGEST_FILTER_PREFIX],
           (unsigned long long)(d.files_refused + a->report.t.refused_edge),
           (unsigned long long)a->report.special[SPECIAL_SYMLINK], (unsigned long long)a->report.special[SPECIAL_FIFO],
           (unsigned long long)a->report.special[SPECIAL_SOCKET], (unsigned long long)a->report.special[SPECIAL_DEVICE],
           (unsigned long long)a->report.special[SPECIAL_BAD_LINK], (unsigned long long)a->report.t.refused_edge,
           (unsigned long long)d.vanished);
    fflush(stdout);
    daemon_free(&d);
    return status;
}

