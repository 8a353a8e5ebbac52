/* files.h — opening the files of a case folder safely: only regular files are read (a FIFO or a
 * device named q.npy is refused before anything blocks on it), a dangling symbolic link is an
 * error rather than an absent file, and an output folder is checked against the case it came
 * from before anything is written. */
#ifndef FLASHLAB_FILES_H
#define FLASHLAB_FILES_H

#include <stdio.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens path for reading ("rb") if it is a regular file; otherwise NULL with err filled. Opening
 * never blocks: a FIFO is refused as "not a regular file". */
FILE *fl_open_regular(const char *path, FlError *err);

/* 1 if path exists, 0 if nothing is there, -1 with err filled otherwise (a symbolic link whose
 * target is missing, a permission problem). */
int fl_path_exists(const char *path, FlError *err);

/* The canonical absolute form of path into out (len bytes), following links. A path that does not
 * exist yet resolves through its longest existing parent, the rest appended as written (so a
 * folder `run` is about to create can be compared with the case folder). 0, or -1 with err. */
int fl_resolve_path(const char *path, char *out, size_t len, FlError *err);

/* Whether resolved path a is b or lies inside b (both from fl_resolve_path). */
int fl_path_within(const char *a, const char *b);

#ifdef __cplusplus
}
#endif
#endif
