/*
 * kafka-mock: a Kafka cluster for tests, built on librdkafka's mock cluster
 * (rdkafka_mock.h).  It starts N brokers that speak the Kafka protocol on
 * 127.0.0.1 (one ephemeral port each), so the real agent and receiver
 * processes can connect to them over TCP, as to a real cluster.
 *
 * usage: kafka-mock --brokers N [--topic NAME:PARTITIONS]... [--ready-file FILE]
 *
 * Creates each topic with its partitions, prints the bootstrap servers
 * ("127.0.0.1:PORT,127.0.0.1:PORT,...") as one line on stdout and, with
 * --ready-file, writes the same line to FILE atomically (a temporary file
 * renamed into place).  Then it reads commands from stdin, one per line:
 *
 *   down ID       broker ID (1..N, or "all") drops its connections and refuses
 *                 new ones; its port is kept, and no leader moves elsewhere
 *   up ID         broker ID listens again
 *   rtt ID MS     broker ID delays its responses by MS milliseconds
 *   leader TOPIC PARTITION ID
 *                 broker ID (1..N) leads that partition from now on
 *   coordinator group GROUP ID
 *                 broker ID (1..N) coordinates consumer group GROUP
 *   produce-errors CODE COUNT
 *                 the next COUNT (1..1000) Produce requests, to any broker,
 *                 fail with Kafka error code CODE (1..32767; 29 is
 *                 TOPIC_AUTHORIZATION_FAILED, 10 MSG_SIZE_TOO_LARGE)
 *
 * Each command is answered with one line on stdout: "ok CMD ARGS" or
 * "error: line N: why".  Blank lines are ignored; a bad line does not stop
 * it.  It runs until stdin reaches EOF or it gets SIGTERM or SIGINT, then
 * destroys the cluster and exits 0.  Usage errors exit 2, failures 1.
 *
 * What the mock is (librdkafka 2.0.2): brokers have ids 1..N; a topic's
 * replication factor is min(3, N) whatever is asked; each partition keeps
 * only its newest ~5 MiB (older messages vanish silently), so tests must
 * consume while producing; it holds a Fetch for the client's
 * fetch.wait.max.ms (use ~10 ms in tests); a consumer group's first join
 * takes ~3 s.  Topics named by clients are also auto-created, with 4
 * partitions.  The brokers listen ~15 ms after start; stopping takes ~1 s
 * (rd_kafka_mock_cluster_destroy waits out its thread's 1 s poll).  A broker
 * that is down keeps leading its partitions: they take and give nothing
 * until it is up again, and clients see "Connection refused" on its port.
 *
 * It is what the Kafka transport's integration tests (issue 11) run
 * instead of a real cluster: test_kafka_mock.sh shows the way, with
 * tests/tools/kafka-probe as the client.
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Limits; the usage messages below spell them out. */
#define MAX_BROKERS 32
#define MAX_PARTITIONS 1024
#define MAX_TOPICS 64
#define MAX_LINE 256 /* a command line, its newline included */
#define MAX_RTT_MS 600000

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

static void usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "kafka-mock: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nusage: kafka-mock --brokers N [--topic NAME:PARTITIONS]... [--ready-file FILE]\n");
    exit(2);
}

/* A decimal integer in [lo, hi] and nothing else; -1 on anything else
 * (lo >= 0 in every use). */
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

/* Kafka's rule for topic names: 1..249 of [A-Za-z0-9._-], not "." or "..". */
static int valid_topic(const char *name, size_t len)
{
    if (len == 0 || len > 249)
        return 0;
    if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

struct topic {
    char name[250];
    int partitions;
};

static int write_ready_file(const char *path, const char *line)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp)) {
        fprintf(stderr, "kafka-mock: --ready-file %s: path too long\n", path);
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        fprintf(stderr, "kafka-mock: --ready-file: %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    int ok = fprintf(f, "%s\n", line) > 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "kafka-mock: --ready-file %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static void reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line on stdout, flushed: whoever drives us waits for it. */
static void reply(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* A broker id argument: 1..brokers, or "all" (-1 to the mock).  0 if bad. */
static int parse_broker(const char *s, int brokers, int32_t *id)
{
    if (strcmp(s, "all") == 0) {
        *id = -1;
        return 1;
    }
    long v = parse_num(s, 1, brokers);
    if (v < 0)
        return 0;
    *id = (int32_t)v;
    return 1;
}

/* Run one command line (no newline); answer it on stdout. */
static void run_command(rd_kafka_mock_cluster_t *mc, int brokers, unsigned long lineno, char *line)
{
    char *argv[4];
    int argc = 0;
    for (char *save = NULL, *tok = strtok_r(line, " \t\r", &save); tok != NULL;
         tok = strtok_r(NULL, " \t\r", &save)) {
        if (argc == 4) {
            reply("error: line %lu: too many arguments", lineno);
            return;
        }
        argv[argc++] = tok;
    }
    if (argc == 0)
        return; /* a blank line */

    const char *cmd = argv[0];
    if (strcmp(cmd, "leader") == 0 || strcmp(cmd, "coordinator") == 0) {
        const int leader = cmd[0] == 'l';
        int32_t id;
        long part = 0;
        if (argc != 4) {
            reply("error: line %lu: usage: %s", lineno, leader ? "leader TOPIC PARTITION ID" : "coordinator group GROUP ID");
            return;
        }
        if (!leader && strcmp(argv[1], "group") != 0) {
            reply("error: line %lu: coordinator: \"%.32s\" is not \"group\"", lineno, argv[1]);
            return;
        }
        if (leader && (part = parse_num(argv[2], 0, 1 << 20)) < 0) {
            reply("error: line %lu: bad partition \"%.32s\"", lineno, argv[2]);
            return;
        }
        if (!parse_broker(argv[3], brokers, &id) || id < 0) {
            reply("error: line %lu: bad broker id \"%.32s\" (1..%d)", lineno, argv[3], brokers);
            return;
        }
        const rd_kafka_resp_err_t err = leader ? rd_kafka_mock_partition_set_leader(mc, argv[1], (int32_t)part, id)
                                               : rd_kafka_mock_coordinator_set(mc, "group", argv[2], id);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
            reply("ok %s %s %s %s", cmd, argv[1], argv[2], argv[3]);
        else
            reply("error: line %lu: %s %s %s: %s", lineno, cmd, argv[1], argv[2], rd_kafka_err2str(err));
        return;
    }
    if (strcmp(cmd, "produce-errors") == 0) {
        if (argc != 3) {
            reply("error: line %lu: usage: produce-errors CODE COUNT", lineno);
            return;
        }
        const long code = parse_num(argv[1], 1, 32767), count = parse_num(argv[2], 1, 1000);
        if (code < 0 || count < 0) {
            reply("error: line %lu: bad %s \"%.32s\" (%s)", lineno, code < 0 ? "error code" : "count",
                  code < 0 ? argv[1] : argv[2], code < 0 ? "1..32767" : "1..1000");
            return;
        }
        rd_kafka_resp_err_t errs[1000];
        for (long i = 0; i < count; i++)
            errs[i] = (rd_kafka_resp_err_t)code;
        rd_kafka_mock_push_request_errors_array(mc, 0 /* Produce */, (size_t)count, errs);
        reply("ok produce-errors %ld %ld", code, count);
        return;
    }
    int is_down = strcmp(cmd, "down") == 0, is_up = strcmp(cmd, "up") == 0;
    int is_rtt = strcmp(cmd, "rtt") == 0;
    if (!is_down && !is_up && !is_rtt) {
        reply("error: line %lu: unknown command \"%.32s\" (down ID, up ID, rtt ID MS, leader TOPIC PARTITION ID, "
              "coordinator group GROUP ID, produce-errors CODE COUNT)", lineno, cmd);
        return;
    }
    int want = is_rtt ? 3 : 2;
    if (argc != want) {
        reply("error: line %lu: usage: %s", lineno, is_rtt ? "rtt ID MS" : is_up ? "up ID" : "down ID");
        return;
    }
    int32_t id;
    if (!parse_broker(argv[1], brokers, &id)) {
        reply("error: line %lu: bad broker id \"%.32s\" (1..%d or all)", lineno, argv[1], brokers);
        return;
    }
    rd_kafka_resp_err_t err;
    if (is_rtt) {
        long ms = parse_num(argv[2], 0, MAX_RTT_MS);
        if (ms < 0) {
            reply("error: line %lu: bad rtt \"%.32s\" (milliseconds, 0..%d)", lineno, argv[2], MAX_RTT_MS);
            return;
        }
        err = rd_kafka_mock_broker_set_rtt(mc, id, (int)ms);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            reply("ok rtt %s %ld", argv[1], ms);
            return;
        }
    } else {
        err = is_down ? rd_kafka_mock_broker_set_down(mc, id) : rd_kafka_mock_broker_set_up(mc, id);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            reply("ok %s %s", cmd, argv[1]);
            return;
        }
    }
    reply("error: line %lu: %s %s: %s", lineno, cmd, argv[1], rd_kafka_err2str(err));
}

/* Read commands from stdin until EOF or a signal.  Lines longer than
 * MAX_LINE - 1 bytes are refused whole, before anything looks at them. */
static int command_loop(rd_kafka_mock_cluster_t *mc, int brokers, const sigset_t *waitmask)
{
    char buf[MAX_LINE];
    size_t len = 0;
    int skipping = 0; /* inside an over-long line: drop bytes up to its newline */
    unsigned long lineno = 0;
    for (;;) {
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        int r = ppoll(&pfd, 1, NULL, waitmask);
        if (stop_signal)
            return 0;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "kafka-mock: poll: %s\n", strerror(errno));
            return -1;
        }
        ssize_t n = read(STDIN_FILENO, buf + len, sizeof(buf) - len);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            fprintf(stderr, "kafka-mock: read stdin: %s\n", strerror(errno));
            return -1;
        }
        if (n == 0) {
            if (len > 0 && !skipping) { /* a last line without its newline */
                buf[len] = '\0';
                run_command(mc, brokers, ++lineno, buf);
            }
            return 0;
        }
        len += (size_t)n;
        size_t start = 0;
        for (size_t i = 0; i < len; i++) {
            if (buf[i] != '\n')
                continue;
            buf[i] = '\0';
            if (skipping)
                skipping = 0; /* the over-long line was answered when it began */
            else
                run_command(mc, brokers, ++lineno, buf + start);
            start = i + 1;
        }
        memmove(buf, buf + start, len - start);
        len -= start;
        if (len == sizeof(buf)) { /* no newline in MAX_LINE bytes */
            if (!skipping)
                reply("error: line %lu: longer than %d bytes", ++lineno, MAX_LINE - 1);
            skipping = 1;
            len = 0;
        }
    }
}

int main(int argc, char **argv)
{
    static struct topic topics[MAX_TOPICS];
    int ntopics = 0;
    long brokers = -1;
    const char *ready_file = NULL;

    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (strcmp(opt, "--brokers") != 0 && strcmp(opt, "--topic") != 0 && strcmp(opt, "--ready-file") != 0)
            usage_error("unknown argument \"%s\"", opt);
        if (i + 1 >= argc)
            usage_error("%s needs a value", opt);
        const char *val = argv[++i];
        if (strcmp(opt, "--brokers") == 0) {
            brokers = parse_num(val, 1, MAX_BROKERS);
            if (brokers < 0)
                usage_error("--brokers \"%s\": not a number of brokers from 1 to 32", val);
        } else if (strcmp(opt, "--ready-file") == 0) {
            if (*val == '\0')
                usage_error("--ready-file %s: empty path", val);
            ready_file = val;
        } else {
            const char *colon = strrchr(val, ':');
            if (colon == NULL)
                usage_error("--topic \"%s\": expected NAME:PARTITIONS", val);
            size_t nlen = (size_t)(colon - val);
            if (!valid_topic(val, nlen))
                usage_error("--topic \"%s\": a topic name is 1 to 249 of A-Z a-z 0-9 . _ -", val);
            long parts = parse_num(colon + 1, 1, MAX_PARTITIONS);
            if (parts < 0)
                usage_error("--topic \"%s\": partitions must be a number from 1 to 1024", val);
            if (ntopics == MAX_TOPICS)
                usage_error("--topic \"%s\": too many topics (at most 64)", val);
            for (int t = 0; t < ntopics; t++)
                if (strlen(topics[t].name) == nlen && memcmp(topics[t].name, val, nlen) == 0)
                    usage_error("--topic \"%s\": topic given twice", val);
            memcpy(topics[ntopics].name, val, nlen);
            topics[ntopics].name[nlen] = '\0';
            topics[ntopics].partitions = (int)parts;
            ntopics++;
        }
    }
    if (brokers < 0)
        usage_error("%s", "--brokers N is required");

    /* SIGTERM and SIGINT are blocked everywhere (librdkafka's threads
     * inherit the mask) but in ppoll(), which lets the loop see them
     * without a race. */
    sigset_t block, waitmask;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &waitmask);
    sigdelset(&waitmask, SIGTERM);
    sigdelset(&waitmask, SIGINT);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* The mock needs a client handle for its bookkeeping; this one never
     * connects anywhere.  log_level 4 (warnings and worse) hides the notice
     * that it has no bootstrap.servers. */
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "client.id", "kafka-mock", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(conf, "log_level", "4", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "kafka-mock: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (rk == NULL) {
        fprintf(stderr, "kafka-mock: rd_kafka_new: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, (int)brokers);
    if (mc == NULL) {
        fprintf(stderr, "kafka-mock: could not create a mock cluster of %ld brokers\n", brokers);
        rd_kafka_destroy(rk);
        return 1;
    }
    int status = 0;
    for (int t = 0; t < ntopics && status == 0; t++) {
        int rf = brokers < 3 ? (int)brokers : 3;
        rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mc, topics[t].name, topics[t].partitions, rf);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            fprintf(stderr, "kafka-mock: topic %s: %s\n", topics[t].name, rd_kafka_err2str(err));
            status = 1;
        }
    }
    if (status == 0) {
        const char *boot = rd_kafka_mock_cluster_bootstraps(mc);
        reply("%s", boot);
        if (ready_file != NULL && write_ready_file(ready_file, boot) < 0)
            status = 1;
    }
    if (status == 0 && command_loop(mc, (int)brokers, &waitmask) < 0)
        status = 1;

    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return status;
}
