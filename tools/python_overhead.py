#!/usr/bin/env python3
"""python_overhead.py -- what the Python layers add to one libflashlab call.

Times a forward call of one stage on a tiny problem (default stage 05, 1 x 1 x 1 x 16, so that the
library's own work is small) in three ways, interleaved in one process so that a busy machine
slows them alike:

  bare    lib.flashlab_forward through ctypes with every argument built in advance (the floor:
          the library's lookup, its poisoned buffers, the run and the copy out);
  numpy   flashlab.forward(q, k, v, stage=...) on float32 NumPy arrays;
  torch   flashlab.torch.attention(q, k, v, stage=...) on float32 CPU tensors, under
          torch.no_grad() and with q requiring grad (the autograd path); only where torch imports;
  empty   an operator registered like flashlab::attention whose body only allocates its outputs:
          what torch.library's dispatch and autograd wrapping cost by themselves.

Each way runs ROUNDS rounds of CALLS calls; the report is the median over rounds of the mean time
per call, and the overhead of a way is its median minus bare's.

    python3 tools/python_overhead.py [--stage 05] [--calls 5000] [--rounds 5] [--lib PATH]
"""

import argparse
import ctypes
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

import numpy as np  # noqa: E402

import flashlab  # noqa: E402


def per_call_us(fn, calls):
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def bare_call(lib, stage, q, k, v):
    """A closure calling flashlab_forward with everything prepared once."""
    B, Hq, Tq, d = q.shape
    p = flashlab._Problem(struct_size=ctypes.sizeof(flashlab._Problem), B=B, Hq=Hq, Hkv=k.shape[1], Tq=Tq,
                          Tk=k.shape[2], d=d, dv=v.shape[3], q=q.ctypes.data, k=k.ctypes.data, v=v.ctypes.data)
    o = np.empty((B, Hq, Tq, v.shape[3]), dtype=np.float32)
    lse = np.empty((B, Hq, Tq), dtype=np.float32)
    counters = flashlab._Counters(struct_size=ctypes.sizeof(flashlab._Counters))
    args = (stage.encode(), b"", b"cpu", ctypes.byref(p), o.ctypes.data, lse.ctypes.data, ctypes.byref(counters))
    fn = lib.flashlab_forward

    def call():
        if fn(*args) != 0:
            raise RuntimeError(lib.flashlab_last_error())
    return call


def ways(stage, q, k, v):
    lib = flashlab.load_library()
    found = {"bare": bare_call(lib, stage, q, k, v),
             "numpy": lambda: flashlab.forward(q, k, v, stage=stage)}
    try:
        import torch
        import flashlab.torch as fltorch
    except ImportError as e:
        print(f"torch ways left out: {e}")
        return found
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    tq_grad = tq.clone().requires_grad_(True)

    def torch_no_grad():
        with torch.no_grad():
            fltorch.attention(tq, tk, tv, stage=stage)
    found["torch no_grad"] = torch_no_grad
    found["torch grad"] = lambda: fltorch.attention(tq_grad, tk, tv, stage=stage)
    found.update(empty_op_ways(torch, tq, tk, tv, tq_grad))
    return found


def empty_op_ways(torch, tq, tk, tv, tq_grad):
    """torch's own share: an operator with flashlab::attention's signature, fake function and
    autograd registration whose body only allocates its outputs (no library call, no checks)."""
    from typing import Optional, Tuple
    Tensor = torch.Tensor

    @torch.library.custom_op("flashlab_overhead::empty_attention", mutates_args=())
    def empty(q: Tensor, k: Tensor, v: Tensor, sinks: Optional[Tensor], stage: str, variant: str, causal: bool,
              window: int, sink_tokens: int, scale: Optional[float]) -> Tuple[Tensor, Tensor]:
        return q.new_empty((q.shape[0], q.shape[1], q.shape[2], v.shape[3])), q.new_empty(q.shape[:3])

    def setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:4], *output)

    empty.register_autograd(lambda ctx, do, dlse: (None,) * 10, setup_context=setup)

    def empty_no_grad():
        with torch.no_grad():
            empty(tq, tk, tv, None, "05", "", False, 0, 0, None)
    return {"empty op no_grad": empty_no_grad,
            "empty op grad": lambda: empty(tq_grad, tk, tv, None, "05", "", False, 0, 0, None)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", default="05")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shape", default="1,1,1,16", help="B,H,T,d of q, k and v")
    ap.add_argument("--lib", default="")
    args = ap.parse_args()
    if args.lib:
        flashlab.load_library(args.lib)
    shape = tuple(int(x) for x in args.shape.split(","))
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    found = ways(args.stage, q, k, v)
    for fn in found.values():  # warm up: library load, first-call costs, torch's dispatcher caches
        for _ in range(200):
            fn()
    times = {name: [] for name in found}
    for _ in range(args.rounds):
        for name, fn in found.items():
            times[name].append(per_call_us(fn, args.calls))
    bare = statistics.median(times["bare"])
    print(f"stage {args.stage}, shape {shape}, median of {args.rounds} x {args.calls} calls")
    for name, t in times.items():
        med = statistics.median(t)
        extra = "" if name == "bare" else f"   overhead {med - bare:6.1f} us"
        print(f"  {name:14s} {med:7.1f} us/call{extra}   (rounds: {', '.join(f'{x:.1f}' for x in t)})")


if __name__ == "__main__":
    main()
