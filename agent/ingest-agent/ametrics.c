/*
 * The agent's Prometheus metrics (docs/operations.md, "Metrics"): defined
 * at start, fed from the shipping totals (agent_metrics_sync adds what
 * changed since the last call) and from the daemon's own figures, served on
 * metrics.listen and logged every --stats-interval as JSON.
 */
#include "agent.h"

#include <string.h>

static const double latency_buckets[] = { 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600 };

int agent_metrics_init(agent *a)
{
    agent_metrics *m = &a->report.m;
    struct {
        ingest_metric **x;
        int type;
        const char *name, *help, *label;
    } defs[] = {
        { &m->info, INGEST_METRIC_GAUGE, "ingest_agent_info", "Always 1; the label names this agent's device", "device" },
        { &m->files_seen, INGEST_METRIC_COUNTER, "ingest_agent_files_seen_total",
          "Regular files offered by walks of the sources (every walk counts again)", "source" },
        { &m->files_unchanged, INGEST_METRIC_COUNTER, "ingest_agent_files_unchanged_total",
          "Files passed over because they were unchanged since their ack", NULL },
        { &m->files_skipped, INGEST_METRIC_COUNTER, "ingest_agent_files_skipped_total",
          "Files skipped by a filter rule (never deleted or moved)", "reason" },
        { &m->files_shipped, INGEST_METRIC_COUNTER, "ingest_agent_files_shipped_total",
          "Files of acknowledged batches", NULL },
        { &m->files_refused, INGEST_METRIC_COUNTER, "ingest_agent_files_refused_total",
          "Files of acknowledged batches the core refused alone (its reason is logged; not sent again until they "
          "change)",
          NULL },
        { &m->bytes_shipped, INGEST_METRIC_COUNTER, "ingest_agent_bytes_shipped_total",
          "Bytes of the files of acknowledged batches", NULL },
        { &m->bytes_read, INGEST_METRIC_COUNTER, "ingest_agent_bytes_read_total",
          "Bytes read, chunked and hashed into batches", NULL },
        { &m->chunks, INGEST_METRIC_COUNTER, "ingest_agent_chunks_total", "Chunks of acknowledged batches", NULL },
        { &m->chunks_new, INGEST_METRIC_COUNTER, "ingest_agent_chunks_sent_total",
          "Chunks sent because the core lacked them", NULL },
        { &m->chunks_dedup, INGEST_METRIC_COUNTER, "ingest_agent_chunks_deduplicated_total",
          "Chunks of acknowledged batches that the core already held", NULL },
        { &m->bytes_raw, INGEST_METRIC_COUNTER, "ingest_agent_chunk_bytes_raw_total",
          "Bytes of the chunks sent, before compression", NULL },
        { &m->bytes_comp, INGEST_METRIC_COUNTER, "ingest_agent_chunk_bytes_compressed_total",
          "Bytes of the chunks sent, compressed", NULL },
        { &m->wire, INGEST_METRIC_COUNTER, "ingest_agent_wire_bytes_total",
          "Bytes on the wire (frames, with their overhead)", "direction" },
        { &m->batches, INGEST_METRIC_COUNTER, "ingest_agent_batches_total",
          "Batches by outcome: sent (manifest sent), acked, failed (refused), abandoned (a file changed), id_taken "
          "(among abandoned: the id was landed before with other data; a new instance is taken)",
          "outcome" },
        { &m->errors, INGEST_METRIC_COUNTER, "ingest_agent_errors_total",
          "Errors by kind: connect, session (lost connection or protocol), refused, store", "kind" },
        { &m->stage, INGEST_METRIC_SECONDS, "ingest_agent_stage_seconds_total",
          "Seconds of the shipping thread by stage: wait_build (walk, read, chunk, hash by the builder), "
          "wait_want, send (re-read, compress, encrypt, write), wait_ack; walk (daemon discovery)",
          "stage" },
        { &m->queue_files, INGEST_METRIC_GAUGE, "ingest_agent_queue_files", "Files in journaled, unacked batches", NULL },
        { &m->queue_bytes, INGEST_METRIC_GAUGE, "ingest_agent_queue_bytes", "Bytes in journaled, unacked batches", NULL },
        { &m->queue_batches, INGEST_METRIC_GAUGE, "ingest_agent_queue_batches", "Journaled, unacked batches", NULL },
        { &m->backpressure, INGEST_METRIC_GAUGE, "ingest_agent_backpressure",
          "1 while the agent takes no new files (queue or spool full)", NULL },
        { &m->spool_bytes, INGEST_METRIC_GAUGE, "ingest_agent_spool_bytes", "Bytes held in the spool", NULL },
        { &m->special, INGEST_METRIC_GAUGE, "ingest_agent_special_files",
          "Entries under the sources that are not regular files or directories, found by the last walk and "
          "skipped (never opened, never shipped): symlink, fifo, socket, device; and bad_link: symlinks of a "
          "source with symlinks: ship whose target cannot be shipped",
          "kind" },
    };
    if (ingest_metrics_create(a->ctx, &a->report.metrics) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++)
        if (ingest_metric_define(a->report.metrics, defs[i].type, defs[i].name, defs[i].help, defs[i].label, NULL, 0,
                                 defs[i].x) != 0)
            return -1;
    if (ingest_metric_define(a->report.metrics, INGEST_METRIC_HISTOGRAM, "ingest_agent_file_latency_seconds",
                             "Seconds from a file taken into a batch (stable) to its batch's ack", NULL,
                             latency_buckets, sizeof(latency_buckets) / sizeof(latency_buckets[0]),
                             &m->latency) != 0)
        return -1;
    ingest_metric_set(m->info, a->cfg->device_id, 1);
    for (int k = 0; k < SPECIAL_KINDS; k++)
        ingest_metric_set(m->special, agent_special_name(k), 0);
    return 0;
}

/* Add the growth of a totals field since the last sync to counter x (label lv). */
#define SYNC(field, x, lv)                                                                                            \
    do {                                                                                                              \
        if (a->report.t.field > a->report.msync.field)                                                                              \
            ingest_metric_add(a->report.m.x, lv, a->report.t.field - a->report.msync.field);                                               \
    } while (0)
#define SYNC_S(field, lv)                                                                                             \
    do {                                                                                                              \
        if (a->report.t.field > a->report.msync.field)                                                                              \
            ingest_metric_add_seconds(a->report.m.stage, lv, a->report.t.field - a->report.msync.field);                                   \
    } while (0)

void agent_metrics_sync(agent *a)
{
    if (a->report.metrics == NULL)
        return;
    SYNC(ship.files, files_shipped, NULL);
    SYNC(ship.files_refused, files_refused, NULL);
    SYNC(refused_edge, files_refused, NULL);
    SYNC(ship.bytes, bytes_shipped, NULL);
    SYNC(bytes_read, bytes_read, NULL);
    SYNC(ship.chunks, chunks, NULL);
    SYNC(ship.chunks_sent, chunks_new, NULL);
    SYNC(ship.chunks_dedup, chunks_dedup, NULL);
    SYNC(ship.chunk_bytes_raw, bytes_raw, NULL);
    SYNC(ship.chunk_bytes_sent, bytes_comp, NULL);
    SYNC(ship.wire_out, wire, "out");
    SYNC(ship.wire_in, wire, "in");
    SYNC(batches, batches, "sent");
    SYNC(ship.batches_acked, batches, "acked");
    SYNC(ship.batches_failed, batches, "failed");
    SYNC(ship.batches_abandoned, batches, "abandoned");
    SYNC(ship.batches_id_taken, batches, "id_taken");
    SYNC(err_connect, errors, "connect");
    SYNC(err_session, errors, "session");
    SYNC(err_store, errors, "store");
    SYNC(ship.batches_failed, errors, "refused");
    SYNC_S(wait_build_s, "wait_build");
    SYNC_S(ship.wait_want_s, "wait_want");
    SYNC_S(ship.send_s, "send");
    SYNC_S(ship.wait_ack_s, "wait_ack");
    SYNC_S(walk_s, "walk");
    a->report.msync = a->report.t;
}

void agent_metrics_latency(agent *a, double seconds, uint64_t files)
{
    if (a->report.metrics == NULL || !(seconds >= 0))
        return;
    for (uint64_t i = 0; i < files; i++)
        ingest_metric_observe(a->report.m.latency, NULL, seconds);
}

const char *agent_special_name(int kind)
{
    static const char *const names[SPECIAL_KINDS] = { "symlink", "fifo", "socket", "device", "bad_link" };
    return kind >= 0 && kind < SPECIAL_KINDS ? names[kind] : "?";
}

void agent_walk_special(agent *a, const ingest_sender_stats *ss)
{
    const uint64_t n[SPECIAL_KINDS] = { ss->skipped_symlinks, ss->skipped_fifos, ss->skipped_sockets,
                                        ss->skipped_devices, ss->skipped_links };
    /* said once, not on every rescan: when the counts change */
    if (memcmp(n, a->report.special, sizeof n) != 0 && (n[0] | n[1] | n[2] | n[3] | n[4]) != 0)
        prog_log(INGEST_LOG_INFO,
                 "walk: skipped %llu symlinks, %llu FIFOs, %llu sockets and %llu devices under the sources (only "
                 "regular files ship), and %llu symlinks to ship whose target cannot be shipped",
                 (unsigned long long)n[SPECIAL_SYMLINK], (unsigned long long)n[SPECIAL_FIFO],
                 (unsigned long long)n[SPECIAL_SOCKET], (unsigned long long)n[SPECIAL_DEVICE],
                 (unsigned long long)n[SPECIAL_BAD_LINK]);
    memcpy(a->report.special, n, sizeof n);
    if (a->report.metrics != NULL)
        for (int k = 0; k < SPECIAL_KINDS; k++)
            ingest_metric_set(a->report.m.special, agent_special_name(k), (int64_t)n[k]);
}
