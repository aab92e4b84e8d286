/*
 * Readiness for a service manager, without libsystemd: systemd's notify
 * protocol is one datagram of "NAME=VALUE" lines sent to the AF_UNIX socket
 * that $NOTIFY_SOCKET names (a path, or "@name" in the abstract namespace).
 * A unit of Type=notify counts as started when "READY=1" arrives.
 */
#ifndef INGEST_NOTIFY_H
#define INGEST_NOTIFY_H

/*
 * Send state ("READY=1", "RELOADING=1", "STOPPING=1", "STATUS=text", or
 * several of them separated by newlines) to $NOTIFY_SOCKET.  Returns 1 when
 * sent, 0 when there is no NOTIFY_SOCKET (not started by a service manager
 * that asked: nothing to do), -1 when it could not be sent (logged once, the
 * program goes on: readiness is advice to the supervisor, not a duty).
 * Thread-safe; never raises SIGPIPE.
 */
int prog_notify(const char *state);

#endif
