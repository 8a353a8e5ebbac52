#!/usr/bin/env python3
"""test_torch_cuda.py -- flashlab.torch.attention on CUDA tensors (ctest python_torch_cuda, label gpu).

The checks of test_torch.py, on the GPU, with its functions and tolerances:
1. Gradients. For every CUDA implementation that list_stages() reports with "backward", o and dq,
   dk, dv (and dsinks) of attention() on CUDA tensors against the float64 reference (SDPA's math
   backend, or the sink-column softmax) on the same inputs, over the cases its features cover
   (plain, causal, GQA, GQA + causal, and window, sink tokens, sinks where the stage has them).
   float32 tensors; a bf16 stage (12, and 14, 15 where built and the GPU runs them) also with
   bf16 tensors, handed to it as they are: the float32 outputs of the operators are compared at
   the bf16 tolerance of docs/conventions.md (2^-5 for o, 2^-4 for the gradients), and the bf16 o
   and gradients autograd returns must be exactly their rounding to bf16. A float32 stage given
   bf16 tensors computes in float32 on the (exact) widened values: float32 tolerance.
2. The backward reuses the forward's o and lse: one training step calls the library's forward once
   and flashlab_backward_from once, and its gradients are within the float32 gradient tolerance of
   flashlab.backward's (forward + backward in one call, on host copies; a CUDA stage that adds dq
   with atomics need not repeat its last bits, so this is not a bit-for-bit check here).
3. Streams and memory: the result on a side stream (inputs written there just before the call)
   equals the default stream's; a view at an odd offset (not 16-byte aligned) gives the aligned
   copy's result; the library refuses host arrays said to be device memory (BadInput, nothing
   written); CUDA tensors to a CPU-only stage; q on the GPU with k on the CPU; float16.
4. torch.compile (fullgraph) of the tiny model of test_torch.py on the GPU against eager.

    python3 tests/python/test_torch_cuda.py [LIB]

LIB: a libflashlab.so built with CUDA (default: $FLASHLAB_LIB, else build/libflashlab.so).
Exit 0: all passed; 1: a failure; 77: no torch, no CUDA device torch can use, or a library
without CUDA stages -- skipped, never passed.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_torch as tt  # noqa: E402  (the CPU test's references, cases and checks)

SKIP = 77


def run_gradients_cuda(flashlab, torch, flt, tally):
    impls = [s for s in flashlab.list_stages() if s["device"] == "cuda" and "backward" in s["features"]]
    names = sorted({s["stage"] for s in impls})
    print(f"CUDA implementations with a backward pass: {', '.join(names) or 'none'}")
    if "12" not in names:
        tally.check(False, "stage 12 (tensor cores, bf16) has no CUDA backward in this library")
    for impl in impls:
        bf16 = (impl["precision"] or "").startswith("bf16")
        for seed, (name, needs, opts) in enumerate(tt.CASES):
            if needs - set(impl["features"]):
                continue
            try:
                tt.run_gradient_case(torch, flt, impl, name, opts, 200 + seed, tally, device="cuda")
                dtype = torch.bfloat16
                if bf16 or name in ("causal", "gqa_causal"):  # a float32 stage widens bf16 tensors
                    tt.run_gradient_case(torch, flt, impl, name, opts, 200 + seed, tally, device="cuda", dtype=dtype)
            except flashlab.NoDevice as e:  # a stage built for another GPU (stage 14 off Hopper)
                tally.skipped(f"{impl['stage']} {impl['variant'] or '-'} {name}: {e.message}")
                break


def run_streams_and_memory(flashlab, torch, flt, tally):
    import numpy as np
    shapes = (2, 4, 2, 33, 33, 64, 64)
    t = tt.converted(tt.make_inputs(torch, shapes, False, 11), "cuda", torch.float32)
    q, k, v = t["q"], t["k"], t["v"]
    want = flt.attention(q, k, v, stage="12", causal=True)

    # inputs written on a side stream just before the call: the library waits for that stream
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        q2 = q * 1.0
        for _ in range(20):  # queue some work, so an unsynchronised read would see q2 unwritten
            q2 = (q2 * 2.0) * 0.5
        got = flt.attention(q2, k, v, stage="12", causal=True)
    torch.cuda.synchronize()
    tally.check(torch.equal(got, want), "stage 12 on a side stream equals the default stream's result")

    # a view 4 bytes into an allocation is not 16-byte aligned: the layer copies it
    buf = torch.empty(q.numel() + 1, device="cuda")
    odd = buf[1:].view(q.shape)
    odd.copy_(q)
    tally.check(odd.data_ptr() % 16 != 0 and torch.equal(flt.attention(odd, k, v, stage="12", causal=True), want),
                "a q at an odd offset (not 16-byte aligned) gives the aligned result")

    # host arrays said to be device memory: refused, nothing written
    qh, kh, vh = (np.ascontiguousarray(x.cpu().numpy()) for x in (q, k, v))
    o = np.full((2, 4, 33, 64), 7.0, np.float32)
    lse = np.full((2, 4, 33), 7.0, np.float32)
    dims, options = flashlab._dims(qh.shape, kh.shape, vh.shape, None), flashlab._options(True, 0, 0, None)
    try:
        flashlab._forward_at(flashlab._names("12", "", "cuda"), dims, options, qh.ctypes.data, kh.ctypes.data,
                             vh.ctypes.data, None, o.ctypes.data, lse.ctypes.data,
                             arrays=(flashlab.MEMORY_CUDA, flashlab.FLOAT32, None))
        tally.check(False, "host arrays passed as device memory: ran (expected BadInput)")
    except flashlab.BadInput as e:
        tally.check("not CUDA device memory" in e.message and (o == 7.0).all() and (lse == 7.0).all(),
                    f"host arrays passed as device memory: BadInput, nothing written: {e.message}")

    tt.expect_unsupported(flashlab, tally, "q on the GPU, k and v on the CPU",
                          lambda: flt.attention(q, k.cpu(), v.cpu(), stage="12"), "one device")
    tt.expect_unsupported(flashlab, tally, "float16 CUDA tensors",
                          lambda: flt.attention(q.half(), k.half(), v.half(), stage="12"), "float16")
    try:
        flt.attention(q, k, v, stage="02")
        tally.check(False, "CUDA tensors to stage 02 (CPU only): ran")
    except flashlab.FlashlabError as e:
        tally.check("on cuda" in e.message, f"CUDA tensors to stage 02 (CPU only): {e.message}")


def main(argv):
    try:
        import numpy  # noqa: F401
        import torch
    except ImportError as e:
        print(f"skip: {e.name} is not importable here ({e})")
        return SKIP
    if not torch.cuda.is_available():
        print("skip: torch sees no usable CUDA device (torch.cuda.is_available() is False)")
        return SKIP
    lib_path = (argv[1] if len(argv) > 1 and argv[1] else "") or os.environ.get("FLASHLAB_LIB", "") or \
        os.path.join(tt.REPO, "build", "libflashlab.so")
    sys.path.insert(0, os.path.join(tt.REPO, "python"))
    import flashlab
    import flashlab.torch as flt
    if not os.path.isfile(lib_path):
        print(f"skip: no library at {lib_path}")
        return SKIP
    flashlab.load_library(lib_path)
    if not any(s["device"] == "cuda" for s in flashlab.list_stages()):
        print(f"skip: {lib_path} has no CUDA stages (built without CUDA)")
        return SKIP
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}, library {lib_path}")
    tally = tt.Tally()
    start = time.time()
    run_gradients_cuda(flashlab, torch, flt, tally)
    for stage in ("08", "10", "12"):
        tt.run_backward_reuse(flashlab, torch, flt, tally, stage, device="cuda", exact=False)
    run_streams_and_memory(flashlab, torch, flt, tally)
    tt.run_compile(flashlab, torch, flt, tally, device="cuda")
    print(f"summary: {tally.ok} ok, {tally.fail} failed, {tally.skip} skipped in {time.time() - start:.1f} s")
    return 1 if tally.fail or tally.ok == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
