#!/usr/bin/env python3
"""doc_commands.py -- runs every flashlab command the documentation shows, so no page can drift
from the tool.

    doc_commands.py --flashlab build/flashlab --root . [--list] [--jobs N]

Scans the code blocks (fenced or indented) of README.md, docs/*.md, stages/*/README.md, golden/README.md and
notebooks/README.md for lines that start with `flashlab ` or `build/flashlab ` (after an optional
`$ ` prompt), and runs each from the repository root with the built binary. A trailing `# comment`
is not part of the command; it may state the expected exit status:

    # exit 3 ...          the command must exit 3
    --device cuda         exit 0 with a CUDA device; without one it must exit 77 (skipped)

anything else must exit 0. Lines that are templates rather than commands (they hold a placeholder
such as NN, N-1, STAGE, DIR, CASE_DIR, V, "..." or <...>) are listed and not run. Commands of the
other tools (cmake, ctest, tools/*.sh) are run by CI itself and are not repeated here.

A command shown on several pages runs once; distinct commands run --jobs at a time (default 2),
except those that write files (--out), which run one at a time; the report lists every occurrence in page order with its exit status and time.

Exit status: 0 when every command behaved as documented, 1 otherwise, 2 on bad usage. Standard
library only."""

import argparse
import concurrent.futures
import glob
import os
import re
import shlex
import subprocess
import sys
import time

PLACEHOLDER = re.compile(r"(^|\s)(NN|N-1|N|STAGE|DIR|CASE_DIR|OUT|V|A|B|\.\.\.)(\s|$)|<[^>]*>|\[")
COMMAND = re.compile(r"^\s*(?:\$\s+)?((?:build/)?flashlab\s.*)$")
TIMEOUT_S = 600


def doc_files(root):
    patterns = ["README.md", "docs/*.md", "stages/*/README.md", "golden/README.md", "notebooks/README.md"]
    files = []
    for pattern in patterns:
        files.extend(sorted(glob.glob(os.path.join(root, pattern))))
    return files


def commands_in(path):
    """(line number, command, comment) for every flashlab line of a code block: fenced, or
    indented by four spaces (Markdown's indented code block)."""
    found, fenced = [], False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            in_code = fenced or line.startswith("    ") or line.startswith("\t")
            m = COMMAND.match(line) if in_code else None
            if not m:
                continue
            text = m.group(1)
            command, _, comment = text.partition(" #")
            found.append((number, command.strip(), comment.strip()))
    return found


def expected_status(command, comment, have_gpu):
    m = re.search(r"\bexit (\d+)", comment)
    if m:
        return int(m.group(1))
    if re.search(r"--device[ =]cuda", command) and not have_gpu:
        return 77
    return 0


def run(flashlab, root, command):
    args = shlex.split(command)
    args[0] = flashlab
    try:
        done = subprocess.run(args, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=TIMEOUT_S, universal_newlines=True)
    except subprocess.TimeoutExpired:
        return None, "timed out after %d s" % TIMEOUT_S
    return done.returncode, done.stdout


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flashlab", required=True, help="the built flashlab binary")
    ap.add_argument("--root", required=True, help="the repository root")
    ap.add_argument("--list", action="store_true", help="only list the commands found")
    ap.add_argument("--jobs", type=int, default=2, help="commands run at a time (default 2)")
    a = ap.parse_args(argv)
    flashlab = os.path.abspath(a.flashlab)
    if not os.access(flashlab, os.X_OK):
        print("doc_commands: %s is not an executable" % flashlab, file=sys.stderr)
        return 2
    have_gpu = subprocess.run([flashlab, "list"], stdout=subprocess.PIPE, universal_newlines=True).stdout
    have_gpu = "cuda device: none" not in have_gpu
    ran = failed = templates = 0
    found = []  # (where, command, expected status) of every command to run
    for path in doc_files(a.root):
        rel = os.path.relpath(path, a.root)
        for number, command, comment in commands_in(path):
            where = "%s:%d" % (rel, number)
            if PLACEHOLDER.search(command.split(None, 1)[1]):
                templates += 1
                print("template  %s  %s" % (where, command))
                continue
            want = expected_status(command, comment, have_gpu)
            if a.list:
                print("command   %s  %s   (expect exit %d)" % (where, command, want))
                continue
            found.append((where, command, want))
    # A command shown on several pages runs once (its status and output do not depend on the page);
    # distinct commands run a.jobs at a time, and the results print in page order.
    distinct = sorted(set(command for _, command, _ in found), key=[c for _, c, _ in found].index)
    results = {}

    def timed(command):
        start = time.monotonic()
        status, output = run(flashlab, a.root, command)
        results[command] = (status, output, time.monotonic() - start)

    # Commands that write (--out) run one at a time, after the others: two pages may name one folder.
    writers = [c for c in distinct if "--out" in shlex.split(c)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        list(pool.map(timed, [c for c in distinct if c not in writers]))
    for command in writers:
        timed(command)
    for where, command, want in found:
        status, output, seconds = results[command]
        ran += 1
        if status == want:
            print("ok        %s  %s   (exit %d, %.1f s)" % (where, command, status, seconds))
            continue
        failed += 1
        print("FAILED    %s  %s   (exit %s, documented %d, %.1f s)" % (where, command, status, want, seconds))
        print("          " + "\n          ".join(output.strip().splitlines()[-6:]))
    print("doc_commands: %d commands checked (%d distinct ones run, %d at a time), %d failed; %d templates not "
          "run (GPU: %s)" % (ran, len(results), a.jobs, failed, templates, "yes" if have_gpu else "no"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
