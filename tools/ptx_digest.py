#!/usr/bin/env python3
"""ptx_digest.py FILE.cu [FILE.cu ...] — the device code of CUDA sources, one line per kernel or
device function: the file, its name and a hash of its PTX instructions.

For a refactor that must not change a kernel (code moved into a header, a namespace changed around
it), run it before and after and diff the outputs. Equal PTX goes through the same ptxas into the
same machine code, so equal hashes mean the same speed, shown without a GPU.

Compiles as the build does (-O3, -DNDEBUG, compute_90; CUDA_ARCH=80 for another) but without
-lineinfo, so moved lines do not count. Names are demangled with c++filt and stripped of the
per-file anonymous namespace, a function's own mangled name inside its body (its parameter names)
is replaced by one placeholder, and block labels lose the function's index in the file, so moving
a type out of `namespace {` or removing another function changes nothing.
Needs nvcc and c++filt (binutils); no GPU.
"""
import hashlib
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANON = "(anonymous namespace)::"
HEAD = re.compile(r"^(?:\.visible |\.weak |\.extern )*\.(?:entry|func)\s+(?:\([^)]*\)\s*)?(\w+)")


def demangle(names):
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return {n: d.replace(ANON, "") for n, d in zip(names, out)}


def functions(ptx):
    """(mangled name, body without comments) of each .entry/.func that has a body."""
    found, name, body = [], None, []
    for line in ptx.splitlines():
        if name is None:
            m = HEAD.match(line)
            if m:
                name, body = m.group(1), [line]
            continue
        body.append(re.sub(r"//.*$", "", line))
        if line.startswith("}"):
            found.append((name, "\n".join(body)))
            name = None
        elif line.rstrip().endswith(";") and len(body) == 2 and not line.startswith("{"):
            name = None  # a declaration, no body
    return found


def digest(src, arch):
    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, "out.ptx")
        subprocess.run(["nvcc", "-O3", "-DNDEBUG", "-std=c++17", f"-arch=compute_{arch}", "-ptx",
                        "-I" + os.path.join(ROOT, "common"), "-I" + os.path.dirname(os.path.abspath(src)),
                        '-DFLASHLAB_SOURCE_DIR="/"', "-o", ptx, src], check=True)
        text = open(ptx).read()
    funcs = functions(text)
    names = demangle([n for n, _ in funcs])
    rows = []
    for mangled, body in funcs:
        body = body.replace(mangled, "F")
        body = re.sub(r"_GLOBAL__N__\w+?_cu_[0-9a-f]+", "ANON", body)
        body = re.sub(r"\$L__BB\d+_", "$L__BB_", body)  # block labels carry the function's index in the file
        rows.append((names[mangled], hashlib.md5(body.encode()).hexdigest()[:16]))
    return sorted(rows)


def main():
    if len(sys.argv) < 2:
        print("usage: tools/ptx_digest.py FILE.cu [FILE.cu ...]", file=sys.stderr)
        return 2
    arch = os.environ.get("CUDA_ARCH", "90")
    for src in sys.argv[1:]:
        for name, h in digest(src, arch):
            print(f"{os.path.basename(src)}  {h}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
