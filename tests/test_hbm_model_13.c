/* test_hbm_model_13.c — stage 13 (ring attention on P ranks): every rank's HBM bytes and link bytes
 * (sent and received), forward and backward, equal the closed forms of docs/hbm_model.md ("Stage
 * 13" for CPU ranks, "Stage 13 on GPUs" for GPU ranks), and o, lse, dq, dk, dv match the float64
 * reference; on causal, GQA, Tq != Tk, d != dv shapes, T not divisible by 2P, and a sequence
 * shorter than 2P rows.
 *
 * Usage: test_hbm_model_13 cpu            P = 1, 2, 3, 4 CPU ranks, at two SRAM sizes
 *        test_hbm_model_13 cuda [P ...]   GPU ranks (launch mode A, one GPU each; default P = 1):
 *                                         a P with more ranks than GPUs is skipped, and with none
 *                                         left to run the test exits 77
 * The expected numbers are computed here from the doc's rules (chunks, which pairs and tiles are
 * visited, what each moves), not taken from the stage. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "hbm.h"
#include "runner.h"
#include "test_support.h"

typedef struct {
    TestShape s;
    int Hkv, causal;
} RingShape;

/* causal T = 37 (not divisible by 2P); GQA group 3 with Tq > Tk, causal (rows that see no key);
 * no mask, Tq < Tk, d != dv, B = 2; MQA causal with Tq < Tk; T = 5 (P = 3, 4 give empty chunks). */
static const RingShape shapes[] = {
    {{1, 2, 37, 37, 24, 24}, 2, 1},
    {{1, 6, 30, 21, 16, 16}, 2, 1},
    {{2, 2, 13, 40, 24, 40}, 2, 0},
    {{1, 4, 19, 33, 32, 32}, 1, 1},
    {{1, 2, 5, 5, 16, 16}, 2, 1},
};
enum { SHAPE_COUNT = sizeof shapes / sizeof shapes[0], MAX_P = 4 };
static const size_t sram_sizes[] = {FLASHLAB_DEFAULT_SRAM_BYTES, 16u * 1024u};

typedef struct {
    uint64_t read, written, sent, received;
} RankBytes;

static uint64_t umin(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t umax(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* ---- docs/hbm_model.md, stage 13, written out again ------------------------------------------- */

/* Chunk c of n rows cut into 2P: [c n / 2P, (c + 1) n / 2P); rank r holds chunks r and 2P - 1 - r. */
static uint64_t lo_of(uint64_t n, int P, int c) { return n * (uint64_t)c / (uint64_t)(2 * P); }
static int chunk_of(int P, int r, int w) { return w == 0 ? r : 2 * P - 1 - r; }

/* The end of the keys query row i sees (docs/conventions.md, bottom-right causal), Tk without the mask. */
static uint64_t end_of(const AttnProblem *p, uint64_t i)
{
    if (!p->causal)
        return (uint64_t)p->Tk;
    const long e = (long)i + p->Tk - p->Tq + 1;
    return e < 0 ? 0 : (uint64_t)e;
}

/* Rows of rank r's two chunks of n rows. */
static uint64_t own_rows(uint64_t n, int P, int r)
{
    uint64_t sum = 0;
    for (int w = 0; w < 2; w++)
        sum += lo_of(n, P, chunk_of(P, r, w) + 1) - lo_of(n, P, chunk_of(P, r, w));
    return sum;
}

/* The shard of rank o: its two key chunks of every (b, kv head), in rows. */
static uint64_t shard(const AttnProblem *p, int P, int o)
{
    return own_rows((uint64_t)p->Tk, P, o) * (uint64_t)p->B * p->Hkv;
}

/* Forward, one chunk pair of one head (query rows [ql, qh), key rows [kl, kh)), query tiles of Br:
 * a tile whose last row sees past kl reads Q, the keys from kl to min(kh, that end) and merges:
 * reads and writes its o and lse rows. */
static void pair_fwd(const AttnProblem *p, uint64_t ql, uint64_t qh, uint64_t kl, uint64_t kh, uint64_t Br,
                     RankBytes *e)
{
    const uint64_t d = p->d, dv = p->dv;
    for (uint64_t i0 = ql; i0 < qh; i0 += Br) {
        const uint64_t rows = umin(Br, qh - i0), last = end_of(p, i0 + rows - 1);
        if (kh <= kl || last <= kl)
            continue;
        e->read += 4 * (rows * d + (umin(kh, last) - kl) * (d + dv) + rows * (dv + 1));
        e->written += 4 * rows * (dv + 1);
    }
}

/* Backward, one chunk pair: key tiles of Bc up to min(kh, the end of the chunk's last row); each
 * reads K, V, dK, dV and writes dK, dV; each query tile of Br whose last row reaches the key tile
 * reads Q, dO, lse, D, dQ and writes dQ. */
static void pair_bwd(const AttnProblem *p, uint64_t ql, uint64_t qh, uint64_t kl, uint64_t kh, uint64_t Br,
                     uint64_t Bc, RankBytes *e)
{
    const uint64_t d = p->d, dv = p->dv;
    if (qh <= ql || kh <= kl)
        return;
    const uint64_t k_end = umin(kh, end_of(p, qh - 1));
    for (uint64_t j0 = kl; j0 < k_end; j0 += Bc) {
        const uint64_t n = umin(Bc, k_end - j0);
        e->read += 4 * n * 2 * (d + dv);
        e->written += 4 * n * (d + dv);
        for (uint64_t i0 = ql; i0 < qh; i0 += Br) {
            const uint64_t rows = umin(Br, qh - i0);
            if (end_of(p, i0 + rows - 1) <= j0)
                continue;
            e->read += 4 * rows * (2 * d + dv + 2);
            e->written += 4 * rows * d;
        }
    }
}

/* Rank r, one pass: the steps (rank (r - s) mod P's shard at step s, every head, both query chunks
 * against both key chunks), the prologue and epilogue, and the link: the forward sends its held K/V
 * shard after every step but the last; the backward sends K, V, dK, dV after every step but the last
 * and dK, dV once more (home), nothing when P = 1. */
static RankBytes model(const AttnProblem *p, int P, int r, Direction dir, uint64_t Br, uint64_t Bc)
{
    const uint64_t d = p->d, dv = p->dv, heads = (uint64_t)p->B * p->Hq;
    const uint64_t q_own = own_rows((uint64_t)p->Tq, P, r) * heads;
    RankBytes e = {0, 0, 0, 0};
    if (dir == DIR_FWD) {
        e.written += 4 * q_own * (dv + 1); /* o = 0, lse = -inf */
    } else {
        e.read += 4 * q_own * 2 * dv;      /* O, dO for D */
        e.written += 4 * q_own * (1 + d);  /* D; dQ = 0 */
        const uint64_t kv_own = own_rows((uint64_t)p->Tk, P, r) * (uint64_t)p->B * p->Hkv;
        e.read += 4 * kv_own * (d + dv);   /* the home shard's dK, dV ... */
        e.written += 4 * kv_own * (d + dv);/* ... into dk, dv */
    }
    for (int s = 0; s < P; s++) {
        const int o = ((r - s) % P + P) % P;
        for (uint64_t bh = 0; bh < heads; bh++)
            for (int qw = 0; qw < 2; qw++)
                for (int kw = 0; kw < 2; kw++) {
                    const int qc = chunk_of(P, r, qw), kc = chunk_of(P, o, kw);
                    const uint64_t ql = lo_of((uint64_t)p->Tq, P, qc), qh = lo_of((uint64_t)p->Tq, P, qc + 1);
                    const uint64_t kl = lo_of((uint64_t)p->Tk, P, kc), kh = lo_of((uint64_t)p->Tk, P, kc + 1);
                    if (qh <= ql || kh <= kl || end_of(p, qh - 1) <= kl)
                        continue;
                    if (dir == DIR_FWD)
                        pair_fwd(p, ql, qh, kl, kh, Br, &e);
                    else
                        pair_bwd(p, ql, qh, kl, kh, Br, Bc, &e);
                }
        if (P == 1)
            continue;
        const int from = ((r - 1 - s) % P + P) % P; /* what rank r - 1 sends after step s */
        const int kv = s < P - 1, grads = dir == DIR_BWD;
        if (kv || grads) {
            e.sent += 4 * shard(p, P, o) * (d + dv) * (uint64_t)(kv + grads);
            e.received += 4 * shard(p, P, from) * (d + dv) * (uint64_t)(kv + grads);
        }
    }
    return e;
}

/* The tiles: the forward's Bc = M / 4 / (4 (d + dv)), Br = min(Bc, d); the backward's Bc halved and
 * the largest Br <= min(Bc, d) with 2 Bc (d + dv) + Br (2d + dv + 2 Bc + 2) <= M / 4. */
static void tiles(const AttnProblem *p, size_t M, Direction dir, uint64_t *Br, uint64_t *Bc)
{
    const uint64_t M_f = M / 4, d = p->d, dv = p->dv;
    *Bc = umax(1, M_f / (4 * (d + dv)));
    *Br = umax(1, umin(*Bc, d));
    if (dir == DIR_BWD) {
        *Bc = umax(1, *Bc / 2);
        const uint64_t kv = 2 * *Bc * (d + dv), per_row = 2 * d + dv + 2 * *Bc + 2;
        *Br = umax(1, umin(umin(*Bc, d), M_f > kv ? (M_f - kv) / per_row : 1));
    }
}

/* ---- docs/hbm_model.md, stage 13 on GPUs (ring.cu), written out again -------------------------------- */

/* ring.cu's tiles: the forward's query tiles of 128 packed rows, the backward's 64 x 64. */
enum { GPU_FWD_BR = 128, GPU_BWD_BR = 64, GPU_BWD_BC = 64 };

/* Of key chunk [kl, kl + m), how many keys packed row `row` of query chunk [ql, ql + n) sees (a
 * prefix): the row is local row row % n of its head, at position ql + row % n + Tk - Tq. */
static uint64_t pair_seen(const AttnProblem *p, uint64_t ql, uint64_t n, uint64_t kl, uint64_t m, uint64_t row)
{
    if (!p->causal)
        return m;
    const long e = (long)(ql + row % n) + p->Tk - p->Tq + 1 - (long)kl;
    return e <= 0 ? 0 : umin((uint64_t)e, m);
}

/* Rank r, one pass, GPU rules: every kv head alike (times B Hkv); a query chunk's rows are the GQA
 * group's packed rows (group x chunk rows). Forward, per step and query tile of 128 packed rows:
 * when it sees E > 0 keys of the held shard (per key chunk, what its furthest row sees): Q, those
 * K/V rows, and one merge (o, lse read and written). Backward, per step, kv head and key tile of 64
 * of each key chunk: this step's dK, dV written whole; the tile's keys up to what the last row of
 * the rank's query chunks sees read as K, V; per query tile of 64 packed rows with a row that sees
 * the tile's first key, Q, dO, lse, D and dQ read, dQ written; then the fold (dkv_step, and from the
 * second step on the gradients that came, read; the sum written). Link bytes: as on the CPU. */
static RankBytes gpu_model(const AttnProblem *p, int P, int r, Direction dir)
{
    const uint64_t d = p->d, dv = p->dv, group = (uint64_t)(p->Hq / p->Hkv), G = (uint64_t)p->B * p->Hkv;
    const uint64_t q_own = own_rows((uint64_t)p->Tq, P, r) * (uint64_t)p->B * p->Hq;
    uint64_t ql[2], qn[2];
    for (int w = 0; w < 2; w++) {
        ql[w] = lo_of((uint64_t)p->Tq, P, chunk_of(P, r, w));
        qn[w] = lo_of((uint64_t)p->Tq, P, chunk_of(P, r, w) + 1) - ql[w];
    }
    RankBytes e = {0, 0, 0, 0};
    if (dir == DIR_FWD) {
        e.written += 4 * q_own * (dv + 1);
    } else {
        e.read += 4 * q_own * 2 * dv;
        e.written += 4 * q_own * (1 + d);
    }
    for (int s = 0; s < P; s++) {
        const int o = ((r - s) % P + P) % P;
        uint64_t kl[2], km[2];
        for (int kw = 0; kw < 2; kw++) {
            kl[kw] = lo_of((uint64_t)p->Tk, P, chunk_of(P, o, kw));
            km[kw] = lo_of((uint64_t)p->Tk, P, chunk_of(P, o, kw) + 1) - kl[kw];
        }
        RankBytes h = {0, 0, 0, 0}; /* one kv head */
        for (int w = 0; w < 2 && dir == DIR_FWD; w++)
            for (uint64_t p0 = 0; p0 < group * qn[w]; p0 += GPU_FWD_BR) {
                const uint64_t rows = umin(GPU_FWD_BR, group * qn[w] - p0);
                uint64_t E = 0;
                for (int kw = 0; kw < 2; kw++) {
                    uint64_t most = 0;
                    for (uint64_t row = p0; row < p0 + rows && km[kw] > 0; row++)
                        most = umax(most, pair_seen(p, ql[w], qn[w], kl[kw], km[kw], row));
                    E += most;
                }
                if (E > 0) {
                    h.read += 4 * (rows * d + E * (d + dv) + rows * (dv + 1));
                    h.written += 4 * rows * (dv + 1);
                }
            }
        for (int kw = 0; kw < 2 && dir == DIR_BWD; kw++) {
            uint64_t key_end = 0;
            for (int w = 0; w < 2; w++)
                if (qn[w] > 0)
                    key_end = umax(key_end, pair_seen(p, ql[w], qn[w], kl[kw], km[kw], group * qn[w] - 1));
            for (uint64_t j0 = 0; j0 < km[kw]; j0 += GPU_BWD_BC) {
                const uint64_t n = umin(GPU_BWD_BC, km[kw] - j0);
                const uint64_t loaded = key_end > j0 ? umin(n, key_end - j0) : 0;
                h.written += 4 * n * (d + dv);
                if (loaded == 0)
                    continue;
                h.read += 4 * loaded * (d + dv);
                for (int w = 0; w < 2; w++)
                    for (uint64_t p0 = 0; p0 < group * qn[w]; p0 += GPU_BWD_BR) {
                        const uint64_t rows = umin(GPU_BWD_BR, group * qn[w] - p0);
                        int reaches = 0;
                        for (uint64_t row = p0; row < p0 + rows && !reaches; row++)
                            reaches = pair_seen(p, ql[w], qn[w], kl[kw], km[kw], row) > j0;
                        if (reaches) {
                            h.read += 4 * rows * (2 * d + dv + 2);
                            h.written += 4 * rows * d;
                        }
                    }
            }
        }
        e.read += G * h.read, e.written += G * h.written;
        if (dir == DIR_BWD) { /* the fold */
            const uint64_t held = 4 * shard(p, P, o) * (d + dv);
            e.read += held * (s > 0 ? 2 : 1);
            e.written += held;
        }
        if (P == 1)
            continue;
        const int from = ((r - 1 - s) % P + P) % P;
        const int kv = s < P - 1, grads = dir == DIR_BWD;
        if (kv || grads) {
            e.sent += 4 * shard(p, P, o) * (d + dv) * (uint64_t)(kv + grads);
            e.received += 4 * shard(p, P, from) * (d + dv) * (uint64_t)(kv + grads);
        }
    }
    return e;
}

/* ---- the runs ------------------------------------------------------------------------------------ */

static int compare(const char *what, int shape, int P, size_t M, int r, const RankCounter *got, const RankBytes *want)
{
    const int same = got->hbm.bytes_read == want->read && got->hbm.bytes_written == want->written &&
                     got->link_sent == want->sent && got->link_received == want->received;
    printf("shape %d P %d M %zu rank %d %s: read %llu (model %llu) written %llu (model %llu) sent %llu (model %llu) "
           "received %llu (model %llu)%s\n",
           shape, P, M, r, what, (unsigned long long)got->hbm.bytes_read, (unsigned long long)want->read,
           (unsigned long long)got->hbm.bytes_written, (unsigned long long)want->written,
           (unsigned long long)got->link_sent, (unsigned long long)want->sent,
           (unsigned long long)got->link_received, (unsigned long long)want->received, same ? "" : "  <- differs");
    return !same;
}

/* One P and M on one shape: a forward run (counts per rank), then forward + backward (the
 * backward's counts per rank), outputs and gradients against the reference. Returns failures, or
 * -1 when the machine has too few GPUs for P (the message is printed). */
static int check(const StageImpl *impl, int shape, int P, size_t M)
{
    const int gpu = impl->device == DEVICE_CUDA;
    const RingShape *rs = &shapes[shape];
    TestFeatures f = {rs->Hkv, rs->causal};
    TestProblem x;
    int failures = 0;
    if (test_problem_make_with(&x, &rs->s, &f, 1300 + (uint64_t)shape) != 0 || test_problem_add_backward(&x, 77) != 0) {
        fprintf(stderr, "shape %d: out of memory\n", shape);
        test_problem_free(&x);
        return 1;
    }
    RankCounter counters[MAX_P];
    RunCtx opts = {0};
    opts.sram_bytes = M, opts.ranks = P, opts.rank_counters = counters;
    AttnTensors t = test_problem_tensors(&x);
    FlError err = {{0}};
    for (int pass = 0; pass < 2; pass++) {
        const Direction dir = pass == 0 ? DIR_FWD : DIR_BWD;
        RunStats stats;
        memset(counters, 0, sizeof counters); /* the stage adds to them: both passes of a bwd run */
        const int rc = runner_run(impl, dir, &x.p, &t, &opts, &stats, &err);
        if (rc == FL_NO_DEVICE) {
            printf("P %d: skipped (%s)\n", P, err.msg);
            test_problem_free(&x);
            return -1;
        }
        if (rc != FL_OK) {
            fprintf(stderr, "shape %d P %d: %s\n", shape, P, err.msg);
            failures++;
            break;
        }
        uint64_t Br, Bc, Br_b, Bc_b, read = 0, written = 0;
        tiles(&x.p, M, DIR_FWD, &Br, &Bc);
        tiles(&x.p, M, DIR_BWD, &Br_b, &Bc_b);
        for (int r = 0; r < P; r++) { /* a bwd run counts its forward pass too */
            RankBytes want = gpu ? gpu_model(&x.p, P, r, DIR_FWD) : model(&x.p, P, r, DIR_FWD, Br, Bc);
            if (dir == DIR_BWD) {
                const RankBytes b = gpu ? gpu_model(&x.p, P, r, DIR_BWD) : model(&x.p, P, r, DIR_BWD, Br_b, Bc_b);
                want.read += b.read, want.written += b.written, want.sent += b.sent, want.received += b.received;
            }
            failures += compare(dir == DIR_FWD ? "fwd" : "fwd+bwd", shape, P, M, r, &counters[r], &want);
            read += want.read, written += want.written;
        }
        const uint64_t total_read = stats.fwd.bytes_read + stats.bwd.bytes_read;
        const uint64_t total_written = stats.fwd.bytes_written + stats.bwd.bytes_written;
        if (total_read != read || total_written != written) {
            fprintf(stderr, "shape %d P %d: the run's HBM total is not the ranks' sum\n", shape, P);
            failures++;
        }
    }
    const double e_o = ref_attention_max_error(&x.p, x.o, x.lse, ERR_ABS_REL);
    const double e_g = ref_gradients_max_error(&x.p, x.dq, x.dk, x.dv, ERR_ABS_REL);
    if (!(e_o <= CHECK_TOL_FWD) || !(e_g <= CHECK_TOL_BWD)) {
        fprintf(stderr, "shape %d P %d M %zu: output error %.3g, gradient error %.3g\n", shape, P, M, e_o, e_g);
        failures++;
    }
    test_problem_free(&x);
    return failures;
}

/* GPU ranks: each P given, every shape, once (the SRAM size is a CPU notion). */
static int main_cuda(int argc, char **argv)
{
    const StageImpl *impl = stage_find("13", DEVICE_CUDA, "");
    if (!impl) {
        printf("stage 13 has no CUDA implementation in this build (no NCCL?): skipped\n");
        return 77;
    }
    int failures = 0, runs = 0;
    for (int i = 2; i < argc || i == 2; i++) {
        const int P = i < argc ? atoi(argv[i]) : 1;
        if (P < 1 || P > MAX_P) {
            fprintf(stderr, "test_hbm_model_13: P = %s; give 1 to %d\n", i < argc ? argv[i] : "?", MAX_P);
            return 2;
        }
        for (int s = 0; s < SHAPE_COUNT; s++) {
            const int f = check(impl, s, P, FLASHLAB_DEFAULT_SRAM_BYTES);
            if (f < 0)
                break; /* too few GPUs for P */
            failures += f, runs++;
        }
    }
    printf("%d failures in %d runs (cuda: %s)\n", failures, runs, cuda_device_description());
    if (runs == 0)
        return 77;
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "cpu") && strcmp(argv[1], "cuda")) || (!strcmp(argv[1], "cpu") && argc != 2)) {
        fprintf(stderr, "usage: test_hbm_model_13 cpu | test_hbm_model_13 cuda [P ...]\n");
        return 2;
    }
    if (!strcmp(argv[1], "cuda"))
        return main_cuda(argc, argv);
    const StageImpl *impl = stage_find("13", DEVICE_CPU, "");
    if (!impl) {
        fprintf(stderr, "stage 13 has no cpu implementation in this build\n");
        return 1;
    }
    int failures = 0, runs = 0;
    for (int s = 0; s < SHAPE_COUNT; s++)
        for (int P = 1; P <= MAX_P; P++)
            for (size_t m = 0; m < sizeof sram_sizes / sizeof sram_sizes[0]; m++, runs++)
                failures += check(impl, s, P, sram_sizes[m]); /* never -1 on the CPU */
    printf("%d failures in %d runs\n", failures, runs);
    return failures ? 1 : 0;
}
