/*
 * conn-flood: pressure on a receiver's connection handling, for the
 * integration tests (tests/integration/test_preauth.sh).
 *
 *   conn-flood --address HOST:PORT --idle N --rate R --seconds S [--status FILE]
 *
 * Keeps N connections open that never send a byte (re-opening any the
 * receiver closes) and, on top of them, opens R more per second that also
 * stay silent until the receiver closes them, for S seconds (at most 5,000
 * connects per second in all).  Writes
 * "open=... opened=... closed_by_peer=..." to FILE (when given) every
 * 100 ms, and the same line on stdout at the end.  Exit 0, or 1 when it
 * could not connect at all.
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_FDS 8192

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct addrinfo *resolve(const char *address)
{
    char host[256];
    const char *colon = strrchr(address, ':');
    if (colon == NULL || (size_t)(colon - address) >= sizeof(host))
        return NULL;
    memcpy(host, address, (size_t)(colon - address));
    host[colon - address] = '\0';
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    return getaddrinfo(host, colon + 1, &hints, &ai) == 0 ? ai : NULL;
}

static int connect_one(const struct addrinfo *ai)
{
    const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int main(int argc, char **argv)
{
    const char *address = NULL, *status = NULL;
    long idle = 0, rate = 0;
    double seconds = 0;
    static const struct option opts[] = {
        { "address", required_argument, NULL, 'a' }, { "idle", required_argument, NULL, 'i' },
        { "rate", required_argument, NULL, 'r' },    { "seconds", required_argument, NULL, 's' },
        { "status", required_argument, NULL, 'S' },  { NULL, 0, NULL, 0 },
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'a': address = optarg; break;
        case 'i': idle = strtol(optarg, NULL, 10); break;
        case 'r': rate = strtol(optarg, NULL, 10); break;
        case 's': seconds = strtod(optarg, NULL); break;
        case 'S': status = optarg; break;
        default: return 1;
        }
    }
    if (address == NULL || idle < 0 || rate < 0 || seconds <= 0 || idle + rate * seconds > MAX_FDS) {
        fprintf(stderr, "usage: conn-flood --address HOST:PORT --idle N --rate R --seconds S [--status FILE]\n");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct addrinfo *ai = resolve(address);
    if (ai == NULL) {
        fprintf(stderr, "conn-flood: cannot resolve %s\n", address);
        return 1;
    }
    static struct pollfd p[MAX_FDS];
    size_t n = 0;
    unsigned long opened = 0, closed = 0, failed = 0;
    const double t0 = now(), end = t0 + seconds;
    double last_status = 0;
    unsigned long flood_opened = 0;
    while (now() < end) {
        /* at least N open, and R more per second on top */
        const unsigned long flood_due = (unsigned long)((now() - t0) * (double)rate);
        /* at most 50 connects per 10 ms tick: a hard flood, not a busy loop */
        for (int k = 0; k < 50 && n < MAX_FDS && ((long)n < idle || flood_opened < flood_due); k++) {
            const int fd = connect_one(ai);
            if (fd < 0) {
                failed++;
                break;
            }
            if ((long)n >= idle)
                flood_opened++;
            p[n].fd = fd;
            p[n].events = POLLIN;
            p[n].revents = 0;
            n++;
            opened++;
        }
        if (poll(p, n, 10) > 0) {
            for (size_t i = 0; i < n;) {
                char b[64];
                if (p[i].revents && recv(p[i].fd, b, sizeof(b), MSG_DONTWAIT) <= 0) {
                    close(p[i].fd);
                    p[i] = p[--n];
                    closed++;
                    continue;
                }
                p[i].revents = 0;
                i++;
            }
        }
        if (status != NULL && now() - last_status >= 0.1) {
            last_status = now();
            FILE *f = fopen(status, "w");
            if (f != NULL) {
                fprintf(f, "open=%zu opened=%lu closed_by_peer=%lu connect_failed=%lu\n", n, opened, closed, failed);
                fclose(f);
            }
        }
    }
    printf("open=%zu opened=%lu closed_by_peer=%lu connect_failed=%lu\n", n, opened, closed, failed);
    for (size_t i = 0; i < n; i++)
        close(p[i].fd);
    freeaddrinfo(ai);
    return opened > 0 ? 0 : 1;
}
