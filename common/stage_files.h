/* stage_files.h — the stage folders of the source tree (stages/NN_name/) and the files in them, as
 * the lesson diff (`flashlab diff`) and the exercise generator (`flashlab exercise`) both see them:
 * which folder a stage argument names, the files of one kind in it, and which file of one stage
 * continues which file of another. Also a small helper that runs a program (the system diff). */
#ifndef FLASHLAB_STAGE_FILES_H
#define FLASHLAB_STAGE_FILES_H

#include <stddef.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { STAGE_MAX_FILES = 8, STAGE_NAME_LEN = 256 };

/* Exercise markers (docs/adding_a_stage.md): comment lines around the regions of a stage source that
 * `flashlab exercise` hands to students. They are no part of any lesson diff. */
#define STAGE_MARKER_BEGIN "exercise: begin"
#define STAGE_MARKER_END "exercise: end"

/* The kinds of file a lesson is made of, in the order the diff shows them: ".h", ".cuh" (CUDA code
 * a .cu file includes), ".c", ".cu", "README.md"; NULL-terminated. A kind starting with '.' is a suffix, anything else a whole name. */
extern const char *const stage_file_kinds[];

/* "1", "01" or "01_naive" (digits, optionally followed by _name): could name a stage. */
int stage_arg_looks_like_stage(const char *arg);

/* The folder name ("07_causal") under stages/ of the source tree for "7", "07" or "07_causal".
 * FL_BAD_INPUT with a message in err when arg is not a stage or no such folder exists. */
int stage_folder_find(const char *arg, char *folder, size_t len, FlError *err);

/* The folder of the stage <folder> starts as a copy of: the one named in stages/<folder>/PARENT
 * (a track off the ladder: 10 -> 08, 11 -> 10, 12 -> 08, 13 -> 08), else the stage numbered one
 * less. FL_BAD_INPUT for stage 01 or a PARENT that names no stage. */
int stage_parent(const char *folder, char *parent, size_t len, FlError *err);

/* What stages/<folder>/PARENT declares about the stage's file `name`, on a line "name partner" after
 * the parent's name: the file it continues when the names differ, as a path under stages/
 * ("04_flash_forward/flash_forward.cu"; a bare file name means the parent's file), or "-" for a
 * step of its own that the lesson diff leaves out (the README walks it). Returns 1 and fills out
 * when there is such a line, 0 when there is none. */
int stage_file_declared(const char *folder, const char *name, char *out, size_t len);

/* Path of stages/<folder>[/<file>] in the source tree. */
void stage_path(const char *folder, const char *file, char *path, size_t len);

/* The files of one kind in stages/<folder>, sorted by name (at most STAGE_MAX_FILES). */
typedef struct {
    char names[STAGE_MAX_FILES][STAGE_NAME_LEN];
    int count;
} StageFiles;

void stage_files_list(const char *folder, const char *kind, StageFiles *files);

/* The index in `other` of the file that pairs with mine->names[index]: the file of the same name,
 * or the only one when both lists hold exactly one file; -1 when none does. */
int stage_files_partner(const StageFiles *mine, int index, const StageFiles *other);

/* Copies the file at path to out_path without its exercise-marker lines. */
int stage_copy_without_markers(const char *path, const char *out_path, FlError *err);

/* Runs argv[0] (searched in PATH) in folder cwd (NULL: the current one) with its stdout on out_fd,
 * waits, and returns its exit status; STAGE_PIPE_CLOSED when it stopped because the reader of its
 * output went away (`flashlab diff | head`); -1 with a message in err when it could not be run or
 * was killed otherwise. The program runs with SIGPIPE at its default, whatever the caller set. */
enum { STAGE_PIPE_CLOSED = -2 };
int stage_run_program(const char *const argv[], const char *cwd, int out_fd, FlError *err);

#ifdef __cplusplus
}
#endif
#endif
