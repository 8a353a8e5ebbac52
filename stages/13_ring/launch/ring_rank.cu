/* stages/13_ring/launch/ring_rank.cu — flashlab_ring_rank: stage 13's ring on GPUs with one process
 * per GPU (launch mode B), the way it runs across hosts. Each process is one rank:
 *
 *   flashlab_ring_rank --rank R --ranks P --id-file PATH [--device N] [--timeout S] [--direction fwd|bwd]
 *                      (CASE_DIR... | [--B N] [--H N] [--Hkv N] (--T N | --Tq N --Tk N) [--d N] [--dv N]
 *                       [--causal] [--seed N] [--reps N] [--warmup N])
 *   flashlab_ring_rank --count-gpus
 *
 * Meeting. NCCL's ranks find each other through a unique id that one of them makes. Rank 0 makes
 * it (ncclGetUniqueId) and writes its 128 bytes to PATH, first to a name of its own beside it and
 * then renamed onto PATH, so that nobody ever reads half of it; the other ranks wait until PATH
 * appears (checking every 50 ms, for --timeout seconds, default 120). PATH must be somewhere every
 * rank can read (one host: /tmp; several: a shared file system), and fresh for each run: rank 0
 * removes it once every rank has joined (ncclCommInitRank returns on rank 0 only then).
 *
 * Each rank uses GPU --device, by default R modulo the GPUs its host shows (one host with P GPUs:
 * rank R on GPU R; hosts of k GPUs: ranks hk .. hk + k - 1 on host h).
 *
 * With case folders (golden or user cases), every rank loads each case, takes its own share of
 * the inputs (split.h), runs the stage's forward (--direction bwd: forward and backward, on the
 * cases with do.npy) and compares its share of o, lse (and dq, dk, dv) with the expected files:
 * exit 1 on a mismatch. Every rank skips the same cases (features stage 13 lacks), so the ranks stay
 * in step: each run is a collective of all of them.
 *
 * Without case folders, every rank makes its own share of a seeded problem directly on its GPU
 * (element (b, h, i, c) of q, k, v, dO is a hash of the seed, the tensor and that index, so every P
 * sees the same problem and no rank ever holds more than its share; T can exceed what one GPU
 * holds). It runs once with the counters on, then --warmup and --reps timed runs (CUDA events; fwd:
 * the forward; bwd: forward + backward, as `flashlab bench` times them), then the same transfers
 * alone (NCCL only, --reps times), and prints one JSON line:
 *   rank, ranks, device, the sizes, direction, ms (median), compute_ms (median time its compute
 *   stream ran kernels), link_ms (median time of its transfers alone), hidden (the share of the link
 *   time that the ring hid behind compute: (compute_ms + link_ms - ms) / link_ms, clamped to
 *   [0, 1]; null with one rank), hbm_read_bytes, hbm_written_bytes, link_sent_bytes,
 *   link_received_bytes (the counted run), tflops (the whole problem's FLOPs over ms).
 *
 * Exit: 0 ok; 1 a case failed its check; 2 bad usage, a bad case, or a failed NCCL/CUDA call;
 * 77 no GPU for this rank.
 *
 * Two ranks on one host (README.md, "Two launch modes"):
 *   id=$(mktemp -d)/nccl_id
 *   build/flashlab_ring_rank --rank 0 --ranks 2 --id-file $id --T 65536 --causal & \
 *   build/flashlab_ring_rank --rank 1 --ranks 2 --id-file $id --T 65536 --causal & wait */
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attn.h"
#include "case.h"
#include "kind.h"
#include "check.h"
#include "cuda_util.h"
#include "error.h"
#include "runner.h"
#include "split.h"
#include "tensor.h"
#include "timer.h"

namespace {

struct Options {
    int rank = -1, ranks = 0, device = -1, count_gpus = 0;
    const char *id_file = nullptr;
    double timeout_s = 120.0;
    Direction dir = DIR_FWD;
    int B = 1, Hq = 8, Hkv = 0, Tq = 0, Tk = 0, d = 64, dv = 0, causal = 0, reps = 10, warmup = 2;
    unsigned long long seed = 1;
    const char **cases = nullptr;
    int ncases = 0;
};

const char *const kUsage =
    "usage: flashlab_ring_rank --rank R --ranks P --id-file PATH [--device N] [--timeout S]\n"
    "                          [--direction fwd|bwd]\n"
    "                          (CASE_DIR... | [--B N] [--H N] [--Hkv N] (--T N | --Tq N --Tk N) [--d N]\n"
    "                           [--dv N] [--causal] [--seed N] [--reps N] [--warmup N])\n"
    "       flashlab_ring_rank --count-gpus\n"
    "One rank of stage 13's ring per process (launch mode B): rank 0 writes the NCCL id to PATH, the\n"
    "others wait for it. With case folders each rank checks its share of the outputs; without, each\n"
    "makes its share of a seeded problem on its GPU, times it and prints one JSON line.\n";

int worse(int a, int b)
{
    static const int order[] = {FL_OK, FL_CHECK_FAILED, FL_NO_DEVICE, FL_UNSUPPORTED, FL_BAD_INPUT};
    int ra = 0, rb = 0;
    for (int i = 0; i < 5; i++)
        ra = order[i] == a ? i : ra, rb = order[i] == b ? i : rb;
    return ra >= rb ? a : b;
}

int parse_number(const char *name, const char *value, long long lo, long long hi, long long *out)
{
    char *end = nullptr;
    errno = 0;
    const long long x = value ? strtoll(value, &end, 10) : 0;
    if (!value || errno || end == value || *end || x < lo || x > hi) {
        fprintf(stderr, "flashlab_ring_rank: %s needs a whole number in [%lld, %lld], got '%s'\n", name, lo, hi,
                value ? value : "");
        return FL_BAD_INPUT;
    }
    *out = x;
    return FL_OK;
}

int parse(int argc, char **argv, Options *o)
{
    o->cases = (const char **)calloc((size_t)argc, sizeof(char *));
    if (!o->cases)
        return FL_BAD_INPUT;
    struct Int {
        const char *name;
        int *slot;
        long long lo, hi;
    };
    const Int ints[] = {{"--rank", &o->rank, 0, 1 << 20},   {"--ranks", &o->ranks, 1, 1 << 20},
                        {"--device", &o->device, 0, 1024},  {"--B", &o->B, 1, 1 << 20},
                        {"--H", &o->Hq, 1, 1 << 16},        {"--Hkv", &o->Hkv, 1, 1 << 16},
                        {"--Tq", &o->Tq, 1, 1 << 30},       {"--Tk", &o->Tk, 1, 1 << 30},
                        {"--d", &o->d, 1, 128},             {"--dv", &o->dv, 1, 128},
                        {"--reps", &o->reps, 1, 100000},    {"--warmup", &o->warmup, 0, 100000}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *value = i + 1 < argc ? argv[i + 1] : nullptr;
        long long x = 0;
        int known = 0, rc = FL_OK;
        for (const Int &n : ints)
            if (!strcmp(a, n.name)) {
                known = 1, i++;
                rc = parse_number(a, value, n.lo, n.hi, &x);
                *n.slot = (int)x;
            }
        if (known) {
            if (rc != FL_OK)
                return rc;
        } else if (!strcmp(a, "--T")) {
            i++;
            if (parse_number(a, value, 1, 1 << 30, &x) != FL_OK)
                return FL_BAD_INPUT;
            o->Tq = o->Tk = (int)x;
        } else if (!strcmp(a, "--seed")) {
            i++;
            if (parse_number(a, value, 0, INT64_MAX, &x) != FL_OK)
                return FL_BAD_INPUT;
            o->seed = (unsigned long long)x;
        } else if (!strcmp(a, "--timeout")) {
            i++;
            if (parse_number(a, value, 1, 86400, &x) != FL_OK)
                return FL_BAD_INPUT;
            o->timeout_s = (double)x;
        } else if (!strcmp(a, "--id-file") && value) {
            o->id_file = value, i++;
        } else if (!strcmp(a, "--direction") && value && (!strcmp(value, "fwd") || !strcmp(value, "bwd"))) {
            o->dir = !strcmp(value, "bwd") ? DIR_BWD : DIR_FWD, i++;
        } else if (!strcmp(a, "--causal")) {
            o->causal = 1;
        } else if (!strcmp(a, "--count-gpus")) {
            o->count_gpus = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(kUsage, stdout);
            exit(0);
        } else if (a[0] == '-') {
            fprintf(stderr, "flashlab_ring_rank: unknown option or missing value: %s\n%s", a, kUsage);
            return FL_BAD_INPUT;
        } else {
            o->cases[o->ncases++] = a;
        }
    }
    if (o->count_gpus)
        return FL_OK;
    if (o->rank < 0 || o->ranks < 1 || !o->id_file || o->rank >= o->ranks) {
        fprintf(stderr, "flashlab_ring_rank: needs --rank R --ranks P --id-file PATH with 0 <= R < P\n%s", kUsage);
        return FL_BAD_INPUT;
    }
    if (o->ncases == 0 && o->Tq <= 0) {
        fprintf(stderr, "flashlab_ring_rank: name case folders, or a problem size (--T N, or --Tq N --Tk N)\n");
        return FL_BAD_INPUT;
    }
    if (o->Tk <= 0)
        o->Tk = o->Tq;
    if (o->Hkv <= 0)
        o->Hkv = o->Hq;
    if (o->dv <= 0)
        o->dv = o->d;
    if (o->Hq % o->Hkv != 0) {
        fprintf(stderr, "flashlab_ring_rank: --H %d is not a multiple of --Hkv %d\n", o->Hq, o->Hkv);
        return FL_BAD_INPUT;
    }
    return FL_OK;
}

// ---- meeting: the NCCL id through a file ---------------------------------------------------------

int nccl_status(ncclResult_t status, const char *what, FlError *err)
{
    if (status == ncclSuccess)
        return FL_OK;
    return fl_fail(err, FL_BAD_INPUT, "NCCL error in %s: %s", what, ncclGetErrorString(status));
}

// Rank 0: the id into `path`, whole or not at all (a private name, then a rename onto path).
int write_id(const char *path, const ncclUniqueId *id, FlError *err)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return fl_fail(err, FL_BAD_INPUT, "rank 0: cannot write %s (%s)", tmp, strerror(errno));
    int ok = fwrite(id, sizeof *id, 1, f) == 1;
    ok &= fclose(f) == 0;
    if (ok && rename(tmp, path) == 0)
        return FL_OK;
    const int e = errno;
    unlink(tmp);
    return fl_fail(err, FL_BAD_INPUT, "rank 0: cannot write the NCCL id to %s (%s)", path, strerror(e));
}

// The other ranks: wait for the file, then read it.
int read_id(const char *path, int rank, double timeout_s, ncclUniqueId *id, FlError *err)
{
    const double deadline = timer_now_ms() + 1000.0 * timeout_s;
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            const size_t n = fread(id, 1, sizeof *id, f);
            fclose(f);
            if (n == sizeof *id)
                return FL_OK;
            return fl_fail(err, FL_BAD_INPUT, "rank %d: %s holds %zu bytes, not an NCCL id (%zu)", rank, path, n,
                           sizeof *id);
        }
        if (timer_now_ms() > deadline)
            return fl_fail(err, FL_BAD_INPUT,
                           "rank %d: no NCCL id in %s after %.0f s: is rank 0 running, with the same --id-file?",
                           rank, path, timeout_s);
        const struct timespec pause = {0, 50 * 1000 * 1000};
        nanosleep(&pause, nullptr);
    }
}

int open_comm(const Options &o, ncclComm_t *comm, FlError *err)
{
    ncclUniqueId id;
    int rc = FL_OK;
    if (o.rank == 0) {
        rc = nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId", err);
        if (rc == FL_OK)
            rc = write_id(o.id_file, &id, err);
    } else {
        rc = read_id(o.id_file, o.rank, o.timeout_s, &id, err);
    }
    if (rc == FL_OK)
        rc = nccl_status(ncclCommInitRank(comm, o.ranks, id, o.rank), "ncclCommInitRank", err);
    if (rc == FL_OK && o.rank == 0)
        unlink(o.id_file); // every rank has joined, so every rank has read it
    return rc;
}

// ---- a rank's share on its GPU ---------------------------------------------------------------------

// Device memory of one run: the share of the inputs and outputs, the workspace, a counter.
struct Share {
    AttnProblem p; // global sizes; pointers to this rank's share (device)
    AttnTensors t;
    void *workspace;
    unsigned long long *hbm;
};

void share_free(Share *s)
{
    cudaFree((void *)s->p.q);
    cudaFree((void *)s->p.k);
    cudaFree((void *)s->p.v);
    cudaFree((void *)s->p.dout);
    cudaFree(s->t.o);
    cudaFree(s->t.lse);
    cudaFree(s->t.dq);
    cudaFree(s->t.dk);
    cudaFree(s->t.dv);
    cudaFree(s->workspace);
    cudaFree(s->hbm);
    memset(s, 0, sizeof *s);
}

int alloc_poisoned(float **x, size_t n, const char *what, FlError *err)
{
    int rc = fl_cuda_alloc_floats(x, n, what, err);
    if (rc == FL_OK && *x)
        rc = fl_cuda_status(cudaMemset(*x, 0xFF, n * sizeof(float)), what, err);
    return rc;
}

// Outputs (NaN-poisoned), workspace and counter for problem `sizes` (the inputs are set by the
// caller). With bwd: dO's share is expected too, and the gradients are allocated.
int share_alloc(const StageImpl *impl, const AttnProblem &sizes, int P, int r, bool bwd, Share *s, FlError *err)
{
    s->p = sizes;
    const RankRows x = rank_rows(sizes.Tq, sizes.Tk, P, r);
    const size_t GQ = (size_t)sizes.B * sizes.Hq, G = (size_t)sizes.B * sizes.Hkv;
    const size_t Q = rows_of(x.q) * GQ, K = rows_of(x.k) * G;
    int rc = alloc_poisoned(&s->t.o, Q * sizes.dv, "o", err);
    if (rc == FL_OK)
        rc = alloc_poisoned(&s->t.lse, Q, "lse", err);
    if (rc == FL_OK && bwd)
        rc = alloc_poisoned(&s->t.dq, Q * sizes.d, "dq", err);
    if (rc == FL_OK && bwd)
        rc = alloc_poisoned(&s->t.dk, K * sizes.d, "dk", err);
    if (rc == FL_OK && bwd)
        rc = alloc_poisoned(&s->t.dv, K * sizes.dv, "dv", err);
    RunCtx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.ranks = P;
    size_t bytes = impl->workspace_bytes ? impl->workspace_bytes(&s->p, &ctx, DIR_FWD) : 0;
    const size_t bwd_bytes = bwd && impl->workspace_bytes ? impl->workspace_bytes(&s->p, &ctx, DIR_BWD) : 0;
    bytes = bwd_bytes > bytes ? bwd_bytes : bytes;
    if (rc == FL_OK)
        rc = fl_cuda_alloc_bytes(&s->workspace, bytes, "the ring's workspace", err);
    if (rc == FL_OK)
        rc = fl_cuda_alloc_bytes((void **)&s->hbm, 2 * sizeof(unsigned long long), "the HBM counter", err);
    return rc;
}

// One pass (fwd: the forward; bwd: forward then backward) of this rank, synchronised.
int run_pass(const StageImpl *impl, Share *s, const Options &o, ncclComm_t comm, bool counted,
             RankCounter *counters, FlError *err)
{
    RunCtx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.ranks = o.ranks, ctx.rank = o.rank, ctx.comm = comm;
    ctx.workspace = s->workspace;
    ctx.rank_counters = counters;
    ctx.hbm_dev = counted ? s->hbm : nullptr;
    int rc = FL_OK;
    if (counted)
        rc = fl_cuda_status(cudaMemset(s->hbm, 0, 2 * sizeof(unsigned long long)), "zeroing the counter", err);
    if (rc == FL_OK)
        rc = impl->forward(&s->p, &s->t, &ctx, err);
    if (rc == FL_OK && o.dir == DIR_BWD)
        rc = impl->backward(&s->p, &s->t, &ctx, err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaDeviceSynchronize(), "the ring", err);
    return rc;
}

// ---- case folders ---------------------------------------------------------------------------------

// This rank's share of a whole host tensor (heads, rows, width) cut by `chunks`, into share (host).
void cut(const float *whole, const Rows chunks[2], size_t heads, size_t rows, size_t width, float *share)
{
    for (int w = 0; w < 2; w++) {
        const size_t n = chunks[w].hi - chunks[w].lo;
        float *part = share + share_offset(chunks, w, heads, width);
        for (size_t h = 0; h < heads; h++)
            memcpy(part + h * n * width, whole + (h * rows + chunks[w].lo) * width, n * width * sizeof(float));
    }
}

// A host copy of this rank's share of a whole tensor, uploaded to the device.
int upload_share(const float *whole, const Rows chunks[2], size_t heads, size_t rows, size_t width,
                 const float **dev, const char *what, FlError *err)
{
    *dev = nullptr;
    if (!whole)
        return FL_OK;
    const size_t n = share_numel(chunks, heads, width);
    float *host = (float *)malloc(n * sizeof(float) + 1);
    if (!host)
        return fl_fail(err, FL_BAD_INPUT, "out of host memory for the share of %s", what);
    cut(whole, chunks, heads, rows, width, host);
    float *x = nullptr;
    const int rc = fl_cuda_upload_floats(&x, host, n, what, err);
    free(host);
    *dev = x;
    return rc;
}

// Compares this rank's share of one output with the same share of the expected tensor, chunk by
// chunk (indices in the printout are (b, h, row within the chunk, column)). Returns failed chunks.
int compare_share(const char *name, const float *dev, const float *expected, const Rows chunks[2], int B, int H,
                  size_t rows, size_t width, double tol, int rank)
{
    const size_t heads = (size_t)B * H, n = share_numel(chunks, heads, width);
    float *got = (float *)malloc(n * sizeof(float) + 1), *want = (float *)malloc(n * sizeof(float) + 1);
    int failed = 0;
    if (!got || !want || cudaMemcpy(got, dev, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
        fprintf(stderr, "rank %d: cannot read back %s\n", rank, name);
        failed = 1;
    } else {
        cut(expected, chunks, heads, rows, width, want);
        for (int w = 0; w < 2; w++) {
            const size_t at = share_offset(chunks, w, heads, width);
            Tensor g, e;
            g.ndim = e.ndim = width == 1 ? 3 : 4;
            g.shape[0] = e.shape[0] = B, g.shape[1] = e.shape[1] = H;
            g.shape[2] = e.shape[2] = (int64_t)(chunks[w].hi - chunks[w].lo);
            g.shape[3] = e.shape[3] = (int64_t)width;
            g.data = got + at, e.data = want + at;
            if (g.shape[2] == 0)
                continue;
            CheckResult r;
            check_tensor(&g, &e, tol, tol, &r);
            char label[96];
            snprintf(label, sizeof label, "rank %d %s rows [%zu, %zu)", rank, name, chunks[w].lo, chunks[w].hi);
            check_print(stdout, label, &g, &r, 2);
            failed += r.mismatches != 0;
        }
    }
    free(got);
    free(want);
    return failed;
}

// One case on this rank: its share up, the ring, its share of the outputs checked.
int run_case(const StageImpl *impl, const Options &o, ncclComm_t comm, const Case &c, FlError *err)
{
    const AttnProblem &w = c.problem;
    const bool bwd = o.dir == DIR_BWD;
    const RankRows x = rank_rows(w.Tq, w.Tk, o.ranks, o.rank);
    const size_t GQ = (size_t)w.B * w.Hq, G = (size_t)w.B * w.Hkv;
    Share s;
    memset(&s, 0, sizeof s);
    int rc = share_alloc(impl, w, o.ranks, o.rank, bwd, &s, err);
    s.p.sinks = nullptr, s.p.block_table = s.p.seq_lens = nullptr;
    s.p.q_bf16 = s.p.k_bf16 = s.p.v_bf16 = s.p.dout_bf16 = nullptr;
    s.p.q = s.p.k = s.p.v = s.p.dout = nullptr;
    if (rc == FL_OK)
        rc = upload_share(w.q, x.q, GQ, (size_t)w.Tq, (size_t)w.d, &s.p.q, "q", err);
    if (rc == FL_OK)
        rc = upload_share(w.k, x.k, G, (size_t)w.Tk, (size_t)w.d, &s.p.k, "k", err);
    if (rc == FL_OK)
        rc = upload_share(w.v, x.k, G, (size_t)w.Tk, (size_t)w.dv, &s.p.v, "v", err);
    if (rc == FL_OK && bwd)
        rc = upload_share(w.dout, x.q, GQ, (size_t)w.Tq, (size_t)w.dv, &s.p.dout, "dO", err);
    if (rc == FL_OK)
        rc = run_pass(impl, &s, o, comm, false, nullptr, err);
    if (rc == FL_OK) {
        printf("rank %d: %s (%s): B=%d Hq=%d Hkv=%d Tq=%d Tk=%d d=%d dv=%d%s\n", o.rank, c.name,
               bwd ? "fwd+bwd" : "fwd", w.B, w.Hq, w.Hkv, w.Tq, w.Tk, w.d, w.dv, w.causal ? " causal" : "");
        int failed = 0;
        failed += compare_share("o", s.t.o, c.expected[OUT_O].data, x.q, w.B, w.Hq, (size_t)w.Tq, (size_t)w.dv,
                                CHECK_TOL_FWD, o.rank);
        failed += compare_share("lse", s.t.lse, c.expected[OUT_LSE].data, x.q, w.B, w.Hq, (size_t)w.Tq, 1,
                                CHECK_TOL_FWD, o.rank);
        if (bwd) {
            failed += compare_share("dq", s.t.dq, c.expected[OUT_DQ].data, x.q, w.B, w.Hq, (size_t)w.Tq,
                                    (size_t)w.d, CHECK_TOL_BWD, o.rank);
            failed += compare_share("dk", s.t.dk, c.expected[OUT_DK].data, x.k, w.B, w.Hkv, (size_t)w.Tk,
                                    (size_t)w.d, CHECK_TOL_BWD, o.rank);
            failed += compare_share("dv", s.t.dv, c.expected[OUT_DV].data, x.k, w.B, w.Hkv, (size_t)w.Tk,
                                    (size_t)w.dv, CHECK_TOL_BWD, o.rank);
        }
        rc = failed ? FL_CHECK_FAILED : FL_OK;
    }
    share_free(&s);
    return rc;
}

int run_cases(const StageImpl *impl, const Options &o, ncclComm_t comm)
{
    int code = FL_OK, checked = 0, passed = 0, skipped = 0;
    for (int i = 0; i < o.ncases; i++) {
        Case c;
        FlError err = {{0}};
        if (case_load(o.cases[i], 1, &c, &err) != FL_OK) {
            fprintf(stderr, "flashlab_ring_rank: rank %d: %s\n", o.rank, err.msg);
            code = worse(code, FL_BAD_INPUT);
            continue;
        }
        const bool wrong_kind = c.kind != &kind_attention || (o.dir == DIR_BWD && !c.problem.dout) || !c.expected[OUT_O].data;
        if (wrong_kind || runner_missing_features(impl, o.dir, &c.problem)) {
            skipped++;
        } else {
            const int rc = run_case(impl, o, comm, c, &err);
            if (rc != FL_OK && rc != FL_CHECK_FAILED)
                fprintf(stderr, "flashlab_ring_rank: rank %d: %s: %s\n", o.rank, c.dir, err.msg);
            checked++;
            passed += rc == FL_OK;
            code = worse(code, rc);
        }
        case_free(&c);
    }
    printf("rank %d of %d: %d case%s checked, %d passed, %d failed; %d skipped (features or direction)\n", o.rank,
           o.ranks, checked, checked == 1 ? "" : "s", passed, checked - passed, skipped);
    if (checked == 0 && code == FL_OK) {
        fprintf(stderr, "flashlab_ring_rank: rank %d: no case was checked: that is not a pass\n", o.rank);
        return FL_BAD_INPUT;
    }
    return code;
}

// ---- a seeded problem, made on the GPU --------------------------------------------------------------

// A hash of (seed, tensor, index) to a float in [-1, 1): the same on every rank and for every P.
__device__ float seeded_value(unsigned long long seed, unsigned tensor, unsigned long long index)
{
    unsigned long long z = seed * 0x9E3779B97F4A7C15ull + ((unsigned long long)tensor << 56) + index;
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// This rank's share of a (heads, rows, width) tensor: element (w, h, i, c) of the share is element
// (h, lo_w + i, c) of the whole tensor.
__global__ void seeded_share_kernel(float *share, Rows c0, Rows c1, unsigned long long heads,
                                    unsigned long long rows, unsigned long long width, unsigned long long seed,
                                    unsigned tensor)
{
    const unsigned long long n0 = (c0.hi - c0.lo) * heads * width, n1 = (c1.hi - c1.lo) * heads * width;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n0 + n1; i += stride) {
        const bool first = i < n0;
        const Rows c = first ? c0 : c1;
        const unsigned long long j = first ? i : i - n0, n = c.hi - c.lo;
        const unsigned long long col = j % width, row = j / width % n, h = j / width / n;
        share[i] = seeded_value(seed, tensor, (h * rows + c.lo + row) * width + col);
    }
}

int seeded_share(const Rows chunks[2], size_t heads, size_t rows, size_t width, unsigned long long seed,
                 unsigned tensor, const float **dev, const char *what, FlError *err)
{
    float *x = nullptr;
    const size_t n = share_numel(chunks, heads, width);
    int rc = fl_cuda_alloc_floats(&x, n, what, err);
    *dev = x;
    if (rc != FL_OK || n == 0)
        return rc;
    const size_t blocks = (n + 255) / 256;
    seeded_share_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256>>>(x, chunks[0], chunks[1], heads, rows,
                                                                            width, seed, tensor);
    return fl_cuda_launch_status("seeded_share_kernel", err);
}

// A barrier over the ranks: a one-float all-reduce, waited for.
int barrier(ncclComm_t comm, float *scratch, cudaStream_t stream, FlError *err)
{
    int rc = nccl_status(ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, comm, stream), "ncclAllReduce", err);
    return rc == FL_OK ? fl_cuda_status(cudaStreamSynchronize(stream), "a barrier", err) : rc;
}

// The ring's transfers alone, as ring.cu posts them (sizes of each step's shards), once: fwd, the
// forward's P - 1 K/V hops; bwd, the forward's and the backward's K/V hops and the backward's P
// dK/dV hops. Into the workspace, whose contents do not matter here.
int transfers_alone(const Share &s, const Options &o, ncclComm_t comm, cudaStream_t stream, FlError *err)
{
    const int P = o.ranks, r = o.rank;
    const size_t G = (size_t)s.p.B * s.p.Hkv, width = (size_t)(s.p.d + s.p.dv);
    auto shard = [&](int owner) {
        const RankRows x = rank_rows(s.p.Tq, s.p.Tk, P, ((owner % P) + P) % P);
        return rows_of(x.k) * G * width;
    };
    size_t most = 0;
    for (int q = 0; q < P; q++)
        most = shard(q) > most ? shard(q) : most;
    float *out = (float *)s.workspace, *in = out + most;
    const int kv_rounds = o.dir == DIR_BWD ? 2 : 1;
    int rc = FL_OK;
    auto hop = [&](int step) {
        int status = nccl_status(ncclGroupStart(), "ncclGroupStart", err);
        const size_t n_out = shard(r - step), n_in = shard(r - step - 1);
        if (status == FL_OK && n_out)
            status = nccl_status(ncclSend(out, n_out, ncclFloat32, (r + 1) % P, comm, stream), "ncclSend", err);
        if (status == FL_OK && n_in)
            status = nccl_status(ncclRecv(in, n_in, ncclFloat32, (r + P - 1) % P, comm, stream), "ncclRecv", err);
        const int end = nccl_status(ncclGroupEnd(), "ncclGroupEnd", status == FL_OK ? err : nullptr);
        return status == FL_OK ? end : status;
    };
    for (int round = 0; rc == FL_OK && round < kv_rounds; round++)
        for (int step = 0; rc == FL_OK && step < P - 1; step++)
            rc = hop(step);
    for (int step = 0; rc == FL_OK && o.dir == DIR_BWD && step < P; step++)
        rc = hop(step);
    return rc;
}

double flops_of(const AttnProblem &p, Direction dir)
{
    double f = 2.0 * p.B * p.Hq * (double)p.Tq * p.Tk * (p.d + p.dv); // as flashlab bench counts
    if (p.causal && p.Tq == p.Tk)
        f /= 2.0;
    return dir == DIR_BWD ? f * 3.5 : f; // forward + backward (2.5x)
}

int run_seeded(const StageImpl *impl, const Options &o, ncclComm_t comm, int device)
{
    FlError err = {{0}};
    AttnProblem sizes;
    memset(&sizes, 0, sizeof sizes);
    sizes.B = o.B, sizes.Hq = o.Hq, sizes.Hkv = o.Hkv, sizes.Tq = o.Tq, sizes.Tk = o.Tk, sizes.d = o.d, sizes.dv = o.dv;
    sizes.scale = 1.0f / sqrtf((float)o.d), sizes.causal = o.causal;
    const bool bwd = o.dir == DIR_BWD;
    const RankRows x = rank_rows(o.Tq, o.Tk, o.ranks, o.rank);
    const size_t GQ = (size_t)o.B * o.Hq, G = (size_t)o.B * o.Hkv;
    Share s;
    memset(&s, 0, sizeof s);
    cudaStream_t clock = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    float *scratch = nullptr;
    const int n = o.warmup + o.reps;
    double *ms = (double *)calloc((size_t)n + 1, sizeof(double));
    double *compute = (double *)calloc((size_t)n + 1, sizeof(double));
    double *link = (double *)calloc((size_t)n + 1, sizeof(double));
    RankCounter *counters = (RankCounter *)calloc((size_t)o.ranks, sizeof(RankCounter));
    RankCounter counted;
    memset(&counted, 0, sizeof counted);
    int rc = ms && compute && link && counters ? FL_OK : fl_fail(&err, FL_BAD_INPUT, "out of host memory");
    if (rc == FL_OK)
        rc = share_alloc(impl, sizes, o.ranks, o.rank, bwd, &s, &err);
    s.p.q = s.p.k = s.p.v = s.p.dout = nullptr;
    if (rc == FL_OK)
        rc = seeded_share(x.q, GQ, (size_t)o.Tq, (size_t)o.d, o.seed, 0, &s.p.q, "q", &err);
    if (rc == FL_OK)
        rc = seeded_share(x.k, G, (size_t)o.Tk, (size_t)o.d, o.seed, 1, &s.p.k, "k", &err);
    if (rc == FL_OK)
        rc = seeded_share(x.k, G, (size_t)o.Tk, (size_t)o.dv, o.seed, 2, &s.p.v, "v", &err);
    if (rc == FL_OK && bwd)
        rc = seeded_share(x.q, GQ, (size_t)o.Tq, (size_t)o.dv, o.seed, 3, &s.p.dout, "dO", &err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaStreamCreateWithFlags(&clock, cudaStreamNonBlocking), "creating a stream", &err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaEventCreate(&start), "creating an event", &err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaEventCreate(&stop), "creating an event", &err);
    if (rc == FL_OK)
        rc = fl_cuda_alloc_floats(&scratch, 1, "a barrier's float", &err);
    if (rc == FL_OK)
        rc = fl_cuda_status(cudaDeviceSynchronize(), "making the inputs", &err);
    // The counted run: HBM bytes and link bytes of this rank.
    if (rc == FL_OK)
        rc = run_pass(impl, &s, o, comm, true, counters, &err);
    if (rc == FL_OK)
        counted = counters[o.rank];
    // The timed runs: the ranks start together (barrier); CUDA events on this rank's GPU around
    // the whole pass, which returns once its streams are done.
    for (int i = 0; rc == FL_OK && i < n; i++) {
        memset(counters, 0, (size_t)o.ranks * sizeof *counters);
        rc = barrier(comm, scratch, clock, &err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventRecord(start, clock), "recording an event", &err);
        if (rc == FL_OK)
            rc = run_pass(impl, &s, o, comm, false, counters, &err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventRecord(stop, clock), "recording an event", &err);
        float t = 0.0f;
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventSynchronize(stop), "a timed run", &err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventElapsedTime(&t, start, stop), "reading an event", &err);
        ms[i] = t, compute[i] = counters[o.rank].compute_ms;
    }
    // The same transfers alone.
    for (int i = 0; rc == FL_OK && o.ranks > 1 && i < n; i++) {
        rc = barrier(comm, scratch, clock, &err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventRecord(start, clock), "recording an event", &err);
        if (rc == FL_OK)
            rc = transfers_alone(s, o, comm, clock, &err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventRecord(stop, clock), "recording an event", &err);
        float t = 0.0f;
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventSynchronize(stop), "the transfers", &err);
        if (rc == FL_OK)
            rc = fl_cuda_status(cudaEventElapsedTime(&t, start, stop), "reading an event", &err);
        link[i] = t;
    }
    if (rc == FL_OK) {
        const double t = median_ms(ms + o.warmup, o.reps), c = median_ms(compute + o.warmup, o.reps);
        const double l = o.ranks > 1 ? median_ms(link + o.warmup, o.reps) : 0.0;
        char hidden[32] = "null";
        if (o.ranks > 1 && l > 0.0) {
            double h = (c + l - t) / l;
            snprintf(hidden, sizeof hidden, "%.3f", h < 0.0 ? 0.0 : h > 1.0 ? 1.0 : h);
        }
        cudaDeviceProp prop;
        const char *name = cudaGetDeviceProperties(&prop, device) == cudaSuccess ? prop.name : "?";
        printf("{\"rank\": %d, \"ranks\": %d, \"device\": \"%s (GPU %d)\", \"B\": %d, \"Hq\": %d, \"Hkv\": %d, "
               "\"Tq\": %d, \"Tk\": %d, \"d\": %d, \"dv\": %d, \"causal\": %s, \"direction\": \"%s\", \"reps\": %d, "
               "\"ms\": %.4f, \"compute_ms\": %.4f, \"link_ms\": %.4f, \"hidden\": %s, \"hbm_read_bytes\": %llu, "
               "\"hbm_written_bytes\": %llu, \"link_sent_bytes\": %llu, \"link_received_bytes\": %llu, "
               "\"tflops\": %.3f}\n",
               o.rank, o.ranks, name, device, o.B, o.Hq, o.Hkv, o.Tq, o.Tk, o.d, o.dv, o.causal ? "true" : "false",
               bwd ? "bwd" : "fwd", o.reps, t, c, l, hidden, (unsigned long long)counted.hbm.bytes_read,
               (unsigned long long)counted.hbm.bytes_written, (unsigned long long)counted.link_sent,
               (unsigned long long)counted.link_received, flops_of(sizes, o.dir) / (t * 1e9));
    } else {
        fprintf(stderr, "flashlab_ring_rank: rank %d: %s\n", o.rank, err.msg);
    }
    cudaFree(scratch);
    if (start)
        cudaEventDestroy(start);
    if (stop)
        cudaEventDestroy(stop);
    if (clock)
        cudaStreamDestroy(clock);
    share_free(&s);
    free(ms), free(compute), free(link), free(counters);
    return rc;
}

} // namespace

int main(int argc, char **argv)
{
    Options o;
    if (parse(argc, argv, &o) != FL_OK)
        return FL_BAD_INPUT;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) // no driver: an error, which means none
        devices = 0;
    if (o.count_gpus) {
        printf("%d\n", devices);
        return FL_OK;
    }
    if (devices == 0) {
        printf("rank %d: no CUDA device: skipped\n", o.rank);
        return FL_NO_DEVICE;
    }
    const int device = o.device >= 0 ? o.device : o.rank % devices;
    if (device >= devices) {
        printf("rank %d: --device %d, and this host shows %d GPU%s: skipped\n", o.rank, device, devices,
               devices == 1 ? "" : "s");
        return FL_NO_DEVICE;
    }
    const StageImpl *impl = stage_find("13", DEVICE_CUDA, "");
    if (!impl) {
        fprintf(stderr, "flashlab_ring_rank: this build has no CUDA implementation of stage 13\n");
        return FL_BAD_INPUT;
    }
    FlError err = {{0}};
    ncclComm_t comm = nullptr;
    int rc = fl_cuda_status(cudaSetDevice(device), "cudaSetDevice", &err);
    if (rc == FL_OK)
        rc = open_comm(o, &comm, &err);
    if (rc != FL_OK) {
        fprintf(stderr, "flashlab_ring_rank: rank %d: %s\n", o.rank, err.msg);
        return rc;
    }
    rc = o.ncases > 0 ? run_cases(impl, o, comm) : run_seeded(impl, o, comm, device);
    ncclCommDestroy(comm);
    free(o.cases);
    return rc;
}
