/* prog_move_file (agent/common/fsmove.c): rename on one filesystem, durable copy-then-unlink across two. */
#include "../../agent/common/fsmove.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

static char src_dir[64] = "/tmp/ingest-fsmove.XXXXXX";
static char shm_dir[64] = "/dev/shm/ingest-fsmove.XXXXXX";
static int have_shm; /* /dev/shm is a tmpfs of its own: another filesystem than /tmp */

static int setup(void **state)
{
    (void)state;
    if (mkdtemp(src_dir) == NULL)
        return -1;
    struct stat a, b;
    have_shm = mkdtemp(shm_dir) != NULL && stat(src_dir, &a) == 0 && stat(shm_dir, &b) == 0 && a.st_dev != b.st_dev;
    return 0;
}

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || (e->d_name[1] == '.' && e->d_name[2] == '\0')))
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static int teardown(void **state)
{
    (void)state;
    rm_tree(src_dir);
    rm_tree(shm_dir);
    return 0;
}

/* A file of n pseudo-random bytes, mode 0640, mtime 1 000 000 000 s. */
static void make_file(const char *path, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        fputc((int)(x & 0xff), f);
    }
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, 0640), 0);
    const struct timespec t[2] = { { 1000000000, 5 }, { 1000000000, 123456789 } };
    assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

static unsigned long checksum(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned long s = 0;
    int c;
    while ((c = fgetc(f)) != EOF)
        s = s * 31u + (unsigned char)c;
    fclose(f);
    return s;
}

/* No ".NAME.ingest-move.PID" left in dir. */
static void no_temp_left(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".ingest-move.") != NULL)
            fail_msg("temporary file left: %s/%s", dir, e->d_name);
    closedir(d);
}

static void check_moved(const char *src, const char *dst, unsigned long sum, size_t n)
{
    struct stat st;
    assert_int_equal(lstat(src, &st), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(stat(dst, &st), 0);
    assert_int_equal((size_t)st.st_size, n);
    assert_int_equal(st.st_mode & 07777, 0640);
    assert_int_equal(st.st_mtim.tv_sec, 1000000000);
    assert_int_equal(st.st_mtim.tv_nsec, 123456789);
    assert_int_equal(checksum(dst), sum);
}

static void test_same_filesystem(void **state)
{
    (void)state;
    char a[128], b[128];
    snprintf(a, sizeof(a), "%s/a", src_dir);
    snprintf(b, sizeof(b), "%s/b", src_dir);
    make_file(a, 1000);
    const unsigned long sum = checksum(a);
    struct stat before, after;
    assert_int_equal(stat(a, &before), 0);
    assert_int_equal(prog_move_file(a, -1, b), 0);
    check_moved(a, b, sum, 1000);
    assert_int_equal(stat(b, &after), 0);
    assert_int_equal(before.st_ino, after.st_ino); /* a rename, not a copy */
    unlink(b);
}

static void test_across_filesystems(void **state)
{
    (void)state;
    if (!have_shm)
        skip();
    char a[128], b[128];
    /* by name, and through a descriptor the caller holds (as release_file holds its leased one) */
    for (int with_fd = 0; with_fd < 2; with_fd++) {
        const size_t n = with_fd ? 300000 : 0;
        snprintf(a, sizeof(a), "%s/big-%d", src_dir, with_fd);
        snprintf(b, sizeof(b), "%s/moved-%d", shm_dir, with_fd);
        make_file(a, n);
        const unsigned long sum = checksum(a);
        const int fd = with_fd ? open(a, O_RDONLY) : -1;
        assert_int_equal(prog_move_file(a, fd, b), 0);
        if (fd >= 0)
            close(fd);
        check_moved(a, b, sum, n);
        no_temp_left(shm_dir);
    }
}

static void test_failures_keep_the_source(void **state)
{
    (void)state;
    char a[128], b[128], l[128];
    snprintf(a, sizeof(a), "%s/keep", src_dir);
    make_file(a, 5000);
    const unsigned long sum = checksum(a);
    /* the destination directory does not exist: on one filesystem, and across */
    snprintf(b, sizeof(b), "%s/no-such-dir/keep", src_dir);
    assert_int_equal(prog_move_file(a, -1, b), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(checksum(a), sum);
    if (have_shm) {
        snprintf(b, sizeof(b), "%s/no-such-dir/keep", shm_dir);
        assert_int_equal(prog_move_file(a, -1, b), -1);
        assert_int_equal(errno, ENOENT);
        assert_int_equal(checksum(a), sum);
        /* a symbolic link is not followed across filesystems */
        snprintf(l, sizeof(l), "%s/link", src_dir);
        assert_int_equal(symlink(a, l), 0);
        snprintf(b, sizeof(b), "%s/link", shm_dir);
        assert_int_equal(prog_move_file(l, -1, b), -1);
        assert_int_equal(errno, ELOOP);
        no_temp_left(shm_dir);
        struct stat st;
        assert_int_equal(lstat(b, &st), -1);
    }
    assert_int_equal(checksum(a), sum);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_filesystem),
        cmocka_unit_test(test_across_filesystems),
        cmocka_unit_test(test_failures_keep_the_source),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
