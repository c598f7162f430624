/* Preloaded into every process of the sandbox (/etc/ld.so.preload). gVisor before 2023,
 * Debian 12's runsc among them, rejects AT_NO_AUTOMOUNT in statx and fstatat with EINVAL,
 * and the image's coreutils pass it on every stat: ls, stat and du would fail on every path.
 * A sandbox has no automount points, so the flag changes nothing and a call it made fail is
 * made again without it. Elsewhere the first call succeeds and nothing is retried. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

typedef int (*statx_fn)(int, const char *, int, unsigned int, struct statx *);
typedef int (*fstatat_fn)(int, const char *, struct stat *, int);
typedef int (*fstatat64_fn)(int, const char *, struct stat64 *, int);

static int refused(int rc, int flags) {
    return rc != 0 && errno == EINVAL && (flags & AT_NO_AUTOMOUNT);
}

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf) {
    static statx_fn real;
    if (!real)
        real = (statx_fn)dlsym(RTLD_NEXT, "statx");
    int rc = real(dirfd, path, flags, mask, buf);
    return refused(rc, flags) ? real(dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf) : rc;
}

int fstatat(int dirfd, const char *path, struct stat *buf, int flags) {
    static fstatat_fn real;
    if (!real)
        real = (fstatat_fn)dlsym(RTLD_NEXT, "fstatat");
    int rc = real(dirfd, path, buf, flags);
    return refused(rc, flags) ? real(dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT) : rc;
}

int fstatat64(int dirfd, const char *path, struct stat64 *buf, int flags) {
    static fstatat64_fn real;
    if (!real)
        real = (fstatat64_fn)dlsym(RTLD_NEXT, "fstatat64");
    int rc = real(dirfd, path, buf, flags);
    return refused(rc, flags) ? real(dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT) : rc;
}
