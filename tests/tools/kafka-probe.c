/*
 * kafka-probe: prove that a Kafka cluster (in the tests, tests/tools/kafka-mock)
 * takes and gives back messages, with a real client over TCP.
 *
 * usage: kafka-probe --bootstrap SERVERS --topic NAME --count K [--timeout SECONDS]
 *
 * Produces K keyed messages to NAME with an idempotent producer (acks=all)
 * and waits for every delivery report; then consumes NAME from the earliest
 * offset as a consumer group of its own until it has read those K messages
 * back (messages of other runs, told apart by a run id in every key, are
 * skipped).  Prints one line:
 *   produced=K failed=F consumed=C duplicates=D bad=B partitions=P
 * (P: how many partitions the delivered messages landed on; D: messages read
 * again, which a consumer may do after a rebalance) and exits 0 only if
 * every message was delivered and read back intact within --timeout
 * (default 30) seconds.  Usage errors exit 2.
 */
#include <librdkafka/rdkafka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_COUNT 100000
#define MAX_PARTITIONS 1024

struct probe {
    long count;
    long delivered, failed;
    unsigned char *got; /* got[i]: times message i was consumed */
    unsigned char partitions[MAX_PARTITIONS];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(const char *why, const char *arg)
{
    fprintf(stderr, "kafka-probe: %s%s\n", why, arg);
    fprintf(stderr, "usage: kafka-probe --bootstrap SERVERS --topic NAME --count K [--timeout SECONDS]\n");
    exit(2);
}

static long parse_num(const char *s, long lo, long hi)
{
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return -1;
    return v;
}

static int set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
    char errstr[512];
    if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "kafka-probe: %s=%s: %s\n", name, value, errstr);
        return -1;
    }
    return 0;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    struct probe *p = opaque;
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        p->failed++;
        fprintf(stderr, "kafka-probe: delivery failed: %s\n", rd_kafka_err2str(m->err));
        return;
    }
    p->delivered++;
    if (m->partition >= 0 && m->partition < MAX_PARTITIONS)
        p->partitions[m->partition] = 1;
}

/* The key and value of message i of run RUN. */
static void key_of(char *buf, size_t n, const char *run, long i)
{
    snprintf(buf, n, "%s-k%ld", run, i);
}
static void value_of(char *buf, size_t n, const char *run, long i)
{
    snprintf(buf, n, "%s-v%ld-payload", run, i);
}

static int produce(struct probe *p, const char *boot, const char *topic, const char *run, double deadline)
{
    char errstr[512], ms[32];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    snprintf(ms, sizeof(ms), "%ld", (long)((deadline - now_s()) * 1000));
    if (set(conf, "bootstrap.servers", boot) < 0 || set(conf, "enable.idempotence", "true") < 0 ||
        set(conf, "acks", "all") < 0 || set(conf, "linger.ms", "5") < 0 ||
        set(conf, "queue.buffering.max.kbytes", "16384") < 0 || set(conf, "message.timeout.ms", ms) < 0) {
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_opaque(conf, p);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (rk == NULL) {
        fprintf(stderr, "kafka-probe: producer: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    int status = 0;
    for (long i = 0; i < p->count && status == 0; i++) {
        char key[96], val[96];
        key_of(key, sizeof(key), run, i);
        value_of(val, sizeof(val), run, i);
        for (;;) {
            rd_kafka_resp_err_t err = rd_kafka_producev(
                rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                RD_KAFKA_V_KEY(key, strlen(key)), RD_KAFKA_V_VALUE(val, strlen(val)), RD_KAFKA_V_END);
            if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
                break;
            if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL || now_s() > deadline) {
                fprintf(stderr, "kafka-probe: produce: %s\n", rd_kafka_err2str(err));
                status = -1;
                break;
            }
            rd_kafka_poll(rk, 10);
        }
        rd_kafka_poll(rk, 0);
    }
    /* Delivered means a delivery report said so, never "enqueued". */
    while (rd_kafka_outq_len(rk) > 0 && now_s() < deadline)
        rd_kafka_flush(rk, 100);
    if (rd_kafka_outq_len(rk) > 0) {
        fprintf(stderr, "kafka-probe: %d messages still undelivered at the deadline\n", rd_kafka_outq_len(rk));
        status = -1;
    }
    rd_kafka_destroy(rk);
    return status;
}

/* Consume until every message of this run was seen or the deadline. */
static int consume(struct probe *p, const char *boot, const char *topic, const char *run, double deadline,
                   long *consumed, long *dups, long *bad)
{
    char errstr[512], group[96];
    snprintf(group, sizeof(group), "%s-group", run);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (set(conf, "bootstrap.servers", boot) < 0 || set(conf, "group.id", group) < 0 ||
        set(conf, "auto.offset.reset", "earliest") < 0 || set(conf, "fetch.wait.max.ms", "10") < 0 ||
        set(conf, "enable.auto.commit", "false") < 0) {
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (rk == NULL) {
        fprintf(stderr, "kafka-probe: consumer: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(subs, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t err = rd_kafka_subscribe(rk, subs);
    rd_kafka_topic_partition_list_destroy(subs);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "kafka-probe: subscribe %s: %s\n", topic, rd_kafka_err2str(err));
        rd_kafka_destroy(rk);
        return -1;
    }
    size_t runlen = strlen(run);
    while (*consumed < p->count && now_s() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (m == NULL)
            continue;
        if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            /* Transient (a broker going away, a rebalance): the client retries. */
            fprintf(stderr, "kafka-probe: consume: %s\n", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        char key[96], want[96];
        long i = -1;
        if (m->key_len > runlen + 2 && m->key_len < sizeof(key) &&
            memcmp(m->key, run, runlen) == 0 && memcmp((const char *)m->key + runlen, "-k", 2) == 0) {
            memcpy(key, m->key, m->key_len);
            key[m->key_len] = '\0';
            i = parse_num(key + runlen + 2, 0, p->count - 1);
            if (i < 0) {
                (*bad)++;
            } else {
                value_of(want, sizeof(want), run, i);
                if (m->len != strlen(want) || memcmp(m->payload, want, m->len) != 0)
                    (*bad)++;
                else if (p->got[i]++ == 0)
                    (*consumed)++;
                else
                    (*dups)++;
            }
        } /* else: a message of another run */
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return 0;
}

int main(int argc, char **argv)
{
    const char *boot = NULL, *topic = NULL;
    long count = -1, timeout = 30;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (strcmp(opt, "--bootstrap") != 0 && strcmp(opt, "--topic") != 0 && strcmp(opt, "--count") != 0 &&
            strcmp(opt, "--timeout") != 0)
            usage("unknown argument ", opt);
        if (i + 1 >= argc)
            usage("a value is missing after ", opt);
        const char *val = argv[++i];
        if (strcmp(opt, "--bootstrap") == 0) {
            boot = val;
        } else if (strcmp(opt, "--topic") == 0) {
            topic = val;
        } else if (strcmp(opt, "--count") == 0) {
            if ((count = parse_num(val, 1, MAX_COUNT)) < 0)
                usage("--count must be 1 to 100000, not ", val);
        } else if ((timeout = parse_num(val, 1, 3600)) < 0) {
            usage("--timeout must be 1 to 3600 seconds, not ", val);
        }
    }
    if (boot == NULL || topic == NULL || count < 0)
        usage("--bootstrap, --topic and --count are required", "");

    char run[64];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(run, sizeof(run), "probe-%ld-%ld", (long)getpid(), (long)ts.tv_nsec);

    struct probe p;
    memset(&p, 0, sizeof(p));
    p.count = count;
    p.got = calloc((size_t)count, 1);
    if (p.got == NULL) {
        fprintf(stderr, "kafka-probe: out of memory\n");
        return 1;
    }
    const double t0 = now_s(), deadline = t0 + (double)timeout;
    long consumed = 0, dups = 0, bad = 0;
    int status = produce(&p, boot, topic, run, deadline);
    const double t1 = now_s();
    if (status == 0)
        status = consume(&p, boot, topic, run, deadline, &consumed, &dups, &bad);
    int nparts = 0;
    for (int i = 0; i < MAX_PARTITIONS; i++)
        nparts += p.partitions[i];
    printf("produced=%ld failed=%ld consumed=%ld duplicates=%ld bad=%ld partitions=%d\n", p.delivered, p.failed,
           consumed, dups, bad, nparts);
    fprintf(stderr, "kafka-probe: produce %.2f s, consume %.2f s\n", t1 - t0, now_s() - t1);
    free(p.got);
    int ok = status == 0 && p.delivered == count && p.failed == 0 && consumed == count && bad == 0;
    return ok ? 0 : 1;
}
