/* cmd_bench.c — flashlab bench: time and counters over sizes and stages, on seeded cases each
 * kind makes (kind.h bench_case); a table, or JSON for scripts and notebooks. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "timer.h"

enum { MAX_RANKS = 64 }; /* --ranks is at most 64 */

typedef struct {
    const StageImpl *impl;
    Direction dir;
    double ms, flops;
    uint64_t read, written;         /* HBM bytes of what was timed (forward + backward for bwd) */
    uint64_t read_bwd, written_bwd; /* of the backward pass alone (bwd rows) */
    size_t extra;                   /* the larger of the passes' extra memory */
    int ranks;                      /* stage 13: the ranks that ran (1 for every other stage) */
    uint64_t link_sent;             /* stage 13: bytes all ranks sent over the ring (both passes) */
    const char *error;
} BenchRow;

static void print_json_row(const BenchRow *row, const Case *c, int first)
{
    const StageImpl *impl = row->impl;
    printf("%s\n  {\"stage\": \"%s\", \"name\": \"%s\", \"variant\": \"%s\", \"device\": \"%s\", \"direction\": \"%s\", ",
           first ? "" : ",", impl->stage, impl->name, impl->variant, device_name(impl->device),
           row->dir == DIR_BWD ? "bwd" : "fwd");
    if (c->kind)
        c->kind->describe_json(c, stdout);
    printf("\"flops\": %.0f, ", row->flops);
    if (row->error) {
        printf("\"error\": ");
        json_string(row->error);
        printf("}");
        return;
    }
    printf("\"time_ms\": %.6g, \"gflops_per_s\": %.6g, \"hbm_read_bytes\": %llu, \"hbm_written_bytes\": %llu, "
           "\"hbm_read_bytes_bwd_pass\": %llu, \"hbm_written_bytes_bwd_pass\": %llu, \"extra_bytes\": %zu, "
           "\"ranks\": %d, \"link_sent_bytes\": %llu, \"error\": null}",
           row->ms, row->flops / (row->ms * 1e6), (unsigned long long)row->read, (unsigned long long)row->written,
           (unsigned long long)row->read_bwd, (unsigned long long)row->written_bwd, row->extra,
           row->ranks > 0 ? row->ranks : 1, (unsigned long long)row->link_sent);
}

static void print_text_row(const BenchRow *row, const Case *c)
{
    progress_line(1, 1, 0.0, ""); /* the row replaces the progress line */
    char dev[48], sizes[96] = "", r[32], w[32], e[32];
    if (c->kind)
        c->kind->columns(c, sizes, sizeof sizes);
    printf("%-5s  %-12s  %-7s  %s  ", row->impl->stage, impl_label(row->impl, dev, sizeof dev),
           c->kind ? c->kind->label(row->dir) : "-", sizes);
    if (row->error) {
        printf("%s\n", row->error);
        return;
    }
    double rate = row->flops / (row->ms * 1e6);
    if (row->impl->device == DEVICE_CUDA)
        rate /= 1000.0;
    printf("%10.3f  %9.2f  %9s  %9s  %9s\n", row->ms, rate, human_bytes((double)row->read, r, sizeof r),
           human_bytes((double)row->written, w, sizeof w), human_bytes((double)row->extra, e, sizeof e));
}

static void print_header(const Options *o)
{
    if (o->json) {
        printf("[");
        return;
    }
    printf("%-5s  %-12s  %-7s  %3s  %3s  %3s  %6s  %6s  %4s  %10s  %9s  %9s  %9s  %9s\n", "stage", "device", "dir", "B",
           "Hq", "Hkv", "Tq", "Tk", "d", "time ms", o->device == DEVICE_CUDA ? "TFLOP/s" : "GFLOP/s", "HBM read",
           "HBM write", "extra mem");
}

/* The counted run (with stage 13's per-rank counters) and the timed runs of row on c. */
static int measure(const Options *o, const Case *c, BenchRow *row, FlError *err)
{
    RunCtx ctx = run_ctx(o);
    RankCounter ranks[MAX_RANKS];
    memset(ranks, 0, sizeof ranks);
    ctx.rank_counters = ctx.ranks > 0 ? ranks : NULL;
    KindRun r;
    int rc = c->kind->run(row->impl, row->dir, c, &ctx, &r, err);
    const RunStats s = r.stats;
    kind_run_free(&r);
    for (int i = 0; i < ctx.ranks && i < MAX_RANKS; i++)
        row->link_sent += ranks[i].link_sent;
    row->ranks = ranks[0].hbm.bytes_read > 0 ? ctx.ranks : 1; /* the stage counted per rank: a ring */
    ctx.rank_counters = NULL;
    const Timing timing = {.warmup = 1, .reps = o->reps, .queued = o->queued};
    if (rc == FL_OK)
        rc = c->kind->time(row->impl, row->dir, c, &ctx, &timing, &row->ms, err);
    if (rc != FL_OK)
        return rc;
    row->read = s.fwd.bytes_read + s.bwd.bytes_read; /* a bwd row counts what it times: fwd + bwd */
    row->written = s.fwd.bytes_written + s.bwd.bytes_written;
    row->extra = s.extra_bytes_fwd > s.extra_bytes_bwd ? s.extra_bytes_fwd : s.extra_bytes_bwd;
    row->read_bwd = s.bwd.bytes_read, row->written_bwd = s.bwd.bytes_written;
    return FL_OK;
}

/* One row: a seeded case of the stage's kind, counted and timed, printed. The row's status. */
static int bench_one(const Options *o, const StageImpl *impl, int T, int d, int first)
{
    BenchRow row;
    memset(&row, 0, sizeof row);
    row.impl = impl, row.dir = o->direction == DIR_BWD ? DIR_BWD : DIR_FWD;
    FlError err = {{0}};
    Case c;
    int rc = kind_of_stage(impl)->bench_case(&o->shape, impl, T, d, row.dir, &c, &err);
    if (rc == FL_OK) {
        row.flops = c.kind->flops(&c, row.dir);
        rc = measure(o, &c, &row, &err);
    }
    if (rc != FL_OK)
        row.error = err.msg;
    if (o->json)
        print_json_row(&row, &c, first);
    else
        print_text_row(&row, &c);
    fflush(stdout);
    case_free(&c);
    return rc;
}

/* The implementations to bench: every one of the default kind on the device, or those of the
 * --stages list (stages of another kind, such as 09, only when named). */
static int bench_select(const Options *o, const StageImpl **chosen, int *count)
{
    const StageImpl *const *all = stage_registry();
    *count = 0;
    char buf[512];
    if (o->stages && strlen(o->stages) >= sizeof buf)
        return usage_error("bench", "--stages list too long: '%s'", o->stages);
    snprintf(buf, sizeof buf, "%s", o->stages ? o->stages : "");
    char *save = NULL;
    char *tok = o->stages ? strtok_r(buf, ",", &save) : NULL;
    do {
        const StageImpl *want = tok ? stage_find(tok, o->device, NULL) : NULL;
        if (tok && !want) {
            fprintf(stderr, "flashlab bench: no stage '%s' on %s in this build (try 'flashlab list')\n", tok,
                    device_name(o->device));
            return FL_BAD_INPUT;
        }
        for (int i = 0; all[i] && *count < 128; i++)
            if (all[i]->device == o->device &&
                (want ? !strcmp(all[i]->stage, want->stage) : !kind_of_stage(all[i])->marker) &&
                (!o->variant || !strcmp(all[i]->variant, o->variant)))
                chosen[(*count)++] = all[i];
    } while (tok && (tok = strtok_r(NULL, ",", &save)) != NULL);
    return FL_OK;
}

/* The device's default sizes where the options left them out. */
static int default_sizes(Options *o)
{
    const int cuda = o->device == DEVICE_CUDA;
    static const int cpu_T[] = {512, 1024, 2048, 4096}, cuda_T[] = {1024, 4096, 16384}, cuda_d[] = {64, 128};
    if (o->T.count == 0)
        for (int i = 0; i < (cuda ? 3 : 4); i++)
            o->T.values[o->T.count++] = cuda ? cuda_T[i] : cpu_T[i];
    if (o->d.count == 0)
        for (int i = 0; i < (cuda ? 2 : 1); i++)
            o->d.values[o->d.count++] = cuda_d[i];
    BenchShape *s = &o->shape;
    if (s->B == 0)
        s->B = cuda ? 4 : 1;
    if (s->H == 0)
        s->H = cuda ? 16 : 8;
    if (o->reps == 0)
        o->reps = cuda ? 20 : 3;
    if (s->Hkv > 0 && s->H % s->Hkv != 0) {
        char h[32];
        snprintf(h, sizeof h, "%d", s->H);
        return usage_error("bench", "--H %s is not a multiple of --Hkv", h);
    }
    return FL_OK;
}

int cmd_bench(Options *o)
{
    if (o->npositional > 0)
        return usage_error("bench", "unexpected argument '%s'", o->positional[0]);
    if (o->queued && o->device != DEVICE_CUDA)
        return usage_error("bench", "%s times CUDA runs: it needs --device cuda", "--queued");
    if (o->device == DEVICE_CUDA && !cuda_device_available()) {
        printf("no CUDA device: skipped (cuda: %s)\n", cuda_device_description());
        return FL_NO_DEVICE;
    }
    const StageImpl *chosen[128];
    int n, rc = default_sizes(o);
    if (rc == FL_OK)
        rc = bench_select(o, chosen, &n);
    if (rc != FL_OK)
        return rc;
    if (n == 0) {
        fprintf(stderr, "flashlab bench: no %s stages in this build\n", device_name(o->device));
        return FL_BAD_INPUT;
    }
    int rows = 0, errors = 0, refused = 0, total = 0;
    for (int s = 0; s < n; s++)
        total += o->direction == DIR_BWD && !has_backward(chosen[s]) ? 0 : o->T.count * o->d.count;
    const double start = timer_now_ms();
    for (int s = 0; s < n; s++) {
        if (o->direction == DIR_BWD && !has_backward(chosen[s]))
            continue; /* forward-only stage: nothing to time backward */
        for (int ti = 0; ti < o->T.count; ti++)
            for (int di = 0; di < o->d.count; di++) {
                char what[96];
                snprintf(what, sizeof what, "stage %s%s%s, T = %d, d = %d", chosen[s]->stage,
                         chosen[s]->variant[0] ? " " : "", chosen[s]->variant, o->T.values[ti], o->d.values[di]);
                if (rows == 0)
                    print_header(o);
                fflush(stdout);
                if (!o->json)
                    progress_line(rows, total, start, what);
                const int status = bench_one(o, chosen[s], o->T.values[ti], o->d.values[di], rows == 0);
                errors += status != FL_OK && status != FL_UNSUPPORTED;
                refused += status == FL_UNSUPPORTED;
                rows++;
            }
    }
    if (!o->json)
        progress_line(total, total, start, "");
    if (o->json && rows > 0)
        printf("\n]\n");
    if (rows == 0) {
        fprintf(stderr, "flashlab bench: nothing to run (no selected stage has a backward pass)\n");
        return FL_BAD_INPUT;
    }
    if (errors)
        return FL_CHECK_FAILED;
    if (refused == rows) { /* some rows may be refused in a sweep; when all are, nothing was measured */
        fprintf(stderr, "flashlab bench: no row ran: the selected stages lack what every row asks for "
                        "(each row says why)\n");
        return FL_UNSUPPORTED;
    }
    return FL_OK;
}
