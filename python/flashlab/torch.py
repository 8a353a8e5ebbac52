"""flashlab.torch -- any stage of libflashlab as a PyTorch operator with autograd.

    import torch, flashlab.torch as flt
    q = torch.randn(2, 4, 64, 32, requires_grad=True)      # (B, Hq, Tq, d)
    k = torch.randn(2, 2, 64, 32, requires_grad=True)      # (B, Hkv, Tk, d)
    v = torch.randn(2, 2, 64, 32, requires_grad=True)      # (B, Hkv, Tk, dv)
    o = flt.attention(q, k, v, stage="10", window=16)      # (B, Hq, Tq, dv)
    o.sum().backward()                                     # q.grad, k.grad, v.grad from stage 10

attention() is two custom operators of torch.library: flashlab::attention (the forward, returning
o and lse) and flashlab::attention_backward, tied together with register_autograd and each given
a fake implementation (the shapes of its outputs), so that torch.compile traces a model through
them without running the library.

API version 1 of libflashlab takes host float32 arrays, so this module takes CPU float32 tensors
and hands the library their data pointers: no copy of a contiguous tensor on the way in, and the
outputs are written straight into new tensors. Any other device or dtype raises
flashlab.Unsupported naming what is missing.

This module imports torch when it is imported; `import flashlab` alone does not, so the NumPy
entry points work on a machine without torch.
"""

from typing import Optional, Tuple

try:
    import torch
except ImportError as e:  # pragma: no cover - depends on the machine
    raise ImportError("flashlab.torch needs PyTorch (pip install torch); flashlab.forward and "
                      "flashlab.backward work on NumPy arrays without it") from e

import flashlab as _fl
from flashlab import Unsupported

__all__ = ["attention"]

Tensor = torch.Tensor


# ---------------------------------------------------------------------------------------------
# What this module can hand to API version 1: CPU float32 tensors.

def _unsupported(message):
    return Unsupported(3, message)


def _require_cpu_float32(name, t):
    if t.is_cpu and t.dtype is torch.float32:  # the usual case, answered without building messages
        return
    if t.device.type == "cuda":
        raise _unsupported(
            f"{name} is on {t.device}: CUDA tensors need libflashlab device pointers, not yet in API v1 "
            f"(only host float32 arrays); move the tensors to the CPU, or use flashlab's command line "
            f"with --device cuda")
    if t.device.type != "cpu":
        raise _unsupported(f"{name} is on {t.device}: API v1 takes CPU (host) float32 tensors only")
    if t.dtype == torch.bfloat16:
        raise _unsupported(
            f"{name} is bfloat16: bf16 tensors are stage 12's (12_tensor_cores) precision, and API v1 "
            f"passes float32 arrays only; give float32 tensors (stage 12's CPU reference rounds them "
            f"to bf16 itself)")
    if t.dtype != torch.float32:
        raise _unsupported(f"{name} is {t.dtype}: API v1 takes float32 tensors only (convert with .float())")


def _require_inputs(q, k, v, sinks):
    for name, t in (("q", q), ("k", k), ("v", v), ("sinks", sinks)):
        if t is not None:
            _require_cpu_float32(name, t)


def _addr(t):
    return None if t is None else t.data_ptr()


def _checked(q, k, v, sinks, stage, variant, causal, window, sink_tokens, scale):
    """(names, dims, options) of a call, checked by the NumPy layer's (remembered) checks."""
    dims = _fl._dims(tuple(q.shape), tuple(k.shape), tuple(v.shape),
                     None if sinks is None else tuple(sinks.shape))
    return _fl._names(stage, variant, "cpu"), dims, _fl._options(causal, window, sink_tokens, scale)


def _contiguous(t):
    return None if t is None else t.contiguous()


# ---------------------------------------------------------------------------------------------
# The forward operator: o (B, Hq, Tq, dv) and lse (B, Hq, Tq).

@torch.library.custom_op("flashlab::attention", mutates_args=())
def _attention_op(q: Tensor, k: Tensor, v: Tensor, sinks: Optional[Tensor], stage: str, variant: str,
                  causal: bool, window: int, sink_tokens: int, scale: Optional[float]) -> Tuple[Tensor, Tensor]:
    _require_inputs(q, k, v, sinks)
    q, k, v, sinks = q.contiguous(), k.contiguous(), v.contiguous(), _contiguous(sinks)
    names, dims, options = _checked(q, k, v, sinks, stage, variant, causal, window, sink_tokens, scale)
    B, Hq, _, Tq, _, _, dv = dims
    o = q.new_empty((B, Hq, Tq, dv))
    lse = q.new_empty((B, Hq, Tq))
    _fl._forward_at(names, dims, options, q.data_ptr(), k.data_ptr(), v.data_ptr(), _addr(sinks),
                    o.data_ptr(), lse.data_ptr(), counters=False)
    return o, lse


@_attention_op.register_fake
def _attention_fake(q, k, v, sinks, stage, variant, causal, window, sink_tokens, scale):
    B, Hq, Tq, _ = q.shape
    return q.new_empty((B, Hq, Tq, v.shape[3])), q.new_empty((B, Hq, Tq))


# ---------------------------------------------------------------------------------------------
# The backward operator: dq, dk, dv and dsinks ((Hq,), or empty without sinks: an operator
# returns tensors only).
#
# It takes the forward's o and lse, which a backward pass reads, but API version 1's
# flashlab_backward runs the forward pass again itself before its backward pass (the two are one
# call there), so today they go unused and the library writes its own o and lse into scratch
# tensors. A later API that takes o and lse will only change this function's body.

@torch.library.custom_op("flashlab::attention_backward", mutates_args=())
def _attention_backward_op(do: Tensor, q: Tensor, k: Tensor, v: Tensor, sinks: Optional[Tensor], o: Tensor,
                           lse: Tensor, stage: str, variant: str, causal: bool, window: int, sink_tokens: int,
                           scale: Optional[float]) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    _require_inputs(q, k, v, sinks)
    _require_cpu_float32("the gradient of o", do)
    q, k, v, sinks, do = q.contiguous(), k.contiguous(), v.contiguous(), _contiguous(sinks), do.contiguous()
    names, dims, options = _checked(q, k, v, sinks, stage, variant, causal, window, sink_tokens, scale)
    B, Hq, _, Tq, _, _, dv = dims
    if tuple(do.shape) != (B, Hq, Tq, dv):
        raise ValueError(f"the gradient of o must be (B, Hq, Tq, dv) = ({B}, {Hq}, {Tq}, {dv}); "
                         f"got {tuple(do.shape)}")
    dq, dk, dv_ = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dsinks = q.new_empty((Hq,) if sinks is not None else (0,))
    o_again, lse_again = q.new_empty((B, Hq, Tq, dv)), q.new_empty((B, Hq, Tq))
    _fl._backward_at(names, dims, options, q.data_ptr(), k.data_ptr(), v.data_ptr(), _addr(sinks),
                     do.data_ptr(), o_again.data_ptr(), lse_again.data_ptr(), dq.data_ptr(), dk.data_ptr(),
                     dv_.data_ptr(), _addr(dsinks) if sinks is not None else None, counters=False)
    return dq, dk, dv_, dsinks


@_attention_backward_op.register_fake
def _attention_backward_fake(do, q, k, v, sinks, o, lse, stage, variant, causal, window, sink_tokens, scale):
    dsinks = q.new_empty((q.shape[1],) if sinks is not None else (0,))
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dsinks


# ---------------------------------------------------------------------------------------------
# Autograd: the forward saves its inputs and outputs; the backward calls the backward operator.

def _save_for_backward(ctx, inputs, output):
    q, k, v, sinks, *options = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, sinks, o, lse)
    ctx.options = options  # stage, variant, causal, window, sink_tokens, scale
    ctx.mark_non_differentiable(lse)  # attention() returns o only; lse has no gradient formula here


def _backward(ctx, grad_o, grad_lse):
    q, k, v, sinks, o, lse = ctx.saved_tensors
    dq, dk, dv, dsinks = _attention_backward_op(grad_o, q, k, v, sinks, o, lse, *ctx.options)
    return dq, dk, dv, (dsinks if sinks is not None else None), None, None, None, None, None, None


_attention_op.register_autograd(_backward, setup_context=_save_for_backward)


# ---------------------------------------------------------------------------------------------
# The entry point.

def attention(q, k, v, *, stage, variant="", causal=False, window=0, sink_tokens=0, sinks=None, scale=None):
    """Attention of one flashlab stage on torch tensors, differentiable in q, k, v and sinks.

    q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) and sinks (Hq,) or None: CPU float32
    tensors in the golden files' layout (a non-contiguous tensor is made contiguous first).
    stage ("07", "7" or "07_causal") and variant ("" or a name from flashlab.list_stages()) pick
    the implementation; causal, window (W > 0 implies causal), sink_tokens, sinks and scale (None
    = 1/sqrt(d)) mean what docs/conventions.md says. Returns o (B, Hq, Tq, dv).

    The gradient runs the stage's own backward pass (flashlab.backward); a stage without one, or
    without a feature the call asks for, raises flashlab.Unsupported naming the stage that adds it.
    A CUDA tensor or a dtype other than float32 raises flashlab.Unsupported.
    """
    _require_inputs(q, k, v, sinks)
    o, _ = _attention_op(q.contiguous(), k.contiguous(), v.contiguous(), _contiguous(sinks), str(stage),
                         variant or "", bool(causal), int(window), int(sink_tokens),
                         None if scale is None else float(scale))
    return o
