#!/usr/bin/env python3
"""test_torch.py -- flashlab.torch.attention against PyTorch's own attention, on the CPU.
(test_torch_cuda.py runs the same checks on CUDA tensors, with these functions.)

1. Gradients. For every CPU implementation that list_stages() reports with "backward" (default
   and named variants), o and the gradients dq, dk, dv (and dsinks) of flashlab.torch.attention
   are compared with a float64 reference on the same float32 inputs:
     - torch's scaled_dot_product_attention, math backend, with the stage's mask as a boolean
       attn_mask (flashlab's causal is bottom-right aligned, SDPA's is_causal is not) and k, v
       repeated over each group for GQA;
     - for learned sinks, which SDPA does not have, an explicit softmax over the scores with one
       more column per head holding the sink logit (its value row is zero). That reference is
       itself checked against SDPA with sinks of -inf, where the two must agree.
   Cases: plain, causal, GQA, window, window + sink tokens, learned sinks, and everything at once.
   An implementation runs each case its features cover; for the first case it does not cover, the
   call must raise flashlab.Unsupported naming a stage that adds the missing feature.
   A bf16 stage (12, 14, 15) runs every case twice: on float32 tensors (which it rounds to bf16)
   and on bf16 tensors (handed to it as they are). With bf16 tensors, the float32 outputs of the
   two operators (flashlab::attention, flashlab::attention_backward) are what is compared with
   the reference, on the bf16 inputs' values; attention()'s bf16 o and autograd's bf16 gradients
   must be exactly those float32 outputs rounded to bf16 (one rounding, checked bit for bit).
2. What the torch layer adds: bf16 tensors to a float32 stage give the float32 result on the same
   values (the library widens them) bit for bit; float16, float64, a meta tensor, mixed dtypes
   raise Unsupported; a non-contiguous input gives the result of its contiguous copy.
3. The backward reuses the forward's o and lse: one training step calls the library's forward
   once and flashlab_backward_from once (never flashlab_backward), and its gradients equal
   flashlab.backward's (forward + backward in one call, API version 1's path) bit for bit.
4. torch.library.opcheck of the operator (schema, fake tensors, autograd registration).
5. torch.compile (fullgraph, default backend) of a tiny model (a linear layer making q, k, v, the
   op, a linear layer after it): forward and backward against the same model run eagerly, and the
   library must have been called by the compiled model.

Tolerance. The rule is the project's (docs/conventions.md): |got - ref| <= tol * (1 + |ref|),
elementwise. For float32 stages tol follows from float32 accumulation: the unit roundoff is
u = 2^-24 ~ 6e-8, and a sum of n terms whose every rounding pushes the same way is off by at most
n u of the sum's size; with n up to 1000 that is 6e-5, hence 1e-4 for o, which comes out of two
products (Q K^T, then P V), and 5e-4 for the gradients, which pass through two more (dS, then
dS K or dS^T Q). The sums in this test have at most 64 terms, so the worst case is well inside
those numbers; they are kept as they are so that this test and the golden checks judge a stage
alike. The bf16 stages (12, 14) round the inputs to bf16 (u = 2^-8) and use the bf16 rule of
the same page: 2^-5 for o, 2^-4 for the gradients.

    python3 tests/python/test_torch.py [LIB]

LIB: libflashlab.so (default: $FLASHLAB_LIB, else build/libflashlab.so of this repository).
Exit 0: all passed; 1: a failure; 77: torch (or NumPy, or the library) is missing.
"""

import os
import re
import sys
import time

SKIP = 77
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOL_F32 = {"o": 1e-4, "grad": 5e-4}
TOL_BF16 = {"o": 2.0**-5, "grad": 2.0**-4}

# name: (needed features, options); shapes come from case_shapes()
CASES = [
    ("plain", set(), dict()),
    ("causal", {"causal"}, dict(causal=True)),
    ("gqa", {"gqa"}, dict(gqa=True)),
    ("gqa_causal", {"gqa", "causal"}, dict(gqa=True, causal=True)),
    ("window", {"causal", "window"}, dict(window=5)),
    ("window_sink_tokens", {"causal", "window", "sink_tokens"}, dict(window=4, sink_tokens=2)),
    ("sinks_causal", {"causal", "sinks"}, dict(causal=True, sinks=True)),
    ("gqa_window_sink_tokens_sinks", {"causal", "gqa", "window", "sink_tokens", "sinks"},
     dict(gqa=True, window=4, sink_tokens=3, sinks=True)),
]


class Tally:
    def __init__(self):
        self.ok = self.fail = self.skip = 0

    def check(self, ok, line):
        print(f"{'ok  ' if ok else 'FAIL'} {line}")
        if ok:
            self.ok += 1
        else:
            self.fail += 1

    def skipped(self, line):
        print(f"skip {line}")
        self.skip += 1


# ---------------------------------------------------------------------------------------------
# The float64 references.

def keep_mask(torch, Tq, Tk, causal, window, sink_tokens):
    """(Tq, Tk) bool: the keys each query row sees (docs/conventions.md). Row i sits at position
    i + Tk - Tq; causal keeps keys at or before it; a window W keeps only the last W of those; sink
    tokens S bring back the first S keys (never one after the row)."""
    pos = torch.arange(Tq)[:, None] + (Tk - Tq)
    key = torch.arange(Tk)[None, :]
    keep = torch.ones(Tq, Tk, dtype=torch.bool)
    if causal or window > 0:
        keep &= key <= pos
    if window > 0:
        keep &= key > pos - window
    if sink_tokens > 0:
        keep |= (key < sink_tokens) & (key <= pos)
    return keep


def repeat_kv(x, Hq):
    return x.repeat_interleave(Hq // x.shape[1], dim=1)


def sdpa_reference(torch, q, k, v, keep, scale):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.MATH):
        return torch.nn.functional.scaled_dot_product_attention(
            q, repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1]), attn_mask=keep, scale=scale)


def sink_column_reference(torch, q, k, v, sinks, keep, scale):
    """Softmax over [masked scores | the head's sink logit]; the sink's probability multiplies a
    zero value row, so it only takes its share of the denominator."""
    B, Hq, Tq, _ = q.shape
    scores = torch.einsum("bhid,bhjd->bhij", q, repeat_kv(k, Hq)) * scale
    scores = scores.masked_fill(~keep, float("-inf"))
    sink_col = sinks.view(1, Hq, 1, 1).expand(B, Hq, Tq, 1)
    p = torch.softmax(torch.cat([scores, sink_col], dim=-1), dim=-1)[..., :-1]
    return p @ repeat_kv(v, Hq)


# ---------------------------------------------------------------------------------------------
# One gradient case on one implementation.

def case_shapes(impl_bf16, gqa):
    """(B, Hq, Hkv, Tq, Tk, d, dv): Tq < Tk so that the bottom-right alignment matters; d != dv
    where the stage allows it (the bf16 stages run d = dv in {64, 128} only)."""
    d, dv = (64, 64) if impl_bf16 else (16, 12)
    return (2, 4, 2 if gqa else 4, 11, 14, d, dv)


def make_inputs(torch, shapes, with_sinks, seed):
    B, Hq, Hkv, Tq, Tk, d, dv = shapes
    g = torch.Generator().manual_seed(seed)
    t = {"q": torch.randn(B, Hq, Tq, d, generator=g), "k": torch.randn(B, Hkv, Tk, d, generator=g),
         "v": torch.randn(B, Hkv, Tk, dv, generator=g), "do": torch.randn(B, Hq, Tq, dv, generator=g)}
    if with_sinks:  # around the scores' size, so the sink takes a real share of each row
        t["sinks"] = torch.randn(Hq, generator=g) + 1.0
    return t


def converted(t, device, dtype):
    """The inputs of make_inputs on device, q, k, v and do in dtype (sinks stay float32)."""
    return {n: x.to(device=device, dtype=x.dtype if n == "sinks" else dtype) for n, x in t.items()}


def flashlab_run(torch, flt, impl, t, opts, scale):
    """o and the gradients through attention() and autograd, in the inputs' dtype."""
    leaves = {n: t[n].clone().requires_grad_(True) for n in ("q", "k", "v", "sinks") if n in t}
    o = flt.attention(leaves["q"], leaves["k"], leaves["v"], stage=impl["stage"], variant=impl["variant"],
                      causal=opts.get("causal", False), window=opts.get("window", 0),
                      sink_tokens=opts.get("sink_tokens", 0), sinks=leaves.get("sinks"), scale=scale)
    o.backward(t["do"])
    out = {"o": o.detach()}
    out.update({"d" + n: x.grad for n, x in leaves.items()})
    return out


def ops_run(torch, impl, t, opts, scale):
    """o and the gradients as the two operators return them: float32, before any conversion."""
    args = (impl["stage"], impl["variant"], opts.get("causal", False), opts.get("window", 0),
            opts.get("sink_tokens", 0), scale)
    sinks = t.get("sinks")
    o, lse = torch.ops.flashlab.attention(t["q"], t["k"], t["v"], sinks, *args)
    dq, dk, dv, dsinks = torch.ops.flashlab.attention_backward(t["do"], t["q"], t["k"], t["v"], sinks, o, lse, *args)
    out = {"o": o, "dq": dq, "dk": dk, "dv": dv}
    if sinks is not None:
        out["dsinks"] = dsinks
    return out


def reference_run(torch, t, opts, scale):
    """float64 on the CPU, on the values of t (whatever their dtype and device)."""
    t = {n: x.detach().cpu().double() for n, x in t.items()}
    leaves = {n: t[n].clone().requires_grad_(True) for n in ("q", "k", "v", "sinks") if n in t}
    Tq, Tk = t["q"].shape[2], t["k"].shape[2]
    keep = keep_mask(torch, Tq, Tk, opts.get("causal", False), opts.get("window", 0), opts.get("sink_tokens", 0))
    if "sinks" in leaves:
        o = sink_column_reference(torch, leaves["q"], leaves["k"], leaves["v"], leaves["sinks"], keep, scale)
    else:
        o = sdpa_reference(torch, leaves["q"], leaves["k"], leaves["v"], keep, scale)
    o.backward(t["do"])
    out = {"o": o.detach()}
    out.update({"d" + n: x.grad for n, x in leaves.items()})
    return out


def worst(torch, got, want, tol):
    """(max |got - want|, max of |got - want| / (tol (1 + |want|))): the rule holds where the
    second, the share of the allowance used, is at most 1."""
    if tuple(got.shape) != tuple(want.shape) or not torch.isfinite(got).all():
        return float("inf"), float("inf")
    err = (got.detach().cpu().double() - want).abs()
    return err.max().item(), (err / (tol * (1.0 + want.abs()))).max().item()


def run_gradient_case(torch, flt, impl, name, opts, seed, tally, device="cpu", dtype=None):
    """One case on impl with tensors of dtype (float32 when None) on device: o and the gradients
    against the float64 reference at the tolerance of the stage's precision."""
    dtype = dtype or torch.float32
    bf16 = (impl["precision"] or "").startswith("bf16")
    tol = TOL_BF16 if bf16 else TOL_F32
    shapes = case_shapes(bf16, opts.get("gqa", False))
    scale = None if name != "plain" else 0.3  # one case with a scale of its own
    t = converted(make_inputs(torch, shapes, opts.get("sinks", False), seed), device, dtype)
    tensors = "" if dtype == torch.float32 else f" {str(dtype).replace('torch.', '')}"
    label = f"{impl['stage']} {impl['variant'] or '-':6s} {name + tensors:29s}"
    got = flashlab_run(torch, flt, impl, t, opts, scale)
    exact = True
    if dtype != torch.float32:  # compare the float32 outputs; the converted ones must be their rounding
        raw = ops_run(torch, impl, t, opts, scale)
        exact = all(torch.equal(got[n], raw[n].to(got[n].dtype)) for n in raw)
        got = raw
    want = reference_run(torch, t, opts, 1.0 / shapes[5] ** 0.5 if scale is None else scale)
    parts, ok = [], exact
    for n in want:
        err, ratio = worst(torch, got[n], want[n], tol["o" if n == "o" else "grad"])
        ok &= ratio <= 1.0
        parts.append(f"{n} {err:.1e} ({ratio:.2f})")
    conversion = "" if dtype == torch.float32 else ("; outputs = float32 rounded once" if exact else
                                                    "; OUTPUTS ARE NOT the float32 ones rounded once")
    tally.check(ok, f"{label} {' '.join(parts)}  tol {tol['o']:.0e}/{tol['grad']:.0e}{conversion}")
    return ok


def check_unsupported(flashlab, torch, flt, impl, name, opts, missing, impls, tally):
    """A case needing features the implementation lacks raises Unsupported naming a stage that
    has the first missing one ("... stage NN adds it")."""
    t = make_inputs(torch, case_shapes(False, opts.get("gqa", False)), opts.get("sinks", False), 0)
    label = f"{impl['stage']} {impl['variant'] or '-':6s} {name} (lacks {', '.join(sorted(missing))})"
    try:
        flashlab_run(torch, flt, impl, t, opts, None)
    except flashlab.Unsupported as e:
        named = re.search(r"stage (\d+) adds it", e.message)
        adders = {s["stage"] for s in impls if s["device"] == "cpu" and missing & set(s["features"])}
        tally.check(bool(named) and named.group(1) in adders, f"{label} raises Unsupported: {e.message}")
        return
    except Exception as e:  # noqa: BLE001
        tally.check(False, f"{label}: {type(e).__name__}: {e} (expected Unsupported)")
        return
    tally.check(False, f"{label}: ran (expected Unsupported)")


def run_gradients(flashlab, torch, flt, tally):
    impls = [s for s in flashlab.list_stages() if s["device"] == "cpu"]
    with_bwd = [s for s in impls if "backward" in s["features"]]
    if not with_bwd:
        tally.check(False, "list_stages() reports no CPU implementation with a backward")
        return
    # the sink-column reference is SDPA's when every sink logit is -inf
    t = make_inputs(torch, case_shapes(False, True), True, 1)
    t["sinks"] = torch.full_like(t["sinks"], float("-inf"))
    keep = keep_mask(torch, 11, 14, False, 4, 3)
    a = sink_column_reference(torch, t["q"].double(), t["k"].double(), t["v"].double(), t["sinks"].double(), keep, 0.25)
    b = sdpa_reference(torch, t["q"].double(), t["k"].double(), t["v"].double(), keep, 0.25)
    tally.check(torch.allclose(a, b, rtol=1e-12, atol=1e-12), "reference: sink column with sinks = -inf equals SDPA")

    for impl in with_bwd:
        lacking = None
        for seed, (name, needs, opts) in enumerate(CASES):
            missing = needs - set(impl["features"])
            if missing:
                lacking = lacking or (name, opts, missing)
                continue
            run_gradient_case(torch, flt, impl, name, opts, 100 + seed, tally)
            if (impl["precision"] or "").startswith("bf16"):
                run_gradient_case(torch, flt, impl, name, opts, 100 + seed, tally, dtype=torch.bfloat16)
        if lacking:
            check_unsupported(flashlab, torch, flt, impl, *lacking, impls, tally)


# ---------------------------------------------------------------------------------------------
# What the torch layer adds: dtype and device errors, non-contiguous inputs, opcheck.

def expect_unsupported(flashlab, tally, what, call, needle):
    try:
        call()
    except flashlab.Unsupported as e:
        tally.check(needle in e.message, f"{what} raises Unsupported: {e.message}")
        return
    except Exception as e:  # noqa: BLE001
        tally.check(False, f"{what}: {type(e).__name__}: {e} (expected Unsupported)")
        return
    tally.check(False, f"{what}: ran (expected Unsupported)")


def run_torch_layer(flashlab, torch, flt, tally):
    t = make_inputs(torch, (1, 2, 2, 5, 5, 8, 8), False, 7)
    q, k, v = t["q"], t["k"], t["v"]
    expect_unsupported(flashlab, tally, "float16 tensors",
                       lambda: flt.attention(q.half(), k.half(), v.half(), stage="07"), "float16")
    expect_unsupported(flashlab, tally, "float64 tensors",
                       lambda: flt.attention(q.double(), k.double(), v.double(), stage="07"), "float32")
    expect_unsupported(flashlab, tally, "meta-device tensors",
                       lambda: flt.attention(q.to("meta"), k.to("meta"), v.to("meta"), stage="07"), "CPU")
    expect_unsupported(flashlab, tally, "q float32 with k, v bf16",
                       lambda: flt.attention(q, k.bfloat16(), v.bfloat16(), stage="07"), "one dtype")
    if torch.cuda.is_available():
        expect_unsupported(flashlab, tally, "q on the GPU, k and v on the CPU",
                           lambda: flt.attention(q.cuda(), k, v, stage="07"), "one device")

    # bf16 tensors to a float32 stage: the library widens them, so the result is the float32 one on
    # the same values, bit for bit (then rounded to bf16, as attention() returns q's dtype)
    q16, k16, v16 = q.bfloat16(), k.bfloat16(), v.bfloat16()
    widened = flt.attention(q16.float(), k16.float(), v16.float(), stage="07", causal=True)
    same = torch.equal(flt.attention(q16, k16, v16, stage="07", causal=True), widened.bfloat16())
    o16, _ = torch.ops.flashlab.attention(q16, k16, v16, None, "07", "", True, 0, 0, None)
    tally.check(same and torch.equal(o16, widened),
                "bf16 tensors to float32 stage 07: the float32 result on the widened values, bit for bit")

    # a non-contiguous q (a transposed view) gives the result of its contiguous copy, bit for bit
    q_t = q.transpose(2, 3).contiguous().transpose(2, 3)
    same = torch.equal(flt.attention(q_t, k, v, stage="07", causal=True),
                       flt.attention(q.contiguous(), k, v, stage="07", causal=True))
    tally.check(not q_t.is_contiguous() and same, "a non-contiguous q gives the contiguous result")

    # a stage without a backward runs forward and raises Unsupported on backward
    no_bwd = [s for s in flashlab.list_stages() if s["device"] == "cpu" and "backward" not in s["features"]
              and s["stage"] in ("01", "02", "03", "05")]
    if no_bwd:
        s = no_bwd[0]["stage"]
        qg = q.clone().requires_grad_(True)
        expect_unsupported(flashlab, tally, f"backward through stage {s} (forward only)",
                           lambda: flt.attention(qg, k, v, stage=s).sum().backward(), "adds it")

    # the operator's registration, as torch checks it: schema, fake tensors, autograd, AOT dispatch
    sinks = torch.zeros(2)
    for args in ((q.clone().requires_grad_(True), k, v, None, "08", "", True, 0, 0, None),
                 (q.clone().requires_grad_(True), k, v, sinks.requires_grad_(True), "10", "", False, 3, 1, 0.5)):
        report = torch.library.opcheck(torch.ops.flashlab.attention.default, args)
        tally.check(all(r == "SUCCESS" for r in report.values()),
                    f"opcheck flashlab::attention stage {args[4]}: {report}")


# ---------------------------------------------------------------------------------------------
# The backward reuses the forward's o and lse.

class LibraryCalls:
    """Counts the package's calls into the library (forward, backward, backward_from) while in a
    with block."""

    NAMES = {"forward": "_forward_at", "backward": "_backward_at", "backward_from": "_backward_from_at"}

    def __init__(self, flashlab):
        self.flashlab, self.calls = flashlab, dict.fromkeys(self.NAMES, 0)

    def __enter__(self):
        self.real = {n: getattr(self.flashlab, attr) for n, attr in self.NAMES.items()}
        for n, attr in self.NAMES.items():
            setattr(self.flashlab, attr, self._counting(n, self.real[n]))
        return self.calls

    def __exit__(self, *exc):
        for n, attr in self.NAMES.items():
            setattr(self.flashlab, attr, self.real[n])

    def _counting(self, name, fn):
        def wrapped(*a, **kw):
            self.calls[name] += 1
            return fn(*a, **kw)
        return wrapped


REUSE_CASES = {  # stage: (shapes, options) of run_backward_reuse
    "10": ((2, 4, 2, 9, 12, 16, 16), dict(gqa=True, window=5, sink_tokens=1, sinks=True)),
    "08": ((2, 4, 2, 9, 12, 16, 16), dict(gqa=True, causal=True)),
    "12": ((1, 4, 2, 40, 70, 64, 64), dict(gqa=True, causal=True)),
}


def run_backward_reuse(flashlab, torch, flt, tally, stage="10", device="cpu", exact=True):
    """One step through attention() on float32 tensors: one forward call, one backward_from call,
    no forward + backward call; its gradients against flashlab.backward (forward + backward in one
    call, API version 1's path) on the same inputs, bit for bit when exact (the CPU stages are
    deterministic), else within the float32 gradients' tolerance (both runs do the same arithmetic;
    only the order of atomic additions may differ)."""
    import numpy as np
    shapes, opts = REUSE_CASES[stage]
    t = converted(make_inputs(torch, shapes, opts.get("sinks", False), 3), device, torch.float32)
    with LibraryCalls(flashlab) as calls:
        got = flashlab_run(torch, flt, {"stage": stage, "variant": ""}, t, opts, None)
    host = {n: x.cpu().numpy() for n, x in t.items()}
    want = flashlab.backward(host["q"], host["k"], host["v"], host["do"], stage=stage, device=device,
                             causal=opts.get("causal", False), window=opts.get("window", 0),
                             sink_tokens=opts.get("sink_tokens", 0), sinks=host.get("sinks"))
    names = ["o", "dq", "dk", "dv"] + (["dsinks"] if "sinks" in host else [])
    diffs = {n: float(np.abs(got[n].cpu().numpy() - want[n]).max()) for n in names}
    same = all(np.array_equal(got[n].cpu().numpy(), want[n]) for n in names)
    close = all(d <= TOL_F32["grad"] for d in diffs.values())
    tally.check(calls == {"forward": 1, "backward": 0, "backward_from": 1} and (same if exact else close),
                f"stage {stage} on {device}: a training step made the library calls {calls}; against "
                f"flashlab.backward (forward + backward): "
                f"{'bit for bit' if same else 'max diff ' + ', '.join(f'{n} {d:.1e}' for n, d in diffs.items())}")


# ---------------------------------------------------------------------------------------------
# torch.compile of a tiny model using the op.

def tiny_model(torch, flt):
    class TinyAttention(torch.nn.Module):
        """x (B, T, 32) -> q, k, v with 4 query heads and 2 kv heads of 8 -> stage 10 -> x."""

        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(32, 64)
            self.out = torch.nn.Linear(32, 32)
            self.sinks = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 4))

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.qkv(x).split([32, 16, 16], dim=-1)
            q = q.view(B, T, 4, 8).transpose(1, 2)       # non-contiguous views: the op copies them
            k = k.view(B, T, 2, 8).transpose(1, 2)
            v = v.view(B, T, 2, 8).transpose(1, 2)
            o = flt.attention(q, k, v, stage="10", window=6, sink_tokens=1, sinks=self.sinks)
            return self.out(o.transpose(1, 2).reshape(B, T, 32))

    return TinyAttention()


def run_compile(flashlab, torch, flt, tally, device="cpu"):
    torch.manual_seed(0)
    model = tiny_model(torch, flt).to(device)
    x = torch.randn(2, 16, 32).to(device)

    def loss_and_grads(m):
        model.zero_grad()
        out = m(x)
        out.square().mean().backward()
        return out.detach(), [p.grad.clone() for p in model.parameters()]

    eager_out, eager_grads = loss_and_grads(model)
    start = time.time()
    try:
        with LibraryCalls(flashlab) as calls:
            compiled = torch.compile(model, fullgraph=True)
            out, grads = loss_and_grads(compiled)
    except Exception as e:  # noqa: BLE001
        tally.check(False, f"torch.compile of a model using flashlab::attention on {device}: {type(e).__name__}: {e}")
        return
    took = time.time() - start
    # the compiled model fuses and reorders the linear layers' float32 sums (32 to 64 terms):
    # the float32 rule above holds for them as for the stage
    errs = [(out - eager_out).abs().max().item()] + [(g - e).abs().max().item() for g, e in zip(grads, eager_grads)]
    close = all(torch.allclose(a, b, rtol=TOL_F32["o"], atol=TOL_F32["o"]) for a, b in [(out, eager_out)]) and \
        all(torch.allclose(g, e, rtol=TOL_F32["grad"], atol=TOL_F32["grad"]) for g, e in zip(grads, eager_grads))
    tally.check(close and calls == {"forward": 1, "backward": 0, "backward_from": 1},
                f"torch.compile(fullgraph=True) on {device} of linear + stage 10 (window, sink tokens, sinks, GQA) + linear: "
                f"library calls {calls}, max diff vs eager: out {errs[0]:.1e}, grads {max(errs[1:]):.1e} "
                f"({took:.1f} s to compile and run)")


def main(argv):
    try:
        import numpy  # noqa: F401
        import torch
    except ImportError as e:
        print(f"skip: {e.name} is not importable here ({e}); the torch tests need PyTorch (pip install torch)")
        return SKIP
    lib_path = (argv[1] if len(argv) > 1 and argv[1] else "") or os.environ.get("FLASHLAB_LIB", "") or \
        os.path.join(REPO, "build", "libflashlab.so")
    sys.path.insert(0, os.path.join(REPO, "python"))
    import flashlab
    import flashlab.torch as flt
    if not os.path.isfile(lib_path):
        print(f"skip: no library at {lib_path} (cmake --build build --target flashlab_shared)")
        return SKIP
    flashlab.load_library(lib_path)
    print(f"torch {torch.__version__}, library {lib_path}")
    torch.manual_seed(0)
    tally = Tally()
    start = time.time()
    run_gradients(flashlab, torch, flt, tally)
    run_torch_layer(flashlab, torch, flt, tally)
    for stage in ("10", "12"):
        run_backward_reuse(flashlab, torch, flt, tally, stage)
    run_compile(flashlab, torch, flt, tally)
    print(f"summary: {tally.ok} ok, {tally.fail} failed, {tally.skip} skipped in {time.time() - start:.1f} s")
    return 1 if tally.fail or tally.ok == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
