/* exercise.c — the student copy of a stage: `flashlab exercise STAGE DIR` (see exercise.h). */
#include "exercise.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attn.h"
#include "exercise_copy.h"

#define MARKER_BEGIN STAGE_MARKER_BEGIN
#define MARKER_END STAGE_MARKER_END
#define STUB_SEPARATOR "| stub:"

/* A line that is all comment: "// ...", "/ * ... * /" with nothing after, or a " * ..." line of a
 * block comment. (A heuristic: a code line starting with a dereference, "*p = 0;", is not one.) */
static int is_comment_line(const char *line, size_t len)
{
    size_t i = indent_of(line, len);
    const char *s = line + i;
    size_t n = len - i;
    if (n >= 2 && s[0] == '/' && s[1] == '/')
        return 1;
    if (n >= 2 && s[0] == '/' && s[1] == '*') {
        for (size_t k = 2; k + 1 < n; k++)
            if (s[k] == '*' && s[k + 1] == '/')
                return is_blank(s + k + 2, n - k - 2);
        return 1;
    }
    return n >= 1 && s[0] == '*' && (n == 1 || s[1] == ' ' || s[1] == '/');
}

static int has_markers(const char *text)
{
    return strstr(text, MARKER_BEGIN) != NULL;
}

/* First line (1-based) of the registration at the end of a stage source: the first
 * `static const StageImpl name = {` block, else the exported array; INT_MAX when neither. */
static int registration_start(const char *text)
{
    size_t pos = 0, len;
    const char *line;
    int number = 0, array_line = INT_MAX;
    while (next_line(text, &pos, &line, &len)) {
        number++;
        static const char block[] = "static const StageImpl ";
        if (len > sizeof block && !memcmp(line, block, sizeof block - 1) && line[sizeof block - 1] != '*' &&
            line_has(line, len, "= {"))
            return number;
        if (array_line == INT_MAX && line_has(line, len, "const StageImpl *const stage"))
            array_line = number;
    }
    return array_line;
}

/* The TODO block's first and last lines. */
static void todo_open(Buf *out, const char *indent, size_t nindent, int k, int total, const char *stage,
                      const char *what)
{
    buf_printf(out, "%.*s// TODO(exercise %d/%d, stage %s): %s\n", (int)nindent, indent, k, total, stage, what);
}

static void todo_close(Buf *out, const char *indent, size_t nindent, int k, int total)
{
    buf_printf(out, "%.*s// END TODO(exercise %d/%d)\n", (int)nindent, indent, k, total);
}

/* ---- hunk mode ---- */

/* `diff OLD NEW` with GNU group formats, into `out`, one tagged line per line: ' ' a line both files
 * share, '-' a line of OLD only, '+' a line of NEW only; '{' and '}' enclose each changed group. */
static int run_group_diff(const char *old_path, const char *new_path, const char *scratch, Buf *out,
                          FlError *err)
{
    const char *argv[] = {"diff",
                          "--unchanged-group-format=%=",
                          "--old-group-format={\n%<}\n",
                          "--new-group-format={\n%>}\n",
                          "--changed-group-format={\n%<%>}\n",
                          "--unchanged-line-format= %l\n",
                          "--old-line-format=-%l\n",
                          "--new-line-format=+%l\n",
                          old_path,
                          new_path,
                          NULL};
    int fd = open(scratch, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return fl_fail(err, FL_BAD_INPUT, "%s: cannot write (%s)", scratch, strerror(errno));
    int status = stage_run_program(argv, NULL, fd, err);
    close(fd);
    int rc = status == 0 || status == 1 ? read_text(scratch, out, TEXT_ANY_SIZE, err)
                                        : fl_fail(err, FL_BAD_INPUT, "diff %s %s failed: %s", old_path,
                                                  new_path, status < 0 ? err->msg : "exit status > 1");
    unlink(scratch);
    return rc;
}

typedef struct {
    const char **line;
    size_t *len;
    int count;
} Lines;

static int group_is_comment_only(const Lines *old_lines, const Lines *new_lines)
{
    const Lines *sides[2] = {old_lines, new_lines};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sides[s]->count; i++)
            if (!is_blank(sides[s]->line[i], sides[s]->len[i]) && !is_comment_line(sides[s]->line[i], sides[s]->len[i]))
                return 0;
    return 1;
}

static void emit_lines(Buf *out, const Lines *lines)
{
    for (int i = 0; i < lines->count; i++) {
        buf_add(out, lines->line[i], lines->len[i]);
        buf_add(out, "\n", 1);
    }
}

/* The indentation of a TODO block: that of its first non-blank line, old side first. */
static void group_indent(const Lines *old_lines, const Lines *new_lines, const char **indent, size_t *n)
{
    const Lines *sides[2] = {old_lines, new_lines};
    *indent = "", *n = 0;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sides[s]->count; i++)
            if (!is_blank(sides[s]->line[i], sides[s]->len[i])) {
                *indent = sides[s]->line[i], *n = indent_of(sides[s]->line[i], sides[s]->len[i]);
                return;
            }
}

static void todo_for_group(Buf *out, const Exercise *ex, const CopyFile *f, const Lines *old_lines,
                           const Lines *new_lines, int k)
{
    char base_number[3] = {f->base_folder[0], f->base_folder[1], '\0'};
    char what[512];
    const int n = new_lines->count;
    if (old_lines->count == 0)
        snprintf(what, sizeof what, "stage %s adds %d line%s here (stage %s has none)", ex->number, n,
                 n == 1 ? "" : "s", base_number);
    else if (n == 0)
        snprintf(what, sizeof what, "stage %s removes or rewrites these lines; they are stage %s's version",
                 ex->number, base_number);
    else
        snprintf(what, sizeof what, "stage %s changes these lines; they are stage %s's version "
                 "(stage %s has %d line%s here)", ex->number, base_number, ex->number, n, n == 1 ? "" : "s");
    const char *indent;
    size_t nindent;
    group_indent(old_lines, new_lines, &indent, &nindent);
    todo_open(out, indent, nindent, k, ex->total_todos, ex->number, what);
    emit_lines(out, old_lines);
    todo_close(out, indent, nindent, k, ex->total_todos);
}

/* Renders a hunk-mode file from its tagged diff; TODO blocks are numbered from first + 1. Returns
 * the number of TODO blocks. */
static int render_hunks(const Exercise *ex, const CopyFile *f, int first, Buf *out)
{
    const int registration = registration_start(f->source.text);
    size_t pos = 0, len, cap = 1;
    for (const char *c = f->hunks.text; c && *c; c++)
        cap += *c == '\n';
    Lines old_lines = {must_alloc(malloc(cap * sizeof(char *))), must_alloc(malloc(cap * sizeof(size_t))), 0};
    Lines new_lines = {must_alloc(malloc(cap * sizeof(char *))), must_alloc(malloc(cap * sizeof(size_t))), 0};
    const char *line;
    int new_line_number = 0, todos = 0;
    while (next_line(f->hunks.text, &pos, &line, &len)) {
        if (line[0] == ' ') {
            buf_add(out, line + 1, len - 1);
            buf_add(out, "\n", 1);
            new_line_number++;
            continue;
        }
        if (line[0] != '{')
            continue;
        old_lines.count = new_lines.count = 0;
        while (next_line(f->hunks.text, &pos, &line, &len) && line[0] != '}') {
            Lines *side = line[0] == '-' ? &old_lines : &new_lines;
            side->line[side->count] = line + 1;
            side->len[side->count++] = len - 1;
        }
        if (new_line_number + 1 >= registration || group_is_comment_only(&old_lines, &new_lines))
            emit_lines(out, &new_lines);
        else
            todo_for_group(out, ex, f, &old_lines, &new_lines, first + ++todos);
        new_line_number += new_lines.count;
    }
    free(old_lines.line), free(old_lines.len), free(new_lines.line), free(new_lines.len);
    return todos;
}

/* ---- marker mode ---- */

/* The task and stub of a begin marker: "/ * exercise: begin — TASK | stub: CODE * /". */
void exercise_parse_marker(const char *line, size_t len, char *task, size_t task_len, char *stub, size_t stub_len)
{
    const char *s = strstr(line, MARKER_BEGIN) + strlen(MARKER_BEGIN);
    size_t n = len - (size_t)(s - line);
    char text[1024];
    snprintf(text, sizeof text, "%.*s", (int)n, s);
    char *end = strstr(text, "*/");
    if (end)
        *end = '\0';
    stub[0] = '\0';
    char *sep = strstr(text, STUB_SEPARATOR);
    if (sep) {
        *sep = '\0';
        const char *code = sep + strlen(STUB_SEPARATOR);
        code += strspn(code, " ");
        snprintf(stub, stub_len, "%s", code);
    }
    const char *t = text;
    for (;;) { /* the separator before the task: spaces, '-', ':' or an em dash */
        if (*t == ' ' || *t == '-' || *t == ':')
            t++;
        else if (!strncmp(t, "\u2014", strlen("\u2014")))
            t += strlen("\u2014");
        else
            break;
    }
    snprintf(task, task_len, "%s", t);
    for (char *z = task + strlen(task); z > task && (z[-1] == ' ' || z[-1] == '\n'); z--)
        z[-1] = '\0';
    for (char *z = stub + strlen(stub); z > stub && z[-1] == ' '; z--)
        z[-1] = '\0';
}

/* Renders a marker-mode file; returns the number of TODO blocks, or -1 with a message in err when a
 * begin marker has no end. */
static int render_markers(const Exercise *ex, const CopyFile *f, int first, Buf *out, FlError *err)
{
    size_t pos = 0, len;
    const char *line;
    int todos = 0, line_number = 0;
    while (next_line(f->source.text, &pos, &line, &len)) {
        line_number++;
        if (!line_has(line, len, MARKER_BEGIN)) {
            buf_add(out, line, len);
            buf_add(out, "\n", 1);
            continue;
        }
        const int k = first + ++todos, begin_line = line_number;
        char task[1024], stub[1024];
        exercise_parse_marker(line, len, task, sizeof task, stub, sizeof stub);
        const size_t nindent = indent_of(line, len);
        todo_open(out, line, nindent, k, ex->total_todos, ex->number, task);
        buf_printf(out, "%.*s// Stage %s's code for this is yours to write.%s\n", (int)nindent, line, ex->number,
                   stub[0] ? " The line below only keeps the copy compiling: replace it." : "");
        if (stub[0])
            buf_printf(out, "%.*s%s\n", (int)nindent, line, stub);
        todo_close(out, line, nindent, k, ex->total_todos);
        int ended = 0;
        while (!ended && next_line(f->source.text, &pos, &line, &len)) {
            line_number++;
            ended = line_has(line, len, MARKER_END);
        }
        if (!ended) {
            fl_fail(err, FL_BAD_INPUT, "stages/%s/%s:%d: '" MARKER_BEGIN "' without '" MARKER_END "'",
                    ex->folder, f->name, begin_line);
            return -1;
        }
    }
    return todos;
}

static int render_file(const Exercise *ex, const CopyFile *f, int first, Buf *out, FlError *err)
{
    buf_add(out, "", 0);
    switch (f->made_from) {
    case MADE_FROM_HUNKS:
        return render_hunks(ex, f, first, out);
    case MADE_FROM_MARKERS:
        return render_markers(ex, f, first, out, err);
    case MADE_GIVEN:
        buf_add(out, f->source.text, f->source.len);
        return 0;
    }
    return 0;
}

/* ==== choosing how each file is made ========================================================== */

/* The stages this one was copied from, as its README names them: every `flashlab diff MM NN` with
 * NN this stage, in order of appearance (stage 05 names 03 for the CPU and 04 for the GPU); else the
 * stage before it. */
static void find_bases(Exercise *ex)
{
    char path[4096];
    stage_path(ex->folder, "README.md", path, sizeof path);
    Buf readme = {0};
    FlError ignored;
    ex->nbases = 0;
    if (read_text(path, &readme, TEXT_ANY_SIZE, &ignored) == FL_OK) {
        for (const char *s = readme.text; (s = strstr(s, "flashlab diff ")) != NULL; s++) {
            char a[16], b[16], folder[STAGE_NAME_LEN];
            if (sscanf(s, "flashlab diff %15[0-9] %15[0-9]", a, b) != 2 || atoi(b) != atoi(ex->number))
                continue;
            if (stage_folder_find(a, folder, sizeof folder, &ignored) != FL_OK)
                continue;
            int known = 0;
            for (int i = 0; i < ex->nbases; i++)
                known |= !strcmp(ex->bases[i], folder);
            if (!known && ex->nbases < MAX_BASES)
                snprintf(ex->bases[ex->nbases++], STAGE_NAME_LEN, "%s", folder);
        }
    }
    buf_free(&readme);
    char previous[16];
    snprintf(previous, sizeof previous, "%d", atoi(ex->number) - 1);
    if (ex->nbases == 0 && atoi(ex->number) > 1 &&
        stage_folder_find(previous, ex->bases[0], STAGE_NAME_LEN, &ignored) == FL_OK)
        ex->nbases = 1;
}

/* How file `index` of `mine` (one kind) is made. A stage whose files hold exercise markers is a
 * marker exercise: its files with markers are made from them, the others are given (hunks against
 * an earlier stage would not fit the given files, e.g. a header whose functions changed). Otherwise
 * each file is made from hunks against its partner in the first base stage that has one, or given
 * when none has. */
static void choose_made_from(const Exercise *ex, const StageFiles *mine, int index, const char *kind,
                             int marker_stage, CopyFile *f)
{
    f->made_from = MADE_GIVEN;
    if (marker_stage) {
        if (has_markers(f->source.text))
            f->made_from = MADE_FROM_MARKERS;
        return;
    }
    for (int b = 0; b < ex->nbases; b++) {
        StageFiles base;
        stage_files_list(ex->bases[b], kind, &base);
        int j = stage_files_partner(mine, index, &base);
        if (j >= 0) {
            f->made_from = MADE_FROM_HUNKS;
            snprintf(f->base_folder, sizeof f->base_folder, "%s", ex->bases[b]);
            snprintf(f->base_name, sizeof f->base_name, "%s", base.names[j]);
            return;
        }
    }
}

/* The tagged diff of a hunk-mode file against its base without marker lines. */
static int load_hunks(CopyFile *f, const char *path, const char *scratch_dir, FlError *err)
{
    char base_path[4096], plain_base[PATH_MAX + 32], stream[PATH_MAX + 32];
    snprintf(plain_base, sizeof plain_base, "%s/.base", scratch_dir);
    snprintf(stream, sizeof stream, "%s/.diff", scratch_dir);
    stage_path(f->base_folder, f->base_name, base_path, sizeof base_path);
    int rc = stage_copy_without_markers(base_path, plain_base, err);
    if (rc == FL_OK)
        rc = run_group_diff(plain_base, path, stream, &f->hunks, err);
    unlink(plain_base);
    return rc;
}

static int load_files(Exercise *ex, const char *scratch_dir, FlError *err)
{
    static const char *const source_kinds[] = {".h", ".cuh", ".c", ".cu"};
    enum { KINDS = sizeof source_kinds / sizeof source_kinds[0] };
    StageFiles mine[KINDS];
    char path[4096];
    int marker_stage = 0;
    for (int k = 0; k < KINDS; k++) {
        stage_files_list(ex->folder, source_kinds[k], &mine[k]);
        for (int i = 0; i < mine[k].count; i++) {
            CopyFile *f = &ex->files[ex->nfiles++];
            snprintf(f->name, sizeof f->name, "%.255s", mine[k].names[i]);
            stage_path(ex->folder, f->name, path, sizeof path);
            int rc = read_text(path, &f->source, TEXT_ANY_SIZE, err);
            if (rc != FL_OK)
                return rc;
            marker_stage |= has_markers(f->source.text);
        }
    }
    for (int k = 0, n = 0; k < KINDS; k++)
        for (int i = 0; i < mine[k].count; i++) {
            CopyFile *f = &ex->files[n++];
            choose_made_from(ex, &mine[k], i, source_kinds[k], marker_stage, f);
            stage_path(ex->folder, f->name, path, sizeof path);
            int rc = f->made_from == MADE_FROM_HUNKS ? load_hunks(f, path, scratch_dir, err) : FL_OK;
            if (rc != FL_OK)
                return rc;
        }
    return FL_OK;
}

/* ==== the folder ============================================================================== */

static int folder_is_usable(const char *dir, FlError *err)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return errno == ENOENT ? FL_OK : fl_fail(err, FL_BAD_INPUT, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return fl_fail(err, FL_BAD_INPUT, "%s exists and is not a folder", dir);
    if (rmdir(dir) == 0) /* empty: it is made again by the final rename */
        return FL_OK;
    return fl_fail(err, FL_BAD_INPUT, "%s exists and is not empty: name a new folder", dir);
}

static void remove_scratch(const char *scratch, const Exercise *ex)
{
    static const char *const extra[] = {"README.md", "CMakeLists.txt", ".base", ".diff"};
    char path[4400];
    for (int i = 0; i < ex->nfiles; i++) {
        snprintf(path, sizeof path, "%s/%s", scratch, ex->files[i].name);
        unlink(path);
    }
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", scratch, extra[i]);
        unlink(path);
    }
    rmdir(scratch);
}

static int write_copy(Exercise *ex, const char *scratch, const char *final_dir, FlError *err)
{
    int rc = load_files(ex, scratch, err);
    Buf out = {0};
    char path[4400];
    for (int pass = 0; pass < 2 && rc == FL_OK; pass++) { /* pass 0 counts the TODOs, pass 1 writes */
        int first = 0;
        for (int i = 0; i < ex->nfiles && rc == FL_OK; i++) {
            out.len = 0;
            int todos = render_file(ex, &ex->files[i], first, &out, err);
            if (todos < 0) {
                rc = FL_BAD_INPUT;
                break;
            }
            ex->files[i].todos = todos;
            first += todos;
            snprintf(path, sizeof path, "%s/%s", scratch, ex->files[i].name);
            if (pass == 1)
                rc = write_text(path, &out, err);
        }
        ex->total_todos = first;
    }
    if (rc == FL_OK && ex->total_todos == 0)
        rc = fl_fail(err, FL_BAD_INPUT, "stage %s gives no TODO: no earlier stage's file to diff against "
                     "and no exercise markers (docs/adding_a_stage.md)", ex->number);
    if (rc == FL_OK) {
        out.len = 0;
        exercise_write_readme(ex, final_dir, &out);
        snprintf(path, sizeof path, "%s/README.md", scratch);
        rc = write_text(path, &out, err);
    }
    if (rc == FL_OK) {
        out.len = 0;
        exercise_write_cmakelists(ex, final_dir, &out);
        snprintf(path, sizeof path, "%s/CMakeLists.txt", scratch);
        rc = write_text(path, &out, err);
    }
    buf_free(&out);
    return rc;
}

/* mkdtemp makes a folder only its owner may read; the copy is an ordinary folder. */
static void make_mode_ordinary(const char *dir)
{
    mode_t mask = umask(0);
    umask(mask);
    chmod(dir, 0777 & ~mask);
}

/* dir as an absolute path (the README and CMakeLists.txt name it), without trailing slashes. */
static int absolute_dir(const char *dir, char *abs, size_t size, FlError *err)
{
    char cwd[PATH_MAX] = "";
    if (dir[0] != '/' && !getcwd(cwd, sizeof cwd))
        return fl_fail(err, FL_BAD_INPUT, "cannot read the current folder (%s)", strerror(errno));
    int n = snprintf(abs, size, "%s%s%s", cwd, cwd[0] ? "/" : "", dir);
    if (n < 0 || (size_t)n >= size)
        return fl_fail(err, FL_BAD_INPUT, "%s: path too long", dir);
    while (n > 1 && abs[n - 1] == '/')
        abs[--n] = '\0';
    return FL_OK;
}

int exercise_write(const char *stage, const char *dir, FlError *err)
{
    Exercise *ex = calloc(1, sizeof *ex);
    if (!ex)
        return fl_fail(err, FL_BAD_INPUT, "out of memory");
    char final_dir[PATH_MAX], scratch[PATH_MAX + 16];
    int rc = stage_folder_find(stage, ex->folder, sizeof ex->folder, err);
    if (rc == FL_OK)
        rc = absolute_dir(dir, final_dir, sizeof final_dir, err);
    if (rc == FL_OK)
        rc = folder_is_usable(final_dir, err);
    if (rc == FL_OK) {
        snprintf(scratch, sizeof scratch, "%s.tmp-XXXXXX", final_dir);
        if (!mkdtemp(scratch))
            rc = fl_fail(err, FL_BAD_INPUT, "%s: cannot create a folder beside it (%s)", dir, strerror(errno));
        else
            make_mode_ordinary(scratch);
    }
    if (rc != FL_OK) {
        free(ex);
        return rc;
    }
    memcpy(ex->number, ex->folder, 2);
    find_bases(ex);
    rc = write_copy(ex, scratch, final_dir, err);
    if (rc == FL_OK && rename(scratch, final_dir) != 0)
        rc = fl_fail(err, FL_BAD_INPUT, "%s: cannot rename %s to it (%s)", dir, scratch, strerror(errno));
    if (rc != FL_OK)
        remove_scratch(scratch, ex);
    else
        for (int i = 0; i < ex->nfiles; i++)
            printf("%s/%s: %d TODO block%s\n", dir, ex->files[i].name, ex->files[i].todos,
                   ex->files[i].todos == 1 ? "" : "s");
    if (rc == FL_OK)
        printf("%s/README.md: the task, how to build and test it; %s/CMakeLists.txt: read with "
               "-DFLASHLAB_STUDENT_DIR=%s\n", dir, dir, final_dir);
    for (int i = 0; i < ex->nfiles; i++)
        buf_free(&ex->files[i].source), buf_free(&ex->files[i].hunks);
    free(ex);
    return rc;
}
