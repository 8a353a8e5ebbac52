/* cmd_run.c — flashlab run STAGE CASE_DIR --out DIR: runs a stage on any case folder of its kind
 * and writes the outputs, all or nothing, never into a case folder. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "npy.h"

/* mkdir -p; *created_last = 1 when the final folder did not exist before. */
static int make_dirs(const char *path, int *created_last, FlError *err)
{
    char buf[4096];
    *created_last = 0;
    if (strlen(path) >= sizeof buf)
        return fl_fail(err, FL_BAD_INPUT, "%s: path too long", path);
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(buf, 0777) == 0) {
            *created_last = saved == '\0' || p[1] == '\0';
        } else if (errno != EEXIST) {
            return fl_fail(err, FL_BAD_INPUT, "%s: cannot create the folder (%s)", buf, strerror(errno));
        } else {
            struct stat st;
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
                return fl_fail(err, FL_BAD_INPUT, "%s: exists and is not a folder", buf);
        }
        *p = saved;
        if (saved == '\0')
            break;
    }
    return FL_OK;
}

/* Writes every output of r into DIR; on any failure removes the files already written (and the
 * folder, when this call created it), so no half result is left behind. */
static int write_run(const char *out_dir, const KindRun *r, FlError *err)
{
    int created;
    int rc = make_dirs(out_dir, &created, err);
    if (rc != FL_OK)
        return rc;
    char written[KIND_MAX_OUTPUTS][4096];
    int nwritten = 0;
    for (int i = 0; i < r->count && rc == FL_OK; i++) {
        snprintf(written[nwritten], sizeof written[0], "%s/%s", out_dir, r->file[i]);
        rc = npy_write(written[nwritten], &r->got[i], err);
        if (rc == FL_OK)
            nwritten++;
    }
    if (rc != FL_OK) {
        for (int i = 0; i < nwritten; i++)
            unlink(written[i]);
        if (created)
            rmdir(out_dir);
        return rc;
    }
    for (int i = 0; i < nwritten; i++)
        printf("wrote %s\n", written[i]);
    return FL_OK;
}

/* Checks the arguments; FL_OK with impl found, or the exit code. */
static int run_args(const Options *o, const StageImpl **impl)
{
    if (o->npositional < 2)
        return usage_error("run", "missing %s", o->npositional < 1 ? "STAGE and CASE_DIR" : "CASE_DIR");
    if (o->npositional > 2)
        return usage_error("run", "one case folder at a time, got extra argument '%s'", o->positional[2]);
    if (!o->out_dir)
        return usage_error("run", "missing %s", "--out DIR");
    return resolve_impl(o, o->positional[0], impl);
}

/* The direction of the run, or why --direction bwd cannot be honoured (the exit code). */
static int run_direction(const Options *o, const StageImpl *impl, const Case *c, Direction *dir)
{
    *dir = c->kind->direction(impl, c, o->direction);
    const int gradients = c->kind->asks_backward(c);
    if (o->direction == DIR_BWD && *dir != DIR_BWD) {
        fprintf(stderr, "flashlab run: --direction bwd needs %s\n",
                gradients ? "a stage with a backward pass (stage 06 on)" : "a case with do.npy");
        return gradients ? FL_UNSUPPORTED : FL_BAD_INPUT;
    }
    if (*dir == DIR_FWD && o->direction != DIR_FWD && gradients)
        fprintf(stderr, "flashlab run: note: stage %s has no backward pass (%s); do.npy ignored\n", impl->stage,
                no_backward_reason(impl));
    return FL_OK;
}

int cmd_run(Options *o)
{
    const StageImpl *impl;
    int rc = run_args(o, &impl);
    if (rc != FL_OK)
        return rc;
    Case c;
    FlError err = {{0}};
    rc = case_check_out_dir(o->out_dir, &err);
    if (rc == FL_OK)
        rc = case_load(o->positional[1], 0, &c, &err);
    if (rc != FL_OK) {
        fprintf(stderr, "flashlab run: %s\n", err.msg);
        return rc;
    }
    Direction dir;
    rc = run_direction(o, impl, &c, &dir);
    KindRun r = {0};
    RunCtx ctx = run_ctx(o);
    if (rc == FL_OK && !c.kind->takes(impl))
        rc = fl_fail(&err, FL_UNSUPPORTED, "%s is a case of kind %s; stage %s (%s) runs %s cases", c.dir,
                     c.kind->name, impl->stage, impl->name, kind_of_stage(impl)->name);
    else if (rc == FL_OK)
        rc = c.kind->run(impl, dir, &c, &ctx, &r, &err);
    if (rc == FL_OK) {
        warn_odd_outputs(&c, &r);
        rc = write_run(o->out_dir, &r, &err);
    }
    if (rc != FL_OK && err.msg[0]) {
        if (rc == FL_NO_DEVICE)
            printf("no CUDA device: skipped\n");
        fprintf(stderr, "flashlab run: %s\n", err.msg);
    }
    kind_run_free(&r);
    case_free(&c);
    return rc == FL_CHECK_FAILED ? FL_BAD_INPUT : rc;
}
