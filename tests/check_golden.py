#!/usr/bin/env python3
"""check_golden.py -- the committed golden cases are exactly what golden/make_golden.py writes.

Regenerates every case into a temporary folder and compares it with golden/cases:
  * the same case folders, and the same files in each;
  * case.json equal as JSON values;
  * inputs (q k v do sinks; for the MLA cases x ckv kpe and the w_* weights; for the paged cases
    k_pages v_pages, NaN-filled slots included, and the int32 block_table seq_lens) bit-identical:
    they come from fixed seeds and a float32 rounding, so any difference means the generator or
    its seeds changed;
  * expected outputs equal within |new - committed| <= 1e-7 + 1e-6 |committed|, with the same
    infinities. The reference runs in float64 through BLAS (einsum/matmul), and a different BLAS
    or CPU may sum in another order and change the last bits, which can flip a float32 rounding;
    the tolerance allows for that and nothing more.

Exit 0: identical; 1: something differs (each difference is printed); 2: bad usage;
77: NumPy is missing (CTest reports the test as skipped).

    python3 tests/check_golden.py [--golden DIR] [--generator golden/make_golden.py]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from need_modules import need  # noqa: E402  (re-runs this script under a python3 that has the modules)
need("numpy", missing_exit=77)  # 77: CTest counts the check as skipped
import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INPUTS = {"q.npy", "k.npy", "v.npy", "do.npy", "sinks.npy",                  # attention
          "x.npy", "ckv.npy", "kpe.npy", "w_dq.npy", "w_uq.npy", "w_qr.npy",  # MLA (stage 09)
          "w_uk.npy", "w_uv.npy", "w_o.npy",
          "k_pages.npy", "v_pages.npy", "block_table.npy", "seq_lens.npy"}  # paged (stage 11)
RTOL, ATOL = 1e-6, 1e-7


def list_cases(folder):
    return sorted(e for e in os.listdir(folder) if os.path.isdir(os.path.join(folder, e)))


def compare_output(path_new, path_old):
    """Returns '' when the two arrays agree within the tolerance, else a one-line reason."""
    new, old = np.load(path_new), np.load(path_old)
    if new.dtype != old.dtype or new.shape != old.shape:
        return f"dtype/shape {new.dtype}{new.shape} vs committed {old.dtype}{old.shape}"
    if not np.array_equal(np.isnan(new), np.isnan(old)):
        return "NaN positions differ"
    if not np.array_equal(np.isinf(new) * np.sign(new), np.isinf(old) * np.sign(old)):
        return "infinity positions differ"
    finite = np.isfinite(old)
    a, b = new[finite].astype(np.float64), old[finite].astype(np.float64)
    excess = np.abs(a - b) - (ATOL + RTOL * np.abs(b))
    if excess.size and excess.max() > 0:
        worst = int(np.argmax(excess))
        index = np.unravel_index(np.flatnonzero(finite)[worst], old.shape)
        return (f"max abs diff {np.max(np.abs(a - b)):.3e}; first worst at {tuple(map(int, index))}: "
                f"{a[worst]!r} vs committed {b[worst]!r}")
    return ""


def compare_case(new_dir, old_dir, name):
    problems = []
    new_files = set(os.listdir(new_dir))
    old_files = set(os.listdir(old_dir))
    for f in sorted(new_files - old_files):
        problems.append(f"{name}/{f}: written by the generator but not committed")
    for f in sorted(old_files - new_files):
        problems.append(f"{name}/{f}: committed but no longer written by the generator")
    for f in sorted(new_files & old_files):
        pn, po = os.path.join(new_dir, f), os.path.join(old_dir, f)
        if f == "case.json":
            with open(pn) as a, open(po) as b:
                if json.load(a) != json.load(b):
                    problems.append(f"{name}/case.json: contents differ")
        elif f in INPUTS:
            with open(pn, "rb") as a, open(po, "rb") as b:
                if a.read() != b.read():
                    problems.append(f"{name}/{f}: input is not bit-identical")
        elif f.endswith(".npy"):
            reason = compare_output(pn, po)
            if reason:
                problems.append(f"{name}/{f}: {reason}")
        else:
            problems.append(f"{name}/{f}: unexpected file")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--golden", default=os.path.join(ROOT, "golden", "cases"))
    ap.add_argument("--generator", default=os.path.join(ROOT, "golden", "make_golden.py"))
    args = ap.parse_args()
    if not os.path.isdir(args.golden):
        print(f"{args.golden}: no such folder (the committed golden cases)")
        return 2
    with tempfile.TemporaryDirectory(prefix="flashlab-golden-") as tmp:
        run = subprocess.run([sys.executable, args.generator, "--out", tmp],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if run.returncode != 0:
            print(f"{args.generator} failed (exit {run.returncode}):\n{run.stdout}")
            return 1
        new_cases, old_cases = list_cases(tmp), list_cases(args.golden)
        problems = []
        for c in sorted(set(new_cases) - set(old_cases)):
            problems.append(f"{c}: written by the generator but not committed")
        for c in sorted(set(old_cases) - set(new_cases)):
            problems.append(f"{c}: committed but no longer written by the generator")
        for c in sorted(set(new_cases) & set(old_cases)):
            problems += compare_case(os.path.join(tmp, c), os.path.join(args.golden, c), c)
    for p in problems:
        print(p)
    if problems:
        print(f"golden regeneration: {len(problems)} difference(s) in {args.golden}; "
              "regenerate with `python3 golden/make_golden.py` if the change is intended")
        return 1
    print(f"golden regeneration: {len(new_cases)} cases in {args.golden} match the generator")
    return 0


if __name__ == "__main__":
    sys.exit(main())
