"""flashlab -- call the attention stages of libflashlab from Python.

A thin ctypes layer over include/flashlab.h (API version 2): nothing is compiled here. The
library is found the first time it is needed, not at import, so `import flashlab` works on a
machine where libflashlab.so has not been built yet:

  1. the path in the environment variable FLASHLAB_LIB, if set;
  2. build/libflashlab.so in the repository this package sits in (<repo>/python/flashlab);
  3. otherwise LibraryNotFound, which says where it looked and how to build the library.

    import numpy as np, flashlab
    q = np.random.randn(1, 4, 37, 64); k = np.random.randn(1, 2, 37, 64); v = k.copy()
    r = flashlab.forward(q, k, v, stage="08", causal=True)
    r["o"].shape, r["lse"].shape        # (1, 4, 37, 64), (1, 4, 37)

Arrays go in as host float32 in the golden files' layout (docs/conventions.md) and come back
as new NumPy float32 arrays; a CUDA stage gets them copied to the GPU and back by the library.
backward(..., o=, lse=) runs the backward pass alone on a forward's saved o and lse.
flashlab.torch hands the library CUDA tensors and bf16 tensors too (device pointers, bf16 bit
patterns), through the same calls on addresses (_forward_at, _backward_at, _backward_from_at).
"""

import ctypes
import functools
import math
import os
from ctypes import POINTER, Structure, c_char_p, c_float, c_int, c_size_t, c_uint64, c_void_p

import numpy as np

__all__ = [
    "forward", "backward", "list_stages", "load_library", "api_version",
    "FlashlabError", "BadInput", "Unsupported", "NoDevice", "LibraryNotFound",
]

API_VERSION = 2  # the FLASHLAB_API_VERSION this wrapper was written against

_INT_MAX = 2**31 - 1
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_DEFAULT_LIB = os.path.join(_REPO_ROOT, "build", "libflashlab.so")


# ---------------------------------------------------------------------------------------------
# Errors: one class per status of the C interface, all FlashlabError (a RuntimeError).

class LibraryNotFound(RuntimeError):
    """libflashlab.so was not found, or could not be loaded, or has another API version."""


class FlashlabError(RuntimeError):
    """A call into libflashlab returned a status other than 0; .status and .message hold it."""

    def __init__(self, status, message):
        self.status = status
        self.message = message
        super().__init__(f"flashlab status {status}: {message}")


class BadInput(FlashlabError):
    """Status 2: the library refused an argument (the message names it)."""


class Unsupported(FlashlabError):
    """Status 3: the stage lacks a feature or head dim the call asks for."""


class NoDevice(FlashlabError):
    """Status 77: device "cuda" without a usable GPU, or one the stage cannot run on."""


_ERROR_CLASS = {2: BadInput, 3: Unsupported, 77: NoDevice}


# ---------------------------------------------------------------------------------------------
# The two structs of flashlab.h, field for field.

class _Problem(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("B", c_int), ("Hq", c_int), ("Hkv", c_int), ("Tq", c_int), ("Tk", c_int),
        ("d", c_int), ("dv", c_int),
        ("scale", c_float),
        ("causal", c_int), ("window", c_int), ("sink_tokens", c_int),
        # pointers in C; held here as plain addresses (c_void_p), which ctypes fills from an int
        # without building a pointer object per call
        ("q", c_void_p), ("k", c_void_p), ("v", c_void_p), ("sinks", c_void_p),
        # version 2: where the arrays live, the element type of q, k, v and dout, a cudaStream_t
        ("memory", c_int), ("dtype", c_int), ("stream", c_void_p),
    ]


MEMORY_HOST, MEMORY_CUDA = 0, 1  # flashlab_problem.memory
FLOAT32, BF16 = 0, 1             # flashlab_problem.dtype
HOST_FLOAT32 = (MEMORY_HOST, FLOAT32, None)  # (memory, dtype, stream) of the NumPy entry points


_COUNTER_NAMES = ("fwd_read", "fwd_written", "fwd_extra", "bwd_read", "bwd_written", "bwd_extra")


class _Counters(Structure):
    _fields_ = [("struct_size", c_size_t)] + [(name, c_uint64) for name in _COUNTER_NAMES]


# ---------------------------------------------------------------------------------------------
# Finding and loading the library (once, on first use).

_lib = None


def _declare(lib):
    """Gives every exported function its C signature, so ctypes converts the arguments."""
    f32p = c_void_p  # float * in C: an array's address (arr.ctypes.data)
    lib.flashlab_api_version.argtypes = []
    lib.flashlab_api_version.restype = c_int
    lib.flashlab_last_error.argtypes = []
    lib.flashlab_last_error.restype = c_char_p
    lib.flashlab_forward.argtypes = [c_char_p, c_char_p, c_char_p, POINTER(_Problem), f32p, f32p,
                                     POINTER(_Counters)]
    lib.flashlab_forward.restype = c_int
    lib.flashlab_backward.argtypes = [c_char_p, c_char_p, c_char_p, POINTER(_Problem), f32p, f32p,
                                      f32p, f32p, f32p, f32p, f32p, POINTER(_Counters)]
    lib.flashlab_backward.restype = c_int
    lib.flashlab_backward_from.argtypes = [c_char_p, c_char_p, c_char_p, POINTER(_Problem), f32p, f32p,
                                           f32p, f32p, f32p, f32p, f32p, POINTER(_Counters)]
    lib.flashlab_backward_from.restype = c_int
    lib.flashlab_list.argtypes = [c_char_p, c_size_t]
    lib.flashlab_list.restype = c_size_t


def load_library(path=None):
    """Loads libflashlab (once) and returns the ctypes handle.

    path: a .so to load instead of the usual search (FLASHLAB_LIB, then build/libflashlab.so
    under the repository root). A later call with another path loads that one instead.
    Raises LibraryNotFound when nothing loads or the API version is not API_VERSION (2).
    """
    global _lib
    if _lib is not None and (not path or os.path.abspath(path) == _lib._name):
        return _lib
    if path:
        tried = [("the path given", path)]
    elif os.environ.get("FLASHLAB_LIB"):
        tried = [("FLASHLAB_LIB", os.environ["FLASHLAB_LIB"])]
    else:
        tried = [("the repository's build folder", _DEFAULT_LIB)]
    where, candidate = tried[0]
    if not os.path.isfile(candidate):
        raise LibraryNotFound(
            f"libflashlab not found: looked for {candidate} ({where}). Build it with "
            f"'cmake -B build && cmake --build build --target flashlab_shared' in {_REPO_ROOT}, "
            f"or set FLASHLAB_LIB to the path of libflashlab.so.")
    try:
        lib = ctypes.CDLL(os.path.abspath(candidate))
        _declare(lib)
    except (OSError, AttributeError) as e:
        raise LibraryNotFound(f"cannot load {candidate} ({where}) as libflashlab: {e}") from None
    version = lib.flashlab_api_version()
    if version != API_VERSION:
        raise LibraryNotFound(f"{candidate} has flashlab API version {version}; this Python "
                              f"package speaks version {API_VERSION} (rebuild one or the other)")
    _lib = lib
    return lib


def api_version():
    """The FLASHLAB_API_VERSION the loaded library was built with (2)."""
    return load_library().flashlab_api_version()


# ---------------------------------------------------------------------------------------------
# Argument checks. A call is checked in three parts, each remembered by its arguments so that a
# loop calling the same shapes and options pays for the checks once: the shapes (_dims), the
# options (_options) and the names (_names). The arrays themselves only need converting (a no-op
# for C-contiguous float32) and their addresses.

_F32 = np.dtype(np.float32)
_PROBLEM_SIZE = ctypes.sizeof(_Problem)
_COUNTERS_SIZE = ctypes.sizeof(_Counters)
_CounterWords = c_uint64 * (1 + len(_COUNTER_NAMES))  # _Counters seen as its 7 words
_NoBytes = ctypes.c_char * 0                           # a zero-length view, only for its address


def _f32(x):
    return np.ascontiguousarray(x, dtype=_F32)


def _addr(a):
    """The address of a C-contiguous array's first element (None for None).

    A zero-length ctypes view of the buffer gives it in about a third of the time of
    a.ctypes.data; a read-only array (which from_buffer refuses) takes the slower way.
    """
    if a is None:
        return None
    try:
        return ctypes.addressof(_NoBytes.from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


def _remembered(check):
    """check, remembering its answers by argument (typed, so True and 1 stay apart).

    Arguments that cannot be hashed (a 0-d array as scale) are checked every time.
    """
    cached = functools.lru_cache(maxsize=256, typed=True)(check)

    def checked(*args):
        try:
            return cached(*args)
        except TypeError as e:
            if "unhashable" not in str(e):
                raise
            return check(*args)
    checked.__doc__ = check.__doc__
    return checked


@_remembered
def _dims(q_shape, k_shape, v_shape, sinks_shape):
    """(B, Hq, Hkv, Tq, Tk, d, dv) from the four shapes (sinks_shape None without sinks), or a
    ValueError naming the argument whose shape is wrong."""
    q_shape, k_shape, v_shape = tuple(q_shape), tuple(k_shape), tuple(v_shape)
    if len(q_shape) != 4 or 0 in q_shape:
        raise ValueError(f"q must be (B, Hq, Tq, d) with every size > 0; got {q_shape}")
    B, Hq, Tq, d = q_shape
    if (len(k_shape) != 4 or k_shape[0] != B or k_shape[3] != d or k_shape[1] == 0 or k_shape[2] == 0
            or Hq % k_shape[1] != 0):
        raise ValueError(f"k must be (B, Hkv, Tk, d) = ({B}, Hkv, Tk, {d}) with Hq % Hkv == 0 "
                         f"(Hq = {Hq}); got {k_shape}")
    Hkv, Tk = k_shape[1], k_shape[2]
    if len(v_shape) != 4 or v_shape[:3] != (B, Hkv, Tk) or v_shape[3] == 0:
        raise ValueError(f"v must be (B, Hkv, Tk, dv) = ({B}, {Hkv}, {Tk}, dv) with dv > 0; "
                         f"got {v_shape}")
    if sinks_shape is not None and tuple(sinks_shape) != (Hq,):
        raise ValueError(f"sinks must be (Hq,) = ({Hq},); got {tuple(sinks_shape)}")
    return (int(B), int(Hq), int(Hkv), int(Tq), int(Tk), int(d), int(v_shape[3]))


def _int_arg(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= _INT_MAX:
        raise ValueError(f"{name} must be an integer in [0, 2^31 - 1]; got {value!r}")
    return int(value)


@_remembered
def _options(causal, window, sink_tokens, scale):
    """(scale, causal, window, sink_tokens) as the problem struct holds them, scale None -> 0
    (the library's 1 / sqrt(d)); or a ValueError."""
    if scale is None:
        scale = 0.0
    scale = float(scale)
    if scale != 0.0 and not (math.isfinite(scale) and scale > 0.0):
        raise ValueError(f"scale must be finite and > 0 (or None for 1/sqrt(d)); got {scale}")
    return (scale, 1 if causal else 0, _int_arg("window", window), _int_arg("sink_tokens", sink_tokens))


@_remembered
def _names(stage, variant, device):
    return str(stage).encode(), (variant or "").encode(), str(device).encode()


def _problem(dims, options, q, k, v, sinks, arrays):
    """The flashlab_problem struct for checked dims and options, the inputs' addresses and
    arrays = (memory, dtype, stream)."""
    return _Problem(_PROBLEM_SIZE, *dims, *options, q, k, v, sinks, *arrays)


def _check(lib, status):
    if status != 0:
        message = (lib.flashlab_last_error() or b"").decode("utf-8", "replace")
        raise _ERROR_CLASS.get(status, FlashlabError)(status, message)


def _new_counters(wanted):
    return _Counters(_COUNTERS_SIZE) if wanted else None


def _counters_dict(c):
    return dict(zip(_COUNTER_NAMES, _CounterWords.from_buffer(c)[1:]))


# ---------------------------------------------------------------------------------------------
# The calls on addresses: shared by the NumPy entry points below and by flashlab.torch, which
# hands over tensors' data pointers (host or CUDA device memory, float32 or bf16: arrays =
# (memory, dtype, stream) says which). Each returns the counters dict (or None when not wanted).

def _forward_at(names, dims, options, q, k, v, sinks, o, lse, counters=True, arrays=HOST_FLOAT32):
    """flashlab_forward on the buffers at the given addresses (o and lse written)."""
    lib = load_library()
    p = _problem(dims, options, q, k, v, sinks, arrays)
    c = _new_counters(counters)
    _check(lib, lib.flashlab_forward(*names, ctypes.byref(p), o, lse, c if c is None else ctypes.byref(c)))
    return None if c is None else _counters_dict(c)


def _backward_call(entry, names, dims, options, q, k, v, sinks, do, o, lse, dq, dk, dv, dsinks, counters, arrays):
    """A backward entry of the library (flashlab_backward or flashlab_backward_from) on the buffers
    at the given addresses."""
    lib = load_library()
    p = _problem(dims, options, q, k, v, sinks, arrays)
    c = _new_counters(counters)
    _check(lib, getattr(lib, entry)(*names, ctypes.byref(p), do, o, lse, dq, dk, dv, dsinks,
                                    c if c is None else ctypes.byref(c)))
    return None if c is None else _counters_dict(c)


def _backward_at(names, dims, options, q, k, v, sinks, do, o, lse, dq, dk, dv, dsinks, counters=True,
                 arrays=HOST_FLOAT32):
    """flashlab_backward on the buffers at the given addresses (every output written)."""
    return _backward_call("flashlab_backward", names, dims, options, q, k, v, sinks, do, o, lse, dq, dk, dv,
                          dsinks, counters, arrays)


def _backward_from_at(names, dims, options, q, k, v, sinks, do, o, lse, dq, dk, dv, dsinks, counters=True,
                      arrays=HOST_FLOAT32):
    """flashlab_backward_from on the buffers at the given addresses: o and lse read, the gradients
    written, the forward pass not run."""
    return _backward_call("flashlab_backward_from", names, dims, options, q, k, v, sinks, do, o, lse, dq, dk,
                          dv, dsinks, counters, arrays)


def _outputs(shapes):
    """New float32 arrays of the given shapes, carved from one allocation; with the address of
    each."""
    sizes = [math.prod(s) for s in shapes]
    buf = np.empty(sum(sizes), dtype=_F32)
    base = _addr(buf)
    arrays, addrs, at = [], [], 0
    for shape, size in zip(shapes, sizes):
        arrays.append(buf[at:at + size].reshape(shape))
        addrs.append(base + 4 * at)
        at += size
    return arrays, addrs


def _inputs(q, k, v, sinks):
    """q, k, v and sinks as C-contiguous float32 arrays, and their checked dims."""
    q, k, v = _f32(q), _f32(k), _f32(v)
    sinks = None if sinks is None else _f32(sinks)
    return q, k, v, sinks, _dims(q.shape, k.shape, v.shape, None if sinks is None else sinks.shape)


# ---------------------------------------------------------------------------------------------
# The entry points.

def forward(q, k, v, *, stage, variant="", device="cpu", causal=False, window=0, sink_tokens=0,
            sinks=None, scale=None):
    """Runs the forward pass of one stage.

    q (B, Hq, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv), sinks (Hq,) or None: any array-like,
    converted to C-contiguous float32. stage: "07", "7" or "07_causal"; variant: "" for the
    default implementation, or a name from list_stages() ("naive"); device: "cpu" or "cuda".
    causal, window (W > 0 implies causal), sink_tokens and scale (None = 1/sqrt(d)) are the
    options of docs/conventions.md.

    Returns {"o": (B, Hq, Tq, dv), "lse": (B, Hq, Tq), "counters": {...}} with the HBM bytes the
    stage counted. Raises ValueError for a bad shape, FlashlabError (BadInput, Unsupported,
    NoDevice) for a status from the library, LibraryNotFound when there is no library.
    """
    q, k, v, sinks, dims = _inputs(q, k, v, sinks)
    options = _options(causal, window, sink_tokens, scale)
    B, Hq, _, Tq, _, _, dv = dims
    (o, lse), (o_at, lse_at) = _outputs(((B, Hq, Tq, dv), (B, Hq, Tq)))
    counters = _forward_at(_names(stage, variant, device), dims, options,
                           _addr(q), _addr(k), _addr(v), _addr(sinks), o_at, lse_at)
    return {"o": o, "lse": lse, "counters": counters}


def backward(q, k, v, do, *, stage, variant="", device="cpu", causal=False, window=0,
             sink_tokens=0, sinks=None, scale=None, o=None, lse=None):
    """Runs the backward pass of one stage: after its forward pass, or on a forward's o and lse.

    Arguments as for forward(), plus do (B, Hq, Tq, dv), the gradient arriving at o.

    Without o and lse: the forward pass runs first (flashlab_backward). Returns {"o", "lse", "dq",
    "dk", "dv", "counters"} and "dsinks" (Hq,) when sinks is given; dq, dk and dv have the shapes
    of q, k and v, and counters has both passes filled.

    With o (B, Hq, Tq, dv) and lse (B, Hq, Tq), as forward() returned them for the same stage,
    variant, device, inputs and options: only the backward pass runs, reading them
    (flashlab_backward_from). The result holds the same keys, "o" and "lse" being the given
    arrays (as float32), and counters has only the backward pass (fwd_* are 0).
    """
    if (o is None) != (lse is None):
        raise ValueError("give both o and lse (the forward's outputs), or neither")
    q, k, v, sinks, dims = _inputs(q, k, v, sinks)
    options = _options(causal, window, sink_tokens, scale)
    B, Hq, Hkv, Tq, Tk, d, dv = dims
    do = _f32(do)
    if do.shape != (B, Hq, Tq, dv):
        raise ValueError(f"do must be (B, Hq, Tq, dv) = ({B}, {Hq}, {Tq}, {dv}); got {do.shape}")
    names = ["o", "lse", "dq", "dk", "dv"] + (["dsinks"] if sinks is not None else [])
    shapes = [(B, Hq, Tq, dv), (B, Hq, Tq), (B, Hq, Tq, d), (B, Hkv, Tk, d), (B, Hkv, Tk, dv), (Hq,)]
    call_names = _names(stage, variant, device)
    inputs = (_addr(q), _addr(k), _addr(v), _addr(sinks), _addr(do))
    if o is None:
        arrays, at = _outputs(shapes[:len(names)])
        dsinks_at = at[5] if sinks is not None else None
        counters = _backward_at(call_names, dims, options, *inputs, *at[:5], dsinks_at)
    else:
        o, lse = _f32(o), _f32(lse)
        for name, x, shape in (("o", o, shapes[0]), ("lse", lse, shapes[1])):
            if x.shape != shape:
                raise ValueError(f"{name} must be {shape} (the forward's {name}); got {x.shape}")
        grads, at = _outputs(shapes[2:len(names)])
        dsinks_at = at[3] if sinks is not None else None
        counters = _backward_from_at(call_names, dims, options, *inputs, _addr(o), _addr(lse), *at[:3], dsinks_at)
        arrays = [o, lse] + grads
    out = dict(zip(names, arrays))
    out["counters"] = counters
    return out


def list_stages():
    """Every implementation the library registered, as a list of dicts.

    Keys: stage ("07"), name ("causal"), device ("cpu"/"cuda"), variant ("" for the default
    one), precision ("float32" or "bf16"; None if the library does not print it) and features,
    a list that starts with "forward" ("forward", "backward", "causal", "gqa", ...).
    """
    lib = load_library()
    size = 4096
    while True:
        buf = ctypes.create_string_buffer(size)
        need = lib.flashlab_list(buf, size)
        if need < size:
            break
        size = need + 1
    stages = []
    for line in buf.value.decode("utf-8", "replace").splitlines():
        # "07 causal cpu - float32 backward causal": stage name device variant precision feature...
        cols = line.split()
        if len(cols) < 4 or cols[0] == "stage" or line.startswith("cuda device"):
            continue
        stage, name, device, variant = cols[:4]
        rest = cols[4:]
        precision = None
        if rest and rest[0].startswith(("float32", "bf16")):
            precision = rest.pop(0)
            while rest and rest[0].startswith("d="):  # "bf16 d=64,128", as `flashlab list` prints it
                precision += " " + rest.pop(0)
        features = [f for word in rest for f in word.split(",") if f]
        if "forward" not in features:
            features.insert(0, "forward")
        stages.append({"stage": stage, "name": name, "device": device,
                       "variant": "" if variant == "-" else variant,
                       "precision": precision, "features": features})
    return stages
