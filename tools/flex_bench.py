#!/usr/bin/env python3
"""flex_bench.py -- PyTorch's FlexAttention on the gpt-oss pattern, the reference beside stage 15
(`flashlab bench --stages 15 --window W --sinks ...`) that issue 27 names.

The mask is a causal sliding window of W keys plus S sink tokens, given to FlexAttention as a block
mask (so it skips the blocks no row sees), with GQA (enable_gqa). Learned sinks, which FlexAttention
has no argument for, are folded in through the lse it returns: a sink logit s_h with a zero value
row only grows each row's denominator, so o_sinks = o * sigmoid(lse - s_h). Compiled with
torch.compile, timed forward or forward + backward (through autograd, the sinks' gradient included).

    python3 tools/flex_bench.py --B 1 --H 64 --Hkv 8 --T 4096,32768 --d 64 --window 128 --sinks \\
        --direction bwd --json flex.json

On a CPU, PyTorch compiles FlexAttention for inference only and without the lse, so there the
script is checked with --eager --direction fwd. TFLOP/s count only the (query, key) pairs the mask keeps: forward 4 d per pair and head, forward +
backward 3.5 times that (docs/design.md's convention). Rows are JSON objects with "tool": "flex"
(not "backend", so tools that read SDPA rows pass them over). Exit 0 when every shape ran, 1 when a
shape failed (its row says why), 2 without PyTorch or FlexAttention.
"""
import argparse
import json
import sys
import time


def int_list(text):
    """A comma-separated list of positive integers (an argparse type: a bad one is a usage error)."""
    try:
        values = [int(x) for x in text.split(",") if x]
    except ValueError:
        values = []
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError("expected comma-separated positive integers, got %r" % text)
    return values


def visible_pairs(T, window, sink_tokens):
    """(query, key) pairs of one head that the causal window + sink tokens mask keeps."""
    pairs = 0
    for i in range(T):
        band = min(window, i + 1) if window > 0 else i + 1
        pairs += band + min(sink_tokens, i + 1 - band)
    return pairs


def make_mask(window, sink_tokens):
    def keep(b, h, q, k):
        causal = k <= q
        if window <= 0:
            return causal
        return causal & ((q - k < window) | (k < sink_tokens))
    return keep


def attention_fn(torch, flex_attention, block_mask, sinks, compile=True):
    """The timed function: FlexAttention, and with sinks the lse fold; compiled unless told not to
    (uncompiled FlexAttention is PyTorch's slow reference path, for checking this script)."""
    try:  # newer PyTorch asks for the lse as an auxiliary output; older ones take return_lse
        from torch.nn.attention.flex_attention import AuxRequest
        lse_kwargs, aux = {"return_aux": AuxRequest(lse=True)}, True
    except ImportError:
        lse_kwargs, aux = {"return_lse": True}, False

    def run(q, k, v, s):
        o, extra = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True, **lse_kwargs)
        lse = extra.lse if aux else extra
        if sinks:
            # o * sigmoid(lse - s_h): the sink's share of each row's denominator taken out of o
            o = o * torch.sigmoid(lse - s.view(1, -1, 1)).unsqueeze(-1).to(o.dtype)
        return o
    return torch.compile(run) if compile else run


def time_one(torch, args, T, d):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    device, dtype = args.device, getattr(torch, args.dtype)
    grad = args.direction == "bwd"
    g = torch.Generator(device=device).manual_seed(27)
    def rand(*shape):
        return torch.randn(*shape, device=device, dtype=dtype, generator=g).requires_grad_(grad)
    q, k, v = rand(args.B, args.H, T, d), rand(args.B, args.Hkv, T, d), rand(args.B, args.Hkv, T, d)
    s = torch.randn(args.H, device=device, dtype=torch.float32, generator=g).requires_grad_(grad)
    block_mask = create_block_mask(make_mask(args.window, args.sink_tokens), None, None, T, T, device=device)
    fn = attention_fn(torch, flex_attention, block_mask, args.sinks, compile=not args.eager)
    do = torch.randn(args.B, args.H, T, d, device=device, dtype=dtype, generator=g)

    def step():
        o = fn(q, k, v, s)
        if grad:
            o.backward(do)

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(args.warmup):
        step()
    sync()
    times = []
    for _ in range(args.reps):
        start = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return times[len(times) // 2]


def run(args, torch):
    rows, failed = [], 0
    for T in args.T:
        for d in args.d:
            flops = 4.0 * args.B * args.H * d * visible_pairs(T, args.window, args.sink_tokens)
            flops *= 3.5 if args.direction == "bwd" else 1.0
            row = {"tool": "flex", "direction": args.direction, "B": args.B, "H": args.H, "Hkv": args.Hkv,
                   "T": T, "d": d, "window": args.window, "sink_tokens": args.sink_tokens,
                   "sinks": args.sinks, "dtype": args.dtype, "device": args.device, "flops": flops}
            try:
                ms = time_one(torch, args, T, d)
                row.update(time_ms=ms, tflops_per_s=flops / ms / 1e9)
                print("flex %-3s B=%d H=%d/%d T=%d d=%d W=%d S=%d%s: %.3f ms, %.1f TFLOP/s" % (
                    args.direction, args.B, args.H, args.Hkv, T, d, args.window, args.sink_tokens,
                    " sinks" if args.sinks else "", ms, row["tflops_per_s"]))
            except Exception as e:  # one shape's failure is reported in its row, not fatal
                failed += 1
                row.update(time_ms=None, tflops_per_s=None, error="%s: %s" % (type(e).__name__, e))
                print("flex T=%d d=%d: failed: %s" % (T, d, row["error"]), file=sys.stderr)
            rows.append(row)
    return rows, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=64, help="query heads")
    ap.add_argument("--Hkv", type=int, default=8, help="kv heads (H a multiple of it)")
    ap.add_argument("--T", type=int_list, default="4096", help="comma-separated sequence lengths")
    ap.add_argument("--d", type=int_list, default="64", help="comma-separated head dims")
    ap.add_argument("--window", type=int, default=128, help="W keys per row (0: causal only)")
    ap.add_argument("--sink-tokens", type=int, default=0, help="S first keys every row keeps")
    ap.add_argument("--sinks", action="store_true", help="learned sink logits through the lse")
    ap.add_argument("--direction", choices=("fwd", "bwd"), default="fwd")
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    ap.add_argument("--device", default="cuda", help="cuda (FlexAttention's backward needs it) or cpu")
    ap.add_argument("--eager", action="store_true",
                    help="do not compile (PyTorch's slow reference path: to check this script on a CPU)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", metavar="PATH", help="write the rows as a JSON array here")
    args = ap.parse_args()
    if args.B <= 0 or args.Hkv <= 0 or args.H % args.Hkv or args.window < 0 or args.sink_tokens < 0:
        ap.error("--B, --H, --Hkv must be positive with H a multiple of Hkv; --window, --sink-tokens >= 0")
    try:
        import torch
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError as e:
        print("flex_bench.py: needs PyTorch with FlexAttention (%s)" % e, file=sys.stderr)
        return 2
    rows, failed = run(args, torch)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
