/* failfs: a read-only FUSE passthrough of a directory (a test sysfs tree) in which every read of a
 * file whose path starts with one of the given prefixes fails with EINVAL, as a firmware-restricted
 * mlx5 function's counter reads do. Each failing read appends its path to a log file, so a test can
 * count the reads the monitor really made.
 *
 *   failfs SOURCE_DIR LOG_FILE PREFIX[,PREFIX...] MOUNTPOINT [fuse options]
 *
 * Test-only (tests/sources/test_restricted_counters.py builds it with gcc and libfuse3-dev).
 */
#define FUSE_USE_VERSION 31
#include <fuse.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>
#include <sys/stat.h>

static char src[PATH_MAX];
static char logpath[PATH_MAX];
static char *prefixes[64];
static int nprefixes;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void real(char *out, const char *path) { snprintf(out, PATH_MAX, "%s%s", src, path); }

static int failing(const char *path) {
    for (int i = 0; i < nprefixes; i++)
        if (strncmp(path, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    return 0;
}

static int f_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    char p[PATH_MAX]; real(p, path);
    return lstat(p, st) == -1 ? -errno : 0;
}

static int f_readlink(const char *path, char *buf, size_t size) {
    char p[PATH_MAX]; real(p, path);
    ssize_t n = readlink(p, buf, size - 1);
    if (n == -1) return -errno;
    buf[n] = 0;
    return 0;
}

static int f_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info *fi,
                     enum fuse_readdir_flags flags) {
    char p[PATH_MAX]; real(p, path);
    DIR *d = opendir(p);
    if (!d) return -errno;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) fill(buf, e->d_name, NULL, 0, 0);
    closedir(d);
    return 0;
}

static int f_open(const char *path, struct fuse_file_info *fi) {
    char p[PATH_MAX]; real(p, path);
    if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
    int fd = open(p, O_RDONLY);
    if (fd == -1) return -errno;
    close(fd);
    fi->direct_io = 1;          /* every read reaches us: no page cache */
    return 0;
}

static int f_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    if (failing(path)) {
        pthread_mutex_lock(&lock);
        FILE *f = fopen(logpath, "a");
        if (f) { fprintf(f, "%s\n", path); fclose(f); }
        pthread_mutex_unlock(&lock);
        return -EINVAL;
    }
    char p[PATH_MAX]; real(p, path);
    int fd = open(p, O_RDONLY);
    if (fd == -1) return -errno;
    ssize_t n = pread(fd, buf, size, off);
    int err = errno;
    close(fd);
    return n == -1 ? -err : (int)n;
}

static const struct fuse_operations ops = {
    .getattr = f_getattr, .readlink = f_readlink, .readdir = f_readdir, .open = f_open, .read = f_read,
};

int main(int argc, char *argv[]) {
    if (argc < 5) {
        fprintf(stderr, "usage: failfs SOURCE_DIR LOG_FILE PREFIX[,PREFIX...] MOUNTPOINT [fuse options]\n");
        return 2;
    }
    if (!realpath(argv[1], src)) { perror(argv[1]); return 2; }
    snprintf(logpath, sizeof logpath, "%s", argv[2]);
    for (char *t = strtok(argv[3], ","); t && nprefixes < 64; t = strtok(NULL, ",")) prefixes[nprefixes++] = t;
    /* fuse_main gets: program, mountpoint, options */
    char *fargv[64];
    int fargc = 0;
    fargv[fargc++] = argv[0];
    for (int i = 4; i < argc && fargc < 62; i++) fargv[fargc++] = argv[i];
    return fuse_main(fargc, fargv, &ops, NULL);
}
