#!/usr/bin/env bash
# gpu-check.sh — build and check flashlab on a GPU machine, from the repository root:
#   unpack .deps/*.deb (OpenBLAS, cJSON) into /opt/deps, configure a Release build in build-gpu,
#   build, run `ctest -L gpu`, compute-sanitizer (memcheck + racecheck) on every CUDA implementation's
#   check (each stage and variant; fwd+bwd where a case has do.npy), `flashlab tour --device all`,
#   `flashlab bench --device cuda --json` forward (every CUDA stage) and forward+backward
#   (`--direction bwd`, the stages with a backward), the same again with --causal for the stages
#   that support it, PyTorch SDPA on the same shapes in both directions, non-causal and causal
#   (tools/sdpa_bench.py), a GQA decode step (stage 08 against stage 07 on K/V repeated to Hq heads,
#   with the device copy bandwidth beside it), and last the summary tables: ours vs SDPA.
#   The bf16 stages are left out of that float32 sweep: 15 and 18 have the gpt-oss section, 16 the
#   paged decode one, 17 the MLA one, and stage 12 its own section, which benches it
#   with stage 14 (every variant) where the build has sm_90a (fwd and fwd+bwd, non-causal and
#   causal, T = 1024,4096,16384, d = 64,128, B = 4, H = 16) beside sdpa_bench.py --dtype bf16
#   (SDPA's FLASH_ATTENTION and CUDNN_ATTENTION backends) on the same shapes, and tools/tc_report.py
#   prints the table with the acceptance rows of issues 13 and 26 (T = 4096).
#   ctest -L gpu and the sanitizer take stage 12 like any CUDA stage: both find the stages through
#   `flashlab list` and the tests' gpu label.
# Everything is written under $OUT (default ./gpu-out); the summary also goes to stdout.
#
# Environment:
#   CUDA_ARCH=90          architectures for CMAKE_CUDA_ARCHITECTURES (default: native)
#   BUILD_DIR=build-gpu   build folder
#   SKIP_TESTS=1 SKIP_SANITIZER=1 SKIP_TOUR=1 SKIP_BENCH=1 SKIP_SDPA=1   leave a part out
#   CTEST_ARGS="-R stage14"   extra ctest arguments (default none: every gpu test, which takes over
#                         7 minutes on an H100, most of it in the exercise tests)
#                         (SKIP_BENCH=1 leaves out every timing section: the decode, stage 12,
#                         window, MLA and paged ones below too)
#   BENCH_ONLY=1          only build + bench + SDPA + summary (a cheap timing iteration)
#   BENCH_ARGS="--T 1024,4096 --reps 5"   extra flags for `flashlab bench` (and T/d/B/H for SDPA)
#   BENCH_STAGES=05,06    only these stages in the bench (default: every CUDA stage)
#   SANITIZE_STAGES=06    only these stages under compute-sanitizer (default: every CUDA stage)
#   SANITIZE_ARGS="--blocks 3"   extra flags for those checks (stage 14: blocks that take several
#                         query tiles each, which the golden cases alone never make)
#   SKIP_SWEEP=1          no float32 attention sweep (nor its SDPA runs); the sections below still
#                         run (BENCH_STAGES=11,16 would still sweep stage 11)
#   SKIP_CAUSAL=1         no causal bench / SDPA runs (the stage 12 section's too)
#   SKIP_DECODE=1         no GQA decode bench
#   SKIP_TC=1             no stage 12 section (it also needs 12 in BENCH_STAGES when that is set;
#                         SKIP_SDPA=1 leaves out its SDPA runs, and the table then has stage 12 alone)
#   TC_ARGS="--T 4096 --reps 5"   extra flags for its `flashlab bench` runs, after the defaults above
#                         (--T, --d, --B, --H, --reps also reach its SDPA runs); BENCH_ARGS does not apply.
#                         Its files: tc_bench_*.json, tc_sdpa_*.json, tc_summary.txt
#   SKIP_WINDOW=1         no sliding-window bench (stage 10: T scaling at W = 256, W >= T vs 08)
#   SKIP_GPTOSS=1         no gpt-oss window bench (stages 15 and 18, those built, in bf16 at B = 1,
#                         Hq = 64, Hkv = 8, d = 64, W = 128, learned sinks, T = 4096 and 32768, fwd
#                         and fwd+bwd, and without sinks at 32768, beside tools/flex_bench.py at
#                         T = 32768 (each direction in a process of its own: a second length makes
#                         torch.compile recompile with the length dynamic, slower); issue 27's
#                         1.5x row. Its files: gptoss_*.json, gptoss.txt
#   SKIP_MLA=1            no MLA bench (stage 09: DeepSeek-V2 shape, decode B = 64 Tk = 4096 and
#                         prefill T = 4096, both variants; plain MHA decode through stage 08; the
#                         latent kernel's own time and DRAM bytes from Nsight Compute; stage 17 in
#                         bf16 on the decode step, with its kernel's time and the bf16 matmul rate)
#   DECODE_ARGS="--B 8 --H 32 --Hkv 8 --Tq 1 --T 16384 --d 128"   the decode problem
#   SKIP_PAGED=1          no paged decode bench (stage 11, and stage 16 in bf16 where built, on a
#                         paged cache, page size 16, against stage 08 on the contiguous problem and
#                         SDPA with enable_gqa, float32 and FLASH_ATTENTION in bf16; Hq = 32,
#                         Hkv = 8, d = 128, Tq = 1, for each B of PAGED_B and T of PAGED_T)
#   PAGED_B="1 8 64"  PAGED_T=4096,32768,131072   its sizes;  SKIP_PAGED_SDPA=1  without SDPA
#                         (with stage 16, also a plain copy moving each bf16 step's K/V bytes, timed
#                         like a step and queued behind a spin kernel: tools/sdpa_bench.py
#                         --copy-traffic, copy_traffic.json; and stage 16 and FA2 timed queued
#                         too, bench --queued and sdpa_bench.py --queued, in the report's second
#                         bf16 table)
#   REPS=10               timed runs per shape (flashlab and SDPA)
#   CMD_TIMEOUT=600       seconds any one GPU command may run (flashlab, compute-sanitizer, ncu, the
#                         PyTorch scripts, and each ctest test): a kernel that never returns (a
#                         barrier waited on for ever) costs that command, reported as exit 124, and
#                         the run goes on
# Exit status: 0 when every part that ran passed, else 1.
set -uo pipefail

OUT=${OUT:-./gpu-out}
BUILD_DIR=${BUILD_DIR:-build-gpu}
CUDA_ARCH=${CUDA_ARCH:-native}
REPS=${REPS:-10}
BENCH_ARGS=${BENCH_ARGS:-}
if [ "${BENCH_ONLY:-0}" = 1 ]; then
  SKIP_TESTS=1 SKIP_SANITIZER=1 SKIP_TOUR=1
fi
if [ "${SKIP_BENCH:-0}" = 1 ]; then # every timing section, not only the float32 sweep
  SKIP_DECODE=1 SKIP_TC=1 SKIP_WINDOW=1 SKIP_GPTOSS=1 SKIP_MLA=1 SKIP_PAGED=1
fi
mkdir -p "$OUT"
failed=()
step() { echo; echo "==== $*"; }
record() { # record NAME STATUS
  if [ "$2" -ne 0 ]; then failed+=("$1 (exit $2)"); fi
}

# ---- dependencies: the Debian packages carried in .deps (the GPU machine has no registry) ----
DEPS=/opt/deps/usr
if ls .deps/*.deb >/dev/null 2>&1; then
  step "unpacking .deps into /opt/deps"
  for f in .deps/*.deb; do dpkg -x "$f" /opt/deps || exit 1; done
fi
export CMAKE_PREFIX_PATH=$DEPS${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export LD_LIBRARY_PATH=$DEPS/lib/x86_64-linux-gnu:$DEPS/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# cJSON's CMake package from the .deb names /usr paths: skip it, so CMake finds header + library
blas_hints=(-DCMAKE_DISABLE_FIND_PACKAGE_cJSON=ON)
if [ -f $DEPS/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so ]; then
  blas_hints+=(-DBLAS_LIBRARIES=$DEPS/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so
              -DCBLAS_INCLUDE_DIR=$DEPS/include/x86_64-linux-gnu/openblas-pthread)
fi

# ---- configure + build ------------------------------------------------------------------------
step "configure + build ($BUILD_DIR, CUDA architectures $CUDA_ARCH)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/build.log"
{ cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" "${blas_hints[@]}" &&
  cmake --build "$BUILD_DIR" -j16; } >>"$OUT/build.log" 2>&1
status=$?
tail -3 "$OUT/build.log"
if [ $status -ne 0 ]; then
  echo "build failed; see $OUT/build.log"; tail -40 "$OUT/build.log"; exit 1
fi
# Every GPU command runs under `guard`: past CMD_TIMEOUT seconds it is stopped (exit 124, with a
# line saying so) instead of holding up the rest of the run. "$FLASHLAB" is flashlab under it.
CMD_TIMEOUT=${CMD_TIMEOUT:-600}
guard() {
  timeout -k 10 "$CMD_TIMEOUT" "$@"
  local status=$?
  [ $status -eq 124 ] && echo "gpu-check: stopped after $CMD_TIMEOUT s (a hung kernel?): $*" >&2
  return $status
}
FLASHLAB_BIN=$BUILD_DIR/flashlab
flashlab_guarded() { guard "$FLASHLAB_BIN" "$@"; }
FLASHLAB=flashlab_guarded
cuda_stages=$("$FLASHLAB" list | awk '$3 == "cuda" { print $1 }' | sort -u)

# ---- tests ----------------------------------------------------------------------------------------
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  step "ctest -L gpu ${CTEST_ARGS:-}"
  # shellcheck disable=SC2086
  (cd "$BUILD_DIR" && ctest -L gpu --output-on-failure --timeout "$CMD_TIMEOUT" ${CTEST_ARGS:-}) >"$OUT/ctest.log" 2>&1
  status=$?; record "ctest -L gpu" $status
  grep -E "tests passed|Failed|\*\*\*|Skipped" "$OUT/ctest.log" | tail -15
fi

in_list() { # in_list ITEM "a,b,c" (an empty list holds everything)
  [ -z "$2" ] && return 0
  case ",$2," in *",$1,"*) return 0 ;; esac
  return 1
}
cuda_stages_with() { # cuda_stages_with FEATURE "a,b,c": those of the stages whose CUDA implementation has it
  "$FLASHLAB" list | awk -v f="$1" '$3 == "cuda" && ("," $NF ",") ~ ("," f ",") { print $1 }' | sort -u |
    while read -r s; do in_list "$s" "$2" && echo "$s"; done | paste -sd, -
}

if [ "${SKIP_SANITIZER:-0}" != 1 ]; then
  step "compute-sanitizer memcheck + racecheck on each CUDA implementation's check"
  : >"$OUT/sanitizer.log"; rm -f "$OUT/sanitizer.failed"
  # one line per CUDA implementation: "STAGE VARIANT" (variant "-" = the default one)
  "$FLASHLAB" list | awk '$3 == "cuda" { print $1, $4 }' | while read -r s v; do
    in_list "$s" "${SANITIZE_STAGES:-}" || continue
    variant=$([ "$v" = "-" ] && echo "" || echo "$v")
    for tool in memcheck racecheck; do
      # shellcheck disable=SC2086
      guard compute-sanitizer --tool $tool --error-exitcode 9 "$FLASHLAB_BIN" check "$s" --device cuda --variant "$variant" \
        ${SANITIZE_ARGS:-} >>"$OUT/sanitizer.log" 2>&1
      status=$?
      printf '%-10s stage %s %-13s: %s\n' "$tool" "$s" "${variant:-(default)}" "$([ $status -eq 0 ] && echo clean || echo "FAILED (exit $status)")" |
        tee -a "$OUT/sanitizer.log"
      [ $status -eq 0 ] || echo "FAILED $tool $s $variant" >>"$OUT/sanitizer.failed"
    done
  done
  if [ -s "$OUT/sanitizer.failed" ]; then record "compute-sanitizer" 1; fi
fi

if [ "${SKIP_TOUR:-0}" != 1 ]; then
  step "flashlab tour --device all"
  "$FLASHLAB" tour --device all 2>&1 | tee "$OUT/tour.txt"
  record "tour" "${PIPESTATUS[0]}"
fi

# ---- benchmark: ours, then PyTorch SDPA on the same shapes -----------------------------------------
bench_stages=${BENCH_STAGES:-$(echo "$cuda_stages" | paste -sd, -)}
# stages 09 and 17 (MLA) have their own inputs and shapes, stages 12, 14, 15, 16 and 18 compute in bf16: each
# has its section below (tensor cores, gpt-oss, paged decode), not this float32 attention sweep
attention_stages=$(echo "$bench_stages" | tr , '\n' | grep -vx -e 09 -e 12 -e 14 -e 15 -e 16 -e 17 -e 18 | paste -sd, -)
[ "${SKIP_SWEEP:-0}" = 1 ] && attention_stages="" # the sections below only
if [ "${SKIP_BENCH:-0}" != 1 ] && [ -n "$attention_stages" ]; then
  step "flashlab bench --device cuda --stages $attention_stages --d 64,128 --reps $REPS $BENCH_ARGS (fwd, then fwd+bwd)"
  # shellcheck disable=SC2086
  "$FLASHLAB" bench --device cuda --stages "$attention_stages" --d 64,128 --reps "$REPS" $BENCH_ARGS --json >"$OUT/bench_fwd.json"
  record "bench fwd" $?
  bwd_stages=$(cuda_stages_with backward "$attention_stages") # forward + backward: those that have one
  if [ -n "$bwd_stages" ]; then
    # shellcheck disable=SC2086
    "$FLASHLAB" bench --device cuda --stages "$bwd_stages" --direction bwd --d 64,128 --reps "$REPS" $BENCH_ARGS \
      --json >"$OUT/bench_bwd.json"
    record "bench fwd+bwd" $?
  fi
  causal_stages=$(cuda_stages_with causal "$attention_stages")
  if [ "${SKIP_CAUSAL:-0}" != 1 ] && [ -n "$causal_stages" ]; then
    step "flashlab bench --causal --stages $causal_stages (fwd, then fwd+bwd)"
    for direction in fwd bwd; do
      stages=$causal_stages
      [ $direction = bwd ] && stages=$(cuda_stages_with backward "$causal_stages")
      [ -n "$stages" ] || continue
      # shellcheck disable=SC2086
      "$FLASHLAB" bench --device cuda --stages "$stages" --causal --direction $direction --d 64,128 \
        --reps "$REPS" $BENCH_ARGS --json >"$OUT/bench_causal_$direction.json"
      record "bench causal $direction" $?
    done
  fi
  python3 - "$OUT/bench_fwd.json" "$OUT/bench_bwd.json" "$OUT"/bench_causal_*.json >"$OUT/bench.json" <<'PY'
import json, sys
rows = []
for path in sys.argv[1:]:
    try:
        rows += json.load(open(path))
    except (OSError, ValueError):
        pass  # a direction with no rows (no stage has a backward) prints nothing
print(json.dumps(rows, indent=1))
PY
fi
if [ "${SKIP_SDPA:-0}" != 1 ] && [ -n "$attention_stages" ]; then # the reference of the float32 sweep
  step "PyTorch SDPA (float32, TF32 off) on the same shapes, fwd and fwd+bwd"
  sdpa_args=()
  for flag in --T --d --B --H; do # pass the bench's own overrides through
    value=$(echo " $BENCH_ARGS " | sed -n "s/.* $flag \([^ ]*\) .*/\1/p")
    [ -n "$value" ] && sdpa_args+=("$flag" "$value")
  done
  for direction in fwd bwd; do
    PYTHONUNBUFFERED=1 guard python3 tools/sdpa_bench.py --direction $direction --reps "$REPS" "${sdpa_args[@]}" \
      --json "$OUT/sdpa_$direction.json"
    record "sdpa_bench $direction" $?
    if [ "${SKIP_CAUSAL:-0}" != 1 ]; then
      PYTHONUNBUFFERED=1 guard python3 tools/sdpa_bench.py --causal --direction $direction --reps "$REPS" \
        "${sdpa_args[@]}" --json "$OUT/sdpa_causal_$direction.json"
      record "sdpa_bench causal $direction" $?
    fi
  done
fi
if [ "${SKIP_DECODE:-0}" != 1 ] && in_list 08 "$bench_stages"; then
  DECODE_ARGS=${DECODE_ARGS:-"--B 8 --H 32 --Hkv 8 --Tq 1 --T 16384 --d 128"}
  step "GQA decode: stage 08 ($DECODE_ARGS) vs stage 07 on K/V repeated to Hq heads; copy bandwidth"
  # shellcheck disable=SC2086
  "$FLASHLAB" bench --device cuda --stages 08 $DECODE_ARGS --reps "$REPS" --json >"$OUT/decode_08.json"
  record "decode bench 08" $?
  repeated=$(echo " $DECODE_ARGS " | sed -E 's/ --Hkv [0-9]+ / /') # Hkv = Hq: each kv head copied per query head
  # shellcheck disable=SC2086
  "$FLASHLAB" bench --device cuda --stages 07 $repeated --reps "$REPS" --json >"$OUT/decode_07.json"
  record "decode bench 07" $?
  guard python3 tools/sdpa_bench.py --copy-bandwidth --json "$OUT/copy_bandwidth.json"
  record "copy bandwidth" $?
  python3 - "$OUT/copy_bandwidth.json" "$OUT/decode_08.json" "$OUT/decode_07.json" <<'PY' | tee "$OUT/decode.txt"
import json, sys
copy = json.load(open(sys.argv[1]))["gb_per_s"]
print("GQA decode (HBM bytes as counted by the stage; GB/s = (read + written) / time; copy %.0f GB/s)" % copy)
rows = {}
for path in sys.argv[2:]:
    for r in json.load(open(path)):
        if r.get("error"):
            print("stage %s %s: %s" % (r["stage"], r["variant"] or "flash", r["error"]))
            continue
        gbps = (r["hbm_read_bytes"] + r["hbm_written_bytes"]) / (r["time_ms"] * 1e6)
        kv = r["B"] * r["Hkv"] * r["Tk"] * (r["d"] + r["dv"]) * 4  # the closed form of the K/V bytes
        kv_read = r["hbm_read_bytes"] - r["B"] * r["Hq"] * r["Tq"] * r["d"] * 4  # read minus Q
        check = "equal" if kv_read == kv else "DIFFERENT"
        if r["variant"] == "naive":  # its reads also hold S and P: no K/V-only figure
            kv_read, check = r["hbm_read_bytes"], "all reads, S and P included"
        print("stage %s %-13s B=%d Hq=%d Hkv=%d Tq=%d Tk=%d d=%d  %8.3f ms  K/V read %d B (B*Hkv*Tk*(d+dv)*4 = %d: %s)"
              "  %7.0f GB/s = %.2f of copy" % (r["stage"], r["variant"] or "flash", r["B"], r["Hq"], r["Hkv"],
                                              r["Tq"], r["Tk"], r["d"], r["time_ms"], kv_read, kv, check,
                                              gbps, gbps / copy))
        rows[(r["stage"], r["variant"])] = r
a, b = rows.get(("08", "")), rows.get(("07", ""))
if a and b:
    print("stage 08 flash is %.2fx faster than stage 07 flash on K/V repeated to Hq heads" % (b["time_ms"] / a["time_ms"]))
PY
fi
if [ -s "$OUT/bench.json" ] && [ -s "$OUT/sdpa_fwd.json" ]; then
  step "summary"
  sdpa_files=("$OUT/sdpa_fwd.json")
  for f in "$OUT/sdpa_bwd.json" "$OUT/sdpa_causal_fwd.json" "$OUT/sdpa_causal_bwd.json"; do
    [ -s "$f" ] && sdpa_files+=("$f")
  done
  guard python3 tools/sdpa_bench.py --compare "$OUT/bench.json" "${sdpa_files[@]}" | tee "$OUT/summary.txt"
fi

# ---- tensor cores: stage 12 (and 14 on Hopper) in bf16 beside SDPA's FA2 and cuDNN backends -----
if [ "${SKIP_TC:-0}" != 1 ] && in_list 12 "$bench_stages"; then
  if echo "$cuda_stages" | grep -qx 12; then
    TC_ARGS=${TC_ARGS:-}
    tc_shape="--T 1024,4096,16384 --d 64,128 --B 4 --H 16" # = flashlab bench --device cuda's defaults
    tc_sdpa=()
    for flag in --T --d --B --H --reps; do # what SDPA gets: the defaults, then what TC_ARGS says
      value=$(echo " $tc_shape --reps $REPS $TC_ARGS " | sed -n "s/.* $flag \([^ ]*\) .*/\1/p")
      tc_sdpa+=("$flag" "$value")
    done
    rm -f "$OUT"/tc_bench_*.json "$OUT"/tc_sdpa_*.json # the report reads them all: none from an older run
    masks=("")
    [ "${SKIP_CAUSAL:-0}" != 1 ] && masks+=(--causal)
    tc_stages=12 # and stage 14, every variant, where this build has it (sm_90a)
    echo "$cuda_stages" | grep -qx 14 && tc_stages=12,14
    step "stages $tc_stages (bf16, tensor cores): flashlab bench --stages $tc_stages $tc_shape --reps $REPS${TC_ARGS:+ $TC_ARGS}, fwd and fwd+bwd${masks[1]:+, non-causal and causal}"
    for mask in "${masks[@]}"; do
      for direction in fwd bwd; do
        name=${mask:+causal_}$direction
        # shellcheck disable=SC2086
        "$FLASHLAB" bench --device cuda --stages $tc_stages --direction $direction $mask $tc_shape --reps "$REPS" \
          $TC_ARGS --json >"$OUT/tc_bench_$name.json"
        record "stages $tc_stages bench $name" $?
      done
    done
    if [ "${SKIP_SDPA:-0}" != 1 ]; then
      step "PyTorch SDPA in bf16 (FLASH_ATTENTION, CUDNN_ATTENTION) on the same shapes: ${tc_sdpa[*]}"
      for mask in "${masks[@]}"; do
        for direction in fwd bwd; do
          name=${mask:+causal_}$direction
          # shellcheck disable=SC2086
          PYTHONUNBUFFERED=1 guard python3 tools/sdpa_bench.py --dtype bf16 --direction $direction $mask "${tc_sdpa[@]}" \
            --json "$OUT/tc_sdpa_$name.json"
          record "sdpa_bench bf16 $name" $?
        done
      done
    fi
    step "tensor-core summary (tools/tc_report.py $OUT)"
    python3 tools/tc_report.py "$OUT" | tee "$OUT/tc_summary.txt"
    record "tc report" "${PIPESTATUS[0]}"
  else
    step "stage 12: no CUDA implementation in this build; tensor-core section skipped"
  fi
fi

if [ "${SKIP_WINDOW:-0}" != 1 ] && in_list 10 "$bench_stages"; then
  step "sliding window: stage 10 at W = 256 + learned sinks, T = 4096 and 32768; W >= T against stage 08 causal"
  for direction in fwd bwd; do
    "$FLASHLAB" bench --device cuda --stages 10 --variant "" --window 256 --sinks --T 4096,32768 --d 64,128 \
      --direction $direction --reps "$REPS" --json >"$OUT/window_$direction.json"
    record "window bench $direction" $?
    "$FLASHLAB" bench --device cuda --stages 10 --variant "" --window 4096 --T 4096 --d 64,128 \
      --direction $direction --reps "$REPS" --json >"$OUT/window_full_$direction.json"
    record "window W>=T bench $direction" $?
    "$FLASHLAB" bench --device cuda --stages 08 --variant "" --causal --T 4096 --d 64,128 \
      --direction $direction --reps "$REPS" --json >"$OUT/window_causal08_$direction.json"
    record "stage 08 causal bench $direction" $?
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/window.txt"
import json, sys, os
out = sys.argv[1]
def rows(name):
    try:
        return [r for r in json.load(open(os.path.join(out, name))) if not r.get("error")]
    except (OSError, ValueError):
        return []
for direction in ("fwd", "bwd"):
    w = {(r["Tk"], r["d"]): r for r in rows("window_%s.json" % direction)}
    full = {r["d"]: r for r in rows("window_full_%s.json" % direction)}
    causal = {r["d"]: r for r in rows("window_causal08_%s.json" % direction)}
    label = "forward + backward" if direction == "bwd" else "forward"
    for d in (64, 128):
        a, b = w.get((4096, d)), w.get((32768, d))
        if a and b:
            print("stage 10 %s, W = 256 + sinks, d = %d: T = 4096 %.3f ms, T = 32768 %.3f ms: x%.2f for 8x T "
                  "(HBM read x%.2f)" % (label, d, a["time_ms"], b["time_ms"], b["time_ms"] / a["time_ms"],
                                        b["hbm_read_bytes"] / a["hbm_read_bytes"]))
        f, c = full.get(d), causal.get(d)
        if f and c:
            print("stage 10 %s, W = 4096 >= T = 4096, d = %d: %.3f ms; stage 08 causal %.3f ms: ratio %.3f"
                  % (label, d, f["time_ms"], c["time_ms"], f["time_ms"] / c["time_ms"]))
PY
fi

gptoss_stages=$(for s in 15 18; do in_list "$s" "$bench_stages" && echo "$s"; done | paste -sd, -)
if [ "${SKIP_GPTOSS:-0}" != 1 ] && [ -n "$gptoss_stages" ]; then
  GPTOSS="--B 1 --H 64 --Hkv 8 --d 64 --window 128"
  step "gpt-oss window: stages $gptoss_stages $GPTOSS --sinks, T = 4096 and 32768, beside FlexAttention"
  rm -f "$OUT"/gptoss_*.json
  for direction in fwd bwd; do
    # shellcheck disable=SC2086
    "$FLASHLAB" bench --device cuda --stages "$gptoss_stages" --variant "" $GPTOSS --sinks --T 4096,32768 \
      --direction $direction --reps "$REPS" --json >"$OUT/gptoss_$direction.json"
    record "gpt-oss bench $direction" $?
    # shellcheck disable=SC2086
    guard python3 tools/flex_bench.py $GPTOSS --sinks --T 32768 --direction $direction --reps "$REPS" \
      --json "$OUT/gptoss_flex_$direction.json"
    record "gpt-oss FlexAttention $direction" $?
  done
  # shellcheck disable=SC2086
  "$FLASHLAB" bench --device cuda --stages "$gptoss_stages" --variant "" $GPTOSS --T 32768 --direction bwd \
    --reps "$REPS" --json >"$OUT/gptoss_nosinks_bwd.json"
  record "gpt-oss bench without sinks" $?
  python3 tools/gptoss_report.py "$OUT" | tee "$OUT/gptoss.txt"
fi

if [ "${SKIP_MLA:-0}" != 1 ] && in_list 09 "$bench_stages"; then
  MLA_DECODE=${MLA_DECODE:-"--B 64 --H 128 --Tq 1 --T 4096 --d 128"}
  MLA_PREFILL=${MLA_PREFILL:-"--B 1 --H 128 --T 4096 --causal --d 128"}
  step "MLA (stage 09, m = 512, p = 64, D = 5120, mq = 1536): decode $MLA_DECODE, prefill $MLA_PREFILL"
  # shellcheck disable=SC2086
  "$FLASHLAB" bench --device cuda --stages 09 $MLA_DECODE --causal --reps "$REPS" --json >"$OUT/mla_decode.json"
  record "MLA decode bench" $?
  # shellcheck disable=SC2086
  "$FLASHLAB" bench --device cuda --stages 09 $MLA_PREFILL --reps 3 --json >"$OUT/mla_prefill.json"
  record "MLA prefill bench" $?
  # plain MHA with a full K/V cache, the same heads: stage 08 on (B, H, Tk, dh) keys and values
  mha=$(echo " $MLA_DECODE " | sed -E 's/ --H ([0-9]+) / --H \1 --Hkv \1 /')
  # shellcheck disable=SC2086
  "$FLASHLAB" bench --device cuda --stages 08 --variant "" $mha --causal --reps "$REPS" --json >"$OUT/mla_mha.json"
  record "MHA decode bench" $?
  [ -s "$OUT/copy_bandwidth.json" ] || guard python3 tools/sdpa_bench.py --copy-bandwidth --json "$OUT/copy_bandwidth.json"
  if command -v ncu >/dev/null 2>&1; then # the latent kernel alone: duration and DRAM bytes
    # shellcheck disable=SC2086
    guard ncu --clock-control none --kernel-name regex:latent_attention --launch-skip 2 --launch-count 3 \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
      "$FLASHLAB_BIN" bench --device cuda --stages 09 --variant "" $MLA_DECODE --causal --reps 3 \
      >"$OUT/mla_ncu.csv" 2>"$OUT/mla_ncu.err"
    record "ncu latent kernel" $?
  fi
  if echo "$cuda_stages" | grep -qx 17; then # stage 17 (bf16, wgmma) on the same step, where built
    # shellcheck disable=SC2086
    "$FLASHLAB" bench --device cuda --stages 17 $MLA_DECODE --causal --reps "$REPS" --json >"$OUT/mla17_decode.json"
    record "MLA bf16 decode bench" $?
    guard python3 tools/sdpa_bench.py --matmul-rate --json "$OUT/matmul.json"
    if command -v ncu >/dev/null 2>&1; then
      # shellcheck disable=SC2086
      guard ncu --clock-control none --kernel-name regex:latent_attention --launch-skip 2 --launch-count 3 \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
        "$FLASHLAB_BIN" bench --device cuda --stages 17 $MLA_DECODE --causal --reps 3 \
        >"$OUT/mla17_ncu.csv" 2>"$OUT/mla17_ncu.err"
      record "ncu stage 17 latent kernel" $?
    fi
  fi
  python3 tools/mla_report.py "$OUT" | tee "$OUT/mla.txt"
  record "MLA report" $?
fi

if [ "${SKIP_PAGED:-0}" != 1 ] && in_list 11 "$bench_stages"; then
  PAGED_T=${PAGED_T:-4096,32768,131072}
  paged_stages=08,11 # and stage 16 (bf16 on tensor cores) where this build has its kernel
  echo "$cuda_stages" | grep -qx 16 && paged_stages=08,11,16
  step "paged decode: stages $paged_stages (page size 16) vs stage 08 (contiguous) vs SDPA; B in ${PAGED_B:-1 8 64}, T = $PAGED_T"
  [ -s "$OUT/copy_bandwidth.json" ] || guard python3 tools/sdpa_bench.py --copy-bandwidth --json "$OUT/copy_bandwidth.json"
  if [ "$paged_stages" = 08,11,16 ]; then # plain copies moving each bf16 step's K/V bytes, B*Hkv*T*(d+dv)*2
    traffic=$(for b in ${PAGED_B:-1 8 64}; do for t in ${PAGED_T//,/ }; do echo $((b * 8 * t * 256 * 2)); done; done | sort -nu | paste -sd,)
    guard python3 tools/sdpa_bench.py --copy-traffic "$traffic" --reps "$REPS" --json "$OUT/copy_traffic.json"
    record "same-traffic copies" $?
  fi
  for b in ${PAGED_B:-1 8 64}; do
    "$FLASHLAB" bench --device cuda --stages $paged_stages --variant "" --B "$b" --H 32 --Hkv 8 --Tq 1 --T "$PAGED_T" \
      --d 128 --causal --page-size 16 --reps "$REPS" --json >"$OUT/paged_b$b.json"
    record "paged decode bench B=$b" $?
    if [ "$paged_stages" = 08,11,16 ]; then # stage 16 again, each step queued: the GPU's time alone
      "$FLASHLAB" bench --device cuda --stages 16 --variant "" --B "$b" --H 32 --Hkv 8 --Tq 1 --T "$PAGED_T" \
        --d 128 --causal --page-size 16 --reps "$REPS" --queued --json >"$OUT/paged16q_b$b.json"
      record "paged decode bench B=$b, stage 16 queued" $?
    fi
    if [ "${SKIP_PAGED_SDPA:-0}" != 1 ]; then
      guard python3 tools/sdpa_bench.py --decode --B "$b" --H 32 --Hkv 8 --Tq 1 --T "$PAGED_T" --d 128 --reps "$REPS" \
        --json "$OUT/paged_sdpa_b$b.json"
      record "SDPA decode B=$b" $?
      if [ "$paged_stages" = 08,11,16 ]; then # beside stage 16: FlashAttention-2 in bf16
        guard python3 tools/sdpa_bench.py --decode --dtype bf16 --backends FLASH_ATTENTION --B "$b" --H 32 --Hkv 8 --Tq 1 \
          --T "$PAGED_T" --d 128 --reps "$REPS" --json "$OUT/paged_fa2_b$b.json"
        record "SDPA FA2 bf16 decode B=$b" $?
        guard python3 tools/sdpa_bench.py --decode --dtype bf16 --backends FLASH_ATTENTION --B "$b" --H 32 --Hkv 8 --Tq 1 \
          --T "$PAGED_T" --d 128 --reps "$REPS" --queued --json "$OUT/paged_fa2q_b$b.json"
        record "SDPA FA2 bf16 decode B=$b queued" $?
      fi
    fi
  done
  python3 tools/decode_report.py "$OUT" | tee "$OUT/paged.txt"
  record "paged decode report" $?
fi

echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "gpu-check: every part that ran passed (logs in $OUT)"
  exit 0
fi
echo "gpu-check: FAILED: ${failed[*]} (logs in $OUT)"
exit 1
