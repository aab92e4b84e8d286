/*
 * The Kafka transport's clients (docs/kafka.md), on librdkafka: what both
 * sides share (a client configuration from our keys, the reply partition
 * of a device) and the edge's client, an idempotent producer of a device's
 * records with a reader of its replies.  The core's consumer group is in
 * core.h (ingest_core_kafka_*), since it serves the core.
 *
 * Records are keyed by device id on {topic}; replies on {reply_topic}
 * (default "{topic}-replies") go to the partition ingest_kafka_reply_partition
 * names (librdkafka's consistent partitioner, CRC32 of the key), so an
 * agent reads only the partition its own replies land in.
 *
 * THREAD SAFETY: an edge client is used by one thread, but for the
 * link it hands out (link.h's rules); the client's own thread serves
 * delivery reports and replies.
 */
#ifndef INGEST_KAFKA_H
#define INGEST_KAFKA_H

#include "ingest/common.h"
#include "ingest/klink.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INGEST_KAFKA_TOPIC_DEFAULT "ingest"
#define INGEST_KAFKA_GROUP_DEFAULT "ingest-receivers"
#define INGEST_KAFKA_RECORD_MAX 990000u              /* a record, under librdkafka's message.max.bytes default */
#define INGEST_KAFKA_RECORD_ROOM 10000u  /* message.max.bytes less this: a record (the key, Kafka's framing) */
#define INGEST_KAFKA_RECORD_MIN 16384u   /* the smallest record the agent makes under message.max.bytes */
#define INGEST_KAFKA_QUEUE_KBYTES_DEFAULT 4096      /* queue.buffering.max.kbytes, unless properties set it */
#define INGEST_KAFKA_PROPERTIES_MAX 64

typedef struct ingest_kafka_conf {
    const char *brokers;     /* bootstrap servers, host:port,... */
    const char *topic;       /* NULL or "": INGEST_KAFKA_TOPIC_DEFAULT */
    const char *reply_topic; /* NULL or "": "{topic}-replies" */
    const char *group;       /* the receivers' consumer group (NULL: INGEST_KAFKA_GROUP_DEFAULT) */
    /* kafka.properties: "name=value" strings given to librdkafka verbatim (TLS, SASL, tuning);
     * set after our defaults and before what the transport needs (idempotence, acks, manual commits). */
    const char *const *props;
    size_t nprops;
} ingest_kafka_conf;

/*
 * Check properties as librdkafka would take them: 0, or INGEST_EINVAL
 * naming the property and librdkafka's reason (for configuration files).
 */
INGEST_API int ingest_kafka_check_properties(ingest_ctx *ctx, const char *const *props, size_t n);

/* The reply topic's name for kc into out (cap >= 256): 0 or INGEST_ETOOBIG. */
INGEST_API int ingest_kafka_reply_topic(const ingest_kafka_conf *kc, char *out, size_t cap);

/* The partition of the reply topic (of nparts) that replies to device land in. */
INGEST_API int32_t ingest_kafka_reply_partition(const char *device, int32_t nparts);

typedef struct ingest_kafka_edge ingest_kafka_edge;

typedef struct ingest_kafka_edge_opts {
    ingest_kafka_conf kc;
    const char *device;
    int timeout_ms; /* to learn the reply topic's partitions and end at open (0: 10 s) */
    /* librdkafka's own log lines and the client's, at most at log_level (log may be NULL). */
    ingest_log_fn log;
    void *log_userdata;
    int log_level;
} ingest_kafka_edge_opts;

typedef struct ingest_kafka_edge_stats {
    uint64_t produced, delivered, failed; /* records */
    uint64_t replies, replies_bad;        /* records read on the reply partition for this device */
} ingest_kafka_edge_stats;

/*
 * Start the producer (idempotent, acks=all) and the reader of the device's
 * reply partition, from its current end.  INGEST_EINVAL (a bad property,
 * named), INGEST_EIO (the brokers could not say where the replies are
 * within timeout_ms).
 */
INGEST_API int ingest_kafka_edge_open(ingest_ctx *ctx, const ingest_kafka_edge_opts *o,
                                      ingest_kafka_edge **out) INGEST_WUR;
/* Waits up to 5 s for records still queued; NULL accepted. */
INGEST_API void ingest_kafka_edge_close(ingest_kafka_edge *k);
/*
 * A link (klink.h) over the client: lo's bus and record_max are set here.
 * One link at a time; end it with ingest_kafka_edge_unlink before
 * destroying it.
 */
INGEST_API int ingest_kafka_edge_link(ingest_kafka_edge *k, const ingest_klink_edge_opts *lo,
                                      ingest_link **out) INGEST_WUR;
INGEST_API void ingest_kafka_edge_unlink(ingest_kafka_edge *k);
INGEST_API void ingest_kafka_edge_stats_get(ingest_kafka_edge *k, ingest_kafka_edge_stats *st);
/* 1 when the producer failed for good (librdkafka's fatal error of an idempotent producer: every record
 * is refused from then on), with librdkafka's reason in why; 0 otherwise.  Only a new client (close,
 * open) publishes again. */
INGEST_API int ingest_kafka_edge_failed(ingest_kafka_edge *k, char *why, size_t whycap);

#ifdef __cplusplus
}
#endif
#endif
