#!/usr/bin/env python3
"""mla_report.py OUT -- the stage 09 (MLA) table from what tools/gpu-check.sh measured in OUT:

  mla_decode.json   flashlab bench --stages 09 (both variants), a decode step (Tq = 1)
  mla_prefill.json  the same for a prefill step (Tq = Tk)
  mla_mha.json      stage 08 on the same heads with a full K/V cache (plain MHA, Hkv = H)
  copy_bandwidth.json  device-to-device copy GB/s (tools/sdpa_bench.py --copy-bandwidth)
  mla_ncu.csv       Nsight Compute: duration and DRAM bytes of the latent attention kernel
  mla17_decode.json, mla17_ncu.csv   the same decode step and kernel for stage 17 (bf16, wgmma),
                    where the build has it
  matmul.json       bf16 matmul TFLOP/s (tools/sdpa_bench.py --matmul-rate)

Prints cache bytes per token (closed form), HBM bytes per decoded token as the stages counted them
(read + written over B * Tq tokens), times, and the latent kernel's effective bandwidth as a
fraction of the copy bandwidth; for stage 17 also its speed-up over stage 09 and its latent
kernel's TFLOP/s as a fraction of the matmul rate (issue 27's acceptance). Python 3 standard library
only."""

import csv
import json
import os
import sys

UNITS = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0, "ns": 1e-9, "us": 1e-6, "ms": 1e-3,
         "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12}


def load(out, name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def ncu_kernel(out, name="mla_ncu.csv"):
    """Mean duration (s) and DRAM bytes read of the profiled latent-attention launches, or None."""
    try:
        with open(os.path.join(out, name)) as f:
            lines = [line for line in f if line.startswith('"')]
    except OSError:
        return None
    per_metric = {}
    for row in csv.DictReader(lines):
        value = float(row["Metric Value"].replace(",", "")) * UNITS.get(row["Metric Unit"], 1.0)
        per_metric.setdefault(row["Metric Name"], []).append(value)
    t, b = per_metric.get("gpu__time_duration.sum"), per_metric.get("dram__bytes_read.sum")
    if not t or not b:
        return None
    return sum(t) / len(t), sum(b) / len(b), len(t)


def per_token(r):
    return (r["hbm_read_bytes"] + r["hbm_written_bytes"]) / (r["B"] * r["Tq"])


def main(out):
    decode, prefill, mha = load(out, "mla_decode.json"), load(out, "mla_prefill.json"), load(out, "mla_mha.json")
    copy = (load(out, "copy_bandwidth.json") or {}).get("gb_per_s")
    if not decode:
        print("mla_report: no mla_decode.json in %s" % out)
        return 1
    ok = [r for r in decode if not r.get("error")]
    for r in decode:
        if r.get("error"):
            print("stage 09 %s: %s" % (r["variant"] or "absorbed", r["error"]))
    if not ok:
        return 1
    r0 = ok[0]
    m, p, H, dh, dv = r0["mla"]["m"], r0["mla"]["p"], r0["Hq"], r0["d"], r0["dv"]
    print("MLA decode, B = %d, H = %d, dh = %d, dv = %d, m = %d, p = %d, Tk = %d, Tq = %d (float32)"
          % (r0["B"], H, dh, dv, m, p, r0["Tk"], r0["Tq"]))
    print("cache bytes per token: MLA (m + p) * 4 = %d;  MHA 2 * H * dh * 4 = %d  (%.0fx)"
          % ((m + p) * 4, 2 * H * dh * 4, 2 * H * dh / (m + p)))
    rows = {r["variant"]: r for r in ok}
    for variant in ("", "naive"):
        r = rows.get(variant)
        if r:
            print("  stage 09 %-8s %10.3f ms   HBM bytes per decoded token %.3g" %
                  (variant or "absorbed", r["time_ms"], per_token(r)))
    for r in mha or []:
        if not r.get("error"):
            print("  stage 08 MHA      %10.3f ms   HBM bytes per decoded token %.3g (full K/V cache, Hkv = %d)"
                  % (r["time_ms"], per_token(r), r["Hkv"]))
    if "" in rows and "naive" in rows:
        print("absorbed is %.1fx faster than naive at decode" % (rows["naive"]["time_ms"] / rows[""]["time_ms"]))
    kernel = ncu_kernel(out)
    if kernel and copy:
        seconds, dram, launches = kernel
        cache = r0["B"] * r0["Tk"] * (m + p) * 4
        print("latent attention kernel (Nsight Compute, mean of %d launches): %.3f ms, DRAM read %.3g B"
              % (launches, seconds * 1e3, dram))
        print("  cache bytes / time = %.0f GB/s = %.2f of copy (%.0f GB/s); DRAM bytes / time = %.0f GB/s = %.2f"
              % (cache / seconds / 1e9, cache / seconds / 1e9 / copy, copy, dram / seconds / 1e9,
                 dram / seconds / 1e9 / copy))
    if "" in rows:
        stage17(out, rows[""], copy)
    if prefill:
        pr = {r["variant"]: r for r in prefill if not r.get("error")}
        for r in prefill:
            if r.get("error"):
                print("prefill stage 09 %s: %s" % (r["variant"] or "absorbed", r["error"]))
        if "" in pr and "naive" in pr:
            a, n = pr[""], pr["naive"]
            print("MLA prefill, B = %d, Tq = Tk = %d, causal: absorbed %.3f ms, naive %.3f ms: %s wins (%.2fx)"
                  % (a["B"], a["Tk"], a["time_ms"], n["time_ms"], "absorbed" if a["time_ms"] < n["time_ms"]
                     else "naive", max(a["time_ms"], n["time_ms"]) / min(a["time_ms"], n["time_ms"])))
    return 0


def stage17(out, r09, copy):
    """Stage 17's line: the step against stage 09's absorbed one, and its latent kernel's rate."""
    rows = [r for r in load(out, "mla17_decode.json") or [] if not r.get("error")]
    if not rows:
        return
    r = rows[0]
    m, p = r["mla"]["m"], r["mla"]["p"]
    print("  stage 17 (bf16) %10.3f ms   HBM bytes per decoded token %.3g: %.1fx faster than stage 09 absorbed"
          % (r["time_ms"], per_token(r), r09["time_ms"] / r["time_ms"]))
    kernel = ncu_kernel(out, "mla17_ncu.csv")
    if not kernel:
        return
    seconds, dram, launches = kernel
    pairs = r["B"] * r["Tq"] * r["Tk"] if not r["causal"] or r["Tq"] == 1 else None
    matmul = (load(out, "matmul.json") or {}).get("tflops")
    line = "stage 17 latent attention kernel (Nsight Compute, mean of %d launches): %.3f ms" % (launches,
                                                                                              seconds * 1e3)
    if pairs:
        tflops = 2.0 * pairs * r["Hq"] * (2 * m + p) / seconds / 1e12
        line += ", %.0f TFLOP/s" % tflops
        if matmul:
            line += " = %.2f of the bf16 matmul rate (%.0f TFLOP/s)" % (tflops / matmul, matmul)
    print(line)
    if copy:
        cache = r["B"] * r["Tk"] * (m + p) * 2
        print("  cache bytes / time = %.2f of copy (%.0f GB/s); DRAM bytes / time = %.2f"
              % (cache / seconds / 1e9 / copy, copy, dram / seconds / 1e9 / copy))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: mla_report.py OUT", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
