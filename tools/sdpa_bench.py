#!/usr/bin/env python3
"""sdpa_bench.py — the GPU reference numbers beside `flashlab bench --device cuda` (docs/design.md).

Times PyTorch's scaled_dot_product_attention in float32 (TF32 off) with the memory-efficient and
the math backends on the shapes of flashlab's CUDA bench (self-attention, Hq = Hkv = H, d = dv;
--causal passes is_causal=True), with CUDA events after warm-up, and reports the median time and
TFLOP/s with FLOPs = 4*B*H*T^2*d forward, halved when causal (the count flashlab uses). --direction bwd times forward + backward
through autograd (out = SDPA(q, k, v); out.backward(dO)), FLOPs 3.5x forward, like
`flashlab bench --direction bwd`. A shape a backend cannot run (the math backend materialises
B*H*T*T scores and runs out of memory at T = 16384) is reported as skipped.

--dtype bf16 is the reference beside stage 12 (tensor cores): q, k, v and dO in bfloat16, timed with
the FLASH_ATTENTION (FlashAttention-2) and CUDNN_ATTENTION backends by default (--backends picks
others), same shapes, FLOP count and JSON rows, each row with "dtype": "bf16" (float32 rows carry no
dtype key). In a bf16 bwd run the gradients of q, k and v are dropped before each run, so no run
pays for adding into the previous one's. A skipped row says why: the backend's own warnings about
the shape when PyTorch only answers "No available kernel".

PyTorch is needed only here, on the GPU machine; nothing in the C build uses this script.

  python3 tools/sdpa_bench.py                              # defaults = flashlab bench --device cuda
  python3 tools/sdpa_bench.py --T 1024,4096 --d 128 --json sdpa.json
  python3 tools/sdpa_bench.py --direction bwd --json sdpa_bwd.json   # forward + backward
  python3 tools/sdpa_bench.py --dtype bf16 --causal --json tc_sdpa_causal_fwd.json   # beside stage 12
  python3 tools/sdpa_bench.py --compare bench.json sdpa.json   # summary table: ours vs SDPA
  python3 tools/sdpa_bench.py --copy-bandwidth             # device-to-device copy GB/s (the roofline)
  python3 tools/sdpa_bench.py --copy-traffic 134217728     # a copy moving a B = 1 decode step's K/V bytes
  python3 tools/sdpa_bench.py --matmul-rate                # bf16 8192^3 torch.matmul TFLOP/s
  python3 tools/sdpa_bench.py --decode --B 1,8 --H 32 --Hkv 8 --T 4096,32768 --d 128 --json dec.json
      # one decoding step (Tq = 1, causal is the same thing there) with enable_gqa=True on contiguous
      # K/V, default backend choice: the reference beside stage 11
  python3 tools/sdpa_bench.py --decode --dtype bf16 --backends FLASH_ATTENTION --B 1,8 --T 32768 --d 128
      # the same step in bf16 on FlashAttention-2 (K/V bytes at 2 each): the reference beside stage 16
      # (--queued: each step launched behind a spin, the GPU's time alone, beside flashlab bench --queued)
"""
import argparse
import json
import statistics
import sys

# flashlab bench --device cuda defaults (common/cli/cmd_bench.c): B = 4, H = 16, T = 1024,4096,16384, d = 64,128
DEFAULT_B, DEFAULT_H, DEFAULT_T, DEFAULT_D = 4, 16, "1024,4096,16384", "64,128"
BACKENDS = ("EFFICIENT_ATTENTION", "MATH")
BF16_BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION")  # FlashAttention-2 and cuDNN: stage 12's reference
DTYPES = ("float32", "bf16")


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def flops(B, H, T, d, direction="fwd", causal=False):
    forward = 4.0 * B * H * T * T * d / (2.0 if causal else 1.0)
    return 3.5 * forward if direction == "bwd" else forward


def import_torch():
    """PyTorch, or exit with a one-line message: only the timing needs it (--compare does not)."""
    try:
        import torch
    except ImportError as e:
        sys.exit("sdpa_bench.py: PyTorch is needed to time SDPA and cannot be imported here (%s); "
                 "install it on the GPU machine, or use --compare, which reads JSON only" % e)
    return torch


QUEUE_CYCLES = 200000  # a first spin of about 0.1 ms: longer than Python takes to queue an event and a copy
QUEUE_MOST_CYCLES = 400000000  # about 0.2 s: a call still not queued whole behind it waits for the GPU inside


def median_event_ms(torch, run, warmup, reps, queued=False, before=None):
    """Median ms of `reps` calls of run() (after `warmup` untimed ones), each timed between its own
    pair of CUDA events, as `flashlab bench` times its reps; before(), if given, runs ahead of each
    call, outside its events (and ahead of the spin when queued). queued (`flashlab bench --queued`):
    each call is launched behind a spin kernel (torch.cuda._sleep), so that the events and the call
    wait on the GPU and the events hold the GPU's time alone; a call the GPU had begun before Python
    had launched all of it (its start event already reached) is timed again behind a spin twice as
    long."""
    samples, cycles, i = [], QUEUE_CYCLES, 0
    while i < warmup + reps:
        if before:
            before()
        if queued:
            torch.cuda._sleep(cycles)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        was_queued = not queued or not start.query()
        stop.synchronize()
        if not was_queued:
            cycles *= 2
            if cycles > QUEUE_MOST_CYCLES:
                sys.exit("sdpa_bench.py: a call still began before it was queued whole behind a %d-cycle spin"
                         % QUEUE_MOST_CYCLES)
            continue
        if i >= warmup:
            samples.append(start.elapsed_time(stop))
        i += 1
    return statistics.median(samples)


def time_sdpa(torch, backend, B, H, T, d, warmup, reps, direction="fwd", causal=False, dtype="float32"):
    """Median ms of `reps` runs, each timed with its own pair of CUDA events; a bwd run is the
    forward and the backward through autograd."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    gen = torch.Generator(device="cuda").manual_seed(T * 131 + d)
    bwd = direction == "bwd"
    bf16 = dtype == "bf16"
    kind = torch.bfloat16 if bf16 else torch.float32
    q, k, v, dout = (torch.randn(B, H, T, d, device="cuda", dtype=kind, generator=gen) for _ in range(4))
    for x in (q, k, v):
        x.requires_grad_(bwd)

    def clear_grads():  # untimed: autograd then stores the new gradients instead of adding them
        q.grad = k.grad = v.grad = None

    def step():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if bwd:
            out.backward(dout)

    with sdpa_kernel(getattr(SDPBackend, backend)):
        return median_event_ms(torch, step, warmup, reps, before=clear_grads if bwd and bf16 else None)


def backend_list(args):
    """The --backends list, else the dtype's default pair."""
    if args.backends:
        return [b.strip().upper() for b in args.backends.split(",") if b.strip()]
    return list(BF16_BACKENDS if args.dtype == "bf16" else BACKENDS)


def skip_reason(error, caught):
    """The note of a row that did not run. "No available kernel" alone does not say why; the
    warnings PyTorch gave while looking for one do (e.g. which head dim or dtype it wanted)."""
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    why = []
    for w in caught:
        text = " ".join(str(w.message).split())
        if text and text not in why:
            why.append(text)
    if why and "no available kernel" in first.lower():
        return "skipped: " + "; ".join(why)[:300]
    return "skipped: " + first[:200]


def run_bench(args):
    torch = import_torch()
    from torch.nn.attention import SDPBackend

    torch.backends.cuda.matmul.allow_tf32 = False  # plain fp32, as flashlab's kernels
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    device = torch.cuda.get_device_name(0)
    bf16 = args.dtype == "bf16"
    rows = []
    for backend in backend_list(args):
        for T in int_list(args.T):
            for d in int_list(args.d):
                row = {"backend": backend, "device": device, "direction": args.direction, "B": args.B,
                       "H": args.H, "T": T, "d": d, "causal": args.causal,
                       "flops": flops(args.B, args.H, T, d, args.direction, args.causal),
                       "time_ms": None, "tflops_per_s": None, "note": None}
                if bf16:
                    row["dtype"] = args.dtype
                if not hasattr(SDPBackend, backend):  # e.g. CUDNN_ATTENTION before PyTorch 2.3
                    row["note"] = "skipped: this PyTorch (%s) has no SDPBackend.%s" % (torch.__version__, backend)
                elif bf16:
                    run_bf16_row(torch, args, backend, T, d, row)
                else:  # float32: exactly as before --dtype existed
                    try:
                        ms = time_sdpa(torch, backend, args.B, args.H, T, d, args.warmup, args.reps, args.direction,
                                       args.causal)
                        row["time_ms"] = ms
                        row["tflops_per_s"] = row["flops"] / (ms * 1e9)
                    except torch.OutOfMemoryError:
                        row["note"] = "skipped: out of GPU memory"
                    except RuntimeError as e:  # e.g. no kernel of this backend for the shape
                        row["note"] = "skipped: " + str(e).splitlines()[0][:120]
                    finally:
                        torch.cuda.empty_cache()
                rows.append(row)
                print_sdpa_row(row)
    return rows


def run_bf16_row(torch, args, backend, T, d, row):
    """Times one bf16 row into `row`, or leaves a note saying why it was skipped: a number is only
    ever written for runs that finished."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ms = time_sdpa(torch, backend, args.B, args.H, T, d, args.warmup, args.reps, args.direction,
                           args.causal, args.dtype)
            if ms > 0:
                row["time_ms"] = ms
                row["tflops_per_s"] = row["flops"] / (ms * 1e9)
            else:
                row["note"] = "skipped: measured %r ms" % ms
        except torch.OutOfMemoryError:
            row["note"] = "skipped: out of GPU memory"
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as e:  # no kernel of it for the shape
            row["note"] = skip_reason(e, caught)
        finally:
            torch.cuda.empty_cache()


def print_sdpa_row(row):
    value = ("%10.3f  %8.2f" % (row["time_ms"], row["tflops_per_s"])) if row["time_ms"] else row["note"]
    print("sdpa %-20s %s%s%s B=%d H=%d T=%-6d d=%-4d %s" % (row["backend"], row.get("direction", "fwd"),
                                                           " causal" if row.get("causal") else "",
                                                           " " + row["dtype"] if "dtype" in row else "", row["B"],
                                                           row["H"], row["T"], row["d"], value), flush=True)


def copy_bandwidth(reps=20, gib=2):
    """Median device-to-device copy bandwidth in GB/s (bytes read + bytes written per second) of a
    `gib` GiB float32 tensor: the practical ceiling of a memory-bound kernel such as decoding."""
    torch = import_torch()

    n = gib * (1 << 30) // 4
    src = torch.empty(n, device="cuda", dtype=torch.float32).normal_()
    dst = torch.empty_like(src)
    ms = median_event_ms(torch, lambda: dst.copy_(src), 3, reps)
    gbps = 2.0 * n * 4 / (ms * 1e6)
    return {"device": torch.cuda.get_device_name(0), "bytes": 2 * n * 4, "time_ms": ms, "gb_per_s": gbps}


def copy_traffic(sizes, warmup=3, reps=20):
    """For each size S in bytes: a device-to-device copy of S / 2 bytes, whose traffic (read +
    written) is S, for a decode step that reads S bytes of K/V to be set beside. Timed twice:
    time_ms like a step (an event pair per rep; what Python spends launching the copy between the
    events counts, as a launch does in `flashlab bench`), and gpu_ms queued (median_event_ms), so
    that only the copy's own time is between the events, as `flashlab bench --queued` times a step.
    At small S a plain copy, too, falls short of the large copy's rate (ramp-up and tail weigh
    more)."""
    torch = import_torch()
    rows = []
    for size in sizes:
        half = max(size // 2, 1)
        src = torch.empty(half, device="cuda", dtype=torch.uint8).random_(0, 256)
        dst = torch.empty_like(src)
        ms = median_event_ms(torch, lambda: dst.copy_(src), warmup, reps)
        gpu_ms = median_event_ms(torch, lambda: dst.copy_(src), warmup, reps, queued=True)
        rows.append({"device": torch.cuda.get_device_name(0), "traffic_bytes": 2 * half, "time_ms": ms,
                     "gb_per_s": 2.0 * half / (ms * 1e6), "gpu_ms": gpu_ms,
                     "gpu_gb_per_s": 2.0 * half / (gpu_ms * 1e6)})
        src = dst = None  # freed before the next size
        torch.cuda.empty_cache()
    return rows


def matmul_rate(reps=20, n=8192):
    """Median bf16 matmul rate in TFLOP/s of an n x n x n product (torch.matmul, float32 sums): the
    tensor cores' practical ceiling, beside which stage 17 reports its latent attention."""
    torch = import_torch()

    a = torch.empty(n, n, device="cuda", dtype=torch.bfloat16).normal_()
    b = torch.empty_like(a).normal_()
    ms = median_event_ms(torch, lambda: torch.matmul(a, b), 3, reps)
    return {"device": torch.cuda.get_device_name(0), "n": n, "time_ms": ms, "tflops": 2.0 * n ** 3 / (ms * 1e9)}


def run_decode(args):
    """One decoding step per (B, T): q (B, H, Tq, d), k and v (B, Hkv, T, d), float32 with TF32 off
    (or bf16 with --dtype bf16, beside stage 16), SDPA with enable_gqa=True and PyTorch's own backend
    choice (or the one --backends names, e.g. FLASH_ATTENTION). Reports the median time and the K/V
    bytes per second, B*Hkv*T*2d*(4 or 2) / time, the traffic a decode step cannot avoid. --queued
    times each step behind a spin (median_event_ms), as `flashlab bench --queued` does."""
    torch = import_torch()
    import contextlib
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    bf16 = args.dtype == "bf16"
    kind, size = (torch.bfloat16, 2) if bf16 else (torch.float32, 4)
    backend = args.backends.strip().upper() if args.backends else None
    if backend and "," in backend:
        sys.exit("sdpa_bench.py: --decode times one backend at a time (--backends NAME)")

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    device = torch.cuda.get_device_name(0)
    rows = []
    for B in int_list(str(args.B)):
        for T in int_list(args.T):
            for d in int_list(args.d):
                row = {"backend": (backend or "default") + " (enable_gqa)", "device": device, "B": B, "Hq": args.H,
                       "Hkv": args.Hkv, "Tq": args.Tq, "T": T, "d": d, "kv_bytes": B * args.Hkv * T * 2 * d * size,
                       "time_ms": None, "kv_gb_per_s": None, "queued": args.queued, "note": None}
                if bf16:
                    row["dtype"] = args.dtype
                try:
                    gen = torch.Generator(device="cuda").manual_seed(T * 131 + d)
                    q = torch.randn(B, args.H, args.Tq, d, device="cuda", dtype=kind, generator=gen)
                    k, v = (torch.randn(B, args.Hkv, T, d, device="cuda", dtype=kind, generator=gen) for _ in range(2))
                    causal = args.Tq > 1  # bottom-right causal equals no mask for a single query
                    chosen = sdpa_kernel(getattr(SDPBackend, backend)) if backend else contextlib.nullcontext()
                    with chosen:
                        row["time_ms"] = median_event_ms(
                            torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
                            args.warmup, args.reps, queued=args.queued)
                    row["kv_gb_per_s"] = row["kv_bytes"] / (row["time_ms"] * 1e6)
                    q = k = v = None  # freed before the next shape
                except torch.OutOfMemoryError:
                    row["note"] = "skipped: out of GPU memory"
                except (RuntimeError, TypeError, AttributeError) as e:
                    row["note"] = "skipped: " + (str(e).splitlines() or [type(e).__name__])[0][:120]
                finally:
                    torch.cuda.empty_cache()
                rows.append(row)
                value = ("%10.3f ms  %8.1f GB/s of K/V" % (row["time_ms"], row["kv_gb_per_s"])) if row["time_ms"] \
                    else row["note"]
                print("sdpa decode %s B=%d Hq=%d Hkv=%d Tq=%d T=%-6d d=%-4d %s%s" % (
                    args.dtype, B, args.H, args.Hkv, args.Tq, T, d, value, " (queued)" if args.queued else ""),
                    flush=True)
    return rows


def compare(flashlab_json, sdpa_jsons):
    """One table per direction and (T, d): each flashlab CUDA implementation and each SDPA
    backend, TFLOP/s and the ratios to SDPA's memory-efficient and math backends."""
    with open(flashlab_json) as f:
        ours_all = [r for r in json.load(f) if r.get("device") == "cuda"]
    theirs_all = []
    for path in sdpa_jsons:
        with open(path) as f:  # float32 rows only: bf16 ones are tools/tc_report.py's
            theirs_all += [r for r in json.load(f) if r.get("dtype", "float32") == "float32"]
    device = theirs_all[0]["device"] if theirs_all else "?"
    # self-attention rows only (Tq = Tk, Hq = Hkv): the shapes SDPA was run on
    ours_all = [r for r in ours_all if r["Tq"] == r["Tk"] and r["Hq"] == r["Hkv"]]
    for causal in (False, True):
        for direction in ("fwd", "bwd"):
            ours = [r for r in ours_all if r.get("direction") == direction and bool(r.get("causal")) == causal]
            theirs = [r for r in theirs_all
                      if r.get("direction", "fwd") == direction and bool(r.get("causal")) == causal]
            if ours or theirs:
                compare_direction(direction, causal, ours, theirs, device)


def compare_direction(direction, causal, ours, theirs, device):
    ref = {(r["T"], r["d"], r["backend"]): r for r in theirs}
    what = "forward + backward, TFLOP/s = 3.5*4*B*H*T^2*d / time" if direction == "bwd" else \
        "forward, TFLOP/s = 4*B*H*T^2*d / time"
    if causal:
        what += ", FLOPs halved"
    print("summary (%s, float32, %s %s)" % (device, "causal" if causal else "non-causal", what))
    print("%-6s %-4s  %-30s %9s %9s  %12s %12s" % ("T", "d", "implementation", "time ms", "TFLOP/s",
                                                 "vs mem-eff", "vs math"))
    shapes = sorted({(r["Tq"], r["d"]) for r in ours} | {(r["T"], r["d"]) for r in theirs})
    for T, d in shapes:
        eff, math = ref.get((T, d, "EFFICIENT_ATTENTION")), ref.get((T, d, "MATH"))
        lines = [("sdpa " + b.lower(), ref.get((T, d, b))) for b in BACKENDS]
        for r in ours:
            if (r["Tq"], r["d"]) == (T, d):
                name = "flashlab %s %s%s" % (r["stage"], r["name"], (" " + r["variant"]) if r["variant"] else "")
                tf = r["gflops_per_s"] / 1000.0 if r.get("error") is None else None
                lines.append((name, {"time_ms": r.get("time_ms"), "tflops_per_s": tf, "note": r.get("error")}))
        for name, r in lines:
            if not r or r.get("tflops_per_s") is None:
                note = (r or {}).get("note") or "not run"
                print("%-6d %-4d  %-30s %s" % (T, d, name, note[:70]))
                continue
            def ratio(base):
                return "%11.2fx" % (r["tflops_per_s"] / base["tflops_per_s"]) if base and base["tflops_per_s"] else "%12s" % "-"
            print("%-6d %-4d  %-30s %9.3f %9.2f  %s %s" % (T, d, name, r["time_ms"], r["tflops_per_s"],
                                                          ratio(eff), ratio(math)))
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--B", default=str(DEFAULT_B), help="batch size (--decode: a comma-separated list)")
    ap.add_argument("--H", type=int, default=DEFAULT_H)
    ap.add_argument("--T", default=DEFAULT_T, help="comma-separated sequence lengths")
    ap.add_argument("--d", default=DEFAULT_D, help="comma-separated head dims")
    ap.add_argument("--direction", choices=("fwd", "bwd"), default="fwd",
                    help="fwd: the forward pass; bwd: forward + backward through autograd")
    ap.add_argument("--causal", action="store_true", help="is_causal=True (FLOPs halved)")
    ap.add_argument("--dtype", choices=DTYPES, default="float32",
                    help="float32 (TF32 off; default backends %s) or bf16 (the reference beside stage 12; "
                         "default backends %s)" % (",".join(BACKENDS), ",".join(BF16_BACKENDS)))
    ap.add_argument("--backends", metavar="LIST",
                    help="comma-separated SDPBackend names to time instead of the dtype's default pair "
                         "(FLASH_ATTENTION, CUDNN_ATTENTION, EFFICIENT_ATTENTION, MATH)")
    ap.add_argument("--decode", action="store_true",
                    help="time one decoding step with enable_gqa=True (uses --B list, --H, --Hkv, --Tq, --T, --d)")
    ap.add_argument("--Hkv", type=int, default=8, help="--decode: kv heads")
    ap.add_argument("--Tq", type=int, default=1, help="--decode: new tokens per sequence")
    ap.add_argument("--queued", action="store_true",
                    help="--decode: each step launched behind a spin kernel, so that its events hold the GPU's "
                         "time alone (as flashlab bench --queued)")
    ap.add_argument("--matmul-rate", action="store_true",
                    help="only measure the bf16 matmul rate (8192^3, TFLOP/s) and exit")
    ap.add_argument("--copy-bandwidth", action="store_true",
                    help="only measure the device-to-device copy bandwidth (GB/s, read + written)")
    ap.add_argument("--copy-traffic", metavar="BYTES",
                    help="only time copies whose traffic (read + written) is each of these comma-separated "
                         "byte counts, e.g. a decode step's K/V bytes (GB/s, time per copy)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", metavar="PATH", help="write the rows as a JSON array here")
    ap.add_argument("--compare", nargs="+", metavar="JSON",
                    help="FLASHLAB_JSON SDPA_JSON [SDPA_JSON...]: summary tables (one per direction) of a "
                         "`flashlab bench --json` file (fwd and bwd rows may be concatenated) against this script's --json files")
    args = ap.parse_args()
    if args.compare:
        if len(args.compare) < 2:
            ap.error("--compare needs FLASHLAB_JSON and at least one SDPA_JSON")
        compare(args.compare[0], args.compare[1:])
        return 0
    if args.copy_bandwidth:
        row = copy_bandwidth(args.reps)
        print("copy %s: %.1f GB/s (read + written, %.3f ms for %d bytes)" % (row["device"], row["gb_per_s"],
                                                                         row["time_ms"], row["bytes"]))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(row, f, indent=1)
        return 0
    if args.copy_traffic:
        try:
            sizes = int_list(args.copy_traffic)
        except ValueError:
            ap.error("--copy-traffic takes comma-separated whole byte counts, not %r" % args.copy_traffic)
        if not sizes or min(sizes) < 2:
            ap.error("--copy-traffic needs byte counts of at least 2")
        rows = copy_traffic(sizes, args.warmup, args.reps)
        for row in rows:
            queued = (", queued %.4f ms, %.1f GB/s" % (row["gpu_ms"], row["gpu_gb_per_s"])) if row["gpu_ms"] else ""
            print("copy of %d bytes' traffic: %.4f ms, %.1f GB/s (read + written)%s" % (
                row["traffic_bytes"], row["time_ms"], row["gb_per_s"], queued))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    if args.matmul_rate:
        row = matmul_rate(args.reps)
        print("matmul %s: %.1f TFLOP/s (bf16, %d^3 in %.3f ms)" % (row["device"], row["tflops"], row["n"],
                                                                 row["time_ms"]))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(row, f, indent=1)
        return 0
    if args.decode:
        rows = run_decode(args)
    else:
        args.B = int(args.B)
        rows = run_bench(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
