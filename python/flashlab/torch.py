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

Tensors. CPU and CUDA tensors, float32 or bfloat16, in the golden files' layout; q, k and v of
one dtype, every tensor on one device. Their data pointers go to libflashlab (API version 2) as
they are: host memory for CPU tensors, device memory for CUDA tensors (no copy to the host and
back; the library runs the CUDA stage on them in place, after waiting for torch's current stream,
and returns when its kernels are done), bf16 bit patterns for bf16 tensors (a bf16 stage, 12 or
14 or 15, reads them as they are; a float32 stage gets them widened to float32 by the library).
The library's outputs are float32: flashlab::attention returns o and lse in float32, and
attention() converts o to the inputs' dtype. The gradients come back in the inputs' dtype.
Any other device or dtype (float16, float64) raises flashlab.Unsupported naming what is missing.

The backward operator runs the stage's backward pass alone on the o and lse the forward saved
(flashlab_backward_from): a training step runs the stage's forward pass once.

This module imports torch when it is imported; `import flashlab` alone does not, so the NumPy
entry points work on a machine without torch.
"""

import contextlib
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
# What this module can hand to API version 2: CPU and CUDA tensors, float32 or bfloat16.

_DTYPE_CODE = {torch.float32: _fl.FLOAT32, torch.bfloat16: _fl.BF16}


def _unsupported(message):
    return Unsupported(3, message)


def _require_supported(q, others):
    """Raises Unsupported unless q is a CPU or CUDA tensor of float32 or bfloat16 and every
    (name, tensor) of others (None for an absent one) is on q's device with q's dtype."""
    if q.device.type not in ("cpu", "cuda"):
        raise _unsupported(f"q is on {q.device}: flashlab takes CPU tensors (host memory) and CUDA tensors "
                           f"(device memory) only")
    if q.dtype not in _DTYPE_CODE:
        raise _unsupported(f"q is {q.dtype}: flashlab takes float32 and bfloat16 tensors only (float16 and "
                           f"float64 are not supported: convert with .float() or .bfloat16())")
    _require_same_device(q, others)
    for name, t in others:
        if t is not None and t.dtype != q.dtype:
            raise _unsupported(f"{name} is {t.dtype} and q {q.dtype}: q, k, v (and the gradient of o) must have "
                               f"one dtype")


def _require_same_device(q, others):
    for name, t in others:
        if t is not None and t.device != q.device:
            raise _unsupported(f"{name} is on {t.device} and q on {q.device}: every tensor of a call must be on "
                               f"one device")


def _require_inputs(q, k, v, sinks):
    if q.is_cpu and q.dtype is torch.float32 and k.is_cpu and k.dtype is torch.float32 and v.is_cpu and \
            v.dtype is torch.float32 and (sinks is None or (sinks.is_cpu and sinks.dtype is torch.float32)):
        return  # the usual CPU case, answered without building messages
    _require_supported(q, (("k", k), ("v", v)))
    if sinks is not None and (sinks.device != q.device or sinks.dtype is not torch.float32):
        raise _unsupported(f"sinks is {sinks.dtype} on {sinks.device}: the operator takes float32 sinks on "
                           f"q's device ({q.device}); attention() converts them")


def _addr(t):
    return None if t is None else t.data_ptr()


def _checked(q, k, v, sinks, stage, variant, causal, window, sink_tokens, scale):
    """(names, dims, options, arrays) of a call, checked by the NumPy layer's (remembered) checks;
    arrays = (memory, dtype, stream) for the library: a CUDA call names torch's current stream."""
    dims = _fl._dims(tuple(q.shape), tuple(k.shape), tuple(v.shape),
                     None if sinks is None else tuple(sinks.shape))
    options = _fl._options(causal, window, sink_tokens, scale)
    if q.is_cuda:
        stream = torch.cuda.current_stream(q.device).cuda_stream or None
        return _fl._names(stage, variant, "cuda"), dims, options, (_fl.MEMORY_CUDA, _DTYPE_CODE[q.dtype], stream)
    return _fl._names(stage, variant, "cpu"), dims, options, (_fl.MEMORY_HOST, _DTYPE_CODE[q.dtype], None)


def _ready(t):
    """t contiguous and, on a GPU, 16-byte aligned as the library requires of device arrays (a view at
    an odd offset is copied); None stays None."""
    if t is None:
        return None
    t = t.contiguous()
    return t.clone() if t.is_cuda and t.data_ptr() % 16 else t


def _on_device(t):
    """The context that makes t's GPU the current one, which the library runs on (a no-op on the CPU
    and when it already is)."""
    if t.is_cuda and t.device.index != torch.cuda.current_device():
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------
# The forward operator: o (B, Hq, Tq, dv) and lse (B, Hq, Tq), both float32.

@torch.library.custom_op("flashlab::attention", mutates_args=())
def _attention_op(q: Tensor, k: Tensor, v: Tensor, sinks: Optional[Tensor], stage: str, variant: str,
                  causal: bool, window: int, sink_tokens: int, scale: Optional[float]) -> Tuple[Tensor, Tensor]:
    _require_inputs(q, k, v, sinks)
    q, k, v, sinks = _ready(q), _ready(k), _ready(v), _ready(sinks)
    names, dims, options, arrays = _checked(q, k, v, sinks, stage, variant, causal, window, sink_tokens, scale)
    B, Hq, _, Tq, _, _, dv = dims
    o = q.new_empty((B, Hq, Tq, dv), dtype=torch.float32)
    lse = q.new_empty((B, Hq, Tq), dtype=torch.float32)
    with _on_device(q):
        _fl._forward_at(names, dims, options, q.data_ptr(), k.data_ptr(), v.data_ptr(), _addr(sinks),
                        o.data_ptr(), lse.data_ptr(), counters=False, arrays=arrays)
    return o, lse


@_attention_op.register_fake
def _attention_fake(q, k, v, sinks, stage, variant, causal, window, sink_tokens, scale):
    B, Hq, Tq, _ = q.shape
    return q.new_empty((B, Hq, Tq, v.shape[3]), dtype=torch.float32), q.new_empty((B, Hq, Tq), dtype=torch.float32)


# ---------------------------------------------------------------------------------------------
# The backward operator: dq, dk, dv and dsinks ((Hq,), or empty without sinks: an operator returns
# tensors only), float32 as the library writes them; the autograd formula below converts them to
# the inputs' dtype. It runs the stage's backward pass alone on the
# forward's o and lse (flashlab_backward_from).

@torch.library.custom_op("flashlab::attention_backward", mutates_args=())
def _attention_backward_op(do: Tensor, q: Tensor, k: Tensor, v: Tensor, sinks: Optional[Tensor], o: Tensor,
                           lse: Tensor, stage: str, variant: str, causal: bool, window: int, sink_tokens: int,
                           scale: Optional[float]) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    _require_inputs(q, k, v, sinks)
    _require_same_device(q, (("the gradient of o", do), ("o", o), ("lse", lse)))
    # the gradient of o goes in with q's dtype; from attention() it is the float32 image of a
    # gradient in that dtype already, so nothing is lost
    do = _ready(do.to(q.dtype))
    q, k, v, sinks = _ready(q), _ready(k), _ready(v), _ready(sinks)
    o, lse = _ready(o.float()), _ready(lse.float())
    names, dims, options, arrays = _checked(q, k, v, sinks, stage, variant, causal, window, sink_tokens, scale)
    B, Hq, Hkv, Tq, Tk, d, dv = dims
    for name, t, shape in (("the gradient of o", do, (B, Hq, Tq, dv)), ("o", o, (B, Hq, Tq, dv)),
                           ("lse", lse, (B, Hq, Tq))):
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must be {shape}; got {tuple(t.shape)}")
    f32 = dict(dtype=torch.float32)
    dq, dk, dv_ = q.new_empty((B, Hq, Tq, d), **f32), q.new_empty((B, Hkv, Tk, d), **f32), q.new_empty((B, Hkv, Tk, dv), **f32)
    dsinks = q.new_empty((Hq,) if sinks is not None else (0,), **f32)
    with _on_device(q):
        _fl._backward_from_at(names, dims, options, q.data_ptr(), k.data_ptr(), v.data_ptr(), _addr(sinks),
                              do.data_ptr(), o.data_ptr(), lse.data_ptr(), dq.data_ptr(), dk.data_ptr(),
                              dv_.data_ptr(), _addr(dsinks) if sinks is not None else None, counters=False,
                              arrays=arrays)
    return dq, dk, dv_, dsinks


@_attention_backward_op.register_fake
def _attention_backward_fake(do, q, k, v, sinks, o, lse, stage, variant, causal, window, sink_tokens, scale):
    f32 = dict(dtype=torch.float32)
    dsinks = q.new_empty((q.shape[1],) if sinks is not None else (0,), **f32)
    return q.new_empty(q.shape, **f32), k.new_empty(k.shape, **f32), v.new_empty(v.shape, **f32), dsinks


# ---------------------------------------------------------------------------------------------
# Autograd: the forward saves its inputs and its float32 o and lse; the backward calls the backward
# operator on them and converts the gradients to the inputs' dtypes.

def _save_for_backward(ctx, inputs, output):
    q, k, v, sinks, *options = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, sinks, o, lse)
    ctx.options = options  # stage, variant, causal, window, sink_tokens, scale
    ctx.mark_non_differentiable(lse)  # attention() returns o only; lse has no gradient formula here


def _backward(ctx, grad_o, grad_lse):
    q, k, v, sinks, o, lse = ctx.saved_tensors
    dq, dk, dv, dsinks = _attention_backward_op(grad_o, q, k, v, sinks, o, lse, *ctx.options)
    return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), (dsinks if sinks is not None else None),
            None, None, None, None, None, None)


_attention_op.register_autograd(_backward, setup_context=_save_for_backward)


# ---------------------------------------------------------------------------------------------
# The entry point.

def attention(q, k, v, *, stage, variant="", causal=False, window=0, sink_tokens=0, sinks=None, scale=None):
    """Attention of one flashlab stage on torch tensors, differentiable in q, k, v and sinks.

    q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv): CPU or CUDA tensors, float32 or
    bfloat16, all of one dtype on one device, in the golden files' layout (a non-contiguous tensor
    is made contiguous first). sinks (Hq,) or None, any floating dtype on the same device (passed
    as float32). stage ("07", "7" or "07_causal") and variant ("" or a name from
    flashlab.list_stages()) pick the implementation, on the CPU for CPU tensors and on the GPU for
    CUDA tensors; causal, window (W > 0 implies causal), sink_tokens, sinks and scale (None =
    1/sqrt(d)) mean what docs/conventions.md says. Returns o (B, Hq, Tq, dv) in q's dtype.

    The gradient runs the stage's own backward pass on the saved o and lse (the forward pass does
    not run again); a stage without one, or without a feature the call asks for, raises
    flashlab.Unsupported naming the stage that adds it. A dtype other than float32 and bfloat16,
    or a device other than the CPU and CUDA, raises flashlab.Unsupported.
    """
    sinks = None if sinks is None else sinks.float()
    _require_inputs(q, k, v, sinks)
    # contiguous only: the alignment check reads data_ptr(), which torch.compile cannot trace, so
    # it happens inside the operator (_ready), where the compiler does not look
    o, _ = _attention_op(q.contiguous(), k.contiguous(), v.contiguous(), None if sinks is None else sinks.contiguous(),
                         str(stage), variant or "", bool(causal), int(window), int(sink_tokens),
                         None if scale is None else float(scale))
    return o.to(q.dtype)
