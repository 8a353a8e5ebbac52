/* cmd_check.c — flashlab check STAGE [CASE_DIR...]: runs a stage on the golden cases of its kind
 * (or the folders named), compares every output with the expected files at the tolerance of the
 * stage's precision, and tallies. With --json: the grade report, one object per case. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "files.h"

typedef struct {
    int checked, passed, skipped;
    int io_failed;  /* cases whose outputs matched but whose HBM traffic failed the IO check */
    int code;       /* worst status so far */
    int json_cases; /* check --json: case objects printed so far */
    char failed_names[400]; /* the failing cases, for the last line */
} CheckTally;

/* ---- check --json: the grade report, one object per case ----
 * {"case", "dir", "direction", "status": "pass" | "fail" | "error", "tensors": {name: {max_abs,
 * max_rel, mismatches}}, "hbm_read_bytes", "hbm_written_bytes" (all passes of the run), the same
 * two for the reference (the stage's default variant on the same device and case), "io_check"
 * ("pass", "fail": a student copy moved more than IO_MARGIN above the reference's bytes, which
 * makes the status "fail" too; "off": not a student copy, --no-io-check, or the reference did not run), "time_ms"
 * (median of 3 runs after one warm-up, counting off), "error": null or the message}. */
typedef struct {
    uint64_t read, written, ref_read, ref_written;
    const char *io_check; /* "pass", "fail", or "off" (not a student copy, or --no-io-check) */
    double ms;
} GradeNumbers;

static void json_case(const Case *c, const char *label, const char *status, const TensorGrade *grades,
                      int ngrades, const GradeNumbers *g, const char *error, CheckTally *tally)
{
    printf("%s\n    {\"case\": ", tally->json_cases++ ? "," : "");
    json_string(c->name);
    printf(", \"dir\": ");
    json_string(c->dir);
    printf(", \"direction\": \"%s\", \"status\": \"%s\", \"tensors\": {", label, status);
    for (int i = 0; i < ngrades; i++)
        printf("%s\"%s\": {\"max_abs\": %.6g, \"max_rel\": %.6g, \"mismatches\": %zu}", i ? ", " : "",
               grades[i].name, grades[i].r.max_abs_err, grades[i].r.max_rel_err, grades[i].r.mismatches);
    printf("}");
    if (g)
        printf(", \"hbm_read_bytes\": %llu, \"hbm_written_bytes\": %llu, \"reference_hbm_read_bytes\": %llu, "
               "\"reference_hbm_written_bytes\": %llu, \"io_check\": \"%s\", \"time_ms\": %.6g",
               (unsigned long long)g->read, (unsigned long long)g->written, (unsigned long long)g->ref_read,
               (unsigned long long)g->ref_written, g->io_check, g->ms);
    printf(", \"error\": ");
    if (error)
        json_string(error);
    else
        printf("null");
    printf("}");
}

/* The reference of a graded implementation: the same stage's variant on its device that it stands
 * for (a student copy "student-V" stands for variant V, "student" for the default one), else the
 * default variant. */
static const StageImpl *reference_impl(const StageImpl *impl)
{
    const char *variant = "";
    if (strncmp(impl->variant, "student-", 8) == 0)
        variant = impl->variant + 8;
    const StageImpl *ref = stage_find(impl->stage, impl->device, variant);
    if (!ref)
        ref = stage_find(impl->stage, impl->device, "");
    return ref ? ref : impl;
}

static int is_student(const StageImpl *impl)
{
    return strcmp(impl->variant, "student") == 0 || strncmp(impl->variant, "student-", 8) == 0;
}

/* The HBM bytes of a run (all its passes) and of the reference on the same case and settings. */
typedef struct {
    uint64_t read, written, ref_read, ref_written;
} IoNumbers;

static int io_numbers(const Options *o, const StageImpl *impl, Direction dir, const Case *c, const RunStats *stats,
                      IoNumbers *io, FlError *err)
{
    RunCtx ctx = run_ctx(o);
    RunStats ref = *stats;
    int rc = FL_OK;
    if (reference_impl(impl) != impl) {
        KindRun r;
        rc = c->kind->run(reference_impl(impl), dir, c, &ctx, &r, err);
        if (rc == FL_OK) /* else the reference's counts stay the run's own: nothing is compared */
            ref = r.stats;
        kind_run_free(&r);
    }
    io->read = stats->fwd.bytes_read + stats->bwd.bytes_read;
    io->written = stats->fwd.bytes_written + stats->bwd.bytes_written;
    io->ref_read = ref.fwd.bytes_read + ref.bwd.bytes_read;
    io->ref_written = ref.fwd.bytes_written + ref.bwd.bytes_written;
    return rc;
}

/* The IO check of a student copy: correct outputs are not enough, the copy must also move no more
 * than IO_MARGIN above the reference's HBM bytes, since the traffic a stage saves is its idea
 * (docs/teaching.md, "How a copy is graded"). Prints the traffic beside the reference's, and on a
 * fail the extra bytes; returns 1 when it fails. */
#define IO_MARGIN 0.10
static int io_exceeds(uint64_t got, uint64_t ref) { return (double)got > (double)ref * (1.0 + IO_MARGIN); }

static int io_check_fails(const StageImpl *impl, const IoNumbers *io, int print)
{
    const int fails = io_exceeds(io->read, io->ref_read) || io_exceeds(io->written, io->ref_written);
    if (!print)
        return fails;
    char r[32], rr[32], w[32], rw[32], extra[32];
    printf("    hbm: read %s (reference %s), written %s (reference %s)\n", human_bytes((double)io->read, r, 32),
           human_bytes((double)io->ref_read, rr, 32), human_bytes((double)io->written, w, 32),
           human_bytes((double)io->ref_written, rw, 32));
    if (!fails)
        return 0;
    const int reads = io_exceeds(io->read, io->ref_read);
    const uint64_t got = reads ? io->read : io->written, ref = reads ? io->ref_read : io->ref_written;
    printf("    IO FAIL: the outputs may match, but it %s %s more HBM bytes than the reference (%.2fx; "
           "allowed %.2fx): not yet the idea of stage %s (--no-io-check to explore)\n",
           reads ? "reads" : "writes", human_bytes((double)(got - ref), extra, 32),
           ref ? (double)got / (double)ref : 0.0, 1.0 + IO_MARGIN, impl->stage);
    return 1;
}

/* ---- check --json ---- */

/* The grade's numbers: the traffic and the graded implementation's time. */
static int grade(const Options *o, const StageImpl *impl, Direction dir, const Case *c, const RunStats *stats,
                 GradeNumbers *g, FlError *err)
{
    IoNumbers io;
    int rc = io_numbers(o, impl, dir, c, stats, &io, err);
    g->read = io.read, g->written = io.written, g->ref_read = io.ref_read, g->ref_written = io.ref_written;
    g->io_check = rc != FL_OK || !is_student(impl) || o->no_io_check ? "off"
                  : io_check_fails(impl, &io, 0)                       ? "fail"
                                                                       : "pass";
    RunCtx ctx = run_ctx(o);
    const Timing timing = {.warmup = 1, .reps = 3, .queued = 0};
    if (rc == FL_OK)
        rc = c->kind->time(impl, dir, c, &ctx, &timing, &g->ms, err);
    return rc;
}

/* ---- one case ---- */

static void print_case_header(const Case *c, Direction dir, int verbose)
{
    char sizes[256];
    c->kind->describe(c, sizes, sizeof sizes);
    printf("%s (%s): %s\n", c->name, c->kind->label(dir), sizes);
    if (verbose && c->description[0])
        printf("    %s\n", c->description);
}

static void print_hbm_line(const char *pass, const HbmCounter *h, size_t extra)
{
    char r[32], w[32], e[32];
    printf("    hbm %s: read %s, written %s, extra %s\n", pass, human_bytes((double)h->bytes_read, r, 32),
           human_bytes((double)h->bytes_written, w, 32), human_bytes((double)extra, e, 32));
}

/* A run that did not complete: its message, and the status it adds to the tally. */
static void tally_run_error(const Options *o, const Case *c, const char *label, int rc, const FlError *err,
                            CheckTally *tally)
{
    fprintf(stderr, "flashlab check: %s: %s\n", c->dir, err->msg);
    if (o->json)
        json_case(c, label, "error", NULL, 0, NULL, err->msg, tally);
    tally->code = worse(tally->code, rc == FL_CHECK_FAILED ? FL_BAD_INPUT : rc);
    if (rc != FL_UNSUPPORTED && rc != FL_NO_DEVICE)
        tally->checked++;
}

static void tally_result(const Case *c, int failed_tensors, CheckTally *tally)
{
    tally->checked++;
    if (failed_tensors == 0) {
        tally->passed++;
        return;
    }
    tally->code = worse(tally->code, FL_CHECK_FAILED);
    size_t used = strlen(tally->failed_names);
    if (used + strlen(c->name) + 8 < sizeof tally->failed_names)
        snprintf(tally->failed_names + used, sizeof tally->failed_names - used, "%s%s", used ? ", " : "", c->name);
    else if (!strstr(tally->failed_names, ", ..."))
        snprintf(tally->failed_names + used, sizeof tally->failed_names - used, ", ...");
}

/* Whether the case is left out: a golden case the stage cannot run in the asked direction is
 * skipped; a case the user named and the stage cannot run is an error (the run says why). */
static int left_out(const Options *o, const StageImpl *impl, const Case *c, Direction dir, int explicit,
                    CheckTally *tally)
{
    if (o->direction == DIR_BWD && dir != DIR_BWD) { /* the stage has a backward pass: the case has no dO */
        if (!explicit) {
            tally->skipped++;
            return 1;
        }
        fprintf(stderr, "flashlab check: %s: no do.npy, so no backward pass to check (--direction bwd)\n", c->dir);
        tally->code = worse(tally->code, FL_BAD_INPUT);
        return 1;
    }
    char why[160] = "";
    if (explicit || c->kind->supports(impl, dir, c, why, sizeof why, NULL) == FL_OK)
        return 0;
    if (o->verbose)
        printf("%s: skipped (%s)\n", c->name, why);
    tally->skipped++;
    return 1;
}

/* Runs one loaded case and compares; explicit: the user named it (unsupported -> exit 3). */
static void check_one_case(const Options *o, const StageImpl *impl, const Case *c, int explicit, CheckTally *tally)
{
    const Direction dir = c->kind->direction(impl, c, o->direction);
    if (left_out(o, impl, c, dir, explicit, tally))
        return;
    FlError err = {{0}};
    KindRun r;
    RunCtx ctx = run_ctx(o);
    int rc = c->kind->run(impl, dir, c, &ctx, &r, &err);
    const char *label = c->kind->label(dir);
    if (rc != FL_OK) {
        tally_run_error(o, c, label, rc, &err, tally);
        kind_run_free(&r);
        return;
    }
    warn_odd_outputs(c, &r);
    if (!o->json) {
        print_case_header(c, dir, o->verbose);
        if (o->verbose)
            print_hbm_line("fwd", &r.stats.fwd, r.stats.extra_bytes_fwd);
        if (o->verbose && dir == DIR_BWD)
            print_hbm_line("bwd", &r.stats.bwd, r.stats.extra_bytes_bwd);
    }
    double max_err;
    TensorGrade grades[KIND_MAX_OUTPUTS];
    int ngrades;
    int failed = compare_run(c, &r, impl->precision, o->json ? 0 : 1 + o->verbose, &max_err, grades, &ngrades);
    const int outputs_failed = failed;
    if (o->json) {
        GradeNumbers g;
        rc = grade(o, impl, dir, c, &r.stats, &g, &err);
        failed += strcmp(g.io_check, "fail") == 0;
        json_case(c, label, failed ? "fail" : "pass", grades, ngrades, &g, rc == FL_OK ? NULL : err.msg, tally);
    } else if (is_student(impl) && !o->no_io_check) {
        IoNumbers io;
        if (io_numbers(o, impl, dir, c, &r.stats, &io, &err) != FL_OK)
            printf("    hbm: the reference did not run (%s): IO not checked\n", err.msg);
        else
            failed += io_check_fails(impl, &io, 1);
    }
    tally->io_failed += failed && !outputs_failed;
    tally_result(c, failed, tally);
    kind_run_free(&r);
}

/* A folder with no input of any kind is not a case: golden/cases may hold other folders. */
static int looks_like_case(const char *dir)
{
    const CaseKind *const *kinds = case_kinds();
    for (int i = 0; kinds[i]; i++)
        for (const char *const *f = kinds[i]->input_files; *f; f++) {
            char path[4400];
            snprintf(path, sizeof path, "%s/%s", dir, *f);
            if (strcmp(*f, "case.json") != 0 && fl_path_exists(path, NULL) > 0)
                return 1;
        }
    return 0;
}

static int check_case_dir(const Options *o, const StageImpl *impl, const char *dir, int explicit, CheckTally *tally)
{
    if (!explicit && !looks_like_case(dir)) {
        if (o->verbose)
            printf("%s: skipped (no input file of any case kind: not a case)\n", dir);
        return FL_OK;
    }
    Case c;
    FlError err = {{0}};
    int rc = case_load(dir, 1, &c, &err);
    if (rc != FL_OK) {
        fprintf(stderr, "flashlab check: %s\n", err.msg);
        tally->code = worse(tally->code, rc);
        return rc;
    }
    if (c.kind->takes(impl)) {
        check_one_case(o, impl, &c, explicit, tally);
    } else if (!explicit) { /* golden cases of another kind belong to other stages */
        if (o->verbose)
            printf("%s: skipped (%s case; stage %s runs %s cases)\n", c.name, c.kind->name, impl->stage,
                   kind_of_stage(impl)->name);
        tally->skipped++;
    } else {
        fprintf(stderr, "flashlab check: %s is a case of kind %s; stage %s (%s) runs %s cases; stage %s runs %s cases\n",
                c.dir, c.kind->name, impl->stage, impl->name, kind_of_stage(impl)->name, kind_first_stage(c.kind),
                c.kind->name);
        tally->code = worse(tally->code, FL_UNSUPPORTED);
    }
    case_free(&c);
    return FL_OK;
}

/* ---- the command ---- */

static void print_json_head(const StageImpl *impl)
{
    printf("{\"stage\": \"%s\", \"name\": \"%s\", \"variant\": \"%s\", \"device\": \"%s\", "
           "\"reference_variant\": \"%s\", \"precision\": \"%s\", \"tolerance\": {\"forward\": %g, "
           "\"gradients\": %g}, \"cases\": [",
           impl->stage, impl->name, impl->variant, device_name(impl->device), reference_impl(impl)->variant,
           impl->precision == PRECISION_BF16 ? "bf16" : "float32", check_tolerance(impl->precision, 0),
           check_tolerance(impl->precision, 1));
}

static int check_golden(const Options *o, const StageImpl *impl, CheckTally *tally)
{
    char **dirs;
    int n;
    FlError err = {{0}};
    if (list_subdirs(golden_dir(), &dirs, &n, &err) != FL_OK) {
        fprintf(stderr, "flashlab check: %s (set FLASHLAB_GOLDEN or name case folders)\n", err.msg);
        return FL_BAD_INPUT;
    }
    for (int i = 0; i < n; i++)
        check_case_dir(o, impl, dirs[i], 0, tally);
    free_names(dirs, n);
    return FL_OK;
}

static int print_summary(const Options *o, const StageImpl *impl, const CheckTally *t)
{
    char label[64];
    if (o->json)
        printf("\n  ], \"checked\": %d, \"passed\": %d, \"failed\": %d, \"skipped\": %d}\n", t->checked, t->passed,
               t->checked - t->passed, t->skipped);
    if (t->checked == 0 && t->code != FL_OK)
        return t->code;
    if (!o->json) {
        printf("stage %s (%s, %s): %d case%s checked, %d passed, %d failed", impl->stage, impl->name,
               impl_label(impl, label, sizeof label), t->checked, t->checked == 1 ? "" : "s", t->passed,
               t->checked - t->passed);
        if (t->io_failed)
            printf(" (%d of them on HBM traffic alone)", t->io_failed);
        if (t->skipped)
            printf("; %d golden case%s skipped (features, head dims or direction this run does not cover)",
                   t->skipped, t->skipped == 1 ? "" : "s");
        printf("\n");
        if (t->failed_names[0])
            printf("failed: %s\n", t->failed_names);
    }
    if (t->code == FL_OK && t->checked == 0) {
        fprintf(stderr, "flashlab check: no case was checked for stage %s%s: that is not a pass\n", impl->stage,
                o->direction == DIR_BWD ? " --direction bwd" : "");
        return FL_BAD_INPUT;
    }
    return t->code;
}

/* A student copy checked on the CPU: say plainly when its CUDA half was not (no device here, or a
 * build without CUDA), so a pass is not read as a pass of the whole exercise. */
static void note_unchecked_cuda(const Options *o, const StageImpl *impl)
{
    if (impl->device != DEVICE_CPU || strncmp(impl->variant, "student", 7) != 0 || o->json)
        return;
    const StageImpl *gpu = stage_find(impl->stage, DEVICE_CUDA, impl->variant);
    if (gpu && cuda_device_available())
        printf("note: this checked the CPU half of your copy; the CUDA half: build/flashlab check %s --variant %s "
               "--device cuda\n", impl->stage, impl->variant);
    else if (gpu)
        printf("note: the CUDA half of your copy (the .cu file) compiled but was NOT checked: there is no CUDA "
               "device here\n");
    else
        printf("note: the CUDA half of your copy (the .cu file, if the stage has one) was NOT compiled or "
               "checked: this build has no CUDA\n");
}

int cmd_check(Options *o)
{
    if (o->npositional < 1)
        return usage_error("check", "missing %s", "STAGE");
    const StageImpl *impl;
    int rc = resolve_impl(o, o->positional[0], &impl);
    if (rc != FL_OK)
        return rc;
    if (o->direction == DIR_BWD && !has_backward(impl)) {
        fprintf(stderr, "flashlab check: stage %s (%s) has no backward pass; %s\n", impl->stage, impl->name,
                no_backward_reason(impl));
        return FL_UNSUPPORTED;
    }
    CheckTally tally = {0, 0, 0, 0, FL_OK, 0, ""};
    if (o->json) { /* the grade report: one JSON object on stdout, messages still on stderr */
        o->verbose = 0;
        print_json_head(impl);
    }
    for (int i = 1; i < o->npositional; i++)
        check_case_dir(o, impl, o->positional[i], 1, &tally);
    if (o->npositional == 1 && check_golden(o, impl, &tally) != FL_OK)
        return FL_BAD_INPUT;
    rc = print_summary(o, impl, &tally);
    note_unchecked_cuda(o, impl);
    return rc;
}
