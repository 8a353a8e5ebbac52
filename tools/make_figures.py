#!/usr/bin/env python3
"""make_figures.py — the figures of docs/figures/, drawn from `flashlab bench --json`.

  tools/make_figures.py [--flashlab build/flashlab] [--out docs/figures] [--gpu DIR]

Figure 1, hbm_per_stage.svg (always; CPU only, deterministic): HBM bytes read and written by every
CPU stage implementation on the tour problem (the shape of golden/cases/tour), forward in one panel
and forward + backward (both passes) of the stages with a backward in the other, on a log axis.
Stages 07, 08 and 10 run the problem that shows what they add (--causal; --Hkv 1; --window 16);
variants with equal counters share a row. The counters are exact closed forms (docs/hbm_model.md)
and the SVG is written without dates or random ids, so the same build and matplotlib draw the same
SVG byte for byte.

Figure 2, gpu_tflops.svg (only with --gpu DIR): TFLOP/s of the CUDA stages beside PyTorch SDPA per
T and d, forward and forward + backward (and causal, when the run has it), from the output folder
of tools/gpu-check.sh: bench.json (or its parts bench_*.json) and sdpa_*.json.

Needs Python with NumPy and matplotlib. Stage 09 (MLA) is left out: its bench times an MLA step on
its own inputs, not an attention problem of the tour's shape. So is stage 12's CPU side: it is the
reference of the bf16 tensor-core kernels, counting their 2-byte inputs, in a float32 figure.
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys
import time

from need_modules import need  # the same folder: re-runs under a python3 that has the modules

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOUR = os.path.join(ROOT, "golden", "cases", "tour")
SRAM = 128 * 1024  # the CPU tiled stages' M, named explicitly so that the label stays true
WINDOW = 16        # stage 10's row: a window well below the tile size (Bc = 64 at d = 64)
FIG1 = "hbm_per_stage.svg"
FIG2 = "gpu_tflops.svg"
READ_COLOR, WRITE_COLOR = "#3b6ea5", "#e08a2c"


def setup_matplotlib():
    need("numpy", "matplotlib")
    try:
        import numpy  # noqa: F401  (the tour case's .npy headers)
        import matplotlib
    except ImportError as e:
        sys.exit("make_figures.py: %s (%s): it needs NumPy and matplotlib (python3-numpy, python3-matplotlib)"
                 % (e, sys.executable))
    matplotlib.rcdefaults()  # no user matplotlibrc: the same SVG everywhere
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams["svg.hashsalt"] = "flashlab"  # fixed ids in the SVG
    plt.rcParams["font.size"] = 9
    return plt


def save(plt, fig, path):
    fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
    print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


# ---- figure 1: HBM bytes per CPU stage ------------------------------------------------------------

def npy_shape(path):
    import numpy as np
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, _, _ = read_header(f)
    return shape


def tour_shape():
    """(B, Hq, Hkv, Tq, Tk, d) of golden/cases/tour, from the .npy headers."""
    B, Hq, Tq, d = npy_shape(os.path.join(TOUR, "q.npy"))
    _, Hkv, Tk, dk = npy_shape(os.path.join(TOUR, "k.npy"))
    dv = npy_shape(os.path.join(TOUR, "v.npy"))[3]
    if not (dk == d == dv):
        sys.exit("make_figures.py: the tour case has d = %d, dv = %d; flashlab bench needs d = dv" % (d, dv))
    return B, Hq, Hkv, Tq, Tk, d


def bench(flashlab, shape, extra):
    """Rows of one `flashlab bench --json` run on the tour shape (one timed rep: only counters are used)."""
    B, Hq, Hkv, Tq, Tk, d = shape
    cmd = [flashlab, "bench", "--device", "cpu", "--T", str(Tk), "--B", str(B), "--H", str(Hq), "--d", str(d),
           "--sram", str(SRAM), "--reps", "1", "--json"] + extra
    if Tq != Tk:
        cmd += ["--Tq", str(Tq)]
    if Hkv != Hq and "--Hkv" not in extra:
        cmd += ["--Hkv", str(Hkv)]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if run.returncode != 0:
        sys.exit("make_figures.py: `%s` exited %d:\n%s" % (" ".join(cmd), run.returncode, run.stderr.strip()))
    rows = json.loads(run.stdout)
    for r in rows:
        if r.get("error"):
            sys.exit("make_figures.py: stage %s %s failed in `%s`: %s" % (r["stage"], r["variant"], " ".join(cmd),
                                                                         r["error"]))
    return rows


# The stages whose row runs the problem that shows what they add (any other CPU stage runs the plain
# tour problem): 07's causal skip, 08's K/V shared by the group (MQA: Hkv = 1), 10's window band.
FEATURE_FLAGS = {"07": ["--causal"], "08": ["--Hkv", "1"], "10": ["--window", str(WINDOW)]}


def cpu_stages(flashlab):
    """The CPU stages of this build, in ladder order (`flashlab list`), without 09 (MLA) and 12 (bf16)."""
    run = subprocess.run([flashlab, "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if run.returncode != 0:
        sys.exit("make_figures.py: `%s list` exited %d: %s" % (flashlab, run.returncode, run.stderr.strip()))
    stages = set()
    for line in run.stdout.splitlines():
        f = line.split()
        if len(f) >= 3 and f[0].isdigit() and f[2] == "cpu" and f[0] not in ("09", "12"):
            stages.add(f[0])
    return sorted(stages)


def cpu_rows(flashlab, shape):
    """The two panels' rows, in ladder order: (label, read bytes, written bytes); and whether stages
    07, 08, 10 on the plain problem count exactly stage 05's forward and stage 06's forward + backward
    bytes (stage 10's naive backward also writes D, 4·B·Hq·Tq bytes), which the figure's note says."""
    B, Hq, Hkv, Tq, Tk, d = shape
    stages = cpu_stages(flashlab)
    plain = [s for s in stages if s not in FEATURE_FLAGS]
    featured = [s for s in stages if s in FEATURE_FLAGS]
    fwd, bwd = [], []
    plain_same = bool(featured) and "05" in stages and "06" in stages
    for direction, panel in (("fwd", fwd), ("bwd", bwd)):
        rows = []
        if plain:
            rows += bench(flashlab, shape, ["--stages", ",".join(plain), "--direction", direction])
        for s in featured:
            rows += bench(flashlab, shape, ["--stages", s, "--direction", direction] + FEATURE_FLAGS[s])
        if direction == "bwd":
            rows = [r for r in rows if r.get("direction") == "bwd"]  # the stages with a backward
        if featured and plain_same:  # the featured stages on the plain problem, for the note
            ref = {(r["stage"], r["variant"]): (r["hbm_read_bytes"], r["hbm_written_bytes"]) for r in rows}
            for r in bench(flashlab, shape, ["--stages", ",".join(featured), "--direction", direction]):
                if direction == "bwd" and r.get("direction") != "bwd":
                    continue
                want = ref.get(("05", "")) if direction == "fwd" else ref.get(("06", r["variant"]))
                got = (r["hbm_read_bytes"], r["hbm_written_bytes"])
                if direction == "bwd" and (r["stage"], r["variant"]) == ("10", "naive"):
                    got = (got[0], got[1] - 4 * B * Hq * Tq)
                plain_same = plain_same and want == got
        by_stage = {}
        for r in rows:
            by_stage.setdefault(r["stage"], []).append(r)
        for stage in sorted(by_stage):
            impls = by_stage[stage]
            flags = FEATURE_FLAGS.get(stage)
            base = "%s %s%s" % (stage, impls[0]["name"], (" (%s)" % " ".join(flags)) if flags else "")
            many = len(impls) > 1
            # variants whose counters are equal (the same forward code) share one row
            groups = []
            for r in impls:
                key = (r["hbm_read_bytes"], r["hbm_written_bytes"])
                name = (r["variant"] or "flash") if many else ""
                for g in groups:
                    if g[0] == key:
                        g[1].append(name)
                        break
                else:
                    groups.append((key, [name]))
            for (read, written), names in groups:
                names = ", ".join(n for n in names if n)
                panel.append((base + ((" · " + names) if names else ""), read, written))
    return fwd, bwd, plain_same


def fmt_bytes(n):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return "%.3g %s" % (n / scale, unit)
    return "%d B" % n


def figure_hbm(plt, flashlab, out):
    shape = tour_shape()
    B, Hq, Hkv, Tq, Tk, d = shape
    fwd, bwd, plain_same = cpu_rows(flashlab, shape)
    panels = [(fwd, "forward"), (bwd, "forward + backward (both passes)")]
    n = max(len(fwd), len(bwd))
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 0.42 * n + 1.6), sharex=True)
    lo = min(min(r[1], r[2]) for rows, _ in panels for r in rows)
    hi = max(max(r[1], r[2]) for rows, _ in panels for r in rows)
    for ax, (rows, title) in zip(axes, panels):
        h = 0.38
        for i, (label, read, written) in enumerate(rows):
            y = i
            ax.barh(y - h / 2, read, height=h, color=READ_COLOR, label="read" if i == 0 else None)
            ax.barh(y + h / 2, written, height=h, color=WRITE_COLOR, label="written" if i == 0 else None)
            ax.text(read * 1.06, y - h / 2, fmt_bytes(read), va="center", fontsize=7)
            ax.text(written * 1.06, y + h / 2, fmt_bytes(written), va="center", fontsize=7)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([r[0] for r in rows])
        ax.set_ylim(n - 0.5, -0.6)
        ax.set_xscale("log")
        ax.set_xlim(lo / 2, hi * 4)
        ticks = [10.0 ** k for k in range(int(math.floor(math.log10(lo / 2))) + 1,
                                           int(math.floor(math.log10(hi * 4))) + 1)]
        ax.set_xticks(ticks)
        ax.set_xticklabels([fmt_bytes(t) for t in ticks])
        ax.set_xlabel("HBM bytes (log scale)")
        ax.set_title(title)
        ax.grid(axis="x", which="major", color="#dddddd", linewidth=0.6)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    axes[0].legend(loc="lower right", frameon=False)
    heads = "H = %d" % Hq if Hq == Hkv else "Hq = %d, Hkv = %d" % (Hq, Hkv)
    seq = "T = %d" % Tk if Tq == Tk else "Tq = %d, Tk = %d" % (Tq, Tk)
    fig.suptitle("HBM traffic of the CPU stages on the tour problem (B = %d, %s, %s, d = %d, float32; "
                 "M = %d KiB): counted by flashlab bench" % (B, heads, seq, d, SRAM // 1024), fontsize=10)
    fig.tight_layout()
    note = ("Stages 07, 08 and 10 run the problem that shows what they add: the causal mask; one K/V head for the %d "
            "query heads (MQA, --Hkv 1); a %d-key sliding window." % (Hq, WINDOW))
    if plain_same:
        note += ("\nWithout those flags they count exactly what stage 05 counts forward and stage 06 forward + "
                 "backward (stage 10's naive backward also writes D: 4·B·H·T = %s more)." % fmt_bytes(4 * B * Hq * Tq))
    else:
        print("make_figures.py: note: stages 07, 08, 10 on the plain problem do not count what 05 and 06 do; "
              "the figure's note leaves that sentence out")
    fig.text(0.01, -0.01, note, ha="left", va="top", fontsize=8, color="#444444")
    save(plt, fig, os.path.join(out, FIG1))


# ---- figure 2: TFLOP/s on the GPU beside PyTorch SDPA ------------------------------------------------

SDPA_NAMES = {"EFFICIENT_ATTENTION": "SDPA mem-efficient", "MATH": "SDPA math", "FLASH_ATTENTION": "SDPA flash",
              "CUDNN_ATTENTION": "SDPA cuDNN"}
SDPA_STYLE = {"EFFICIENT_ATTENTION": ("black", "-"), "MATH": ("#777777", "-"), "FLASH_ATTENTION": ("black", "--"),
              "CUDNN_ATTENTION": ("#777777", "--")}
VARIANT_LINE = {"": "-", "deterministic": "--", "naive": ":"}


def load_json(path):
    with open(path) as f:
        return json.load(f)


def gpu_rows(folder):
    """(ours, theirs): the CUDA self-attention rows of bench.json and every sdpa_*.json row."""
    if os.path.isfile(os.path.join(folder, "bench.json")):
        paths = [os.path.join(folder, "bench.json")]
    else:  # bench.json is gpu-check's concatenation of these
        paths = sorted(glob.glob(os.path.join(folder, "bench_*.json")))
    sdpa = sorted(glob.glob(os.path.join(folder, "sdpa_*.json")))
    if not paths or not sdpa:
        sys.exit("make_figures.py: --gpu %s needs the output folder of tools/gpu-check.sh, with bench.json "
                 "(or bench_*.json) and sdpa_*.json; found %s" % (folder, ", ".join(
                     os.path.basename(p) for p in paths + sdpa) or "neither"))
    ours = []
    for p in paths:
        ours += load_json(p)
    theirs = []
    for p in sdpa:
        theirs += load_json(p)
    ours = [r for r in ours if r.get("device") == "cuda" and r["Tq"] == r["Tk"] and r["Hq"] == r["Hkv"]
            and not r.get("window") and not r.get("sink_tokens") and not r.get("sinks") and r["stage"] != "09"]
    return ours, theirs


def figure_gpu(plt, ours, theirs, folder, out, stage_filter):
    panels = [(c, dr) for c in (False, True) for dr in ("fwd", "bwd")
              if any(bool(r.get("causal")) == c and r.get("direction", "fwd") == dr for r in ours + theirs)]
    ds = sorted({r["d"] for r in ours} | {r["d"] for r in theirs})
    if not panels or not ds:
        sys.exit("make_figures.py: no CUDA self-attention rows in %s" % folder)
    fig, axes = plt.subplots(len(panels), len(ds), figsize=(5.2 * len(ds), 3.4 * len(panels)), squeeze=False)
    stage_colors = {}
    palette = plt.get_cmap("tab10").colors
    for row, (causal, direction) in enumerate(panels):
        if stage_filter:
            keep = set(stage_filter)
        else:  # the lesson of each panel: 01/04/05 forward, 06 forward + backward, 07 causal
            keep = {"07"} if causal else ({"01", "04", "05"} if direction == "fwd" else {"06"})
        mine = [r for r in ours if bool(r.get("causal")) == causal and r.get("direction") == direction
                and r["stage"] in keep and r.get("error") is None]
        ref = [r for r in theirs if bool(r.get("causal")) == causal and r.get("direction", "fwd") == direction
               and r.get("tflops_per_s")]
        for col, d in enumerate(ds):
            ax = axes[row][col]
            series = {}
            for r in mine:
                if r["d"] == d:
                    key = ("ours", r["stage"], r["name"], r["variant"])
                    series.setdefault(key, []).append((r["Tk"], r["gflops_per_s"] / 1000.0))
            for r in ref:
                if r["d"] == d:
                    series.setdefault(("sdpa", r["backend"]), []).append((r["T"], r["tflops_per_s"]))
            ts = set()
            for key in sorted(series):
                pts = sorted(series[key])
                ts |= {t for t, _ in pts}
                if key[0] == "ours":
                    _, stage, name, variant = key
                    color = stage_colors.setdefault(stage, palette[len(stage_colors) % len(palette)])
                    style = VARIANT_LINE.get(variant, "-.")
                    label = "%s %s%s" % (stage, name, (" " + variant) if variant else "")
                    ax.plot([t for t, _ in pts], [v for _, v in pts], style, color=color, marker="o",
                            markersize=4, label=label)
                else:
                    color, style = SDPA_STYLE.get(key[1], ("#aaaaaa", "-."))
                    ax.plot([t for t, _ in pts], [v for _, v in pts], style, color=color, marker="s",
                            markersize=4, linewidth=2, label=SDPA_NAMES.get(key[1], "SDPA " + key[1].lower()))
            ax.set_xscale("log", base=2)
            if ts:
                ax.set_xticks(sorted(ts))
                ax.set_xticklabels([str(t) for t in sorted(ts)])
            ax.set_ylim(bottom=0)
            ax.set_xlabel("T")
            ax.set_ylabel("TFLOP/s")
            what = "forward + backward" if direction == "bwd" else "forward"
            ax.set_title("%s%s, d = %d" % ("causal " if causal else "", what, d))
            ax.grid(color="#dddddd", linewidth=0.6)
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
            if series:
                ax.legend(fontsize=7, frameon=False)
            else:
                ax.text(0.5, 0.5, "no rows", transform=ax.transAxes, ha="center", va="center")
    devices = sorted({r.get("device") for r in theirs if r.get("device")})
    sizes = sorted({(r["B"], r["Hq"]) for r in ours} | {(r["B"], r["H"]) for r in theirs})
    fig.suptitle("flashlab CUDA stages beside PyTorch SDPA, float32 (TF32 off): %s, %s\n"
                 "TFLOP/s of 4·B·H·T²·d FLOPs forward, ×3.5 forward + backward, halved causal"
                 % (", ".join(devices) or "device unknown", "; ".join("B = %d, H = %d" % s for s in sizes)),
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_figheight()))
    save(plt, fig, os.path.join(out, FIG2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flashlab", default=os.path.join(ROOT, "build", "flashlab"), help="the flashlab binary")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "figures"), help="folder for the SVGs")
    ap.add_argument("--gpu", metavar="DIR", help="output folder of tools/gpu-check.sh (bench.json, sdpa_*.json): "
                    "draw figure 2, " + FIG2)
    ap.add_argument("--gpu-stages", metavar="LIST", help="figure 2: these stages (e.g. 05,06) in every panel "
                    "(default: 01,04,05 forward, 06 forward + backward, 07 causal)")
    args = ap.parse_args()
    if not os.access(args.flashlab, os.X_OK):
        sys.exit("make_figures.py: %s is not an executable flashlab (build it: cmake --build build, or pass "
                 "--flashlab)" % args.flashlab)
    start = time.monotonic()
    gpu = gpu_rows(args.gpu) if args.gpu else None  # a wrong folder fails before anything is drawn
    plt = setup_matplotlib()
    os.makedirs(args.out, exist_ok=True)
    figure_hbm(plt, args.flashlab, args.out)
    if args.gpu:
        stages = [s for s in args.gpu_stages.split(",") if s] if args.gpu_stages else None
        figure_gpu(plt, gpu[0], gpu[1], args.gpu, args.out, stages)
    else:
        print("figure 2 (%s) skipped: it needs a tools/gpu-check.sh output folder (--gpu DIR)" % FIG2)
    print("done in %.1f s" % (time.monotonic() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
