#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py): one GRPO and one SDPO update of a Qwen3-4B-shaped model at the paper's lengths
# on one lent GPU, no network, no vLLM; the first thing to run when a GPU is lent. From the repository root:
#
#   bash bench/gpu_wheels.sh                          # here, with the package index: .whl/ (carry it)
#   OUT=/path/for/output bash bench/gpu_check.sh      # there; SHAPE=tiny for a dry run of the script anywhere
#
# Uses bench/gpu_env.sh's set-up (carried wheels, the working tree on PYTHONPATH, offline settings); prints the
# report (times, peak memory, the estimate beside it) and keeps it in $OUT/gpu_check.json and $OUT/console.txt.
# About 3-6 minutes on one H100 or H200 (model build and save, two trainer builds, two updates).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
START=$(date +%s)
OUT=${OUT:-/tmp/gpu_check_out}
SITE=${SITE:-/tmp/site}
SHAPE=${SHAPE:-qwen3-4b}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/sdpocl-gpucheck.XXXXXX)

source "$ROOT/bench/gpu_env.sh"

main() {
    local have_gpu=0
    gpu_env || return $?
    step "bench/gpu_check.py --shape $SHAPE (scratch in $WORK)"
    timeout -k 15 "${BUDGET:-420}" python3 bench/gpu_check.py --shape "$SHAPE" --work "$WORK" >"$WORK/report.txt"
    local rc=$?
    grep "^\[gpu-check\]" "$WORK/report.txt"
    sed -n '/^{$/,$p' "$WORK/report.txt" >"$OUT/gpu_check.json"
    step "exit status $rc$([ $rc -eq 124 ] && echo ' (TIME LIMIT)')"
    return $rc
}

pack() {
    ls -la "$OUT"
    rm -rf "$WORK"
}

run_and_pack gpu_check
