"""need_modules.py -- makes a flashlab script run under a Python that has the modules it needs.

A script calls need("numpy", "matplotlib") before importing them. When this interpreter lacks one
(python3 on PATH is often a pyenv or venv shim while the Debian packages went to /usr/bin/python3),
the script is started again, same arguments, under the first interpreter that has them all:
$FLASHLAB_PYTHON, then /usr/bin/python3, /usr/local/bin/python3 and every python3 on PATH. When
none has them, one line names this interpreter, what is missing and the install command, and the
script exits with `missing_exit` (2, or 77 for a CTest test that should count as skipped).
Standard library only."""

import importlib.util
import os
import shutil
import subprocess
import sys

_REEXEC = "FLASHLAB_NEED_MODULES_REEXEC"
_DEBIAN = {"numpy": "python3-numpy", "matplotlib": "python3-matplotlib", "nbformat": "python3-nbformat",
           "nbclient": "python3-nbclient", "ipykernel": "python3-ipykernel"}


def _missing(modules):
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _candidates():
    seen, found = {os.path.realpath(sys.executable)}, []
    names = [os.environ.get("FLASHLAB_PYTHON", ""), "/usr/bin/python3", "/usr/local/bin/python3"]
    names += [os.path.join(d, "python3") for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    for name in names:
        path = shutil.which(name) if name and os.sep not in name else name
        if path and os.path.isfile(path) and os.access(path, os.X_OK) and os.path.realpath(path) not in seen:
            seen.add(os.path.realpath(path))
            found.append(path)
    return found


def _has_all(python, modules):
    probe = "import importlib.util, sys; sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))"
    try:
        return subprocess.run([python, "-c", probe] + list(modules), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def need(*modules, missing_exit=2):
    missing = _missing(modules)
    if not missing:
        return
    if not os.environ.get(_REEXEC):
        for python in _candidates():
            if _has_all(python, modules):
                os.environ[_REEXEC] = "1"
                sys.stdout.flush()
                os.execv(python, [python] + sys.argv)
    script = os.path.basename(sys.argv[0])
    debs = " ".join(_DEBIAN.get(m, "python3-" + m) for m in missing)
    sys.stderr.write("%s: %s needs %s (no python3 here has %s); install: apt-get install %s, or %s -m pip "
                     "install %s\n" % (script, sys.executable, ", ".join(missing), "them" if len(missing) > 1
                                       else "it", debs, sys.executable, " ".join(missing)))
    sys.exit(missing_exit)
