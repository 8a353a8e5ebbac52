#!/usr/bin/env python3
"""Execute one notebook headless (nbclient, kernel python3) and fail on any cell error.

    run_notebook.py NOTEBOOK --flashlab PATH/TO/build/flashlab [--root REPO] [--save OUT.ipynb]
                    [--figures DIR]

The notebook is executed from a copy in a temporary folder, so nothing is written into the
repository; FLASHLAB (the built tool) and FLASHLAB_ROOT (the repository) are set for its kernel.
--save writes the executed notebook (with outputs) to OUT.ipynb for a look at the figures;
--figures writes every figure the notebook drew as DIR/figNN.png (no Jupyter needed to see them).
Exit: 0 every cell ran; 1 a cell failed (its traceback is printed); 2 bad usage;
77 nbformat, nbclient, ipykernel, matplotlib or numpy missing (CTest: skipped, never passed).
"""
import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from need_modules import need  # noqa: E402  (re-runs this script under a python3 that has the modules)

NEEDED = ["numpy", "matplotlib", "nbformat", "nbclient", "ipykernel"]


def save_figures(nb, folder):
    """Every image/png output of the executed notebook as folder/figNN.png, in cell order."""
    import base64
    os.makedirs(folder, exist_ok=True)
    count = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            png = out.get("data", {}).get("image/png")
            if png:
                count += 1
                path = os.path.join(folder, "fig%02d.png" % count)
                with open(path, "wb") as f:
                    f.write(base64.b64decode(png))
                print("run_notebook: wrote " + path)
    if count == 0:
        print("run_notebook: the notebook drew no figure")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebook")
    ap.add_argument("--flashlab", required=True, help="path to the built flashlab tool")
    ap.add_argument("--root", help="repository root (default: the notebook's parent folder's parent)")
    ap.add_argument("--save", help="also write the executed notebook here")
    ap.add_argument("--figures", help="write the figures the notebook drew into this folder as PNG")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per cell (default 300)")
    args = ap.parse_args()

    need(*NEEDED, missing_exit=77)  # another python3 that has them all, or exit 77 (skipped)
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:
        print(f"{sys.executable}: missing Python modules: {', '.join(missing)}; notebook skipped")
        print("Debian/Ubuntu: apt-get install -y python3-nbclient python3-nbformat "
              "python3-ipykernel python3-matplotlib (tools/quickstart.sh installs them)")
        return 77

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb_path = os.path.abspath(args.notebook)
    root = os.path.abspath(args.root or os.path.join(os.path.dirname(nb_path), ".."))
    tool = os.path.abspath(args.flashlab)
    if not os.path.isfile(nb_path) or not os.access(tool, os.X_OK):
        print(f"run_notebook: no notebook {nb_path} or no executable {tool}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="flashlab-nb-") as tmp:
        work = os.path.join(tmp, os.path.basename(nb_path))
        shutil.copyfile(nb_path, work)
        # The kernel inherits this environment; keep Jupyter's and IPython's files in tmp too.
        os.environ["FLASHLAB"] = tool
        os.environ["FLASHLAB_ROOT"] = root
        os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(tmp, "runtime")
        os.environ["IPYTHONDIR"] = os.path.join(tmp, "ipython")
        os.environ["MPLCONFIGDIR"] = os.path.join(tmp, "mpl")
        os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # debugpy's start-up noise

        nb = nbformat.read(work, as_version=4)
        client = NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                                resources={"metadata": {"path": tmp}})
        start = time.monotonic()
        try:
            client.execute()
        except CellExecutionError as e:
            print(f"run_notebook: a cell of {os.path.basename(nb_path)} failed:\n{e}")
            return 1
        except Exception as e:  # kernel could not start, cell timeout, ...
            print(f"run_notebook: {os.path.basename(nb_path)}: {type(e).__name__}: {e}")
            return 1
        elapsed = time.monotonic() - start
        if args.save:
            nbformat.write(nb, args.save)
        if args.figures:
            save_figures(nb, args.figures)
        code_cells = sum(1 for c in nb.cells if c.cell_type == "code")
        print(f"run_notebook: {os.path.basename(nb_path)}: {code_cells} code cells ran "
              f"in {elapsed:.1f} s")
        # Echo the cells' text output, so the CTest log shows the numbers just measured.
        for c in nb.cells:
            for out in c.get("outputs", []):
                if out.get("output_type") == "stream":
                    sys.stdout.write(out.get("text", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
