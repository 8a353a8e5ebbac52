/* files.c — see files.h. */
#define _GNU_SOURCE /* O_CLOEXEC, realpath */
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

FILE *fl_open_regular(const char *path, FlError *err)
{
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        fl_fail(err, FL_BAD_INPUT, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fl_fail(err, FL_BAD_INPUT, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0)
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        fl_fail(err, FL_BAD_INPUT, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

int fl_path_exists(const char *path, FlError *err)
{
    struct stat st;
    if (stat(path, &st) == 0)
        return 1;
    if (errno != ENOENT) {
        fl_fail(err, FL_BAD_INPUT, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (lstat(path, &st) == 0) { /* the name is there, what it points to is not */
        fl_fail(err, FL_BAD_INPUT, "%s: a symbolic link to a file that does not exist", path);
        return -1;
    }
    return 0;
}

/* Whether the relative path rest holds a ".." component. */
static int has_parent_step(const char *rest)
{
    for (const char *p = rest; (p = strstr(p, "..")) != NULL; p += 2)
        if ((p == rest || p[-1] == '/') && (p[2] == '\0' || p[2] == '/'))
            return 1;
    return 0;
}

int fl_resolve_path(const char *path, char *out, size_t len, FlError *err)
{
    char head[PATH_MAX], resolved[PATH_MAX];
    if (strlen(path) >= sizeof head) {
        fl_fail(err, FL_BAD_INPUT, "%.200s...: path too long", path);
        return -1;
    }
    strcpy(head, path);
    const char *tail = ""; /* the part of path below the longest prefix that exists */
    while (!realpath(head[0] ? head : ".", resolved)) {
        if (errno != ENOENT) {
            fl_fail(err, FL_BAD_INPUT, "%s: %s", path, strerror(errno));
            return -1;
        }
        char *slash = strrchr(head, '/');
        tail = slash ? path + (slash - head) + 1 : path;
        if (!slash)
            head[0] = '\0';
        else if (slash == head) /* "/missing": the root exists */
            strcpy(head, "/");
        else
            *slash = '\0';
    }
    if (has_parent_step(tail)) { /* "new/../x" cannot be judged before "new" exists */
        fl_fail(err, FL_BAD_INPUT, "%s: '..' below a folder that does not exist yet", path);
        return -1;
    }
    const char *root = strcmp(resolved, "/") ? resolved : "";
    int n = tail[0] ? snprintf(out, len, "%s/%s", root, tail) : snprintf(out, len, "%s", resolved);
    if (n < 0 || (size_t)n >= len) {
        fl_fail(err, FL_BAD_INPUT, "%.200s...: path too long", path);
        return -1;
    }
    while (n > 1 && out[n - 1] == '/') /* "out/" and "out" are one folder */
        out[--n] = '\0';
    return 0;
}

int fl_path_within(const char *a, const char *b)
{
    size_t nb = strlen(b);
    if (strncmp(a, b, nb) != 0)
        return 0;
    return a[nb] == '\0' || a[nb] == '/' || (nb == 1 && b[0] == '/');
}
