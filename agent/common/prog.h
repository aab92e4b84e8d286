/* Helpers shared by the programs: logging to stderr, sockets, time. */
#ifndef INGEST_PROG_H
#define INGEST_PROG_H

#include <ingest.h>
#include <stdint.h>

#if defined(__GNUC__)
#define PROG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PROG_PRINTF(a, b)
#endif

/* Name shown in log lines ("ingest-agent") and the level in force. */
void prog_log_init(const char *name, int level);
void prog_log_set_level(int level);
int prog_log_level(void);
/*
 * One line to stderr: "2026-11-22T17:50:00.123Z name[level]: msg".  A
 * control byte left in msg (text that no prog_escape went through) is
 * written as "\xNN", so that a line is always one line.
 */
void prog_log(int level, const char *fmt, ...) PROG_PRINTF(2, 3);
/*
 * A line of a kind that can come in floods (refused connections): a burst
 * of lines is logged, then one per interval seconds; the next line logged
 * says how many were not.  One limiter per kind:
 * static prog_ratelimit r = { 10, 5 }  (interval 0: 10 s; burst 0: 5).
 */
typedef struct prog_ratelimit {
    double interval;  /* seconds per line once the burst is spent */
    unsigned burst;   /* lines logged at once after a quiet spell */
    double tokens;    /* lines that may be logged now */
    double last;      /* prog_now() of the last call, 0 = never */
    unsigned long dropped;
} prog_ratelimit;
void prog_log_limited(prog_ratelimit *r, int level, const char *fmt, ...) PROG_PRINTF(3, 4);
/*
 * Escape text that a peer or a device controls (an ERROR or ACK message, a
 * file name) for a log line, so that it can neither break the line nor
 * drive the terminal: printable ASCII and valid UTF-8 stay as they are; a
 * backslash becomes "\\"; newline, return and tab become "\n", "\r",
 * "\t"; other control bytes and bytes that are not UTF-8 become "\xNN"; C1
 * controls, line and paragraph separators and bidirectional controls
 * (U+0080..U+009F, U+2028, U+2029, U+200E/F, U+202A..U+202E,
 * U+2066..U+2069) become "\u{XXXX}".  out (cap >= 4) always ends in a NUL;
 * text that does not fit is cut at a character boundary and ends in "...".
 * Returns out, for use as a prog_log argument.
 */
const char *prog_escape(char *out, size_t cap, const char *text);
/* A buffer that holds the escaped form of any text of n bytes. */
#define PROG_ESCAPE_CAP(n) (4 * (n) + 4)
/*
 * prog_escape into one of PROG_ESC_SLOTS buffers of PROG_ESC_BYTES of the
 * calling thread (allocated at its first call, freed when it exits; a fixed
 * "out of memory" text when they cannot be), used in turn: up to that many
 * in one prog_log call, e.g.
 * prog_log(..., "after_ship move %s -> %s", prog_esc(full), prog_esc(dst)).
 */
#define PROG_ESC_SLOTS 4
#define PROG_ESC_BYTES 2048
const char *prog_esc(const char *text);
/* A library log callback that forwards to prog_log (userdata unused). */
void prog_lib_log(void *userdata, int level, const char *msg);
/* Parse "error|warn|info|debug"; -1 if unknown. */
int prog_parse_level(const char *s);

/*
 * Fix glibc's mmap threshold at 128 KiB (no-op elsewhere): every buffer
 * from 128 KiB up is mapped when allocated and unmapped when freed.  By
 * default glibc raises the threshold to the size of each such buffer freed,
 * and the next ones then come from its heaps, which keep their pages (the
 * agent's per-batch read buffers and 1 MiB chunk groups, the receiver's
 * per-batch buffers): docs/operations.md, "Sizing".
 */
void prog_malloc_tune(void);
/* Monotonic clock in seconds. */
double prog_now(void);
/* CPU seconds used by this process (user + system). */
double prog_cpu_seconds(void);

/*
 * Split "host:port" (host may be "[v6]") and connect with a timeout;
 * returns a connected blocking fd or -1 with errmsg set.
 */
int prog_connect(const char *address, int timeout_ms, char *errmsg, size_t cap);
/* Listen on "host:port" (port 0: ephemeral); returns the fd or -1. */
int prog_listen(const char *address, char *bound, size_t bound_cap, char *errmsg, size_t cap);
/* Print the configuration keys of program (INGEST_CONFIG_AGENT or _RECEIVER) for --help-config. */
void prog_print_config_keys(int program, const char *title);

/*
 * A listening socket served by a thread of its own: answer(userdata, fd)
 * handles each accepted connection in a thread of its own (at most 8 at
 * once; more get busy (an HTTP 503, "busy\n"; NULL: nothing) and are closed; a client that does not take its answer
 * is given up after 2 s), and the connection is closed after it.  answer
 * may run concurrently with itself.  prog_server_start takes over listen_fd (closed on
 * failure too); prog_server_stop ends the thread and closes it.
 */
typedef struct prog_server prog_server;
prog_server *prog_server_start(int listen_fd, void (*answer)(void *userdata, int fd), void *userdata, const char *busy,
                               char *err, size_t errcap);
void prog_server_stop(prog_server *s);
/* Write n bytes to fd, giving up at the first error. */
void prog_write_all(int fd, const void *p, size_t n);

/*
 * Write text to path atomically (a new temporary file in the same directory,
 * created with O_EXCL | O_NOFOLLOW, then renamed over path); 0 or -1 with
 * errno, ELOOP if path is a symbolic link (refused).
 */
int prog_write_file_atomic(const char *path, const char *text);
/* The same, and durable: the file fsynced before the rename, its directory after; 0 or -1. */
int prog_write_file_durable(const char *path, const char *text);
/* The same for n bytes at p. */
int prog_write_bytes_durable(const char *path, const void *p, size_t n);
/* Read from fd until cap bytes or its end (or an error); the bytes read. */
size_t prog_read_upto(int fd, void *buf, size_t cap);
/*
 * One process per state directory: an exclusive flock on dir/lock, held
 * while the descriptor returned is open (it goes with the process).  -1,
 * logged, when it cannot be taken: "state_dir DIR is in use by another
 * WHO" when another process holds it, else the error.
 */
int prog_lock_state_dir(const char *dir, const char *who);

/*
 * A SIGBUS (a mapped file shorter than the pages read from it: an LMDB
 * data.mdb cut by a full disk or a bad copy) ends the process with msg on
 * stderr and exit status 70, after making the file mark (NULL: none), so
 * that the next start can act on it; it is not left to kill the process
 * without a word.  Copied; async-signal-safe in the handler.
 */
void prog_sigbus_guard(const char *msg, const char *mark);

#endif
