/* prog_notify (agent/common/notify.c): systemd's readiness datagram, by path and in the abstract namespace. */
#include "../../agent/common/notify.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

/* A datagram socket bound to name ("@..." abstract); the address length follows notify.c's rule. */
static int listener(const char *name)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    const size_t n = strlen(name);
    memcpy(sa.sun_path, name, n);
    if (name[0] == '@')
        sa.sun_path[0] = '\0';
    const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    const socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (name[0] == '/'));
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, len), 0);
    return fd;
}

static void expect_datagram(int fd, const char *want)
{
    char buf[256];
    const ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    assert_true(n >= 0);
    buf[n] = '\0';
    assert_string_equal(buf, want);
}

static void test_path(void **state)
{
    (void)state;
    char dir[] = "/tmp/ingest-notify.XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/notify", dir);
    const int fd = listener(path);
    setenv("NOTIFY_SOCKET", path, 1);
    assert_int_equal(prog_notify("READY=1"), 1);
    expect_datagram(fd, "READY=1");
    assert_int_equal(prog_notify("RELOADING=1\nSTATUS=re-reading"), 1);
    expect_datagram(fd, "RELOADING=1\nSTATUS=re-reading");
    close(fd);
    unlink(path);
    /* the socket is gone: a failure the caller can see, and no crash */
    assert_int_equal(prog_notify("READY=1"), -1);
    rmdir(dir);
    unsetenv("NOTIFY_SOCKET");
}

static void test_abstract(void **state)
{
    (void)state;
    char name[64];
    snprintf(name, sizeof(name), "@ingest-notify-test-%ld", (long)getpid());
    const int fd = listener(name);
    setenv("NOTIFY_SOCKET", name, 1);
    assert_int_equal(prog_notify("READY=1"), 1);
    expect_datagram(fd, "READY=1");
    close(fd);
    unsetenv("NOTIFY_SOCKET");
}

static void test_not_asked(void **state)
{
    (void)state;
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(prog_notify("READY=1"), 0);
    setenv("NOTIFY_SOCKET", "", 1);
    assert_int_equal(prog_notify("READY=1"), 0);
    /* neither a path nor an abstract name; too long for sun_path */
    setenv("NOTIFY_SOCKET", "relative/notify", 1);
    assert_int_equal(prog_notify("READY=1"), -1);
    char longname[200];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[0] = '/';
    longname[sizeof(longname) - 1] = '\0';
    setenv("NOTIFY_SOCKET", longname, 1);
    assert_int_equal(prog_notify("READY=1"), -1);
    unsetenv("NOTIFY_SOCKET");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path),
        cmocka_unit_test(test_abstract),
        cmocka_unit_test(test_not_asked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
