/*
 * kafka-put: publish one message, the bytes of stdin, with a key, and wait
 * for its delivery report.  The Kafka tests use it to put records no agent
 * would make (forged, of an unknown device, malformed) into a topic.
 *
 * usage: kafka-put --bootstrap SERVERS --topic NAME --key KEY < BYTES
 *
 * At most 1,000,000 bytes.  Exits 0 once delivered, 1 on failure (the
 * reason on stderr), 2 on a usage error.
 */
#include <librdkafka/rdkafka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BYTES 1000000

static int delivered = -1;

static void on_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    delivered = m->err == 0;
    if (m->err)
        fprintf(stderr, "kafka-put: not delivered: %s\n", rd_kafka_err2str(m->err));
}

int main(int argc, char **argv)
{
    const char *boot = NULL, *topic = NULL, *key = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--bootstrap") == 0)
            boot = argv[i + 1];
        else if (strcmp(argv[i], "--topic") == 0)
            topic = argv[i + 1];
        else if (strcmp(argv[i], "--key") == 0)
            key = argv[i + 1];
    }
    if (boot == NULL || topic == NULL || key == NULL || argc != 7) {
        fprintf(stderr, "usage: kafka-put --bootstrap SERVERS --topic NAME --key KEY < BYTES\n");
        return 2;
    }
    static char buf[MAX_BYTES + 1];
    const size_t n = fread(buf, 1, sizeof(buf), stdin);
    if (n > MAX_BYTES) {
        fprintf(stderr, "kafka-put: more than %d bytes on stdin\n", MAX_BYTES);
        return 2;
    }
    char err[512];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    if (rd_kafka_conf_set(c, "bootstrap.servers", boot, err, sizeof(err)) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(c, "enable.idempotence", "true", err, sizeof(err)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "kafka-put: %s\n", err);
        return 1;
    }
    rd_kafka_conf_set_dr_msg_cb(c, on_dr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof(err));
    if (rk == NULL) {
        fprintf(stderr, "kafka-put: %s\n", err);
        return 1;
    }
    const rd_kafka_resp_err_t e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, strlen(key)),
                                                    RD_KAFKA_V_VALUE(buf, n), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                                    RD_KAFKA_V_END);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "kafka-put: %s\n", rd_kafka_err2str(e));
        rd_kafka_destroy(rk);
        return 1;
    }
    rd_kafka_flush(rk, 15000);
    rd_kafka_destroy(rk);
    return delivered == 1 ? 0 : 1;
}
