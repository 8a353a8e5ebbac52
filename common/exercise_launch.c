/* exercise_launch.c — `flashlab CMD --variant student...` in the main executable: hands the
 * command to flashlab_student, building it first when the copy changed (exercise.h). */
#include "exercise.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attn.h"
#include "stage_files.h"

static int asks_for_student_variant(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *value = !strcmp(argv[i], "--variant") && i + 1 < argc ? argv[i + 1]
                            : !strncmp(argv[i], "--variant=", 10) ? argv[i] + 10
                                                                  : NULL;
        if (value && !strncmp(value, "student", 7))
            return 1;
    }
    return 0;
}

static int has_student_impls(void)
{
    const StageImpl *const *all = stage_registry();
    for (int i = 0; all[i]; i++)
        if (!strncmp(all[i]->variant, "student", 7))
            return 1;
    return 0;
}

/* The newest modification time of the copy's sources (.c, .cu, .h, .cuh, CMakeLists.txt) in dir. */
static time_t newest_source(const char *dir)
{
    time_t newest = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        const char *dot = strrchr(e->d_name, '.');
        if (!(dot && (!strcmp(dot, ".c") || !strcmp(dot, ".cu") || !strcmp(dot, ".h") || !strcmp(dot, ".cuh"))) &&
            strcmp(e->d_name, "CMakeLists.txt") != 0)
            continue;
        char path[PATH_MAX + 256];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) == 0 && st.st_mtime > newest)
            newest = st.st_mtime;
    }
    if (d)
        closedir(d);
    return newest;
}

/* When the student's copy (named in BUILD/flashlab_student.dir) changed since BUILD/flashlab_student
 * was linked, or the executable is missing, builds it again: FL_OK, or FL_BAD_INPUT when the copy
 * does not compile (the compiler's messages are on the terminal). */
static int student_build_fresh(const char *build_dir, const char *student, const char *command)
{
    char marker[PATH_MAX + 32], dir[PATH_MAX] = "";
    snprintf(marker, sizeof marker, "%s/flashlab_student.dir", build_dir);
    FILE *f = fopen(marker, "r");
    if (!f)
        return FL_OK; /* no student copy configured: the caller says what to do */
    int got = fgets(dir, sizeof dir, f) != NULL;
    fclose(f);
    dir[strcspn(dir, "\n")] = '\0';
    struct stat st;
    if (got && stat(student, &st) == 0 && newest_source(dir) <= st.st_mtime)
        return FL_OK;
    fprintf(stderr, "flashlab %s: %s changed since %s was built: building it (cmake --build %s --target "
            "flashlab_student)\n", command, dir, student, build_dir);
    const char *const cmake[] = {"cmake", "--build", build_dir, "--target", "flashlab_student", NULL};
    FlError err = {{0}};
    int status = stage_run_program(cmake, NULL, STDERR_FILENO, &err);
    if (status == 0)
        return FL_OK;
    fprintf(stderr, "flashlab %s: your copy in %s does not build (the compiler's messages are above)\n", command,
            dir);
    return FL_BAD_INPUT;
}

int exercise_forward_to_student_build(int argc, char **argv)
{
    if (!asks_for_student_variant(argc, argv) || has_student_impls())
        return -1;
    char self[PATH_MAX], student[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(self, '/');
    if (slash && !strcmp(slash + 1, "flashlab_student"))
        return -1; /* it is the student build: its own lookup says what is missing */
    char build_dir[PATH_MAX];
    snprintf(build_dir, sizeof build_dir, "%.*s", slash ? (int)(slash - self) : 1, slash ? self : ".");
    snprintf(student, sizeof student, "%s/flashlab_student", build_dir);
    if (student_build_fresh(build_dir, student, argc > 1 ? argv[1] : "") != FL_OK)
        return FL_BAD_INPUT;
    fflush(stdout);
    if (access(student, X_OK) == 0)
        execv(student, argv);
    fprintf(stderr, "flashlab %s: student copy not built (no %s): configure with "
            "-DFLASHLAB_STUDENT_DIR=DIR and run 'ctest -R student_build' (docs/teaching.md)\n",
            argc > 1 ? argv[1] : "", student);
    return FL_BAD_INPUT;
}
