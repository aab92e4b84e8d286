/* The edge daemon's status: the snapshot ingestctl status reads, as text or JSON (daemon_int.h). */
#include "daemon_int.h"

/* ---- status ------------------------------------------------------------------- */

void dmn_snap_sources_free(snap *sn)
{
    for (size_t i = 0; i < sn->nsrc; i++) {
        free(sn->src[i].name);
        free(sn->src[i].path);
    }
    free(sn->src);
    sn->src = NULL;
    sn->nsrc = 0;
}

/* The sources as the status shows them (at start and after a reload). */
void dmn_publish_sources(daemon_t *d)
{
    snap_source *ns = calloc(d->nsrc ? d->nsrc : 1, sizeof(*ns));
    size_t n = 0;
    for (size_t i = 0; ns != NULL && i < d->nsrc; i++) {
        ns[n].name = strdup(d->src[i].name);
        ns[n].path = strdup(d->src[i].path);
        ns[n].spool = d->src[i].spool;
        if (ns[n].name == NULL || ns[n].path == NULL) {
            free(ns[n].name);
            free(ns[n].path);
            continue;
        }
        n++;
    }
    pthread_mutex_lock(&d->slock);
    dmn_snap_sources_free(&d->sn);
    d->sn.src = ns;
    d->sn.nsrc = n;
    const ingest_agent_config *cfg = d->a->cfg;
    snprintf(d->sn.device, sizeof(d->sn.device), "%s", cfg->device_id);
    snprintf(d->sn.core, sizeof(d->sn.core), "%s", cfg->core_address);
    snprintf(d->sn.window, sizeof(d->sn.window), "%s", cfg->throttle_window);
    d->sn.throttle_rate = cfg->throttle_rate;
    d->sn.queue_files = d->queue_files;
    d->sn.queue_bytes = d->queue_bytes;
    d->sn.spool_quota = d->spool_quota;
    pthread_mutex_unlock(&d->slock);
}

/* Copy the main thread's figures for the status thread. */
void dmn_publish(daemon_t *d)
{
    agent *a = d->a;
    const double now = prog_now();
    if (a->report.metrics != NULL) {
        agent_metrics_sync(a);
        ingest_metric_set(a->report.m.queue_files, NULL, (int64_t)d->q_files);
        ingest_metric_set(a->report.m.queue_bytes, NULL, (int64_t)d->q_bytes);
        ingest_metric_set(a->report.m.queue_batches, NULL, (int64_t)d->q_batches);
        ingest_metric_set(a->report.m.backpressure, NULL, d->backpressure || d->spool_full || d->store_full);
        ingest_metric_set(a->report.m.spool_bytes, NULL, (int64_t)d->spool_bytes);
    }
    agent_dict_status ds;
    agent_dict_status_get(a, &ds);
    pthread_mutex_lock(&d->slock);
    snap *sn = &d->sn;
    sn->dict = ds;
    sn->connected = a->net.link != NULL;
    sn->watching = d->ino >= 0 && !d->ino_full;
    for (size_t i = 0; i < sn->nsrc && i < d->nsrc; i++) { /* sn->src mirrors d->src (dmn_publish_sources) */
        sn->src[i].missing = d->src[i].missing;
        sn->src[i].watched = d->src[i].root_watched;
    }
    sn->backpressure = d->backpressure;
    sn->spool_full = d->spool_full;
    sn->store_full = d->store_full;
    sn->spool_room = d->spool_room;
    sn->fs_free = d->fs_free;
    /* as it is now, not only as the last batch met it: nothing may have been queued since it closed */
    sn->window_closed = a->thr.window_closed || !throttle_window_open(a, NULL);
    sn->q_batches = d->q_batches;
    sn->q_files = d->q_files;
    sn->q_bytes = d->q_bytes;
    sn->settling = d->settling;
    sn->spool_bytes = d->spool_bytes;
    sn->spool_files = d->spool_files;
    memcpy(sn->inflight, d->inflight, sizeof(sn->inflight));
    sn->last_ack_ns = d->last_ack_ns;
    sn->files_seen = d->files_seen;
    sn->walks = d->walks;
    sn->walk_seconds = d->walk_seconds;
    sn->path_walks = d->path_walks;
    sn->file_records = d->file_records;
    sn->seen_records = d->seen_records;
    sn->pruned = d->pruned;
    memcpy(sn->special, a->report.special, sizeof(sn->special));
    sn->files_taken = d->files_taken;
    sn->bytes_taken = d->bytes_taken;
    sn->files_shipped = d->shipped_files;
    sn->files_refused = d->files_refused + d->a->report.t.refused_edge; /* by the core, and at the edge (landing.c) */
    sn->bytes_shipped = d->shipped_bytes;
    sn->bytes_read = d->bytes_read;
    sn->chunks_new = a->report.t.ship.chunks_sent;
    sn->chunks_dedup = a->report.t.ship.chunks_dedup;
    sn->chunk_bytes_sent = a->report.t.ship.chunk_bytes_sent;
    sn->wire_out = a->report.t.ship.wire_out;
    sn->wire_in = a->report.t.ship.wire_in;
    sn->batches_acked = d->batches_acked;
    sn->batches_replayed = d->batches_replayed;
    sn->deleted = d->deleted;
    sn->moved = d->moved;
    sn->same_bytes = d->same_bytes;
    sn->vanished = d->vanished;
    memcpy(sn->skipped, d->skipped, sizeof(sn->skipped));
    sn->throttle_wait_ms = a->thr.throttle_wait_ms;
    const size_t last = (sn->rate_head + RATE_SAMPLES - 1) % RATE_SAMPLES;
    if (sn->rate_n == 0 || now - sn->rate_t[last] >= 0.2) {
        sn->rate_t[sn->rate_head] = now;
        sn->rate_w[sn->rate_head] = a->report.t.ship.wire_out + a->report.t.ship.wire_in;
        sn->rate_head = (sn->rate_head + 1) % RATE_SAMPLES;
        if (sn->rate_n < RATE_SAMPLES)
            sn->rate_n++;
    }
    pthread_mutex_unlock(&d->slock);
}

void dmn_publish_hook(agent *a)
{
    dmn_publish(a->userdata);
}

/* Wire bytes per second over the last RATE_WINDOW_S seconds (caller holds slock). */
static double wire_rate(const snap *sn, double now)
{
    if (sn->rate_n == 0)
        return 0.0;
    const uint64_t cur = sn->wire_out + sn->wire_in;
    /* the newest sample at least RATE_WINDOW_S old, else the oldest one */
    size_t base = (sn->rate_head + RATE_SAMPLES - sn->rate_n) % RATE_SAMPLES;
    for (size_t k = 0; k < sn->rate_n; k++) {
        const size_t i = (sn->rate_head + RATE_SAMPLES - 1 - k) % RATE_SAMPLES;
        if (now - sn->rate_t[i] >= RATE_WINDOW_S) {
            base = i;
            break;
        }
    }
    double dt = now - sn->rate_t[base];
    if (dt < RATE_WINDOW_S)
        dt = RATE_WINDOW_S < now - sn->started ? RATE_WINDOW_S : now - sn->started;
    if (dt < 0.001 || cur < sn->rate_w[base])
        return 0.0;
    return (double)(cur - sn->rate_w[base]) / dt;
}

typedef struct outbuf {
    char *p;
    size_t cap, len;
} outbuf;

static void PROG_PRINTF(2, 3) put(outbuf *o, const char *fmt, ...)
{
    if (o->len + 1 >= o->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len = o->len + (size_t)n < o->cap ? o->len + (size_t)n : o->cap - 1;
}

/* A JSON string: quotes, backslashes and control bytes escaped. */
static void put_jstr(outbuf *o, const char *s)
{
    put(o, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            put(o, "\\%c", *c);
        else if (*c < 0x20 || *c == 0x7f)
            put(o, "\\u%04x", *c);
        else
            put(o, "%c", *c);
    }
    put(o, "\"");
}

static const char *const skip_names[INGEST_FILTER_NREASONS] = { "", "include", "exclude", "min_size",
                                                                "max_size", "max_age", "sample", "prefix" };

static void fmt_time(int64_t ns, char *buf, size_t cap)
{
    const time_t t = (time_t)(ns / 1000000000);
    struct tm tm;
    if (ns == 0 || gmtime_r(&t, &tm) == NULL || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, cap, "-");
}

static const char *source_state(const snap *sn, size_t i)
{
    return sn->src[i].missing ? "missing" : sn->watching && sn->src[i].watched ? "watching" : "rescan-only";
}

static void render_json(const snap *sn, double now, int64_t wall, outbuf *o)
{
    put(o, "{\"device\":");
    put_jstr(o, sn->device);
    put(o, ",\"uptime_s\":%.1f,\"core\":{\"address\":", now - sn->started);
    put_jstr(o, sn->core);
    put(o, ",\"connected\":%s},\"sources\":[", sn->connected ? "true" : "false");
    for (size_t i = 0; i < sn->nsrc; i++) {
        put(o, "%s{\"name\":", i ? "," : "");
        put_jstr(o, sn->src[i].name);
        put(o, ",\"path\":");
        put_jstr(o, sn->src[i].path);
        put(o, ",\"state\":\"%s\",\"spool\":\"%s\"}", source_state(sn, i),
            sn->src[i].spool ? "copy" : "none");
    }
    put(o, "],\"queue\":{\"batches\":%llu,\"files\":%llu,\"bytes\":%llu,\"max_files\":%llu,\"max_bytes\":%llu}",
        (unsigned long long)sn->q_batches, (unsigned long long)sn->q_files, (unsigned long long)sn->q_bytes,
        (unsigned long long)sn->queue_files, (unsigned long long)sn->queue_bytes);
    put(o, ",\"settling\":{\"files\":%llu}", (unsigned long long)sn->settling);
    put(o, ",\"in_flight\":");
    if (sn->inflight[0])
        put_jstr(o, sn->inflight);
    else
        put(o, "null");
    char ts[40];
    fmt_time(sn->last_ack_ns, ts, sizeof(ts));
    if (sn->last_ack_ns)
        put(o, ",\"last_ack\":{\"time\":\"%s\",\"age_s\":%.1f}", ts, (double)(wall - sn->last_ack_ns) / 1e9);
    else
        put(o, ",\"last_ack\":null");
    put(o,
        ",\"totals\":{\"files_seen\":%llu,\"files_taken\":%llu,\"bytes_taken\":%llu,\"files_shipped\":%llu,"
        "\"bytes_shipped\":%llu,\"bytes_read\":%llu,\"chunks_new\":%llu,\"chunks_dedup\":%llu,"
        "\"chunk_bytes_sent\":%llu,\"wire_bytes_out\":%llu,\"wire_bytes_in\":%llu,\"batches_acked\":%llu,"
        "\"batches_replayed\":%llu,\"after_ship_deleted\":%llu,\"after_ship_moved\":%llu,\"files_refused\":%llu,"
        "\"files_same_bytes\":%llu,\"files_vanished\":%llu}",
        (unsigned long long)sn->files_seen, (unsigned long long)sn->files_taken, (unsigned long long)sn->bytes_taken,
        (unsigned long long)sn->files_shipped, (unsigned long long)sn->bytes_shipped,
        (unsigned long long)sn->bytes_read, (unsigned long long)sn->chunks_new, (unsigned long long)sn->chunks_dedup,
        (unsigned long long)sn->chunk_bytes_sent, (unsigned long long)sn->wire_out, (unsigned long long)sn->wire_in,
        (unsigned long long)sn->batches_acked, (unsigned long long)sn->batches_replayed,
        (unsigned long long)sn->deleted, (unsigned long long)sn->moved, (unsigned long long)sn->files_refused,
        (unsigned long long)sn->same_bytes, (unsigned long long)sn->vanished);
    put(o, ",\"walks\":{\"count\":%llu,\"last_seconds\":%.3f,\"of_changed_files\":%llu,\"not_regular\":{",
        (unsigned long long)sn->walks, sn->walk_seconds, (unsigned long long)sn->path_walks);
    for (int k = 0; k < SPECIAL_KINDS; k++)
        put(o, "%s\"%s\":%llu", k ? "," : "", agent_special_name(k), (unsigned long long)sn->special[k]);
    put(o, "}}");
    put(o, ",\"records\":{\"shipped\":%llu,\"settle_filter\":%llu,\"dropped\":%llu}",
        (unsigned long long)sn->file_records, (unsigned long long)sn->seen_records, (unsigned long long)sn->pruned);
    put(o, ",\"skipped\":{");
    for (int r = 1; r < INGEST_FILTER_NREASONS; r++)
        put(o, "%s\"%s\":%llu", r > 1 ? "," : "", skip_names[r], (unsigned long long)sn->skipped[r]);
    put(o, "},\"backpressure\":{\"on\":%s,\"queue\":%s,\"spool\":%s,\"state_store\":%s}",
        sn->backpressure || sn->spool_full || sn->store_full ? "true" : "false", sn->backpressure ? "true" : "false",
        sn->spool_full ? "true" : "false", sn->store_full ? "true" : "false");
    put(o, ",\"spool\":{\"files\":%llu,\"bytes\":%llu,\"quota\":%llu,\"room\":%llu,\"fs_free\":%llu}",
        (unsigned long long)sn->spool_files, (unsigned long long)sn->spool_bytes, (unsigned long long)sn->spool_quota,
        (unsigned long long)sn->spool_room, (unsigned long long)(sn->fs_free == UINT64_MAX ? 0 : sn->fs_free));
    put(o, ",\"throttle\":{\"rate\":%llu,\"window\":", (unsigned long long)sn->throttle_rate);
    put_jstr(o, sn->window);
    put(o, ",\"window_open\":%s,\"waited_s\":%.3f}", sn->window_closed ? "false" : "true",
        (double)sn->throttle_wait_ms / 1000.0);
    put(o, ",\"wire_rate_bps\":%.0f", wire_rate(sn, now));
    const agent_dict_status *ds = &sn->dict;
    put(o, ",\"dictionary\":{\"id\":%u,\"bytes\":%llu,\"auto\":%s,\"sampling\":%s,\"replaced\":%llu,", ds->id,
        (unsigned long long)ds->bytes, ds->is_auto ? "true" : "false", ds->sampling ? "true" : "false",
        (unsigned long long)ds->retrains);
    if (ds->probed)
        put(o, "\"saved_pct_last\":%.1f,\"saved_pct_best\":%.1f}", ds->last_pct, ds->best_pct);
    else
        put(o, "\"saved_pct_last\":null,\"saved_pct_best\":null}");
}

static void render_text(const snap *sn, double now, int64_t wall, outbuf *o)
{
    put(o, "device %s   core %s (%s)   up %.0f s\n", sn->device, sn->core,
        sn->connected ? "connected" : "not connected", now - sn->started);
    put(o, "\n%-20s %-12s %-6s %s\n", "SOURCE", "STATE", "SPOOL", "PATH");
    for (size_t i = 0; i < sn->nsrc; i++)
        put(o, "%-20s %-12s %-6s %s\n", sn->src[i].name, source_state(sn, i),
            sn->src[i].spool ? "copy" : "none", sn->src[i].path);
    char ts[40];
    fmt_time(sn->last_ack_ns, ts, sizeof(ts));
    put(o, "\n%-20s %llu batches, %llu files, %llu bytes (limits %llu files, %llu bytes)\n", "queued",
        (unsigned long long)sn->q_batches, (unsigned long long)sn->q_files, (unsigned long long)sn->q_bytes,
        (unsigned long long)sn->queue_files, (unsigned long long)sn->queue_bytes);
    put(o, "%-20s %llu files (not taken until unchanged for their settle time)\n", "settling",
        (unsigned long long)sn->settling);
    put(o, "%-20s %s\n", "in flight", sn->inflight[0] ? sn->inflight : "-");
    if (sn->last_ack_ns)
        put(o, "%-20s %s (%.0f s ago)\n", "last ack", ts, (double)(wall - sn->last_ack_ns) / 1e9);
    else
        put(o, "%-20s -\n", "last ack");
    put(o, "%-20s %s (queue %s, spool %s, state store %s)\n", "backpressure",
        sn->backpressure || sn->spool_full || sn->store_full ? "ON" : "off", sn->backpressure ? "full" : "ok",
        sn->spool_full ? "full" : "ok", sn->store_full ? "full" : "ok");
    put(o, "%-20s %llu files, %llu of %llu bytes (spool.quota %llu, sized to the free space)\n", "spool",
        (unsigned long long)sn->spool_files, (unsigned long long)sn->spool_bytes, (unsigned long long)sn->spool_room,
        (unsigned long long)sn->spool_quota);
    put(o, "%-20s rate %llu B/s, window %s (%s), waited %.1f s\n", "throttle",
        (unsigned long long)sn->throttle_rate, sn->window[0] ? sn->window : "always",
        sn->window_closed ? "CLOSED" : "open", (double)sn->throttle_wait_ms / 1000.0);
    put(o, "%-20s %.0f B/s (last %.0f s)\n", "wire rate", wire_rate(sn, now), RATE_WINDOW_S);
    const agent_dict_status *ds = &sn->dict;
    if (ds->id != 0)
        put(o, "%-20s id %u, %llu bytes%s", "dictionary", ds->id, (unsigned long long)ds->bytes,
            ds->is_auto ? " (auto)" : "");
    else
        put(o, "%-20s none%s", "dictionary", ds->is_auto ? " (auto)" : "");
    if (ds->probed)
        put(o, "; saves %.1f%% on the last small files probed, %.1f%% at best", ds->last_pct, ds->best_pct);
    if (ds->is_auto)
        put(o, "; replaced %llu times%s", (unsigned long long)ds->retrains,
            ds->sampling ? "; sampling small files for a new one" : "");
    put(o, "\n");
    put(o, "%-20s %llu, the last took %.3f s; %llu looks at changed files alone\n", "walks",
        (unsigned long long)sn->walks, sn->walk_seconds, (unsigned long long)sn->path_walks);
    put(o, "%-20s %llu shipped, %llu settling or filtered; %llu of files gone dropped\n", "file records",
        (unsigned long long)sn->file_records, (unsigned long long)sn->seen_records, (unsigned long long)sn->pruned);
    put(o, "%-20s", "not regular files");
    for (int k = 0; k < SPECIAL_KINDS; k++)
        put(o, " %s=%llu", agent_special_name(k), (unsigned long long)sn->special[k]);
    put(o, " (last walk; skipped, never shipped)\n");
    put(o, "\n%-20s %14s %16s\n", "STAGE", "FILES", "BYTES");
    put(o, "%-20s %14llu %16s\n", "seen (last walk)", (unsigned long long)sn->files_seen, "-");
    put(o, "%-20s %14llu %16llu\n", "taken", (unsigned long long)sn->files_taken,
        (unsigned long long)sn->bytes_taken);
    put(o, "%-20s %14s %16llu\n", "read", "-", (unsigned long long)sn->bytes_read);
    put(o, "%-20s %14llu %16llu\n", "shipped (acked)", (unsigned long long)sn->files_shipped,
        (unsigned long long)sn->bytes_shipped);
    put(o, "%-20s %14llu %16s\n", "refused by core", (unsigned long long)sn->files_refused, "-");
    put(o, "%-20s %14llu %16s\n", "vanished", (unsigned long long)sn->vanished, "-");
    put(o, "%-20s %14s %16llu\n", "wire out", "-", (unsigned long long)sn->wire_out);
    put(o, "%-20s %14s %16llu\n", "wire in", "-", (unsigned long long)sn->wire_in);
    put(o, "%-20s %llu new (%llu bytes sent), %llu dedup\n", "chunks", (unsigned long long)sn->chunks_new,
        (unsigned long long)sn->chunk_bytes_sent, (unsigned long long)sn->chunks_dedup);
    put(o, "%-20s %llu acked, %llu replayed; after_ship %llu deleted, %llu moved\n", "batches",
        (unsigned long long)sn->batches_acked, (unsigned long long)sn->batches_replayed,
        (unsigned long long)sn->deleted, (unsigned long long)sn->moved);
    put(o, "%-20s %llu (ctime changed alone, bytes as shipped: recorded, not shipped)\n", "same bytes",
        (unsigned long long)sn->same_bytes);
    put(o, "%-20s", "skipped");
    for (int r = 1; r < INGEST_FILTER_NREASONS; r++)
        put(o, " %s=%llu", skip_names[r], (unsigned long long)sn->skipped[r]);
    put(o, "\n");
}

/* The status thread's callback. */
void dmn_render(void *ud, int json, char *buf, size_t cap)
{
    daemon_t *d = ud;
    outbuf o = { buf, cap, 0 };
    const double now = prog_now();
    const int64_t wall = dmn_wall_now_ns();
    pthread_mutex_lock(&d->slock);
    if (json)
        render_json(&d->sn, now, wall, &o);
    else
        render_text(&d->sn, now, wall, &o);
    pthread_mutex_unlock(&d->slock);
    if (json) {
        /* the metrics (when on) as they are now: their updates are atomic, no lock needed */
        if (d->a->report.metrics != NULL && o.len + 16 < o.cap) {
            put(&o, ",\"metrics\":");
            const size_t need = ingest_metrics_render_json(d->a->report.metrics, o.p + o.len, o.cap - o.len);
            o.len = o.len + need < o.cap ? o.len + need : o.cap - 1;
        }
        put(&o, "}\n");
    }
}

