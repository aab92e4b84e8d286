/*
 * Inside the Kafka transport: the librdkafka configuration both sides make
 * from ingest_kafka_conf (kafka.c), used by the edge client there and by
 * the core's consumer group (core/kserve.c).
 */
#ifndef INGEST_KAFKA_INT_H
#define INGEST_KAFKA_INT_H

#include "ingest/kafka.h"

#include <librdkafka/rdkafka.h>

enum { KAFKA_PRODUCER, KAFKA_CONSUMER, KAFKA_GROUP };

/* Where librdkafka's log lines go: the first member of whatever a client's opaque points at. */
typedef struct ingest__kafka_logto {
    ingest_log_fn log;
    void *ud;
    int level;
} ingest__kafka_logto;

/*
 * A librdkafka configuration for role: bootstrap.servers, our defaults,
 * kc's properties, then what the role needs (idempotent producer with
 * acks=all; a group member that commits by hand).  opaque (the client's
 * rd_kafka_opaque, delivery reports' and rebalances' argument) must start
 * with an ingest__kafka_logto, whose lines librdkafka's log goes to.
 * NULL with the reason in ctx.
 */
rd_kafka_conf_t *ingest__kafka_conf(ingest_ctx *ctx, const ingest_kafka_conf *kc, int role, void *opaque);

/* How many partitions topic has (0 and the reason in ctx when the brokers do not say within timeout_ms). */
int32_t ingest__kafka_partitions(ingest_ctx *ctx, rd_kafka_t *rk, rd_kafka_topic_t *rkt, int timeout_ms);

#endif
