#!/usr/bin/env bash
# The paper preset's rehearsal (config/rehearsal.yaml: a tiny stand-in model built by `sdpocl build-standin`,
# the loaders' fixtures) through Snakemake on one GPU machine with no network, as one command:
# train (bf16 autocast on CUDA), evaluation (lm-eval, HF backend: no vLLM there), drift, tables and figures.
#
#   OUT=/path/for/results bash bench/gpu_rehearsal.sh        # from the repository root
#
# Missing packages come as wheels in .whl/ (ignored by git), installed with --no-deps into $SITE and put first
# on PYTHONPATH; the machine's own torch / transformers are used. The workflow runs from the working tree
# (PYTHONPATH=workflow and an `sdpocl` shim), with a derived config written by bench/gpu_rehearsal_tools.py.
# Prints a compact summary (versions, device and precision of every train stage, wall times, the evaluation
# table's head, the GPU's peak memory); logs and tables go to $OUT/gpu_rehearsal.tar.gz, the console to
# $OUT/console.txt. Exit status: non-zero when an install, a job or the CUDA check failed.
#
# Environment: OUT (default /tmp/gpu_rehearsal_out), SITE (/tmp/site), BUDGET (seconds for the whole script,
# default 400: Snakemake gets what is left after the set-up, less 100 s for what follows), CORE_RUNS=1 (only
# GRPO, SDPO_0, SDPO_5% and StableSDPO; default: config/rehearsal.yaml's whole grid), JOB_SERVER=auto|on|off
# (auto: off only if CUDA fails in a child forked after the job server's imports), SKIP_INSTALL=1.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
START=$(date +%s)
BUDGET=${BUDGET:-400}
OUT=${OUT:-/tmp/gpu_rehearsal_out}
SITE=${SITE:-/tmp/site}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/sdpocl-gpu.XXXXXX)
RESULTS=$WORK/results
CFG=$WORK/rehearsal-gpu.yaml
TOOLS="bench/gpu_rehearsal_tools.py"

# shellcheck source=bench/gpu_env.sh
source "$ROOT/bench/gpu_env.sh"

main() {
    local rc=0 have_gpu=0
    gpu_env || return $?

    step "build the stand-in model and a stub embedding model"
    timeout 180 sdpocl build-standin --out "$WORK/standin" --corpus tests/fixtures/paper/*.json* >"$WORK/standin.log" 2>&1 || {
        tail -20 "$WORK/standin.log"
        return 12
    }
    timeout 120 python3 "$TOOLS" embedder --tokenizer "$WORK/standin" --out "$WORK/embedder" 2>&1 | tail -3
    [ "${PIPESTATUS[0]}" -eq 0 ] || return 13

    local js_flag=""
    case "${JOB_SERVER:-auto}" in
        off) js_flag=--no-job-server ;;
        on) ;;
        *)
            step "probe: CUDA in a child forked after the job server's imports (sdpocl.jobserver)"
            timeout 180 python3 "$TOOLS" probe 2>&1 | grep -v -e "^  pid = os.fork()" | tail -5
            local prc=${PIPESTATUS[0]}
            if [ "$prc" -ne 0 ]; then
                echo "PROBE FAILED (rc $prc): running with job_server: false; the job server would break GPU jobs"
                js_flag=--no-job-server
                rc=20
            fi
            ;;
    esac
    # shellcheck disable=SC2086
    python3 "$TOOLS" config --results "$RESULTS" --base "$WORK/standin" --embedder "$WORK/embedder" --out "$CFG" \
        $js_flag $([ "${CORE_RUNS:-0}" = 1 ] && echo --core-runs) || return 14

    local sampler=""
    if [ "$have_gpu" = 1 ]; then
        python3 "$TOOLS" sample --out "$WORK/gpu_samples.jsonl" --stop "$WORK/stop-sampler" --interval 0.5 &
        sampler=$!
    fi
    local left=$((BUDGET - $(elapsed) - 100)) # kept back: the forced stages, the report and the tarball
    [ "$left" -gt 60 ] || left=60
    step "snakemake all on $(nproc) cores, time limit ${left}s (log: snakemake.log in the tarball)"
    timeout -k 20 "$left" snakemake all --profile profiles/local --cores "$(nproc)" --retries 0 \
        --configfile "$CFG" >"$WORK/snakemake.log" 2>&1
    local src=$?
    [ -n "$sampler" ] && {
        touch "$WORK/stop-sampler"
        timeout 10 tail --pid="$sampler" -f /dev/null
        kill "$sampler" 2>/dev/null
    }
    step "snakemake exit status $src$([ $src -eq 124 ] && echo ' (TIME LIMIT)')"
    sed -n '/^Job stats:/,/^$/p' "$WORK/snakemake.log" | awk 'NF==2 && $2~/^[0-9]+$/{printf "%s=%s ", $1, $2} END{print ""}'
    grep -E "^[0-9]+ of [0-9]+ steps|steps \([0-9]+%\) done|Complete log" "$WORK/snakemake.log" | tail -2
    if [ $src -ne 0 ]; then
        echo "--- snakemake errors:"
        grep -n -E "Error in rule|Exiting because|MissingOutput|Traceback|Error:|error:" "$WORK/snakemake.log" | head -30
        echo "--- snakemake.log tail:"
        tail -40 "$WORK/snakemake.log" | cut -c1-300
        rc=30
    fi
    head -3 "$RESULTS/logs/job_server.log" 2>/dev/null | cut -c1-300

    step "report"
    timeout 60 python3 "$TOOLS" report --results "$RESULTS" --samples "$WORK/gpu_samples.jsonl" \
        $([ "$have_gpu" = 1 ] && echo --expect-cuda)
    local rrc=$?
    [ $rrc -eq 0 ] || {
        echo "REPORT: rc $rrc (4 = a train stage did not run on CUDA)"
        [ $rc -ne 0 ] || rc=40
    }
    step "sdpocl preflight on the derived config (informational)"
    timeout 60 sdpocl preflight --config "$CFG" --results "$RESULTS" >"$WORK/preflight.log" 2>&1
    grep -E "^\[|^preflight" "$WORK/preflight.log" | cut -c1-220
    step "forced-reward stages (teacher, distillation loss, non-zero gradients; the fixtures give no reward)"
    if [ -f "$RESULTS/runs/sdpo_a0_s0/math/resolved_config.json" ]; then
        local fleft=$((BUDGET - $(elapsed) - 35))
        [ "$fleft" -gt 30 ] || fleft=30
        timeout -k 5 "$fleft" python3 "$TOOLS" forced --results "$RESULTS" --out "$WORK/forced" >"$WORK/forced.log" 2>&1
        local frc=$?
        grep -E "^(run \(forced|grpo|sdpo|stable|forced stages)|NOT OK|FAILED|Error" "$WORK/forced.log" | cut -c1-200
        [ $frc -eq 0 ] || {
            echo "FORCED STAGES: rc $frc"
            tail -15 "$WORK/forced.log" | cut -c1-300
            [ $rc -ne 0 ] || rc=50
        }
    else
        echo "skipped: the workflow's first stages did not finish"
    fi
    echo "--- distinct warnings in the job logs (count, first 140 chars):"
    grep -rhi -E "warn" "$RESULTS/logs" "$WORK/forced.log" 2>/dev/null | cut -c1-140 | sort | uniq -c | sort -rn | head -12
    return $rc
}

pack() {
    step "pack logs into $OUT/gpu_rehearsal.tar.gz"
    (
        cd "$WORK" || exit
        find . -type f \( -path './results/logs/*' -o -path './results/benchmarks/*' -o -path './results/tables/*' \
            -o -name summary.json -o -name resolved_config.json -o -name train_log.jsonl -o -name scores.json \
            -o -name '*.png' -o -name '*.log' -o -name '*.yaml' -o -name '*.jsonl' \) \
            ! -path './standin/*' ! -path './embedder/*' ! -path '*/checkpoints/*' ! -path '*/samples/*' \
            ! -path './results/data/*' -size -4M >"$WORK/pack.list"
        tar czf "$OUT/gpu_rehearsal.tar.gz" -T "$WORK/pack.list"
    )
    ls -la "$OUT"
}

run_and_pack gpu_rehearsal
