/* main.c — the flashlab command line: the command table with each command's help, and the
 * dispatch. Each command lives in its own cmd_*.c file (cli.h). */
#include <string.h>

#include "cli.h"
#include "exercise.h"
#include "kind.h"

/* A command's --help prints its usage, its help, the paragraphs each case kind adds for it
 * (kind.h KindHelp), then its details (options and exit codes), if any. */
typedef struct {
    const char *name;
    int (*run)(Options *);
    const char *usage;
    const char *help;
    const char *details;
} Command;

static const Command commands[] = {
    {"list", cmd_list, "flashlab list",
     "Prints one row per registered implementation: stage, name, device, variant, the precision it\n"
     "computes in (float32, or bf16 for stage 12, with the head dims it runs: 'bf16 d=64,128' means\n"
     "d = dv = 64 or 128 only), the features it supports and its one-line lesson; then whether a CUDA\n"
     "device is available.\n", NULL},
    {"check", cmd_check,
     "flashlab check STAGE [CASE_DIR...] [--device cpu|cuda] [--variant V] [--direction fwd|bwd]\n"
     "                     [--sram BYTES] [--block-r N] [--block-c N] [--threads N] [--splits N]\n"
     "                     [--blocks N] [--ranks P] [--verbose] [--json] [--no-io-check]",
     "Runs STAGE (e.g. 3, 03 or 03_tiled) on case folders and compares every output with the case's\n"
     "expected .npy files: |out - ref| <= 1e-4 + 1e-4*|ref| for o and lse, 5e-4 for gradients; NaN/Inf\n"
     "positions must match. Those are the float32 tolerances; stage 12 computes in bf16 (float32\n"
     "accumulation) and is checked at 2^-5 (o, lse) and 2^-4 (gradients), derived in\n"
     "docs/conventions.md. Outputs are poisoned with NaN before each run. Prints a header per case, one\n"
     "line per tensor (max abs error, max rel error, mismatches and the first mismatching indices), then\n"
     "a summary.\n"
     "\n"
     "Cases: the CASE_DIRs given, else every folder of the golden directory ($FLASHLAB_GOLDEN, default\n"
     "golden/cases of the source tree) that holds q.npy and whose features the stage supports (and, for\n"
     "a stage that runs only some head dims, as stage 12 runs d = dv in {64, 128}, whose d and dv it\n"
     "runs; a CASE_DIR it does not run exits 3).\n"
     "Direction: without --direction a case runs forward+backward when it has do.npy and the stage has a\n"
     "backward pass (o, lse, dq, dk, dv and dsinks are compared), else forward only (o, lse; do.npy is\n"
     "ignored). --direction fwd checks the forward pass only; --direction bwd only cases with do.npy.\n",
     "  --device cpu|cuda   device of the implementation (default cpu)\n"
     "  --variant V         a variant of the stage (see 'flashlab list'); default the plain one\n"
     "  --sram BYTES        SRAM size M of the tiled CPU stages (65536, 64K, 1M; default 128K)\n"
     "  --block-r/-c N      tile sizes Br, Bc (default: derived from M and d)\n"
     "  --threads N         CPU worker threads (default: all cores)\n"
     "  --splits N          stages 11, 16: split each sequence's keys into N chunks (default: the\n"
     "                      stage's heuristic)\n"
     "  --blocks N          stages 14, 18 forward (cuda): a grid of N thread blocks, each taking query tiles\n"
     "                      until none are left (default: one per SM; variant per-tile: one per\n"
     "                      query tile); the tests use 1 and 3\n"
     "  --ranks P           stage 13: run the ring over P ranks (CPU threads; with --device cuda one GPU\n"
     "                      each, 77 with fewer GPUs; default 1)\n"
     "  --verbose           case descriptions, HBM counts, and the golden cases skipped\n"
     "  --no-io-check       a student copy (--variant student[-V]) passes on its outputs alone; without\n"
     "                      it, each case also shows the HBM bytes beside the reference's (the stage's\n"
     "                      variant V, or its default one), and a copy that reads or writes more than\n"
     "                      1.10x the reference's bytes fails the case ('IO FAIL', with the extra bytes)\n"
     "  --json              a grade report instead of the text (one JSON object on stdout): the stage's\n"
     "                      precision and tolerances; per case\n"
     "                      its status (pass, fail, error), per tensor max abs / max rel error and the\n"
     "                      mismatch count, HBM bytes read and written beside those of the reference\n"
     "                      (the stage's default variant on the same device), and the time (median of\n"
     "                      3 runs after a warm-up); then checked, passed, failed, skipped\n"
     "\n"
     "Exit: 0 all passed; 1 a tensor failed; 2 bad usage, an unreadable case, a run the stage refused\n"
     "(e.g. tiles that do not fit in --sram), or no case checked at all;\n"
     "3 a named case needs a feature the stage lacks (or --direction bwd on a forward-only stage);\n"
     "77 --device cuda without a CUDA device (prints 'no CUDA device: skipped').\n"},
    {"run", cmd_run,
     "flashlab run STAGE CASE_DIR --out DIR [--device cpu|cuda] [--variant V] [--direction fwd|bwd]\n"
     "                   [--sram BYTES] [--block-r N] [--block-c N] [--threads N] [--splits N] [--blocks N]\n"
     "                   [--ranks P]",
     "Runs STAGE on any case folder (case.json optional, q.npy k.npy v.npy, optional do.npy and\n"
     "sinks.npy; expected files are not needed) and writes float32 o.npy and lse.npy into DIR, plus\n"
     "dq.npy dk.npy dv.npy (and dsinks.npy with sinks.npy) when do.npy is present and the stage has a\n"
     "backward pass (--direction fwd skips it). DIR is created if missing. Everything is computed before\n"
     "any file is written; if a write fails, the files already written are removed. DIR may not be a case\n"
     "folder or lie inside one (hold case.json, q.npy, ckv.npy, ... or sit below a folder that does).\n"
     "An input holding NaN or Inf gets one warning line (file, count, first index) and the outputs that\n"
     "depend on it are NaN; a NaN or Inf output from finite inputs gets one warning line per tensor.\n",
     "Exit: 0 ok; 2 bad usage or bad input; 3 the case needs a feature the stage lacks; 77 no CUDA device.\n"},
    {"tour", cmd_tour, "flashlab tour [--device cpu|cuda|all] [--sram BYTES] [--threads N]",
     "Runs every registered implementation, in ladder order, on the golden case golden/cases/tour and\n"
     "prints one table: stage, device (and variant), what was checked (fwd, or fwd+bwd where the stage\n"
     "has a backward pass and the case has do.npy), pass/FAIL (at the tolerance of the stage's\n"
     "precision: float32, or bf16 for stage 12), the max abs error against the golden\n"
     "files, HBM bytes read and written and the extra memory of the forward pass, the median time of 5\n"
     "forward runs (after 1 warm-up, counting off), GFLOP/s (FLOPs as bench --help counts them: halved\n"
     "for causal, window pairs only, a kind's own count for its cases), and the lesson.\n"
     "A stage that ran fwd+bwd gets a second line, 'bwd': HBM bytes and extra memory of the backward\n"
     "pass, and the median time and GFLOP/s (3.5x forward FLOPs) of 5 forward + backward runs.\n"
     "CUDA rows print 'skipped (no CUDA device)' when there is none. --device picks one device\n"
     "(default all).\n",
     "Exit: 0 all rows passed; 1 a row failed; 2 the tour case cannot be read or no\n"
     "stage ran; 77 --device cuda without a CUDA device.\n"},
    {"bench", cmd_bench,
     "flashlab bench [--device cpu|cuda] [--stages 01,02,03] [--T 512,1024,2048,4096] [--B 1] [--H 8]\n"
     "               [--Hkv N] [--Tq N] [--d 64] [--causal] [--window W] [--sink-tokens S] [--sinks]\n"
     "               [--direction fwd|bwd] [--variant V] [--reps N] [--sram BYTES] [--block-r N]\n"
     "               [--block-c N] [--threads N] [--json] [--page-size N] [--splits N] [--blocks N]\n"
     "               [--ranks P] [--queued]",
     "Times the stages on seeded random problems: q (B, H, Tq, d), k and v (B, Hkv, T, d), d = dv.\n"
     "By default Tq = T and Hkv = H (self-attention); --Tq 1 --Hkv 8 --H 32 is a GQA decode step\n"
     "(stages without the gqa feature then report the row as unsupported). --window W (implies\n"
     "--causal), --sink-tokens S and --sinks (learned sink logits, seeded N(0, 1)) ask for the stages\n"
     "with those features (10, 15, 18; the others report the row as unsupported).\n"
     "--variant V benches only that variant of each stage ('' = the default one).\n"
     "--page-size N gives the stages with the paged feature (11, 16) a paged KV cache instead: every\n"
     "sequence's T keys in pages of N slots, pages in a seeded shuffled order (the other stages keep\n"
     "contiguous K/V); --splits N fixes stage 11's and 16's split count; --blocks N stage 14's grid\n"
     "(check --help); --ranks P runs stage 13's ring over P ranks. Inputs above 2^24 elements repeat\n"
     "their first 2^24 values.\n"
     "For each (stage implementation, T, d): one counting run (HBM bytes, extra memory) and a timed\n"
     "run: the median of --reps runs after one warm-up, counting off, each run between its own pair\n"
     "of CUDA events (cuda) or clock readings (cpu), so a run's time includes the host's launch of\n"
     "its first kernel. --queued (cuda) launches each timed run while a kernel that only waits holds\n"
     "the GPU, so that the events hold the GPU's time alone, as a CUDA graph or a busy serving loop\n"
     "sees it (it matters for runs of tens of microseconds, such as a decode step); stage 13's ring,\n"
     "whose kernels run on streams of their own, refuses it.\n"
     "Prints time in ms, GFLOP/s (TFLOP/s on cuda), HBM bytes read and written, and extra memory,\n"
     "one row per run as it finishes (while a row runs, a progress line on stderr says which, when\n"
     "stderr is a terminal);\n"
     "--json prints a JSON array instead (raw numbers, for notebooks and scripts; a stage 13 row also\n"
     "gives its ranks and link_sent_bytes, the bytes all ranks sent over the ring in what was counted).\n"
     "--direction bwd times forward + backward (each timed run: the forward pass, then the backward\n"
     "pass) of the stages that have a backward; its HBM bytes are those of both passes (JSON also\n"
     "gives the backward pass alone: hbm_read_bytes_bwd_pass, hbm_written_bytes_bwd_pass) and its\n"
     "extra memory the larger of the two passes'.\n"
     "FLOPs: 4*B*H*Tq*T*d forward, halved with --causal when Tq = T; with --window, 4*B*H*d per\n"
     "query-key pair the window (and sink tokens) keep; forward + backward 3.5x forward.\n"
     "Defaults: cpu: every CPU implementation, T = 512,1024,2048,4096, B = 1, H = 8, d = 64, reps 3.\n"
     "          cuda: every CUDA implementation, T = 1024,4096,16384, B = 4, H = 16, d = 64,128, reps 20.\n",
     "Exit: 0 ok (a row a stage refuses, e.g. a head dim it does not run, says why and is no failure);\n"
     "1 a run failed (its row shows why; e.g. out of memory); 2 bad usage; 3 every row was refused;\n"
     "77 no CUDA device for --device cuda.\n"},
    {"diff", cmd_diff, "flashlab diff [A] B [--docs]",
     "The lesson diff: for each kind of source (.h, .c, .cu; README.md too with --docs) found in either\n"
     "stage folder, runs the system 'diff -u' of stage A's file against stage B's (paths relative to the\n"
     "source tree). Without A, B is compared with its parent, the stage it starts as a copy of: the one\n"
     "before it on the ladder, or for a track the stage named in stages/B/PARENT (10 and 12 and 13 build\n"
     "on 08, 11 on 10). A file new in B is shown in full as added lines (diff against /dev/null); a file\n"
     "only in A is named. A and B are stage numbers or folder names (6, 06, 06_backward). A reader that\n"
     "goes away (flashlab diff 07 | head) ends the diff quietly.\n"
     "Exit: 0 (differences are the point); 2 a stage folder does not exist or diff cannot run.\n", NULL},
    {"exercise", cmd_exercise, "flashlab exercise STAGE DIR",
     "Writes a student copy of STAGE into DIR (a new or empty folder): the stage's .c, .cu and .h files\n"
     "with the lesson taken out as numbered TODO blocks, '// TODO(exercise K/N, stage NN): ...' to\n"
     "'// END TODO(exercise K/N)'; a README.md with the task and the commands; a CMakeLists.txt.\n"
     "A file that continues a file of the stage it was copied from (the stage's README names it in\n"
     "'flashlab diff MM NN') gets one block per change of that diff, holding stage MM's lines, live,\n"
     "so the copy compiles; changes to comments only and the StageImpl registration keep stage NN's\n"
     "lines. A file with exercise markers ('exercise: begin' ... 'exercise: end', docs/adding_a_stage.md)\n"
     "gets one block per marked region instead, with the marker's stub as its only code; in a stage\n"
     "with markers, its files without them are copied as they are, and so is a new file with no\n"
     "earlier partner. The copy compiles and fails the stage's checks until the TODOs are done.\n"
     "Build it as variant 'student' of its stage: cmake --preset default -DFLASHLAB_STUDENT_DIR=DIR; then\n"
     "'ctest -R stageNN' runs its tests too and 'flashlab check NN --variant student' checks it (run by\n"
     "build/flashlab_student, which flashlab hands every --variant student* request to).\n"
     "Files are written to a temporary folder beside DIR and renamed to DIR at the end: a failure\n"
     "leaves nothing behind. docs/teaching.md describes the whole course set-up.\n"
     "Exit: 0 ok; 2 bad usage, an unknown stage, DIR exists and is not empty, or the stage gives no TODO.\n", NULL},
};
#define NCOMMANDS (int)(sizeof commands / sizeof commands[0])

/* The usage lines; bench's end with the options of the kinds' own sizes. */
static void print_usage(FILE *f, const Command *c, const char *indent)
{
    fprintf(f, "%s%s\n", indent, c->usage);
    if (!strcmp(c->name, "bench"))
        kind_print_bench_usage(f, "               "); /* under the usage string's own lines */
}

static void print_command_help(const Command *c)
{
    print_usage(stdout, c, "Usage: ");
    printf("\n%s", c->help);
    kind_print_help(stdout, c->name);
    if (c->details)
        printf("\n%s", c->details);
}

static void print_main_help(FILE *f)
{
    fprintf(f,
            "flashlab — attention from naive to FlashAttention-2, checked against golden files, with\n"
            "HBM-traffic counters.\n\nUsage:\n");
    for (int i = 0; i < NCOMMANDS; i++)
        print_usage(f, &commands[i], "  ");
    fprintf(f,
            "\n'flashlab CMD --help' describes one command.\n"
            "Exit codes: 0 ok; 1 a check failed; 2 bad usage or bad input; 3 the stage lacks a feature the\n"
            "case asks for (the message names the stage that adds it); 77 no CUDA device (skipped).\n");
}

int main(int argc, char **argv)
{
    int forwarded = exercise_forward_to_student_build(argc, argv);
    if (forwarded >= 0)
        return forwarded;
    if (argc < 2) {
        print_main_help(stderr);
        return FL_BAD_INPUT;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        print_main_help(stdout);
        return FL_OK;
    }
    for (int i = 0; i < NCOMMANDS; i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        Options o;
        memset(&o, 0, sizeof o);
        o.command = commands[i].name;
        o.device = DEVICE_CPU;
        o.device_all = !strcmp(o.command, "tour");
        o.direction = KIND_DIR_ANY;
        int rc = parse_options(&o, argc - 2, argv + 2);
        if (rc < 0) {
            print_command_help(&commands[i]);
            return FL_OK;
        }
        if (rc != FL_OK)
            return rc;
        return commands[i].run(&o);
    }
    fprintf(stderr, "flashlab: unknown command '%s' (see 'flashlab --help')\n", argv[1]);
    return FL_BAD_INPUT;
}
