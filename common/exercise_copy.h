/* exercise_copy.h — the student copy being made, shared by the generator's files: exercise.c
 * (choosing how each file is made, rendering the TODO blocks, writing the folder) and
 * exercise_readme.c (the copy's README.md and CMakeLists.txt). Not a public interface. */
#ifndef FLASHLAB_EXERCISE_COPY_H
#define FLASHLAB_EXERCISE_COPY_H

#include "stage_files.h"
#include "text.h"

#define MAX_BASES 4

typedef enum { MADE_GIVEN, MADE_FROM_HUNKS, MADE_FROM_MARKERS } MadeFrom;

typedef struct {
    char name[STAGE_NAME_LEN];
    MadeFrom made_from;
    char base_folder[STAGE_NAME_LEN], base_name[STAGE_NAME_LEN]; /* MADE_FROM_HUNKS */
    Buf source;   /* this stage's file */
    Buf hunks;    /* MADE_FROM_HUNKS: diff's tagged output (see run_group_diff) */
    int todos;    /* TODO blocks in this file */
} CopyFile;

typedef struct {
    char folder[STAGE_NAME_LEN]; /* "07_causal" */
    char number[3];              /* "07" */
    char bases[MAX_BASES][STAGE_NAME_LEN]; /* folders of the stages it was copied from */
    int nbases;
    CopyFile files[3 * STAGE_MAX_FILES];
    int nfiles;
    int total_todos;
} Exercise;

/* A begin marker line split into its task (the words after "exercise: begin") and its stub (after
 * "| stub:", or ""). */
void exercise_parse_marker(const char *line, size_t len, char *task, size_t task_len, char *stub, size_t stub_len);

/* The copy's README.md (the task, the files, how to build, test and be graded) and its
 * CMakeLists.txt, for a copy that will live in final_dir. */
void exercise_write_readme(const Exercise *ex, const char *final_dir, Buf *out);
void exercise_write_cmakelists(const Exercise *ex, const char *final_dir, Buf *out);

#endif
