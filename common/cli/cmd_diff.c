/* cmd_diff.c — flashlab diff [A] B: the lesson, `diff -u` of stage A's sources against stage B's
 * (A defaults to B's parent: the stage it starts as a copy of). Code only unless --docs. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "stage_files.h"

/* Path of a copy of `path` (relative to the source folder) without exercise-marker lines, in a
 * temporary file (empty when it cannot be made); /dev/null stays as it is. */
static int copy_for_diff(const char *path, char *copy, size_t len, FlError *err)
{
    if (!strcmp(path, "/dev/null"))
        return snprintf(copy, len, "%s", path), FL_OK;
    const char *tmp = getenv("TMPDIR");
    snprintf(copy, len, "%s/flashlab-diff-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    int fd = mkstemp(copy);
    if (fd < 0) {
        copy[0] = '\0';
        return fl_fail(err, FL_BAD_INPUT, "cannot create a temporary file (%s)", strerror(errno));
    }
    close(fd);
    char source[4400];
    snprintf(source, sizeof source, "%s/%s", FLASHLAB_SOURCE_DIR, path);
    return stage_copy_without_markers(source, copy, err);
}

/* `diff -u a b` with a and b named by their paths relative to the source folder. Exercise markers
 * (docs/adding_a_stage.md) are no part of the lesson: the files are compared without them. */
static int run_diff(const char *a, const char *b)
{
    char ca[4200] = "", cb[4200] = "";
    FlError err = {{0}};
    int status = -1;
    if (copy_for_diff(a, ca, sizeof ca, &err) == FL_OK && copy_for_diff(b, cb, sizeof cb, &err) == FL_OK) {
        const char *argv[] = {"diff", "-u", "--label", a, "--label", b, ca, cb, NULL};
        status = stage_run_program(argv, NULL, STDOUT_FILENO, &err);
    }
    if (ca[0] && strcmp(ca, "/dev/null"))
        unlink(ca);
    if (cb[0] && strcmp(cb, "/dev/null"))
        unlink(cb);
    if (status == STAGE_PIPE_CLOSED) /* the reader went away (| head): stop, as diff itself would */
        return STAGE_PIPE_CLOSED;
    if (status < 0 || status > 1) {
        fprintf(stderr, "flashlab diff: %s\n", status < 0 ? err.msg : "the system 'diff' failed");
        return FL_BAD_INPUT;
    }
    if (status == 0)
        printf("(%s and %s are identical)\n", a, b);
    return FL_OK;
}

/* A closed pipe ends the diff at once; otherwise the worse status. */
static int combine(int so_far, int next)
{
    return so_far == STAGE_PIPE_CLOSED || next == STAGE_PIPE_CLOSED ? STAGE_PIPE_CLOSED : worse(so_far, next);
}

/* Whether some file of stage fb (any kind) declares stages/<fa>/<name> as the file it continues. */
static int declared_by_b(const char *fa, const char *name, const char *fb)
{
    char want[2 * STAGE_NAME_LEN], declared[2 * STAGE_NAME_LEN];
    snprintf(want, sizeof want, "%s/%s", fa, name);
    for (int k = 0; stage_file_kinds[k]; k++) {
        StageFiles b;
        stage_files_list(fb, stage_file_kinds[k], &b);
        for (int m = 0; m < b.count; m++)
            if (stage_file_declared(fb, b.names[m], declared, sizeof declared) && !strcmp(declared, want))
                return 1;
    }
    return 0;
}

/* The index among a's files not yet done of the one that pairs with `name`: the same name, or
 * the only one left when `name` is the only one left on its side too; -1 when none does. */
static int partner_left(const StageFiles *a, const int *a_done, const char *name, int others_left)
{
    int left = -1, count = 0;
    for (int i = 0; i < a->count; i++) {
        if (a_done[i])
            continue;
        if (!strcmp(a->names[i], name))
            return i;
        left = i, count++;
    }
    return count == 1 && others_left == 1 ? left : -1;
}

/* One kind of file of stages fa and fb. First, when fa is fb's parent, the files fb's PARENT
 * declares (stage_file_declared): diffed against the file they continue, or named as a step the
 * lesson leaves out. Then the rest:
 * paired files are diffed; a file new in fb is shown in full as added lines (it is part of the
 * lesson); a file only in fa is named. */
static int diff_kind(const char *fa, const char *fb, const char *kind, int from_parent)
{
    StageFiles a, b;
    stage_files_list(fa, kind, &a);
    stage_files_list(fb, kind, &b);
    if (a.count == 0 && b.count == 0)
        return FL_OK;
    printf("==== %s ====\n", kind);
    int rc = FL_OK, a_done[STAGE_MAX_FILES] = {0}, b_done[STAGE_MAX_FILES] = {0};
    char pa[4400], pb[4400], declared[2 * STAGE_NAME_LEN];
    for (int m = 0; m < b.count && from_parent && rc != STAGE_PIPE_CLOSED; m++) {
        if (!stage_file_declared(fb, b.names[m], declared, sizeof declared))
            continue;
        b_done[m] = 1;
        if (!strcmp(declared, "-")) {
            printf("stages/%s/%s: a step of its own, not part of the lesson diff (its README walks it)\n", fb,
                   b.names[m]);
            continue;
        }
        for (int i = 0; i < a.count; i++) /* a file of fa it continues is paired now */
            if (!strncmp(declared, fa, strlen(fa)) && declared[strlen(fa)] == '/' &&
                !strcmp(declared + strlen(fa) + 1, a.names[i]))
                a_done[i] = 1;
        snprintf(pa, sizeof pa, "stages/%s", declared);
        snprintf(pb, sizeof pb, "stages/%s/%s", fb, b.names[m]);
        rc = combine(rc, run_diff(pa, pb));
    }
    int a_left = 0;
    for (int i = 0; i < a.count; i++) {
        a_done[i] |= from_parent && declared_by_b(fa, a.names[i], fb); /* diffed with its successor */
        a_left += !a_done[i];
    }
    for (int i = 0; i < a.count && rc != STAGE_PIPE_CLOSED; i++) {
        if (a_done[i])
            continue;
        const int j = partner_left(&b, b_done, a.names[i], a_left);
        snprintf(pa, sizeof pa, "stages/%s/%s", fa, a.names[i]);
        if (j < 0) {
            printf("only in stages/%s: %s\n", fa, a.names[i]);
            continue;
        }
        b_done[j] = 1;
        snprintf(pb, sizeof pb, "stages/%s/%s", fb, b.names[j]);
        rc = combine(rc, run_diff(pa, pb));
    }
    for (int m = 0; m < b.count && rc != STAGE_PIPE_CLOSED; m++) {
        if (b_done[m])
            continue;
        printf("new in stages/%s: %s\n", fb, b.names[m]);
        snprintf(pb, sizeof pb, "stages/%s/%s", fb, b.names[m]);
        rc = combine(rc, run_diff("/dev/null", pb));
    }
    return rc;
}

/* The two folders: "A B" as named, or "B" against its parent (stage_parent). */
static int diff_folders(const Options *o, char *fa, char *fb, size_t len, FlError *err)
{
    const char *b = o->positional[o->npositional - 1];
    if (stage_folder_find(b, fb, len, err) != FL_OK)
        return FL_BAD_INPUT;
    if (o->npositional == 1)
        return stage_parent(fb, fa, len, err);
    return stage_folder_find(o->positional[0], fa, len, err);
}

int cmd_diff(Options *o)
{
    if (o->npositional < 1 || o->npositional > 2)
        return usage_error("diff", "needs one or two stages, e.g. 'flashlab diff 07' or 'flashlab diff 06 07'%s", "");
    char fa[256], fb[256];
    FlError err = {{0}};
    if (diff_folders(o, fa, fb, sizeof fa, &err) != FL_OK) {
        fprintf(stderr, "flashlab diff: %s\n", err.msg);
        return FL_BAD_INPUT;
    }
    signal(SIGPIPE, SIG_IGN); /* `flashlab diff | head`: a closed pipe ends the diff quietly */
    printf("# stages/%s -> stages/%s%s\n", fa, fb, o->docs ? "" : " (code only; --docs adds the READMEs)");
    char parent[256];
    const int from_parent = stage_parent(fb, parent, sizeof parent, &err) == FL_OK && !strcmp(parent, fa);
    int rc = FL_OK;
    for (int k = 0; stage_file_kinds[k] && rc != STAGE_PIPE_CLOSED; k++)
        if (o->docs || strcmp(stage_file_kinds[k], "README.md") != 0)
            rc = combine(rc, diff_kind(fa, fb, stage_file_kinds[k], from_parent));
    return rc == STAGE_PIPE_CLOSED ? FL_OK : rc;
}
