#!/usr/bin/env python3
"""test_sdpa_bench.py -- tools/sdpa_bench.py's timing paths, run against a stand-in for torch.

sdpa_bench.py is the reference beside `flashlab bench` on the GPU machine, and it only runs there:
a bf16 row that fails for any reason becomes "skipped: ..." (a backend may have no kernel for a
shape), so a mistake in the script itself read as a skipped row on every GPU run, and nothing
here noticed. This test gives the script a fake torch whose attention, copies and matmul "take"
known times on a fake clock, and runs the script's own main() the ways the GPU runs use it: SDPA in
float32 and bf16, forward and forward + backward; the decode step (float32 and bf16, with and
without --queued); --copy-bandwidth, --copy-traffic and --matmul-rate. It checks that every row was
timed and holds the time its calls took; that a bf16 backward starts each rep with the gradients
cleared outside the timed events; and that a queued rep the GPU had begun too early is timed again
behind a longer spin.

Usage: python3 tests/python/test_sdpa_bench.py [REPO]   (exit 0 pass, 1 fail; needs nothing but
python3: no torch, no NumPy, no GPU)
"""
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
import types

FWD_MS, BWD_MS = 1.5, 2.25  # what one fake forward and one fake backward take on the fake clock
COPY_MS, MATMUL_MS = 0.75, 3.0  # one fake tensor copy, one fake matmul


class Clock:
    now = 0.0


class Event:
    """A CUDA event on the fake clock. begun_early: how many of the next queued reps the fake GPU
    starts before Python has queued them whole (their start event already reached)."""
    begun_early = 0

    def __init__(self, enable_timing=False):
        self.at = None

    def record(self):
        self.at = Clock.now

    def query(self):
        if Event.begun_early > 0:
            Event.begun_early -= 1
            return True
        return False

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return end.at - self.at


class Tensor:
    def __init__(self):
        self.grad = None
        self.requires_grad = False

    def requires_grad_(self, flag):
        self.requires_grad = flag
        return self

    def normal_(self):
        return self

    def random_(self, low, high):
        return self

    def copy_(self, src):
        Clock.now += COPY_MS
        return self


def matmul(a, b):
    Clock.now += MATMUL_MS
    return Tensor()


class Output:
    def __init__(self, inputs):
        self.inputs = inputs

    def backward(self, dout):
        Clock.now += BWD_MS
        for x in self.inputs:
            if x.grad is not None:
                Fake.grads_left.append(True)  # autograd would add into them (bf16 must clear them)
            x.grad = Tensor()


class Fake:
    grads_left = []  # one entry per backward that found a gradient from an earlier rep
    sleeps = []      # the spin lengths asked for


def scaled_dot_product_attention(q, k, v, is_causal=False, **kwargs):
    Clock.now += FWD_MS
    return Output((q, k, v))


def make_torch():
    torch = types.ModuleType("torch")
    torch.__version__ = "0.0-fake"
    torch.bfloat16, torch.float32, torch.uint8 = "bfloat16", "float32", "uint8"
    torch.OutOfMemoryError = type("OutOfMemoryError", (RuntimeError,), {})

    class Generator:
        def __init__(self, device=None):
            pass

        def manual_seed(self, seed):
            return self

    torch.Generator = Generator
    torch.randn = torch.empty = lambda *shape, **kwargs: Tensor()
    torch.empty_like = lambda x: Tensor()
    torch.matmul = matmul
    torch.set_float32_matmul_precision = lambda precision: None
    torch.backends = types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace()),
                                           cudnn=types.SimpleNamespace())
    torch.cuda = types.SimpleNamespace(Event=Event, _sleep=lambda cycles: Fake.sleeps.append(cycles),
                                       empty_cache=lambda: None, get_device_name=lambda i: "fake GPU")
    nn = types.ModuleType("torch.nn")
    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = types.SimpleNamespace(FLASH_ATTENTION=1, CUDNN_ATTENTION=2, EFFICIENT_ATTENTION=3, MATH=4)
    attention.sdpa_kernel = lambda backend: contextlib.nullcontext()
    functional = types.ModuleType("torch.nn.functional")
    functional.scaled_dot_product_attention = scaled_dot_product_attention
    torch.nn, nn.attention, nn.functional = nn, attention, functional
    for name, module in (("torch", torch), ("torch.nn", nn), ("torch.nn.attention", attention),
                         ("torch.nn.functional", functional)):
        sys.modules[name] = module
    return torch


def load_script(repo):
    path = os.path.join(repo, "tools", "sdpa_bench.py")
    spec = importlib.util.spec_from_file_location("sdpa_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_main(bench, argv):
    """main() with these arguments; its exit status and its --json rows (a list, one row or many)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        sys.argv = ["sdpa_bench.py"] + argv + ["--json", out]
        rc = bench.main()
        with open(out) as f:
            rows = json.load(f)
        return rc, rows if isinstance(rows, list) else [rows]


def close(x, want):
    return x is not None and abs(x - want) < 1e-9


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    torch = make_torch()
    bench = load_script(repo)
    failures = []

    def expect(ok, what):
        print("%s: %s" % ("ok" if ok else "FAIL", what))
        if not ok:
            failures.append(what)

    shape = ["--B", "1", "--H", "2", "--T", "64,128", "--d", "64", "--warmup", "2", "--reps", "5"]
    for dtype in ("float32", "bf16"):
        for direction in ("fwd", "bwd"):
            Fake.grads_left = []
            rc, rows = run_main(bench, shape + ["--dtype", dtype, "--direction", direction])
            want = FWD_MS + (BWD_MS if direction == "bwd" else 0.0)
            timed = [r for r in rows if r["time_ms"] is not None]
            expect(rc == 0 and len(rows) == 4 and len(timed) == 4,
                   "%s %s: every row timed (notes: %s)" % (dtype, direction, sorted({str(r["note"]) for r in rows})))
            expect(all(close(r["time_ms"], want) for r in timed),
                   "%s %s: each row holds one call's time, %.2f ms" % (dtype, direction, want))
            if dtype == "bf16" and direction == "bwd":
                expect(not Fake.grads_left, "bf16 bwd: every rep starts with the gradients cleared")

    decode = ["--decode", "--B", "1,8", "--H", "32", "--Hkv", "8", "--T", "4096,32768", "--d", "128", "--reps", "5"]
    for extra in ([], ["--queued"], ["--dtype", "bf16", "--backends", "FLASH_ATTENTION"],
                  ["--dtype", "bf16", "--backends", "FLASH_ATTENTION", "--queued"]):
        rc, rows = run_main(bench, decode + extra)
        size = 2 if "bf16" in extra else 4
        expect(rc == 0 and len(rows) == 4 and all(close(r["time_ms"], FWD_MS) for r in rows),
               "decode %s: every step timed, one call's time (notes: %s)" % (" ".join(extra) or "float32",
                                                                           sorted({str(r["note"]) for r in rows})))
        expect(all(r["kv_bytes"] == r["B"] * 8 * r["T"] * 2 * 128 * size and
                   close(r["kv_gb_per_s"], r["kv_bytes"] / (FWD_MS * 1e6)) for r in rows),
               "decode %s: K/V bytes and their rate" % (" ".join(extra) or "float32"))

    rc, rows = run_main(bench, ["--copy-bandwidth", "--reps", "5"])
    expect(rc == 0 and close(rows[0]["time_ms"], COPY_MS) and
           close(rows[0]["gb_per_s"], rows[0]["bytes"] / (COPY_MS * 1e6)), "--copy-bandwidth: one copy's time and rate")
    rc, rows = run_main(bench, ["--copy-traffic", "1000,134217728", "--reps", "5"])
    expect(rc == 0 and [r["traffic_bytes"] for r in rows] == [1000, 134217728] and
           all(close(r["time_ms"], COPY_MS) and close(r["gpu_ms"], COPY_MS) for r in rows),
           "--copy-traffic: each size timed, launched and queued")
    rc, rows = run_main(bench, ["--matmul-rate", "--reps", "5"])
    expect(rc == 0 and close(rows[0]["time_ms"], MATMUL_MS) and
           close(rows[0]["tflops"], 2.0 * rows[0]["n"] ** 3 / (MATMUL_MS * 1e9)), "--matmul-rate: one product's time")

    # The queued timing: the first rep is seen begun early, so it is timed again behind twice the spin.
    Fake.sleeps, Event.begun_early = [], 1
    ms = bench.median_event_ms(torch, lambda: scaled_dot_product_attention(None, None, None), 0, 3, queued=True)
    expect(close(ms, FWD_MS), "queued: the median is one call's time")
    expect(len(Fake.sleeps) == 4 and Fake.sleeps[1] == 2 * Fake.sleeps[0] and Fake.sleeps[2] == Fake.sleeps[1],
           "queued: a rep begun early is timed again behind a spin twice as long (spins %s)" % Fake.sleeps)

    print("test_sdpa_bench: %s" % ("%d failed" % len(failures) if failures else "all passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
