/* exercise_readme.c — the README.md and CMakeLists.txt of a student copy (exercise_copy.h). */
#include <stdio.h>
#include <string.h>

#include "exercise_copy.h"

/* The lesson's summary: the first paragraph after the title of the stage's README. */
static void lesson_summary(const Exercise *ex, char *summary, size_t size)
{
    char path[4096];
    stage_path(ex->folder, "README.md", path, sizeof path);
    Buf readme = {0};
    FlError ignored;
    summary[0] = '\0';
    if (read_text(path, &readme, TEXT_ANY_SIZE, &ignored) != FL_OK)
        return;
    size_t pos = 0, len, used = 0;
    const char *line;
    int in_paragraph = 0;
    while (next_line(readme.text, &pos, &line, &len)) {
        if (line[0] == '#' || (is_blank(line, len) && !in_paragraph))
            continue;
        if (is_blank(line, len))
            break;
        in_paragraph = 1;
        used += (size_t)snprintf(summary + used, used < size ? size - used : 0, "%s%.*s", used ? " " : "",
                                 (int)len, line);
        if (used >= size)
            break;
    }
    buf_free(&readme);
}

static const char *made_from_text(const CopyFile *f, char *buf, size_t size)
{
    switch (f->made_from) {
    case MADE_FROM_HUNKS:
        snprintf(buf, size, "stages/%s/%s with this stage's changes taken out: each block holds the "
                 "earlier stage's lines, live, and says how many lines this stage has there",
                 f->base_folder, f->base_name);
        break;
    case MADE_FROM_MARKERS:
        snprintf(buf, size, "this stage's file with the marked regions taken out");
        break;
    case MADE_GIVEN:
        snprintf(buf, size, "given in full: read it, and use it where the TODOs need it");
        break;
    }
    return buf;
}

/* The tasks of the marker-made files, numbered as their TODO blocks: what each asks, and where. */
static void write_tasks(const Exercise *ex, Buf *out)
{
    int k = 0, any = 0;
    for (int i = 0; i < ex->nfiles; i++) {
        const CopyFile *f = &ex->files[i];
        if (f->made_from != MADE_FROM_MARKERS) {
            k += f->todos;
            continue;
        }
        size_t pos = 0, len;
        const char *line;
        while (next_line(f->source.text, &pos, &line, &len)) {
            if (!line_has(line, len, STAGE_MARKER_BEGIN))
                continue;
            char task[1024], stub[1024];
            exercise_parse_marker(line, len, task, sizeof task, stub, sizeof stub);
            if (!any++)
                buf_printf(out, "## Tasks\n\n| TODO | file | what to do |\n|---|---|---|\n");
            buf_printf(out, "| %d/%d | %s | ", ++k, ex->total_todos, f->name);
            for (const char *c = task; *c; c++) /* a '|' would end the table's cell */
                buf_add(out, *c == '|' ? "\\|" : c, *c == '|' ? 2 : 1);
            buf_printf(out, " |\n");
        }
    }
    if (any)
        buf_printf(out,
                   "\nThe number that shows you are done: `build/flashlab check %s --variant student` ends with as many\n"
                   "cases passed as checked, and its `hbm:` lines show the reference's bytes (no `IO FAIL`). Where a\n"
                   "task names a case or a number of its own, that one shows the task alone.\n\n",
                   ex->number);
}

void exercise_write_readme(const Exercise *ex, const char *final_dir, Buf *out)
{
    char summary[2048], text[1024];
    lesson_summary(ex, summary, sizeof summary);
    buf_printf(out, "# Exercise: stage %s (%s)\n\n", ex->number, ex->folder + 3);
    buf_printf(out, "The lesson: %s\n\n", summary);
    buf_printf(out,
               "This folder is a student copy of `stages/%s`, written by `flashlab exercise %s`. The lesson's\n"
               "code is taken out: %d TODO blocks, each between a line\n"
               "`// TODO(exercise K/%d, stage %s): what to do` and a line `// END TODO(exercise K/%d)`.\n"
               "Make the code inside each block compute what stage %s computes. The copy compiles as it is\n"
               "and fails its tests until you do.\n\n",
               ex->folder, ex->number, ex->total_todos, ex->total_todos, ex->number, ex->total_todos, ex->number);
    buf_printf(out, "| file | TODO blocks | made from |\n|---|---|---|\n");
    for (int i = 0; i < ex->nfiles; i++)
        buf_printf(out, "| %s | %d | %s |\n", ex->files[i].name, ex->files[i].todos,
                   made_from_text(&ex->files[i], text, sizeof text));
    buf_printf(out,
               "\nRead the lesson first: `stages/%s/README.md` (the idea, the math, what changes).\n"
               "`flashlab diff` against the earlier stage prints the answer: leave it for the end.\n\n",
               ex->folder);
    write_tasks(ex, out);
    buf_printf(out,
               "## Build\n\n"
               "From the flashlab source folder (the copy becomes variant `student` of stage %s, in a second\n"
               "executable `build/flashlab_student` that `build/flashlab` hands `--variant student` runs to):\n\n"
               "```sh\n"
               "cmake --preset default -DFLASHLAB_STUDENT_DIR=%s\n"
               "cmake --build --preset default\n"
               "ctest --test-dir build -R student_build            # compiles your copy; shows the compiler's errors\n"
               "```\n\n"
               "Only your copy is built by that test: if it does not compile, the rest of the build still works.\n"
               "After an edit, `build/flashlab ... --variant student` notices that your copy is newer than\n"
               "`build/flashlab_student` and builds it again first (the compiler's errors, if any, end the run).\n\n",
               ex->number, final_dir);
    buf_printf(out,
               "## Test\n\n"
               "```sh\n"
               "ctest --test-dir build -R stage%s                  # the stage's tests; yours end in _student\n"
               "build/flashlab check %s --variant student          # per case and tensor: errors and the first mismatches (b, h, i, j)\n"
               "build/flashlab check %s --variant student --device cuda   # the .cu side, on a GPU\n"
               "```\n\n"
               "Other variants of the stage, if it has any, are built too as `student-NAME` (e.g. `student-naive`).\n"
               "Right outputs are half of a pass: each case also compares your HBM bytes with the stage's own\n"
               "(`hbm:` lines), and a copy that moves more than 1.10x of them fails with `IO FAIL`, since the traffic\n"
               "a stage saves is its idea. `--no-io-check` turns that off while you explore.\n\n",
               ex->number, ex->number, ex->number);
    buf_printf(out,
               "## Grading\n\n"
               "Your instructor runs the same checks on cases you have not seen, drawn from another seed:\n\n"
               "```sh\n"
               "python3 golden/make_golden.py --seed N --out /tmp/hidden     # N: the instructor's secret\n"
               "FLASHLAB_GOLDEN=/tmp/hidden build/flashlab check %s --variant student --json\n"
               "```\n\n"
               "(docs/teaching.md in the source tree describes the whole course set-up.)\n",
               ex->number);
}

void exercise_write_cmakelists(const Exercise *ex, const char *final_dir, Buf *out)
{
    buf_printf(out,
               "# Written by `flashlab exercise %s`: the student copy of stages/%s. The flashlab build reads this\n"
               "# file when configured with -DFLASHLAB_STUDENT_DIR=%s\n"
               "# and builds the sources below as variant \"student\" of stage %s (docs/teaching.md).\n"
               "flashlab_student_stage(%s",
               ex->number, ex->folder, final_dir, ex->number, ex->folder);
    for (int i = 0; i < ex->nfiles; i++) {
        const char *dot = strrchr(ex->files[i].name, '.');
        if (dot && (!strcmp(dot, ".c") || !strcmp(dot, ".cu")))
            buf_printf(out, " %s", ex->files[i].name);
    }
    buf_printf(out, ")\n");
}
