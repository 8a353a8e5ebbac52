#!/usr/bin/env python3
"""gptoss_report.py OUT -- issue 27's window + sinks rows from what tools/gpu-check.sh measured in OUT:

  gptoss_fwd.json, gptoss_bwd.json   flashlab bench --stages 15,18 (those built) at the gpt-oss shape
                                     (B = 1, Hq = 64, Hkv = 8, d = 64, W = 128) with learned sinks,
                                     T = 4096 and 32768, forward and forward + backward
  gptoss_nosinks_bwd.json            the same stages without sinks, forward + backward, T = 32768
  gptoss_flex_fwd.json, gptoss_flex_bwd.json   tools/flex_bench.py on the same shape, T = 32768

Prints one line per stage and direction with its times, FlexAttention's, and the three ratios the
issue asks about: forward + backward against FlexAttention (>= 1.5x), with sinks against without
(<= 1.15x) and T = 32768 against 4096 (<= 9x). A number that was not measured prints as "-".
Python 3 standard library only."""

import json
import os
import sys

LONG, SHORT = 32768, 4096


def load(out, name):
    try:
        with open(os.path.join(out, name)) as f:
            rows = json.load(f)
    except (OSError, ValueError):
        return []
    return [r for r in rows if not r.get("error") and r.get("time_ms")]


def times(rows):
    """{(stage, Tk): ms} of flashlab rows, or {T: ms} of flex rows."""
    if rows and "stage" in rows[0]:
        return {(r["stage"], r["Tk"]): r["time_ms"] for r in rows}
    return {r["T"]: r["time_ms"] for r in rows}


def ratio(a, b):
    return "%.2fx" % (a / b) if a and b else "-"


def ms(x):
    return "%.3f" % x if x else "-"


def main(out):
    flex = {d: times(load(out, "gptoss_flex_%s.json" % d)).get(LONG) for d in ("fwd", "bwd")}
    nosinks = times(load(out, "gptoss_nosinks_bwd.json"))
    printed = False
    for direction, label in (("fwd", "forward"), ("bwd", "forward + backward")):
        ours = times(load(out, "gptoss_%s.json" % direction))
        for stage in sorted({s for s, _ in ours}):
            short, long_ = ours.get((stage, SHORT)), ours.get((stage, LONG))
            line = ("stage %s %s, gpt-oss shape with sinks: T = %d %s ms, T = %d %s ms (x%s for 8x T); "
                    "FlexAttention %s ms: speed-up over it %s" % (stage, label, SHORT, ms(short), LONG, ms(long_),
                                                            ratio(long_, short).rstrip("x"), ms(flex[direction]),
                                                            ratio(flex[direction], long_)))
            if direction == "bwd":
                line += "; without sinks %s ms (sinks cost %s)" % (ms(nosinks.get((stage, LONG))),
                                                                   ratio(long_, nosinks.get((stage, LONG))))
            print(line)
            printed = True
    if not printed:
        print("gptoss_report: no stage rows in %s" % out)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gptoss_report.py OUT")
    sys.exit(main(sys.argv[1]))
