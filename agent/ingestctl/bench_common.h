/*
 * Helpers shared by the benchmarks that run the real programs on loopback
 * (bench_pipeline.c, bench_fleet.c; the clock and /proc readings also
 * bench_scan.c and bench_index.c): keys and configs in a work directory,
 * child processes that are stopped on exit and on SIGINT/SIGTERM/SIGHUP,
 * /proc readings, and the agent's `shipped:` summary line.
 *
 * Single-threaded: the child table is a static array, read by the signal
 * handler.
 */
#ifndef INGESTCTL_BENCH_COMMON_H
#define INGESTCTL_BENCH_COMMON_H

#include <ingest.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

/* Children tracked at once (agents plus the receiver). */
#define BENCH_MAX_CHILDREN 264

/* CLOCK_MONOTONIC, in seconds. */
double bench_now(void);

/* utime+stime of a live (not yet reaped) pid in seconds, from /proc; 0 when unreadable. */
double bench_proc_cpu(pid_t pid);

/* The "FIELD: N kB" line of /proc/PID/status (VmHWM, RssAnon, ...) in KiB; -1 when unreadable. */
long bench_proc_kib(pid_t pid, const char *field);

/* ru_utime + ru_stime in seconds. */
double bench_rusage_cpu(const struct rusage *ru);

/* Write text to path (created or truncated).  0 or -1. */
int bench_write_text(const char *path, const char *text);

/* Bytes and number of the regular files under dir (symlinks not followed). */
void bench_tree_size(const char *dir, uint64_t *bytes, uint64_t *files);

/* Remove dir and everything under it; errors are ignored. */
void bench_remove_tree(const char *dir);

/* The directory this ingestctl was run from (where ingest-agent and ingest-receiver are).  0 or -1. */
int bench_bindir(char *dir, size_t cap);

/*
 * Keys in work: receiver.key/.pub, the fleet dedup key fleet.dedup, DEVICE.key
 * for each of the n devices, and `authorized` listing them.  0, or -1 after
 * saying why on stderr (prefix `who`).
 */
int bench_make_keys(ingest_ctx *ctx, const char *who, const char *work, const char *const *devices, size_t n);

/*
 * The last `shipped:` line of the file at path into line (NUL-terminated,
 * without its newline).  0, or -1 when there is none.
 */
int bench_summary_read(const char *path, char *line, size_t cap);

/* A `name=N` field of a summary line; 0 when absent. */
uint64_t bench_summary_u64(const char *line, const char *name);

/* A `name=X.Y` field of a summary line; -1 when absent. */
double bench_summary_double(const char *line, const char *name);

/*
 * Catch SIGINT, SIGTERM and SIGHUP: the handler sends SIGTERM to every
 * tracked child and remembers the signal.  bench_interrupted() returns it
 * (0 when none came).
 */
void bench_signals_install(void);
int bench_interrupted(void);

/*
 * Start argv[0] with argv, stdout and stderr to the files out and err (NULL:
 * inherited), stdin from /dev/null.  The child gets SIGTERM if this process
 * dies.  The pid is tracked until bench_reaped() or bench_stop().  The pid,
 * or -1 (errno set).
 */
pid_t bench_spawn(char *const *argv, const char *out, const char *err);

/* Forget a child that was waited for. */
void bench_reaped(pid_t pid);

/* SIGTERM a tracked child (nothing when pid <= 0), wait for it, forget it. */
void bench_stop(pid_t pid);

/* SIGTERM every tracked child, wait for each. */
void bench_stop_all(void);

/*
 * Start bindir/ingest-receiver with work/receiver.yaml, its log to log (NULL:
 * inherited), and wait (up to 10 s) until it listens; its address (host:port)
 * into addr.  0, or -1 after saying why on stderr (prefix `who`).
 */
int bench_start_receiver(const char *who, const char *bindir, const char *work, const char *log, pid_t *pid,
                         char *addr, size_t cap);

/* Print the last n lines of the file at path to stderr, each indented. */
void bench_print_tail(const char *path, int n);

#endif
