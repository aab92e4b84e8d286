/*
 * fault-proxy: a TCP proxy between an agent and a receiver that breaks the
 * connection on purpose, for the network fault tests
 * (tests/integration/test_fault_network.sh).
 *
 *   fault-proxy --to HOST:PORT --addr-file FILE --mode MODE [--after N]
 *               [--seconds S] [--faulty K]
 *
 * Listens on 127.0.0.1 (a free port, written as "127.0.0.1:PORT" to FILE
 * once it listens) and forwards each connection to HOST:PORT.  The first K
 * connections (default 1) get the fault; later ones are forwarded as they
 * are, so a retry can succeed.  MODE:
 *   pass    forward everything;
 *   reset   after N bytes from the agent (counted over the connection),
 *           reset both sides (RST: SO_LINGER 0), in the middle of whatever
 *           frame those bytes fall in;
 *   stall   after N bytes from the agent, forward nothing more either way
 *           and read nothing for S seconds (longer than the receiver's
 *           idle timeout), then close both sides;
 *   noread  after N bytes from the agent, stop reading what the receiver
 *           sends (the agent stops reading, as far as the receiver can
 *           tell) while still forwarding the agent's bytes, for S seconds,
 *           then close both sides;
 *   drip    forward both ways 1..16 bytes at a time, 1 ms apart (a slow
 *           link that splits every frame); the ship must still succeed.
 * Prints one line per connection on stdout ("conn N: MODE: A bytes up,
 * B bytes down, ended by ...").  Runs until killed.
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { M_PASS, M_RESET, M_STALL, M_NOREAD, M_DRIP };

typedef struct conn {
    int client, server;
    int mode;
    unsigned n;
} conn;

static const char *g_to;
static long long g_after = 4096;
static double g_seconds = 3;
static int g_mode = M_PASS;
static const char *const MODES[] = { "pass", "reset", "stall", "noread", "drip" };
static pthread_mutex_t g_out = PTHREAD_MUTEX_INITIALIZER;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void msleep(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int dial(const char *address)
{
    char host[256];
    const char *colon = strrchr(address, ':');
    if (colon == NULL || (size_t)(colon - address) >= sizeof(host))
        return -1;
    memcpy(host, address, (size_t)(colon - address));
    host[colon - address] = '\0';
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return -1;
    const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    return fd;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void hard_close(int fd)
{
    const struct linger lg = { 1, 0 }; /* an RST, not a FIN */
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

static void *conn_main(void *arg)
{
    conn *c = arg;
    unsigned char buf[65536];
    long long up = 0, down = 0;
    const char *end = "a side closed";
    int faulted = 0;
    double fault_t = 0;
    for (;;) {
        if (faulted && (c->mode == M_STALL || c->mode == M_NOREAD) && now() - fault_t >= g_seconds) {
            end = "the fault's time ran out";
            break;
        }
        struct pollfd p[2] = { { c->client, POLLIN, 0 }, { c->server, POLLIN, 0 } };
        if (faulted && c->mode == M_STALL)
            p[0].events = p[1].events = 0; /* read nothing: the sockets' buffers fill up */
        if (faulted && c->mode == M_NOREAD)
            p[1].events = 0;
        const int r = poll(p, 2, 50);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        for (int side = 0; side < 2; side++) {
            if (!(p[side].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            const int from = side == 0 ? c->client : c->server, to = side == 0 ? c->server : c->client;
            size_t want = sizeof(buf);
            if (c->mode == M_DRIP)
                want = 1 + (size_t)(rand() % 16);
            if (side == 0 && (c->mode == M_RESET || c->mode == M_STALL || c->mode == M_NOREAD) && !faulted &&
                (long long)want > g_after - up)
                want = (size_t)(g_after - up);
            ssize_t n = want > 0 ? recv(from, buf, want, 0) : 0;
            if (want > 0 && n <= 0) {
                end = side == 0 ? "the agent closed" : "the receiver closed";
                goto done;
            }
            if (n > 0 && write_all(to, buf, (size_t)n) != 0) {
                end = side == 0 ? "the receiver went" : "the agent went";
                goto done;
            }
            if (side == 0)
                up += n;
            else
                down += n;
            if (c->mode == M_DRIP)
                msleep(1);
            if (side == 0 && !faulted && up >= g_after && c->mode != M_PASS && c->mode != M_DRIP) {
                faulted = 1;
                fault_t = now();
                if (c->mode == M_RESET) {
                    hard_close(c->client);
                    hard_close(c->server);
                    c->client = c->server = -1;
                    end = "reset";
                    goto done;
                }
            }
        }
    }
done:
    if (c->client >= 0)
        close(c->client);
    if (c->server >= 0)
        close(c->server);
    pthread_mutex_lock(&g_out);
    printf("conn %u: %s: %lld bytes up, %lld bytes down, ended: %s\n", c->n, MODES[c->mode], up, down, end);
    fflush(stdout);
    pthread_mutex_unlock(&g_out);
    free(c);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: fault-proxy --to HOST:PORT --addr-file FILE --mode pass|reset|stall|noread|drip "
                    "[--after N] [--seconds S] [--faulty K]\n");
    exit(1);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "to", required_argument, NULL, 't' },       { "addr-file", required_argument, NULL, 'a' },
        { "mode", required_argument, NULL, 'm' },     { "after", required_argument, NULL, 'n' },
        { "seconds", required_argument, NULL, 's' },  { "faulty", required_argument, NULL, 'k' },
        { NULL, 0, NULL, 0 },
    };
    const char *addr_file = NULL;
    long faulty = 1;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 't': g_to = optarg; break;
        case 'a': addr_file = optarg; break;
        case 'm': {
            int k = 0;
            while (k < 5 && strcmp(optarg, MODES[k]) != 0)
                k++;
            if (k == 5)
                usage();
            g_mode = k;
            break;
        }
        case 'n': g_after = atoll(optarg); break;
        case 's': g_seconds = atof(optarg); break;
        case 'k': faulty = atol(optarg); break;
        default: usage();
        }
    }
    if (g_to == NULL || addr_file == NULL || g_after < 0)
        usage();
    signal(SIGPIPE, SIG_IGN);
    const int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(ls, 16) != 0 ||
        getsockname(ls, (struct sockaddr *)&sa, &sl) != 0) {
        perror("fault-proxy: listen");
        return 1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", addr_file);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fprintf(f, "127.0.0.1:%u\n", (unsigned)ntohs(sa.sin_port)) < 0 || fclose(f) != 0 ||
        rename(tmp, addr_file) != 0) {
        perror("fault-proxy: address file");
        return 1;
    }
    for (unsigned n = 1;; n++) {
        const int cfd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno == EINTR)
                continue;
            perror("fault-proxy: accept");
            return 1;
        }
        const int sfd = dial(g_to);
        if (sfd < 0) {
            fprintf(stderr, "fault-proxy: cannot reach %s\n", g_to);
            close(cfd);
            continue;
        }
        conn *c = calloc(1, sizeof(*c));
        if (c == NULL)
            return 1;
        c->client = cfd;
        c->server = sfd;
        c->mode = (long)n <= faulty ? g_mode : M_PASS;
        c->n = n;
        pthread_t t;
        if (pthread_create(&t, NULL, conn_main, c) != 0)
            return 1;
        pthread_detach(t);
    }
}
