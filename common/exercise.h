/* exercise.h — `flashlab exercise STAGE DIR`: a student copy of a stage (docs/teaching.md).
 *
 * The copy holds the stage's .c, .cu and .h files with the lesson taken out and marked as numbered
 * TODO blocks, a README.md with the task, and a CMakeLists.txt that the main build reads when
 * configured with -DFLASHLAB_STUDENT_DIR=DIR (the copy then registers as variant "student" of its
 * stage, in a second executable, flashlab_student). Each source file is made in one of three ways:
 *   hunks    the file continues a file of the stage it was copied from (the one its README's
 *            `flashlab diff MM NN` names): each change of that diff becomes a TODO block holding the
 *            earlier stage's lines, live, so the copy compiles. Changes to comments only and the
 *            registration at the end of the file (the StageImpl blocks and the array) keep this
 *            stage's lines, so the copy registers as this stage with its features.
 *   markers  the file has exercise markers (docs/adding_a_stage.md): each marked region becomes a
 *            TODO block, with the marker's stub, if any, as its only live code.
 *   given    copied as it is: a file with no earlier partner, or a file without markers in a stage
 *            that has markers (a stage is either a hunk exercise or a marker exercise). */
#ifndef FLASHLAB_EXERCISE_H
#define FLASHLAB_EXERCISE_H

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the student copy of stage (e.g. "7", "07", "07_causal") into dir, which must not exist or
 * be empty. The copy is written into a temporary sibling folder and renamed to dir at the end, so a
 * failure leaves nothing behind. Prints one line per file written on stdout. FL_BAD_INPUT with a
 * message in err on bad usage or when the stage's files give no TODO. */
int exercise_write(const char *stage, const char *dir, FlError *err);

/* For `flashlab CMD ... --variant student[-V]` in a build without the student copy: runs the
 * flashlab_student executable beside this one with the same arguments. Returns -1 when argv asks for
 * no student variant or this executable has the student copy itself; otherwise does not return,
 * unless flashlab_student is missing (FL_BAD_INPUT, one line on stderr says how to build it). */
int exercise_forward_to_student_build(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
