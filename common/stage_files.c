/* stage_files.c — stage folders and their files (see stage_files.h). */
#include "stage_files.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

const char *const stage_file_kinds[] = {".h", ".cuh", ".c", ".cu", "README.md", NULL};

int stage_arg_looks_like_stage(const char *arg)
{
    size_t digits = strspn(arg, "0123456789");
    return digits >= 1 && digits <= 2 && (arg[digits] == '\0' || arg[digits] == '_');
}

void stage_path(const char *folder, const char *file, char *path, size_t len)
{
    snprintf(path, len, "%s/stages/%s%s%s", FLASHLAB_SOURCE_DIR, folder, file ? "/" : "", file ? file : "");
}

/* The names in folder dir that keep(name, arg) accepts, sorted, at most max; -1 when dir cannot be
 * read. */
static int sorted_names(const char *dir, int (*keep)(const char *name, const void *arg), const void *arg,
                        char names[][STAGE_NAME_LEN], int max)
{
    struct dirent **entries;
    int n = scandir(dir, &entries, NULL, alphasort);
    if (n < 0)
        return -1;
    int count = 0;
    for (int i = 0; i < n; i++) {
        if (count < max && keep(entries[i]->d_name, arg))
            snprintf(names[count++], STAGE_NAME_LEN, "%s", entries[i]->d_name);
        free(entries[i]);
    }
    free(entries);
    return count;
}

/* A stage folder named by arg ("7", "07", "07_causal"): "NN_" and, if arg has one, the same name. */
static int is_stage_folder(const char *name, const void *arg)
{
    const char *a = arg;
    const size_t digits = strspn(a, "0123456789");
    char number[3];
    snprintf(number, sizeof number, "%s%.*s", digits == 1 ? "0" : "", (int)digits, a);
    return strncmp(name, number, 2) == 0 && name[2] == '_' && (a[digits] == '\0' || !strcmp(name + 2, a + digits));
}

int stage_folder_find(const char *arg, char *folder, size_t len, FlError *err)
{
    if (!stage_arg_looks_like_stage(arg))
        return fl_fail(err, FL_BAD_INPUT, "'%s' is not a stage number like 06 or 06_backward", arg);
    char stages[4096], found[1][STAGE_NAME_LEN];
    stage_path("", NULL, stages, sizeof stages);
    int n = sorted_names(stages, is_stage_folder, arg, found, 1);
    if (n < 0)
        return fl_fail(err, FL_BAD_INPUT, "%s: cannot read the folder (%s)", stages, strerror(errno));
    if (n == 0)
        return fl_fail(err, FL_BAD_INPUT, "no folder %s/stages/%s%.*s_*", FLASHLAB_SOURCE_DIR,
                       strspn(arg, "0123456789") == 1 ? "0" : "", (int)strspn(arg, "0123456789"), arg);
    snprintf(folder, len, "%s", found[0]);
    return FL_OK;
}

static int is_kind(const char *file, const void *arg)
{
    const char *kind = arg;
    if (kind[0] != '.')
        return !strcmp(file, kind);
    size_t n = strlen(file), k = strlen(kind);
    return n > k && !strcmp(file + n - k, kind);
}

void stage_files_list(const char *folder, const char *kind, StageFiles *files)
{
    char path[4096];
    stage_path(folder, NULL, path, sizeof path);
    int n = sorted_names(path, is_kind, kind, files->names, STAGE_MAX_FILES);
    files->count = n > 0 ? n : 0;
}

int stage_files_partner(const StageFiles *mine, int index, const StageFiles *other)
{
    if (mine->count == 1 && other->count == 1)
        return 0;
    for (int i = 0; i < other->count; i++)
        if (!strcmp(other->names[i], mine->names[index]))
            return i;
    return -1;
}

int stage_copy_without_markers(const char *path, const char *out_path, FlError *err)
{
    FILE *in = fopen(path, "rb");
    if (!in)
        return fl_fail(err, FL_BAD_INPUT, "%s: cannot read (%s)", path, strerror(errno));
    FILE *out = fopen(out_path, "wb");
    if (!out) {
        fclose(in);
        return fl_fail(err, FL_BAD_INPUT, "%s: cannot write (%s)", out_path, strerror(errno));
    }
    char *line = NULL;
    size_t cap = 0;
    int ok = 1;
    while (getline(&line, &cap, in) >= 0)
        if (!strstr(line, STAGE_MARKER_BEGIN) && !strstr(line, STAGE_MARKER_END))
            ok &= fputs(line, out) >= 0;
    free(line);
    fclose(in);
    ok &= fclose(out) == 0;
    return ok ? FL_OK : fl_fail(err, FL_BAD_INPUT, "%s: write failed", out_path);
}

int stage_run_program(const char *const argv[], const char *cwd, int out_fd, FlError *err)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return fl_fail(err, -1, "cannot start %s (%s)", argv[0], strerror(errno));
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL); /* the caller may ignore it; the program should stop on a closed pipe */
        if ((!cwd || chdir(cwd) == 0) && (out_fd == STDOUT_FILENO || dup2(out_fd, STDOUT_FILENO) >= 0))
            execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "cannot run the system '%s' (%s)\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return fl_fail(err, -1, "lost track of %s (%s)", argv[0], strerror(errno));
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE)
        return STAGE_PIPE_CLOSED;
    if (!WIFEXITED(status) || WEXITSTATUS(status) == 127)
        return fl_fail(err, -1, "the system '%s' could not run or was killed", argv[0]);
    return WEXITSTATUS(status);
}

int stage_file_declared(const char *folder, const char *name, char *out, size_t len)
{
    char path[4400], line[2 * STAGE_NAME_LEN], parent[STAGE_NAME_LEN] = "";
    stage_path(folder, "PARENT", path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int found = 0, first = 1;
    while (!found && fgets(line, sizeof line, f)) {
        char a[STAGE_NAME_LEN], b[STAGE_NAME_LEN];
        if (first) { /* the parent's name */
            first = 0;
            if (sscanf(line, "%255s", parent) != 1)
                break;
            continue;
        }
        if (sscanf(line, "%255s %255s", a, b) != 2 || strcmp(a, name) != 0)
            continue;
        FlError err = {{0}};
        char parent_folder[STAGE_NAME_LEN];
        if (!strcmp(b, "-") || strchr(b, '/'))
            snprintf(out, len, "%s", b);
        else if (stage_folder_find(parent, parent_folder, sizeof parent_folder, &err) == FL_OK)
            snprintf(out, len, "%s/%s", parent_folder, b);
        else
            break;
        found = 1;
    }
    fclose(f);
    return found;
}

int stage_parent(const char *folder, char *parent, size_t len, FlError *err)
{
    char path[4400], line[STAGE_NAME_LEN] = "";
    stage_path(folder, "PARENT", path, sizeof path);
    FILE *f = fopen(path, "r");
    if (f) { /* a track off the ladder names the stage it copies */
        int got = fgets(line, sizeof line, f) != NULL;
        fclose(f);
        line[strcspn(line, " \t\r\n")] = '\0';
        if (!got || !line[0])
            return fl_fail(err, FL_BAD_INPUT, "%s: empty; it names the stage this one copies (e.g. 08_gqa)", path);
        return stage_folder_find(line, parent, len, err);
    }
    const int number = atoi(folder); /* on the ladder: the stage before */
    if (number <= 1)
        return fl_fail(err, FL_BAD_INPUT, "stage %s is the first: it has no parent", folder);
    char before[16];
    snprintf(before, sizeof before, "%02d", number - 1);
    return stage_folder_find(before, parent, len, err);
}
