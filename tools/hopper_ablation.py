#!/usr/bin/env python3
"""hopper_ablation.py — what each of stage 14's ways of hiding the softmax buys, measured in one run.

Stage 14's forward hides the softmax under the tensor cores in two ways: inside a consumer
warpgroup (the softmax of tile j runs while P_{j-1} V_{j-1} is still on the tensor cores) and
between the two consumer warpgroups (ping-pong). Its variants leave them out: "no-pingpong",
"no-overlap" and "serial" (neither). Below "serial", two variants take the rest of Hopper's pieces
away: "wgmma-tma" (TMA copies issued by a consumer's thread, no producer warpgroup) and
"wgmma-only" (cp.async copies by every thread, a block barrier per K/V tile). This script times,
in one run on one GPU:

  - stage 12 (mma.sync, cp.async, no warp specialization: none of Hopper's pieces),
  - stage 14's six forward variants,
  - PyTorch SDPA's FLASH_ATTENTION (FA2) and CUDNN_ATTENTION backends,

non-causal and causal (`flashlab bench --json` and tools/sdpa_bench.py), and then profiles one
forward launch of each stage 14 variant and of stage 12 with Nsight Compute: the tensor pipe's
active cycles, the MUFU (XU: ex2) pipe, issue slots, the three largest issue-stall reasons, and
shared-memory bank conflicts of the threads' own loads and stores. Metric names are checked
against `ncu --query-metrics` first; one the tool does not know is reported as n/a, not guessed.

  python3 tools/hopper_ablation.py --flashlab build-gpu/flashlab --out ablation
  python3 tools/hopper_ablation.py --flashlab build-gpu/flashlab --no-ncu --T 16384 --B 2

Writes ablation.md (the two tables) and the raw JSON / CSV into --out and prints the tables.
Needs a Hopper GPU, PyTorch for the SDPA rows, and ncu for the profile (skipped, and said so,
when ncu is missing).
"""
import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = (("12", ""), ("14", "wgmma-only"), ("14", "wgmma-tma"), ("14", "serial"), ("14", "no-overlap"),
            ("14", "no-pingpong"), ("14", ""))
LABEL = {("12", ""): "stage 12 (mma.sync)", ("14", "wgmma-only"): "14 wgmma-only (cp.async)",
         ("14", "wgmma-tma"): "14 wgmma-tma (TMA, no producer)", ("14", "serial"): "14 serial (neither)",
         ("14", "no-overlap"): "14 ping-pong only", ("14", "no-pingpong"): "14 in-warpgroup overlap only",
         ("14", ""): "14 both (the stage)"}
KERNEL = {"12": "regex:tc_forward_kernel", "14": "regex:hopper_forward_(inline_)?kernel"}
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"
# what the profile table shows, each (column, metric) tried in order until ncu knows one
WANTED = (
    ("tensor pipe %", ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                       "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                       "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")),
    ("MUFU (XU) %", ("sm__pipe_xu_cycles_active.avg.pct_of_peak_sustained_active",
                     "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active")),
    ("issue active %", ("smsp__issue_active.avg.pct_of_peak_sustained_active",)),
    ("smem bank conflicts", ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",)),
    ("L2 %", ("lts__t_sectors.avg.pct_of_peak_sustained_elapsed",)),
    ("DRAM %", ("dram__throughput.avg.pct_of_peak_sustained_elapsed",)),
    ("kernel ms", ("gpu__time_duration.sum",)),
)


def run(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=False, text=True, capture_output=True, **kw)


def bench(args, causal):
    cmd = [args.flashlab, "bench", "--device", "cuda", "--stages", "12,14", "--T", str(args.T), "--B", str(args.B),
           "--H", str(args.H), "--d", args.d, "--reps", str(args.reps), "--json"] + (["--causal"] if causal else [])
    r = run(cmd)
    if r.returncode != 0:
        sys.exit("flashlab bench failed (exit %d):\n%s" % (r.returncode, r.stderr))
    return json.loads(r.stdout)


def sdpa(args, causal, path):
    cmd = [sys.executable, os.path.join(HERE, "sdpa_bench.py"), "--dtype", "bf16", "--T", str(args.T), "--B",
           str(args.B), "--H", str(args.H), "--d", args.d, "--reps", str(args.reps), "--json", path] + \
          (["--causal"] if causal else [])
    r = run(cmd)
    if r.returncode != 0:
        print("sdpa_bench failed (exit %d): its rows are left empty\n%s" % (r.returncode, r.stderr[-2000:]))
        return []
    with open(path) as f:
        return json.load(f)


def timing_table(args, rows, sdpa_rows):
    ds = [int(x) for x in args.d.split(",")]
    cols = [(causal, d) for causal in (False, True) for d in ds]
    ours = {(r["stage"], r["variant"], r["causal"], r["d"]): r for r in rows}
    theirs = {(r["backend"], r["causal"], r["d"]): r for r in sdpa_rows}
    head = "| forward, TFLOP/s | " + " | ".join(("causal " if c else "") + "d = %d" % d for c, d in cols) + " |"
    out = ["B = %d, H = %d, T = %d, bf16, one run" % (args.B, args.H, args.T), "", head,
           "|---" * (len(cols) + 1) + "|"]

    def cell(r, key):
        if not r or r.get(key) is None:
            return (r or {}).get("error") or (r or {}).get("note") or "—"
        return "%.0f" % (r[key] / 1e3 if key == "gflops_per_s" else r[key])

    for stage, variant in VARIANTS:
        out.append("| %s | " % LABEL[(stage, variant)] +
                   " | ".join(cell(ours.get((stage, variant, c, d)), "gflops_per_s") for c, d in cols) + " |")
    for backend, label in (("FLASH_ATTENTION", "SDPA FA2"), ("CUDNN_ATTENTION", "SDPA cuDNN")):
        out.append("| %s | " % label + " | ".join(cell(theirs.get((backend, c, d)), "tflops_per_s")
                                                for c, d in cols) + " |")
    return out


def known_metrics(ncu):
    r = run([ncu, "--query-metrics", "--chip", "gh100"])
    names = set()
    for line in r.stdout.splitlines():
        word = line.split(" ", 1)[0].strip()
        if "__" in word:
            names.add(word)
    return names


def base_name(metric):
    for suffix in (".avg.pct_of_peak_sustained_active", ".sum", ".ratio"):
        if metric.endswith(suffix):
            return metric[: -len(suffix)]
    return metric.split(".")[0]


def chosen_metrics(known):
    columns = []
    for column, candidates in WANTED:
        columns.append((column, next((m for m in candidates if base_name(m) in known), None)))
    # the query lists them as smsp__average_warps_issue_stalled_<reason>_per_issue_active
    stalls = sorted(n + ".ratio" for n in known if n.startswith(STALL_PREFIX) and n + ".ratio" != n and
                    n.endswith(STALL_SUFFIX[: -len(".ratio")]))
    return columns, stalls


def profile(args, ncu, stage, variant, d, metrics, out_dir):
    # bench runs: (a preflight when the outputs are large,) a counting run, one warm-up, one timed
    # run: skipping two launches of the kernel lands on a full-size run in every case
    cmd = [ncu, "--kernel-name", KERNEL[stage], "--launch-skip", "2", "--launch-count", "1", "--csv", "--page",
           "raw", "--metrics", ",".join(metrics), args.flashlab, "bench", "--device", "cuda", "--stages", stage,
           "--variant", variant, "--T", str(args.T), "--B", str(args.B), "--H", str(args.H), "--d", str(d),
           "--reps", "1"]
    r = run(cmd)
    name = "ncu_%s_%s_d%d.csv" % (stage, variant or "default", d)
    with open(os.path.join(out_dir, name), "w") as f:
        f.write(r.stdout + "\n# stderr\n" + r.stderr)
    lines = [l for l in r.stdout.splitlines() if l.startswith('"')]
    table = list(csv.reader(io.StringIO("\n".join(lines))))
    if r.returncode != 0 or len(table) < 2:
        return None, "ncu exit %d (%s)" % (r.returncode, name)
    header, values = table[0], table[-1]  # raw page: names, units, then one row per profiled launch
    return dict(zip(header, values)), None


def number(x):
    try:
        return float(str(x).replace(",", ""))
    except ValueError:
        return None


def profile_table(args, ncu, out_dir):
    known = known_metrics(ncu)
    columns, stalls = chosen_metrics(known)
    metrics = [m for _, m in columns if m] + stalls
    out = ["Nsight Compute, one forward launch each (B = %d, H = %d, T = %d, non-causal)" % (args.B, args.H, args.T),
           "", "| | d | " + " | ".join(c for c, _ in columns) + " | largest stalls (warps per issue) |",
           "|---" * (len(columns) + 3) + "|"]
    for column, metric in columns:
        if metric is None:
            out.insert(1, "(%s: no metric of this ncu answers it: n/a)" % column)
    for d in (int(x) for x in args.d.split(",")):
        for stage, variant in VARIANTS:
            got, why = profile(args, ncu, stage, variant, d, metrics, out_dir)
            if got is None:
                out.append("| %s | %d | %s |" % (LABEL[(stage, variant)], d, why))
                continue
            cells = []
            for column, metric in columns:
                v = number(got.get(metric)) if metric else None
                if v is not None and metric.startswith("gpu__time_duration"):
                    v /= 1e6  # ns
                cells.append("n/a" if v is None else ("%.3f" % v if column == "kernel ms" else "%.0f" % v
                                                      if "conflicts" in column else "%.1f" % v))
            ranked = sorted(((number(got.get(s)) or 0.0, s[len(STALL_PREFIX): -len(STALL_SUFFIX)]) for s in stalls),
                            reverse=True)[:3]
            out.append("| %s | %d | " % (LABEL[(stage, variant)], d) + " | ".join(cells) + " | " +
                       ", ".join("%s %.2f" % (n, v) for v, n in ranked) + " |")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flashlab", default="build-gpu/flashlab", help="the flashlab binary (CUDA build with sm_90a)")
    ap.add_argument("--out", default="ablation", help="folder for ablation.md and the raw files")
    ap.add_argument("--T", type=int, default=4096)
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-ncu", action="store_true", help="time only; no Nsight Compute profile")
    ap.add_argument("--profile-only", action="store_true", help="the Nsight Compute profile only; no timing")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    report = []
    if not args.profile_only:
        rows, sdpa_rows = [], []
        for causal in (False, True):
            rows += bench(args, causal)
            sdpa_rows += sdpa(args, causal, os.path.join(args.out, "sdpa_%s.json" % ("causal" if causal else "full")))
        with open(os.path.join(args.out, "bench.json"), "w") as f:
            json.dump(rows, f, indent=1)
        report = timing_table(args, rows, sdpa_rows)
    ncu = shutil.which("ncu")
    if args.no_ncu and args.profile_only:
        sys.exit("--no-ncu and --profile-only leave nothing to do")
    if args.no_ncu:
        pass
    elif ncu is None:
        report += ["", "(no ncu on PATH: the profile was not taken)"]
    else:
        report += ([""] if report else []) + profile_table(args, ncu, args.out)
    text = "\n".join(report) + "\n"
    with open(os.path.join(args.out, "ablation.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
