#!/usr/bin/env python3
"""hidden_cases.py -- golden/make_golden.py --seed N writes usable hidden cases for grading.

Writes the cases with --seed N (default 1) into WORK and checks that
  (a) the same seed twice gives the same folder byte for byte;
  (b) it is the committed case list (the same case folders, files, case.json and array shapes)
      with other inputs: every input .npy (q.npy of plain_t1 and tour, x.npy of the MLA cases,
      k_pages.npy of the paged ones, ...) differs from the committed one, and seed N+1 differs
      again. Two paged inputs are exceptions: seq_lens.npy is part of the case list and must equal
      the committed one, and block_table.npy (the page order, drawn from the seed) may by chance
      coincide on a small pool, so it is not required to differ;
  (c) `flashlab check 07` passes on every causal or plain hidden case (Hq = Hkv, no window, sink
      tokens or learned sinks), `flashlab check 09` on every mla_* one, `flashlab check 11` on
      every paged one (paged_* and tc_paged_*, the folders with k_pages.npy) and `flashlab check
      16` on every tc_paged_* one (bf16-exact inputs): the stages are correct, so they pass on any
      seed;
  (d) --seed without --out, with --out at the committed golden/cases (spelled another way) and
      with a negative N exits 2 with one line and writes nothing. These refusals run on a copy of
      the generator in WORK, so a broken refusal writes into the copy's golden/cases, never into
      the source tree.

Exit 0: all good; 1: a check failed (each failure is printed); 2: bad usage; 77: NumPy is
missing (CTest reports the test as skipped).

    python3 tests/hidden_cases.py --flashlab build/flashlab --work build/tests/hidden_cases [--seed N]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from need_modules import need  # noqa: E402  (re-runs this script under a python3 that has the modules)
need("numpy", missing_exit=77)  # 77: CTest counts the test as skipped
import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATOR = os.path.join(ROOT, "golden", "make_golden.py")
COMMITTED = os.path.join(ROOT, "golden", "cases")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_golden import INPUTS, list_cases as case_dirs  # noqa: E402  (the input files; case folders)

FIXED_INPUTS = {"seq_lens.npy"}       # paged: the sequence lengths belong to the case list
LAYOUT_INPUTS = {"block_table.npy"}   # paged: a random page order; may repeat on a small pool

failures = []


def check(ok, what):
    """Records a failed check; returns ok."""
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}")
    return ok


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def generate(seed, out, generator=GENERATOR):
    r = run([sys.executable, generator, "--seed", str(seed), "--out", out])
    if not check(r.returncode == 0, f"make_golden.py --seed {seed} --out {out} exited "
                                    f"{r.returncode}:\n{r.stdout}"):
        return False
    print(r.stdout.strip())
    return check(f"hidden seed {seed}" in r.stdout,
                 f"--seed {seed}: the summary line does not name the seed: {r.stdout.strip()!r}")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def tree_files(folder):
    """{relative path: bytes} of every file under folder."""
    out = {}
    for base, _, files in os.walk(folder):
        for f in files:
            path = os.path.join(base, f)
            out[os.path.relpath(path, folder)] = read(path)
    return out


def same_bytes(a, b):
    """(a) two writes of one seed are identical."""
    fa, fb = tree_files(a), tree_files(b)
    check(sorted(fa) == sorted(fb), f"{a} and {b} hold different files")
    differ = [p for p in sorted(set(fa) & set(fb)) if fa[p] != fb[p]]
    check(not differ, f"the same seed wrote different bytes: {', '.join(differ[:5])}")
    if sorted(fa) == sorted(fb) and not differ:
        print(f"(a) same seed twice: {len(fa)} files identical byte for byte")


def same_list_other_inputs(hidden, other_seed_dir, seed):
    """(b) the committed case list, with other inputs."""
    names = case_dirs(hidden)
    if not check(names == case_dirs(COMMITTED),
                 f"hidden case folders differ from the committed ones: "
                 f"{sorted(set(names) ^ set(case_dirs(COMMITTED)))}"):
        return
    n_inputs, tables, new_tables = 0, 0, 0
    for name in names:
        h, c = os.path.join(hidden, name), os.path.join(COMMITTED, name)
        files = sorted(os.listdir(h))
        if not check(files == sorted(os.listdir(c)),
                     f"{name}: files {files} vs committed {sorted(os.listdir(c))}"):
            continue
        check(read(os.path.join(h, "case.json")) == read(os.path.join(c, "case.json")),
              f"{name}/case.json differs from the committed one (it must not, the seed is "
              "not recorded in the case)")
        for f in files:
            if not f.endswith(".npy"):
                continue
            a, b = np.load(os.path.join(h, f)), np.load(os.path.join(c, f))
            check(a.dtype == b.dtype and a.shape == b.shape,
                  f"{name}/{f}: {a.dtype}{a.shape} vs committed {b.dtype}{b.shape}")
            if f in FIXED_INPUTS:
                check(read(os.path.join(h, f)) == read(os.path.join(c, f)),
                      f"{name}/{f}: differs from the committed one (it is part of the case list)")
            elif f in LAYOUT_INPUTS:
                tables += 1
                new_tables += read(os.path.join(h, f)) != read(os.path.join(c, f))
            elif f in INPUTS:
                n_inputs += 1
                check(read(os.path.join(h, f)) != read(os.path.join(c, f)),
                      f"{name}/{f}: the hidden input equals the committed one")
    for name, f in (("plain_t1", "q.npy"), ("tour", "q.npy"), ("mla_decode_tq1", "x.npy"),
                    ("paged_gptoss", "k_pages.npy")):
        check(read(os.path.join(hidden, name, f)) != read(os.path.join(other_seed_dir, name, f)),
              f"{name}/{f}: seeds {seed} and {seed + 1} gave the same input")
    check(tables == 0 or new_tables > 0,
          f"all {tables} paged block tables equal the committed ones: the page order ignores "
          "the seed")
    print(f"(b) {len(names)} cases: same folders, files, case.json and shapes as golden/cases; "
          f"all {n_inputs} input files differ from the committed ones and from seed {seed + 1}; "
          f"{new_tables} of {tables} paged block tables hold another page order")


def plain_or_causal(folder):
    """A case of stage 07: Hq = Hkv, no window, no sink tokens, no learned sinks. (MLA and paged
    cases have no k.npy and are not stage 07 cases.)"""
    if not (os.path.isfile(os.path.join(folder, "q.npy")) and
            os.path.isfile(os.path.join(folder, "k.npy"))):
        return False
    with open(os.path.join(folder, "case.json")) as f:
        meta = json.load(f)
    heads = (np.load(os.path.join(folder, "q.npy"), mmap_mode="r").shape[1],
             np.load(os.path.join(folder, "k.npy"), mmap_mode="r").shape[1])
    return (heads[0] == heads[1] and meta.get("window", 0) == 0 and
            meta.get("sink_tokens", 0) == 0 and
            not os.path.exists(os.path.join(folder, "sinks.npy")))


def stages_pass(flashlab, hidden):
    """(c) the correct stages pass on the hidden cases."""
    names = case_dirs(hidden)
    s07 = [os.path.join(hidden, n) for n in names if plain_or_causal(os.path.join(hidden, n))]
    s09 = [os.path.join(hidden, n) for n in names if n.startswith("mla_")]
    s11 = [os.path.join(hidden, n) for n in names if os.path.isfile(os.path.join(hidden, n, "k_pages.npy"))]
    s16 = [p for p in s11 if os.path.basename(p).startswith("tc_paged_")]
    check(any(p.endswith("/tour") for p in s07) and any(p.endswith("/causal_t1") for p in s07)
          and len(s09) >= 1 and len(s16) >= 1 and len(s11) > len(s16),
          f"case selection looks wrong: 07 {s07}, 09 {s09}, 11 {s11}, 16 {s16}")
    for stage, dirs in (("07", s07), ("09", s09), ("11", s11), ("16", s16)):
        r = run([flashlab, "check", stage] + dirs)
        last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "(no output)"
        if check(r.returncode == 0, f"flashlab check {stage} on {len(dirs)} hidden cases exited "
                                    f"{r.returncode}:\n{r.stdout}"):
            print(f"(c) flashlab check {stage} on {len(dirs)} hidden cases: {last}")


def refusals(work):
    """(d) --seed is refused (exit 2, one line, nothing written) where it must be."""
    copy_dir = os.path.join(work, "generator_copy", "golden")
    os.makedirs(copy_dir)
    generator = os.path.join(copy_dir, "make_golden.py")
    shutil.copy(GENERATOR, generator)
    its_cases = os.path.join(copy_dir, "cases")        # what this copy takes for golden/cases
    spelled = os.path.join(copy_dir, ".", "..", "golden", "cases") + os.sep
    elsewhere = os.path.join(work, "refused")
    for args, why in ((["--seed", "1"], "--seed without --out"),
                      (["--seed", "1", "--out", its_cases], "--out at the committed golden/cases"),
                      (["--seed", "1", "--out", spelled], "--out at golden/cases spelled with ./.."),
                      (["--seed", "1", "--out", os.path.join(its_cases, "sub")],
                       "--out inside golden/cases"),
                      (["--seed", "-1", "--out", elsewhere], "a negative seed"),
                      (["--seed", "x1", "--out", elsewhere], "a seed that is no integer")):
        r = run([sys.executable, generator] + args)
        lines = r.stdout.strip().splitlines()
        ok = check(r.returncode == 2, f"{why}: exit {r.returncode}, not 2:\n{r.stdout}")
        ok &= check(len(lines) == 1, f"{why}: {len(lines)} lines of output, not one:\n{r.stdout}")
        wrote = [p for p in (its_cases, elsewhere) if os.path.exists(p)]
        ok &= check(not wrote, f"{why}: not refused, wrote {', '.join(wrote)}")
        for p in wrote:                 # so that the next refusal is judged on its own
            shutil.rmtree(p)
        if ok:
            print(f"(d) refused ({why}): exit 2: {lines[0]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flashlab", required=True, help="the built flashlab tool")
    ap.add_argument("--work", required=True, help="scratch folder (emptied first)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.seed < 0 or not os.access(args.flashlab, os.X_OK) or not os.path.isdir(COMMITTED):
        print("usage: a non-negative --seed, an executable --flashlab and golden/cases needed")
        return 2
    work, root = os.path.realpath(args.work), os.path.realpath(ROOT)
    if root == work or root.startswith(work.rstrip(os.sep) + os.sep):
        print(f"--work {args.work}: holds the source tree; refusing to empty it")
        return 2
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    a, b, c = (os.path.join(work, x) for x in ("seed_a", "seed_b", "seed_next"))
    if generate(args.seed, a) and generate(args.seed, b) and generate(args.seed + 1, c):
        same_bytes(a, b)
        same_list_other_inputs(a, c, args.seed)
        stages_pass(args.flashlab, a)
    refusals(work)
    if failures:
        print(f"golden_hidden_seed: {len(failures)} check(s) failed")
        return 1
    print(f"golden_hidden_seed: hidden cases of seed {args.seed} are reproducible, new, and pass "
          "stages 07, 09, 11 and 16")
    return 0


if __name__ == "__main__":
    sys.exit(main())
