#!/usr/bin/env python3
"""test_numpy_golden.py -- the Python package against the golden cases, through libflashlab.

For every CPU implementation that list_stages() reports (default and named variants), runs every
attention case of golden/cases (MLA and paged folders are skipped) the way `flashlab check` does:
backward() where the stage has "backward" and the case has do.npy, forward() otherwise, and
compares each output with the expected .npy by the project's rule

    |got - want| <= atol + rtol * |want|  elementwise (atol = rtol), NaN and +-Inf where want has them,

atol 1e-4 for o and lse and 5e-4 for the gradients (float32 stages), 0.03125 and 0.0625 for the
bf16 stages (12, 14). A case that needs a feature the stage lacks, or that the library answers
with Unsupported (the bf16 stages run d = dv in {64, 128} only), is skipped. It also checks the
error paths: a wrong k shape raises ValueError, an unknown stage FlashlabError with status 2 or
3, device "cuda" without a GPU NoDevice (asserted only when the library answers 77), and that
float64 and list inputs give the same outputs as float32 ones.

    python3 tests/python/test_numpy_golden.py [LIB [REPO]]

LIB: libflashlab.so (default: $FLASHLAB_LIB, else REPO/build/libflashlab.so); REPO: the repository
root holding golden/ (default: two levels above this script). An empty argument means the default.
Exit 0: all passed; 1: a failure, or nothing was compared; 77: NumPy or the library is missing.
"""

import json
import os
import sys

SKIP = 77
SCRIPT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ATTENTION_FEATURES = {"forward", "backward", "causal", "gqa", "window", "sink_tokens", "sinks", "paged"}
OTHER_KINDS = ("ckv.npy", "block_table.npy", "k_pages.npy")  # MLA and paged folders
TOL_F32 = {"fwd": 1e-4, "grad": 5e-4}
TOL_BF16 = {"fwd": 0.03125, "grad": 0.0625}


def arg(argv, i):
    return argv[i] if len(argv) > i and argv[i] else ""


def load_cases(np, golden):
    """The attention cases of golden/: a list of dicts with name, arrays and options."""
    cases = []
    for name in sorted(os.listdir(golden)):
        folder = os.path.join(golden, name)
        has = lambda f: os.path.isfile(os.path.join(folder, f))  # noqa: E731
        if not has("q.npy") or not has("k.npy") or any(has(f) for f in OTHER_KINDS):
            continue
        with open(os.path.join(folder, "case.json")) as f:
            meta = json.load(f)
        arrays = {f[:-4]: np.load(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".npy")}
        options = {"causal": bool(meta.get("causal", False)), "window": int(meta.get("window", 0)),
                   "sink_tokens": int(meta.get("sink_tokens", 0)), "scale": meta.get("scale")}
        cases.append({"name": name, "a": arrays, "options": options})
    return cases


def needed_features(case, backward):
    """The features a run of case asks for (common/attn.c, attn_required_features)."""
    a, o = case["a"], case["options"]
    need = {"backward"} if backward else set()
    if o["causal"] or o["window"] > 0:
        need.add("causal")
    if a["q"].shape[1] != a["k"].shape[1]:
        need.add("gqa")
    if o["window"] > 0:
        need.add("window")
    if o["sink_tokens"] > 0:
        need.add("sink_tokens")
    if "sinks" in a:
        need.add("sinks")
    return need


def compare(np, got, want, tol):
    """(ok, max abs error over finite want, elements outside the rule)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return False, float("inf"), -1
    nan_w, inf_w = np.isnan(want), np.isinf(want)
    finite = ~(nan_w | inf_w)
    with np.errstate(invalid="ignore"):  # inf - inf where both are infinite: judged below
        err = np.where(np.isfinite(got), np.abs(got - want), np.inf)
    bad = (finite & ~(err <= tol + tol * np.abs(want))) | (nan_w & ~np.isnan(got)) | (inf_w & (got != want))
    max_err = float(err[finite].max()) if finite.any() else 0.0
    n_bad = int(bad.sum())
    return n_bad == 0, max_err, n_bad


def is_bf16(impl):
    if impl["precision"]:
        return impl["precision"].startswith("bf16")
    return impl["stage"] in ("12", "14")  # the library prints no precision column: the bf16 stages


def run_golden(np, flashlab, cases, tally):
    """Runs and compares every CPU attention implementation; returns those implementations."""
    impls = [s for s in flashlab.list_stages() if s["device"] == "cpu"]
    if not impls:
        print("FAIL: list_stages() reports no CPU implementation")
        tally["fail"] += 1
    ran = []
    for impl in impls:
        label = f"{impl['stage']} {impl['variant'] or '-'}"
        extra = set(impl["features"]) - ATTENTION_FEATURES
        if extra:
            print(f"skip {label}: not an attention stage ({', '.join(sorted(extra))})")
            continue
        ran.append(impl)
        tol = TOL_BF16 if is_bf16(impl) else TOL_F32
        has_bwd = "backward" in impl["features"]
        for case in cases:
            a, options = case["a"], case["options"]
            bwd = has_bwd and "do" in a
            line = f"{label:12s} {case['name']:32s} {'fwd+bwd' if bwd else 'fwd':7s}"
            missing = needed_features(case, bwd) - set(impl["features"])
            if missing:
                print(f"skip {line} needs {', '.join(sorted(missing))}")
                tally["skip"] += 1
                continue
            kw = dict(stage=impl["stage"], variant=impl["variant"], device="cpu",
                      sinks=a.get("sinks"), **options)
            try:
                got = flashlab.backward(a["q"], a["k"], a["v"], a["do"], **kw) if bwd else \
                    flashlab.forward(a["q"], a["k"], a["v"], **kw)
            except flashlab.Unsupported as e:
                if "not q, k, v attention" in e.message:  # stage 09 (MLA): another kind of case
                    print(f"skip {label}: {e.message}")
                    tally["skip"] += 1
                    ran.remove(impl)
                    break
                print(f"skip {line} {e.message}")
                tally["skip"] += 1
                continue
            except Exception as e:  # noqa: BLE001  (any other error is a failure of this run)
                print(f"FAIL {line} {type(e).__name__}: {e}")
                tally["fail"] += 1
                continue
            names = ["o", "lse"] + (["dq", "dk", "dv", "dsinks"] if bwd else [])
            worst, failed = 0.0, []
            for n in names:
                if n not in a:
                    continue
                if n not in got:
                    failed.append(f"{n} missing")
                    continue
                ok, err, n_bad = compare(np, got[n], a[n], tol["grad" if n.startswith("d") else "fwd"])
                worst = max(worst, err)
                if not ok:
                    failed.append(f"{n} max_abs_err {err:.3g}, {n_bad} bad" if n_bad >= 0 else
                                  f"{n} shape {got[n].shape} != {a[n].shape}")
            counters = got.get("counters", {})
            if sorted(counters) != sorted(flashlab._COUNTER_NAMES) or \
                    any(not isinstance(v, int) or v < 0 for v in counters.values()):
                failed.append(f"counters {counters!r}")
            tally["compared"] += 1
            if failed:
                print(f"FAIL {line} {'; '.join(failed)}")
                tally["fail"] += 1
            else:
                print(f"ok   {line} max_abs_err {worst:.3g}")
                tally["ok"] += 1
    return ran


def check(tally, ok, what, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} error path: {what}{': ' + detail if detail else ''}")
    tally["ok" if ok else "fail"] += 1


def run_error_paths(np, flashlab, cases, impls, tally):
    rng = np.random.default_rng(28)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 4, 5, 8), (1, 2, 5, 8), (1, 2, 5, 8)))
    stage = impls[0]["stage"] if impls else "01"

    try:
        flashlab.forward(q, np.zeros((1, 3, 5, 8)), v, stage=stage)
        check(tally, False, "a wrong k shape raises ValueError", "nothing raised")
    except ValueError as e:
        check(tally, "k must be" in str(e), "a wrong k shape raises ValueError", str(e))
    except Exception as e:  # noqa: BLE001
        check(tally, False, "a wrong k shape raises ValueError", f"{type(e).__name__}: {e}")

    try:
        flashlab.backward(q, k, v, np.zeros((1, 4, 5, 7)), stage=stage)
        check(tally, False, "a wrong do shape raises ValueError", "nothing raised")
    except ValueError as e:
        check(tally, "do must be" in str(e), "a wrong do shape raises ValueError", str(e))
    except Exception as e:  # noqa: BLE001
        check(tally, False, "a wrong do shape raises ValueError", f"{type(e).__name__}: {e}")

    try:
        flashlab.forward(q, k, v, stage="99")
        check(tally, False, "stage 99 raises FlashlabError", "it ran")
    except flashlab.FlashlabError as e:
        check(tally, e.status in (2, 3) and bool(e.message), "stage 99 raises FlashlabError (status 2 or 3)",
              f"{type(e).__name__} {e.status}: {e.message}")
    except Exception as e:  # noqa: BLE001
        check(tally, False, "stage 99 raises FlashlabError", f"{type(e).__name__}: {e}")

    cuda = [s for s in flashlab.list_stages() if s["device"] == "cuda" and not s["variant"]]
    cuda_stage = cuda[0]["stage"] if cuda else "01"
    try:
        flashlab.forward(q, k, v, stage=cuda_stage, device="cuda")
        print(f"skip error path: device cuda ran stage {cuda_stage} (a GPU is here): NoDevice not tested")
        tally["skip"] += 1
    except flashlab.Unsupported as e:
        print(f"skip error path: device cuda: unsupported ({e.message}): NoDevice not tested")
        tally["skip"] += 1
    except flashlab.FlashlabError as e:
        check(tally, e.status == 77 and isinstance(e, flashlab.NoDevice),
              "device cuda without a GPU raises NoDevice", f"{type(e).__name__} {e.status}: {e.message}")

    # float64 and nested-list inputs are converted to float32: the same outputs as float32 ones.
    small = [c for c in cases if "sinks" not in c["a"] and c["a"]["q"].shape[1] == c["a"]["k"].shape[1]
             and not c["options"]["causal"] and c["options"]["window"] == 0 and c["a"]["q"].size < 20000]
    if small and impls:
        a, opts = small[0]["a"], small[0]["options"]
        ref = flashlab.forward(a["q"], a["k"], a["v"], stage=stage, **opts)
        f64 = flashlab.forward(a["q"].astype(np.float64), a["k"].astype(np.float64), a["v"].tolist(),
                               stage=stage, **opts)
        same = all(np.array_equal(ref[n], f64[n], equal_nan=True) for n in ("o", "lse"))
        check(tally, same, f"float64 and list inputs give the float32 outputs (stage {stage}, {small[0]['name']})")


def main(argv):
    try:
        import numpy as np
    except ImportError:
        print("skip: NumPy is missing")
        return SKIP
    root = os.path.abspath(arg(argv, 2) or SCRIPT_ROOT)
    lib_path = arg(argv, 1) or os.environ.get("FLASHLAB_LIB", "") or os.path.join(root, "build", "libflashlab.so")
    sys.path.insert(0, os.path.join(SCRIPT_ROOT, "python"))
    import flashlab

    if not os.path.isfile(lib_path):
        print(f"skip: no library at {lib_path} (cmake --build build --target flashlab_shared)")
        return SKIP
    try:
        flashlab.load_library(lib_path)
    except flashlab.LibraryNotFound as e:  # the file is there but does not load: a failure
        print(f"FAIL: {e}")
        return 1
    golden = os.path.join(root, "golden", "cases")
    cases = load_cases(np, golden)
    print(f"library {lib_path}, API version {flashlab.api_version()}; {len(cases)} attention cases in {golden}")

    tally = {"ok": 0, "fail": 0, "skip": 0, "compared": 0}
    impls = run_golden(np, flashlab, cases, tally)
    run_error_paths(np, flashlab, cases, impls, tally)

    print(f"summary: {tally['ok']} ok, {tally['fail']} failed, {tally['skip']} skipped; "
          f"{tally['compared']} stage runs compared with golden outputs")
    if tally["compared"] == 0:
        print("FAIL: nothing was compared")
        return 1
    return 1 if tally["fail"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
