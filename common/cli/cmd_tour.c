/* cmd_tour.c — flashlab tour: every implementation in ladder order on its kind's tour case, one
 * table: what was checked, pass/FAIL, max error, HBM bytes read and written, extra memory, time and
 * GFLOP/s; then each stage's lesson, one line each. Every line fits CLI_WIDTH columns. */
#include <string.h>

#include "cli.h"
#include "timer.h"

#define TOUR_REPS 5

/* The row's first columns; 0 when a CUDA row has no device (the row then says so and ends). */
static int row_start(const StageImpl *impl)
{
    char dev[48];
    printf("%-5s  %-12s  ", impl->stage, impl_label(impl, dev, sizeof dev));
    if (impl->device == DEVICE_CUDA && !cuda_device_available()) {
        printf("skipped (no CUDA device)\n");
        return 0;
    }
    return 1;
}

/* The row's numbers: the counted run, its comparison, the forward time and (bwd) fwd + bwd time. */
typedef struct {
    KindRun r;
    int failed;
    double max_err, ms, ms_both;
} RowNumbers;

static int row_numbers(const Options *o, const StageImpl *impl, const Case *c, Direction dir, RowNumbers *n,
                       FlError *err)
{
    RunCtx ctx = run_ctx(o);
    const Timing timing = {.warmup = 1, .reps = TOUR_REPS, .queued = 0};
    memset(n, 0, sizeof *n);
    int rc = c->kind->run(impl, dir, c, &ctx, &n->r, err);
    if (rc == FL_OK)
        n->failed = compare_run(c, &n->r, impl->precision, 0, &n->max_err, NULL, NULL) != 0;
    if (rc == FL_OK)
        rc = c->kind->time(impl, DIR_FWD, c, &ctx, &timing, &n->ms, err);
    if (rc == FL_OK && dir == DIR_BWD)
        rc = c->kind->time(impl, DIR_BWD, c, &ctx, &timing, &n->ms_both, err);
    return rc;
}

/* One row: runs, checks, counts and times one implementation. Returns 1 if the row failed. */
static int tour_row(const Options *o, const StageImpl *impl, const Case *c)
{
    if (!row_start(impl))
        return 0;
    const Direction dir = c->kind->direction(impl, c, o->direction);
    char why[160] = "", r[32], w[32], e[32];
    if (c->kind->supports(impl, dir, c, why, sizeof why, NULL) != FL_OK) {
        printf("n/a: %s\n", why);
        return 0;
    }
    FlError err = {{0}};
    RowNumbers n;
    int rc = row_numbers(o, impl, c, dir, &n, &err);
    const RunStats stats = n.r.stats, *s = &stats;
    kind_run_free(&n.r);
    if (rc != FL_OK) {
        printf("FAIL  error: %s\n", err.msg);
        return 1;
    }
    char err_s[32], other_case[300] = "";
    snprintf(err_s, sizeof err_s, "%.1e", n.max_err);
    if (c->kind->marker) /* not the default kind's tour case: say which case the row ran */
        snprintf(other_case, sizeof other_case, " (%s)", c->name);
    printf("%-7s  %-4s  %-7s  %9s  %9s  %9s  %9.3f  %8.2f%s\n", c->kind->label(dir), n.failed ? "FAIL" : "pass",
           err_s, human_bytes((double)s->fwd.bytes_read, r, sizeof r), human_bytes((double)s->fwd.bytes_written, w, sizeof w),
           human_bytes((double)s->extra_bytes_fwd, e, sizeof e), n.ms, c->kind->flops(c, DIR_FWD) / (n.ms * 1e6),
           other_case);
    if (dir == DIR_BWD) /* the backward pass's own counters; time and rate of forward + backward */
        printf("%-5s  %-12s  %-7s  %-4s  %-7s  %9s  %9s  %9s  %9.3f  %8.2f\n", "", "",
               "bwd", "", "", human_bytes((double)s->bwd.bytes_read, r, sizeof r),
               human_bytes((double)s->bwd.bytes_written, w, sizeof w), human_bytes((double)s->extra_bytes_bwd, e, sizeof e),
               n.ms_both, c->kind->flops(c, DIR_BWD) / (n.ms_both * 1e6));
    return n.failed;
}

/* The tour case of every kind, loaded; cases[i] belongs to case_kinds()[i]. */
static int load_tour_cases(Case *cases, int *count)
{
    const CaseKind *const *kinds = case_kinds();
    for (*count = 0; kinds[*count]; (*count)++) {
        char dir[4096];
        FlError err = {{0}};
        snprintf(dir, sizeof dir, "%s/%s", golden_dir(), kinds[*count]->tour_case);
        if (case_load(dir, 1, &cases[*count], &err) != FL_OK) {
            fprintf(stderr, "flashlab tour: %s\n", err.msg);
            for (int i = 0; i < *count; i++)
                case_free(&cases[i]);
            return FL_BAD_INPUT;
        }
    }
    return FL_OK;
}

static void print_head(const Options *o, const Case *cases, int count)
{
    for (int i = 0; i < count; i++) {
        char sizes[256];
        cases[i].kind->describe(&cases[i], sizes, sizeof sizes);
        printf("tour case %s (%s stages): %s%s\n", cases[i].name, cases[i].kind->name, sizes,
               cases[i].kind->asks_backward(&cases[i]) ? ", with dO" : "");
    }
    printf("golden cases from %s\n", golden_dir());
    printf("HBM read/written and extra memory: forward pass (a 'bwd' line below a row: the backward pass);\n"
           "time: median of %d runs of the forward (on a 'bwd' line: forward + backward);\n"
           "SRAM M = %zu bytes for the tiled CPU stages\n\n",
           TOUR_REPS, run_ctx(o).sram_bytes);
    printf("%-5s  %-12s  %-7s  %-4s  %-7s  %9s  %9s  %9s  %9s  %8s\n", "stage", "device", "checked", "ok?",
           "max err", "HBM read", "HBM write", "extra mem", "time ms", "GFLOP/s");
}

/* Each stage's lesson once (its default implementation's), a line each, cut to CLI_WIDTH. */
static void print_lessons(const Options *o)
{
    const StageImpl *const *all = stage_registry();
    printf("\nlessons:\n");
    for (int i = 0; all[i]; i++) {
        if ((!o->device_all && all[i]->device != o->device) || (i > 0 && !strcmp(all[i - 1]->stage, all[i]->stage)))
            continue;
        const int room = CLI_WIDTH - 7;
        const int cut = (int)strlen(all[i]->lesson) > room;
        printf("%-5s  %.*s%s\n", all[i]->stage, cut ? room - 3 : room, all[i]->lesson, cut ? "..." : "");
    }
}

int cmd_tour(Options *o)
{
    if (o->npositional > 0)
        return usage_error("tour", "unexpected argument '%s'", o->positional[0]);
    if (!o->device_all && o->device == DEVICE_CUDA && !cuda_device_available()) {
        printf("no CUDA device: skipped (cuda: %s)\n", cuda_device_description());
        return FL_NO_DEVICE;
    }
    Case cases[8];
    int nkinds;
    if (load_tour_cases(cases, &nkinds) != FL_OK)
        return FL_BAD_INPUT;
    print_head(o, cases, nkinds);
    const StageImpl *const *all = stage_registry();
    int rows = 0, failed = 0, total = 0;
    for (int i = 0; all[i]; i++)
        total += o->device_all || all[i]->device == o->device;
    const double start = timer_now_ms();
    for (int i = 0; all[i]; i++) {
        if (!o->device_all && all[i]->device != o->device)
            continue;
        char what[64];
        snprintf(what, sizeof what, "stage %s %s%s%s", all[i]->stage, device_name(all[i]->device),
                 all[i]->variant[0] ? " " : "", all[i]->variant);
        progress_line(rows, total, start, what);
        fflush(stdout);
        for (int k = 0; k < nkinds; k++)
            if (cases[k].kind == kind_of_stage(all[i])) {
                progress_line(total, total, start, ""); /* the row replaces it */
                failed += tour_row(o, all[i], &cases[k]);
                rows++;
            }
        fflush(stdout);
    }
    for (int k = 0; k < nkinds; k++)
        case_free(&cases[k]);
    print_lessons(o);
    if (rows == 0) {
        fprintf(stderr, "flashlab tour: no stages in this build for this device: nothing ran\n");
        return FL_BAD_INPUT;
    }
    printf("\ncuda device: %s\n", cuda_device_available() ? cuda_device_description() : "none");
    printf("%d row%s, %d failed\n", rows, rows == 1 ? "" : "s", failed);
    return failed ? FL_CHECK_FAILED : FL_OK;
}
