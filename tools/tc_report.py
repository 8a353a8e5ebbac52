#!/usr/bin/env python3
"""tc_report.py — the tensor-core table of tools/gpu-check.sh: stages 12 and 14 (bf16) beside PyTorch SDPA.

Reads `flashlab bench --device cuda --stages 12,14 --json` files and `tools/sdpa_bench.py --dtype
bf16 --json` files, given one by one or as a gpu-check output folder (then its tc_bench_*.json and
tc_sdpa_*.json). Prints one row per (direction, mask, B, H, T, d) and stage variant: its time and
TFLOP/s, the TFLOP/s of SDPA's FLASH_ATTENTION (FA2) and CUDNN_ATTENTION (cuDNN) backends, and the
stage's ratio to each. TFLOP/s are the tools' own (docs/design.md: forward 4*B*H*T^2*d, halved when causal;
forward + backward 3.5x forward); a pair whose FLOP counts disagree is flagged, not hidden. A
backend that skipped a shape, or a stage 12 row that failed, shows why below the table, never a
number.

Rows at T = 4096 carry the acceptance of the stage's issue, judged on the stage's default variant
(both d, non-causal and causal, summed up per mask; other variants, such as stage 14's
"per-tile" and its ablation variants "no-pingpong", "no-overlap" and "serial", are printed
beside it but not judged): stage 12 (issue 13) the forward at least 0.6x
FA2 and forward + backward at least 0.5x FA2; stage 14 (issue 26) the forward at least 1.2x FA2
(and at d = 128 at least 0.8x cuDNN) and forward + backward at least 1.0x FA2.

  python3 tools/tc_report.py gpu-out
  python3 tools/tc_report.py tc_bench_fwd.json tc_sdpa_fwd.json [more.json ...] [--strict]

Exit: 0 the table was printed; 1 with --strict when an acceptance row is not met or cannot be
judged; 2 no usable input. Standard library only: it runs offline on copied JSON.
"""
import argparse
import glob
import json
import os
import sys

ACCEPT_T = 4096
ACCEPT_D = (64, 128)
# per stage and direction: (least ratio to FA2, least ratio to cuDNN at d = 128 or None), at T = ACCEPT_T
ACCEPT = {"12": {"fwd": (0.6, None), "bwd": (0.5, None)},
          "14": {"fwd": (1.2, 0.8), "bwd": (1.0, None)}}
ISSUE = {"12": 13, "14": 26}
STAGES = tuple(ACCEPT)
FA2, CUDNN = "FLASH_ATTENTION", "CUDNN_ATTENTION"
DIRECTION_LABEL = {"fwd": "fwd", "bwd": "fwd+bwd"}


def warn(text):
    print("tc_report.py: " + text, file=sys.stderr)


def input_files(paths):
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(glob.glob(os.path.join(path, "tc_bench_*.json")) +
                           glob.glob(os.path.join(path, "tc_sdpa_*.json")))
            if not found:
                warn("%s holds no tc_bench_*.json or tc_sdpa_*.json" % path)
            files += found
        else:
            files.append(path)
    return files


def load_rows(files):
    """(stage 12 and 14 rows, bf16 SDPA rows, the SDPA device names) from the files; a file that is not a
    JSON array (a bench that failed before printing, 'no CUDA device') is reported and passed over."""
    ours, theirs, devices, others = [], [], set(), 0
    for path in files:
        try:
            with open(path) as f:
                rows = json.load(f)
        except (OSError, ValueError) as e:
            warn("%s: not read (%s)" % (path, str(e).splitlines()[0] if str(e) else type(e).__name__))
            continue
        if not isinstance(rows, list):
            warn("%s: not a JSON array of rows" % path)
            continue
        for r in rows:
            if not isinstance(r, dict):
                continue
            if "stage" in r:  # flashlab bench
                if r.get("stage") in STAGES and r.get("device") == "cuda" and not r.get("mla"):
                    ours.append(r)
                else:
                    others += 1
            elif "backend" in r and "direction" in r:  # sdpa_bench.py (not --decode, not --copy-bandwidth)
                if r.get("dtype", "float32") == "bf16":
                    theirs.append(r)
                    devices.add(r.get("device", "?"))
                else:
                    others += 1
    if others:
        warn("left out %d rows that are not stage 12 or 14 on cuda or not bf16 SDPA" % others)
    return ours, theirs, devices


def ours_key(r):
    return (r.get("direction", "fwd"), bool(r.get("causal")), r["B"], r["Hq"], r["Hkv"], r["Tq"], r["Tk"], r["d"])


def sdpa_key(r):
    return (r.get("direction", "fwd"), bool(r.get("causal")), r["B"], r["H"], r["H"], r["T"], r["T"], r["d"])


def tflops_of_ours(r):
    if r.get("error") is not None or not r.get("time_ms") or not r.get("gflops_per_s"):
        return None
    return r["gflops_per_s"] / 1000.0


class Notes:
    """Footnotes: a cell too narrow for a reason says [n], the reason goes below the table."""

    def __init__(self):
        self.lines = []

    def add(self, text):
        if text not in self.lines:
            self.lines.append(text)
        return "[%d]" % (self.lines.index(text) + 1)


def sdpa_cell(r, name, what, notes):
    """(TFLOP/s or None, cell text) of one backend's row."""
    if r is None:
        return None, "not run"
    if r.get("tflops_per_s") is None or not r.get("time_ms"):
        return None, "skip" + notes.add("%s %s: %s" % (name, what, r.get("note") or "no time recorded"))
    return r["tflops_per_s"], "%.1f" % r["tflops_per_s"]


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt_ratio(x):
    return "%.2fx" % x if x is not None else "-"


def verdict(stage, direction, T, d, ours, fa2, cudnn):
    """None off the acceptance rows, else (met: True/False/None, text)."""
    if T != ACCEPT_T or d not in ACCEPT_D:
        return None
    need_fa2, need_cudnn = ACCEPT[stage][direction]
    need_cudnn = need_cudnn if d == 128 else None
    if ours is None:
        return None, "cannot tell (no stage %s number)" % stage
    if fa2 is None or (need_cudnn is not None and cudnn is None):
        return None, "cannot tell (no %s number)" % ("FA2" if fa2 is None else "cuDNN")
    x = ours / fa2
    met = x >= need_fa2
    text = "%.3fx FA2, needs %.1fx" % (x, need_fa2)
    if need_cudnn is not None:
        y = ours / cudnn
        met = met and y >= need_cudnn
        text += "; %.3fx cuDNN, needs %.1fx" % (y, need_cudnn)
    return met, "%s (%s)" % ("met" if met else "NOT met", text)


def report(ours, theirs, devices, out=sys.stdout):
    ours_by = {}
    for r in ours:
        ours_by.setdefault(ours_key(r), []).append(r)
    sdpa_by = {}
    for r in theirs:
        sdpa_by[sdpa_key(r) + (r["backend"],)] = r  # a later file's row replaces an earlier one
    keys = sorted(set(ours_by) | {k[:-1] for k in sdpa_by},
                  key=lambda k: (k[0] != "fwd", k[1], k[2], k[3], k[4], k[6], k[7]))
    device = ", ".join(sorted(devices)) if devices else "device unknown (no SDPA rows)"
    p = lambda *a: print(*a, file=out)
    p("stages 12 and 14 (bf16, tensor cores) beside PyTorch SDPA in bf16, same run: %s" % device)
    p("TFLOP/s: forward 4*B*H*T^2*d / time, fwd+bwd 3.5x that, halved when causal; "
      "FA2 = SDPA FLASH_ATTENTION, cuDNN = SDPA CUDNN_ATTENTION")
    head = "%-7s %-6s %3s %3s %6s %4s | %-8s %9s %8s | %8s %10s | %7s %8s | %s" % (
        "dir", "mask", "B", "H", "T", "d", "stage", "ms", "TF/s", "FA2 TF/s", "cuDNN TF/s", "/FA2", "/cuDNN",
        "acceptance (T = %d)" % ACCEPT_T)
    p(head)
    p("-" * len(head))
    notes = Notes()
    verdicts = []  # (direction, causal, d, met: True / False / None = cannot tell, label, stage)
    for key in keys:
        direction, causal, B, Hq, Hkv, Tq, Tk, d = key
        T = Tk
        mask = "causal" if causal else "full"
        what = "%s %s T=%d d=%d" % (DIRECTION_LABEL.get(direction, direction), mask, T, d)
        fa2_tf, fa2_cell = sdpa_cell(sdpa_by.get(key + (FA2,)), "FA2", what, notes)
        cd_tf, cd_cell = sdpa_cell(sdpa_by.get(key + (CUDNN,)), "cuDNN", what, notes)
        shape = "%-7s %-6s %3d %3s %6s %4d" % (DIRECTION_LABEL.get(direction, direction), mask, B,
                                               Hq if Hq == Hkv else "%d/%d" % (Hq, Hkv),
                                               T if Tq == Tk else "%d/%d" % (Tq, Tk), d)
        mine = ours_by.get(key) or [None]
        for r in sorted(mine, key=lambda x: (x.get("stage", ""), x.get("variant", "")) if x else ("", "")):
            stage = r.get("stage", "") if r else ""
            label = stage if not r or not r.get("variant") else "%s %s" % (stage, r["variant"])
            if r is None:
                ms_cell, tf_cell, tf = "not run", "", None
            elif tflops_of_ours(r) is None:
                tf = None
                ms_cell, tf_cell = "error" + notes.add("stage %s %s: %s" % (label, what, r.get("error") or
                                                                          "no time recorded")), ""
            else:
                tf = tflops_of_ours(r)
                ms_cell, tf_cell = "%.3f" % r["time_ms"], "%.1f" % tf
            flag = ""
            for name, b in (("FA2", FA2), ("cuDNN", CUDNN)):
                s = sdpa_by.get(key + (b,))
                if r is not None and s is not None and r.get("flops") and s.get("flops") and \
                        abs(r["flops"] - s["flops"]) > 1e-9 * max(r["flops"], s["flops"]):
                    flag = " FLOPs differ" + notes.add("%s: stage %s counts %.6g FLOPs, SDPA %s %.6g" %
                                                       (what, stage, r["flops"], name, s["flops"]))
            # judged: the default variant, on self-attention shapes (what SDPA ran)
            judged = stage and not r.get("variant") and Tq == Tk and Hq == Hkv
            v = verdict(stage, direction, T, d, tf, fa2_tf, cd_tf) if judged else None
            if v is not None:
                verdicts.append((direction, causal, d, v[0], label, stage))
            p(("%s | %-8s %9s %8s | %8s %10s | %7s %8s | %s%s" % (
                shape, label, ms_cell, tf_cell, fa2_cell, cd_cell, fmt_ratio(ratio(tf, fa2_tf)),
                fmt_ratio(ratio(tf, cd_tf)), v[1] if v else "", flag)).rstrip())
    if notes.lines:
        p()
        for i, line in enumerate(notes.lines, 1):
            p("[%d] %s" % (i, line))
    all_met = True
    for label in sorted({v[4] for v in verdicts}):
        stage = label.split()[0]
        fwd, bwd = ACCEPT[stage]["fwd"], ACCEPT[stage]["bwd"]
        p()
        p("acceptance of stage %s (issue %d), judged on %s: at T = %d the forward >= %.1fx FA2%s and fwd+bwd "
          ">= %.1fx FA2, d = %s" % (stage, ISSUE[stage], label, ACCEPT_T, fwd[0],
                                    " (d = 128: >= %.1fx cuDNN)" % fwd[1] if fwd[1] else "", bwd[0],
                                    " and ".join(str(d) for d in ACCEPT_D)))
        for causal in (False, True):
            mask = "causal" if causal else "non-causal"
            mine = [v for v in verdicts if v[1] == causal and v[4] == label]
            missing = ["%s d=%d" % (DIRECTION_LABEL[dr], d) for dr in ("fwd", "bwd") for d in ACCEPT_D
                       if not any(v[0] == dr and v[2] == d for v in mine)]
            met = sum(1 for v in mine if v[3] is True)
            bad = ["%s d=%d" % (DIRECTION_LABEL[v[0]], v[2]) for v in mine if v[3] is False]
            unknown = ["%s d=%d" % (DIRECTION_LABEL[v[0]], v[2]) for v in mine if v[3] is None]
            line = "  %-11s %d of %d rows met" % (mask + ":", met, len(mine))
            if bad:
                line += "; not met: " + ", ".join(bad)
            if unknown:
                line += "; cannot tell: " + ", ".join(unknown)
            if missing:
                line += "; no row for " + ", ".join(missing)
            p(line)
            all_met = all_met and not bad and not unknown and not missing
    return all_met


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", metavar="PATH",
                    help="a gpu-check output folder (its tc_bench_*.json, tc_sdpa_*.json) or JSON files")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 unless every acceptance row (each stage's default variant, both masks) is met")
    args = ap.parse_args(argv[1:])
    ours, theirs, devices = load_rows(input_files(args.inputs))
    if not ours and not theirs:
        warn("no stage 12 or 14 rows and no bf16 SDPA rows in %s" % ", ".join(args.inputs))
        return 2
    all_met = report(ours, theirs, devices)
    return 1 if args.strict and not all_met else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
