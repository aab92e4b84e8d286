/* Helpers shared by the programs. */
#include "prog.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h> /* mallopt */
#endif
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <time.h>
#include <unistd.h>

static const char *log_name = "ingest";
static int log_level = INGEST_LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void prog_log_init(const char *name, int level)
{
    log_name = name;
    log_level = level;
}

void prog_log_set_level(int level) { log_level = level; }
int prog_log_level(void) { return log_level; }

static const char *level_name(int level)
{
    switch (level) {
    case INGEST_LOG_ERROR: return "error";
    case INGEST_LOG_WARN: return "warn";
    case INGEST_LOG_INFO: return "info";
    default: return "debug";
    }
}

int prog_parse_level(const char *s)
{
    static const char *const names[] = { "error", "warn", "info", "debug" };
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

const char *prog_escape(char *out, size_t cap, const char *text)
{
    return ingest_escape(out, cap, text);
}

static pthread_key_t esc_key;
static pthread_once_t esc_once = PTHREAD_ONCE_INIT;
static void esc_key_make(void) { (void)pthread_key_create(&esc_key, free); }

/*
 * The slots are allocated by a thread when it first escapes, not held as
 * thread-local arrays: glibc zero-fills static TLS in every thread the
 * program starts, which cost the receiver 8 KiB of each session thread and
 * each reader thread, most of which never escape (docs/architecture.md,
 * "Connection model").  A thread's slots are freed when it exits.
 */
const char *prog_esc(const char *text)
{
    static _Thread_local char (*slot)[PROG_ESC_BYTES];
    static _Thread_local unsigned next;
    if (slot == NULL) {
        (void)pthread_once(&esc_once, esc_key_make);
        if ((slot = malloc((size_t)PROG_ESC_SLOTS * PROG_ESC_BYTES)) == NULL)
            return "(escaped text: out of memory)";
        (void)pthread_setspecific(esc_key, slot);
    }
    char *out = slot[next++ % PROG_ESC_SLOTS];
    return prog_escape(out, PROG_ESC_BYTES, text);
}

/*
 * Write msg into out with every control byte as "\xNN": the last guard of
 * one event per line, for text that reached a log line without prog_escape
 * (a library message quoting a device's file name).  Backslashes are left
 * alone, so text prog_escape made passes unchanged.
 */
static const char *controls_escaped(const char *msg, char *out, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (const unsigned char *s = (const unsigned char *)msg; *s != '\0' && o + 5 <= cap; s++) {
        if (*s < 0x20 || *s == 0x7f) {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[*s >> 4];
            out[o++] = hex[*s & 15];
        } else {
            out[o++] = (char)*s;
        }
    }
    out[o] = '\0';
    return out;
}

/* One formatted line to stderr, with its time and level. */
static void log_line(int level, const char *suffix, const char *fmt, va_list ap) PROG_PRINTF(3, 0);
static void log_line(int level, const char *suffix, const char *fmt, va_list ap)
{
    char raw[2048], guarded[2048];
    vsnprintf(raw, sizeof(raw), fmt, ap);
    const char *msg = raw;
    for (const unsigned char *p = (const unsigned char *)raw; *p != '\0'; p++)
        if (*p < 0x20 || *p == 0x7f) {
            msg = controls_escaped(raw, guarded, sizeof(guarded));
            break;
        }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "%s.%03ldZ %s[%s]: %s%s\n", when, ts.tv_nsec / 1000000, log_name, level_name(level), msg, suffix);
    pthread_mutex_unlock(&log_lock);
}

void prog_log(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    log_line(level, "", fmt, ap);
    va_end(ap);
}

void prog_log_limited(prog_ratelimit *r, int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    const double now = prog_now(), interval = r->interval > 0 ? r->interval : 10.0;
    const double burst = r->burst > 0 ? (double)r->burst : 5.0;
    unsigned long dropped = 0;
    pthread_mutex_lock(&log_lock);
    /* a bucket of burst lines, refilled by one per interval */
    r->tokens = r->last == 0 ? burst : r->tokens + (now - r->last) / interval;
    if (r->tokens > burst)
        r->tokens = burst;
    r->last = now;
    const int pass = r->tokens >= 1.0;
    if (pass) {
        r->tokens -= 1.0;
        dropped = r->dropped;
        r->dropped = 0;
    } else {
        r->dropped++;
    }
    pthread_mutex_unlock(&log_lock);
    if (!pass)
        return;
    char suffix[80] = "";
    if (dropped > 0)
        snprintf(suffix, sizeof(suffix), " (%lu more like it not logged since the last one)", dropped);
    va_list ap;
    va_start(ap, fmt);
    log_line(level, suffix, fmt, ap);
    va_end(ap);
}

void prog_lib_log(void *userdata, int level, const char *msg)
{
    (void)userdata;
    prog_log(level, "%s", msg);
}

void prog_malloc_tune(void)
{
#ifdef __GLIBC__
    (void)mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
}

double prog_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double prog_cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

static int split_address(const char *address, char *host, size_t hcap, char *port, size_t pcap)
{
    const char *colon;
    if (address[0] == '[') {
        const char *end = strchr(address, ']');
        if (end == NULL || end[1] != ':')
            return -1;
        snprintf(host, hcap, "%.*s", (int)(end - address - 1), address + 1);
        colon = end + 1;
    } else {
        colon = strrchr(address, ':');
        if (colon == NULL)
            return -1;
        snprintf(host, hcap, "%.*s", (int)(colon - address), address);
    }
    snprintf(port, pcap, "%s", colon + 1);
    return port[0] ? 0 : -1;
}

int prog_connect(const char *address, int timeout_ms, char *errmsg, size_t cap)
{
    char host[256], port[16];
    if (split_address(address, host, sizeof(host), port, sizeof(port)) != 0) {
        snprintf(errmsg, cap, "bad address '%s' (want host:port)", address);
        return -1;
    }
    struct addrinfo hints = { 0 }, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    const int g = getaddrinfo(host, port, &hints, &res);
    if (g != 0) {
        snprintf(errmsg, cap, "%s: %s", address, gai_strerror(g));
        return -1;
    }
    int fd = -1;
    snprintf(errmsg, cap, "%s: no address", address);
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno == EINPROGRESS) {
            struct pollfd p = { fd, POLLOUT, 0 };
            int err = 0;
            socklen_t len = sizeof(err);
            if (poll(&p, 1, timeout_ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
                goto connected;
            snprintf(errmsg, cap, "connect %s: %s", address, err ? strerror(err) : "timed out");
        } else if (errno == 0 || errno == EISCONN) {
            goto connected;
        } else {
            snprintf(errmsg, cap, "connect %s: %s", address, strerror(errno));
        }
        close(fd);
        fd = -1;
        continue;
    connected:
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        {
            const int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        break;
    }
    freeaddrinfo(res);
    return fd;
}

int prog_listen(const char *address, char *bound, size_t bound_cap, char *errmsg, size_t cap)
{
    char host[256], port[16];
    if (split_address(address, host, sizeof(host), port, sizeof(port)) != 0) {
        snprintf(errmsg, cap, "bad listen address '%s' (want host:port)", address);
        return -1;
    }
    struct addrinfo hints = { 0 }, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    const int g = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (g != 0) {
        snprintf(errmsg, cap, "%s: %s", address, gai_strerror(g));
        return -1;
    }
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
    const int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 64) != 0) {
        snprintf(errmsg, cap, "listen %s: %s", address, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), p, sizeof(p), NI_NUMERICHOST | NI_NUMERICSERV) == 0)
        snprintf(bound, bound_cap, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, p);
    else
        snprintf(bound, bound_cap, "%s", address);
    return fd;
}

/*
 * Temporary file + rename; durable: the file fsynced before the rename, its
 * directory after.  The temporary name is new (O_CREAT | O_EXCL |
 * O_NOFOLLOW, a name nobody can have planted a symlink at in advance: an
 * existing name is skipped), so a file or link already there is never
 * opened or truncated; path itself must not be a symbolic link (ELOOP): the
 * rename would replace the link, not write where it points, but whoever
 * asked for path meant a file.  A link made after the check is replaced.
 */
static int write_file(const char *path, const void *data, size_t len, int durable)
{
    char tmp[4096], dir[4096];
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        errno = ELOOP;
        return -1;
    }
    static unsigned counter;
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        const unsigned n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
        if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%ld.%u.%lx", path, (long)getpid(), n,
                             (unsigned long)ts.tv_nsec) >= sizeof(tmp)) {
            errno = ENAMETOOLONG;
            return -1;
        }
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST)
            return -1;
    }
    if (fd < 0)
        return -1;
    const int ok = write(fd, data, len) == (ssize_t)len && (!durable || fsync(fd) == 0);
    if (close(fd) != 0 || !ok || rename(tmp, path) != 0) {
        const int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    if (!durable)
        return 0;
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else if (slash != NULL)
        *slash = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    const int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -1;
    const int r = fsync(dfd);
    close(dfd);
    return r;
}

int prog_write_file_atomic(const char *path, const char *text) { return write_file(path, text, strlen(text), 0); }
int prog_write_file_durable(const char *path, const char *text) { return write_file(path, text, strlen(text), 1); }

int prog_write_bytes_durable(const char *path, const void *p, size_t n) { return write_file(path, p, n, 1); }

int prog_lock_state_dir(const char *dir, const char *who)
{
    char lockp[4200];
    snprintf(lockp, sizeof(lockp), "%s/lock", dir);
    const int fd = open(lockp, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
        return fd;
    const int e = errno;
    if (fd >= 0 && e == EWOULDBLOCK)
        prog_log(INGEST_LOG_ERROR, "state_dir %s is in use by another %s", dir, who);
    else
        prog_log(INGEST_LOG_ERROR, "state_dir %s: lock: %s", dir, strerror(e));
    if (fd >= 0)
        close(fd);
    return -1;
}

size_t prog_read_upto(int fd, void *buf, size_t cap)
{
    size_t n = 0;
    while (n < cap) {
        const ssize_t r = read(fd, (char *)buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    return n;
}

static int print_key(void *ud, const ingest_config_key *k)
{
    (void)ud;
    printf("  %-24s %-8s %s%s%s%s%s\n", k->name, k->type, k->description, k->default_value[0] ? " (default " : "",
           k->default_value, k->default_value[0] ? ")" : "", k->required ? " [required]" : "");
    return 0;
}

void prog_print_config_keys(int program, const char *title)
{
    printf("%s configuration keys (docs/config.md):\n", title);
    ingest_config_keys(program, print_key, NULL);
}

/* Clients answered at once; one more gets the server's busy reply (prog_server_set_busy) and is closed at once
 * (a scraper and ingestctl status retry).  A silent client holds its place for up to 2 s: enough places that a
 * few idle connections do not lock the others out. */
#define SERVER_CLIENTS_MAX 32
/* A client that does not take its answer is given up after this. */
#define SERVER_SEND_TIMEOUT_S 2

struct prog_server {
    int fd;
    int stop_pipe[2];
    pthread_t thread;
    void (*answer)(void *, int);
    void *ud;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned active; /* client threads running, under mu */
    char busy[128];  /* written to a client over SERVER_CLIENTS_MAX before it is closed ("": nothing) */
};

typedef struct server_client {
    prog_server *s;
    int fd;
} server_client;

static void *client_main(void *arg)
{
    (void)pthread_setname_np(pthread_self(), "ingest-statusc"); /* docs/architecture.md "Threads" */
    server_client *c = arg;
    prog_server *s = c->s;
    s->answer(s->ud, c->fd);
    close(c->fd);
    free(c);
    pthread_mutex_lock(&s->mu);
    s->active--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Each client in a thread of its own, so one slow client never holds up the others. */
static void serve_client(prog_server *s, int fd)
{
    const struct timeval tv = { SERVER_SEND_TIMEOUT_S, 0 };
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    pthread_mutex_lock(&s->mu);
    const int room = s->active < SERVER_CLIENTS_MAX;
    if (room)
        s->active++;
    pthread_mutex_unlock(&s->mu);
    server_client *c = room ? malloc(sizeof(*c)) : NULL;
    pthread_attr_t attr;
    pthread_t t;
    int started = 0;
    if (c != NULL) {
        c->s = s;
        c->fd = fd;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        started = pthread_create(&t, &attr, client_main, c) == 0;
        pthread_attr_destroy(&attr);
    }
    if (started)
        return;
    free(c);
    if (s->busy[0] != '\0') {
        /* the request read first (it may take 20 ms to come): closing with it unread resets the connection,
         * and the client may lose the busy answer with it */
        char drain[512];
        struct pollfd p = { fd, POLLIN, 0 };
        if (poll(&p, 1, 20) == 1)
            (void)recv(fd, drain, sizeof(drain), MSG_DONTWAIT);
        (void)send(fd, s->busy, strlen(s->busy), MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)shutdown(fd, SHUT_WR);
        if (poll(&p, 1, 20) == 1)
            (void)recv(fd, drain, sizeof(drain), MSG_DONTWAIT);
    }
    close(fd);
    if (room) {
        pthread_mutex_lock(&s->mu);
        s->active--;
        pthread_mutex_unlock(&s->mu);
    }
}

static void *server_main(void *arg)
{
    (void)pthread_setname_np(pthread_self(), "ingest-status"); /* docs/architecture.md "Threads" */
    prog_server *s = arg;
    for (;;) {
        struct pollfd p[2] = { { s->fd, POLLIN, 0 }, { s->stop_pipe[0], POLLIN, 0 } };
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents)
            break;
        const int c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        serve_client(s, c);
    }
    return NULL;
}

prog_server *prog_server_start(int listen_fd, void (*answer)(void *userdata, int fd), void *userdata, const char *busy,
                               char *err, size_t errcap)
{
    prog_server *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errcap, "out of memory");
        close(listen_fd);
        return NULL;
    }
    s->fd = listen_fd;
    s->answer = answer;
    s->ud = userdata;
    snprintf(s->busy, sizeof(s->busy), "%s", busy != NULL ? busy : "");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pipe2(s->stop_pipe, O_CLOEXEC) != 0) {
        snprintf(err, errcap, "pipe: %s", strerror(errno));
        close(listen_fd);
        free(s);
        return NULL;
    }
    if (pthread_create(&s->thread, NULL, server_main, s) != 0) {
        snprintf(err, errcap, "cannot start a thread");
        close(s->stop_pipe[0]);
        close(s->stop_pipe[1]);
        close(listen_fd);
        free(s);
        return NULL;
    }
    return s;
}

void prog_server_stop(prog_server *s)
{
    if (s == NULL)
        return;
    const char c = 's';
    if (write(s->stop_pipe[1], &c, 1) != 1) {
        /* closing the pipe below ends the thread too */
    }
    pthread_join(s->thread, NULL);
    /* Clients still being answered end by their deadlines: wait for them. */
    pthread_mutex_lock(&s->mu);
    while (s->active > 0)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    close(s->fd);
    close(s->stop_pipe[0]);
    close(s->stop_pipe[1]);
    free(s);
}

void prog_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        /* a socket's peer may be gone: never SIGPIPE (ENOTSOCK: a plain file descriptor) */
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == ENOTSOCK)
            w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        c += w;
        n -= (size_t)w;
    }
}

static char sigbus_msg[512], sigbus_mark[4096];

static void on_sigbus(int sig)
{
    (void)sig;
    if (sigbus_mark[0] != '\0') {
        const int fd = open(sigbus_mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) {
            (void)fsync(fd);
            close(fd);
        }
    }
    const ssize_t w = write(2, sigbus_msg, strlen(sigbus_msg));
    (void)w;
    _exit(70);
}

void prog_sigbus_guard(const char *msg, const char *mark)
{
    snprintf(sigbus_msg, sizeof(sigbus_msg), "%s\n", msg);
    snprintf(sigbus_mark, sizeof(sigbus_mark), "%s", mark != NULL ? mark : "");
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigbus;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}
