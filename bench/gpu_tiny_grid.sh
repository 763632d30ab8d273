#!/usr/bin/env bash
# The default tiny preset's headline grid (config/config.yaml: GRPO, SDPO_0, SDPO_5% and StableSDPO chains) on
# several seeds at once on one GPU machine with no network, from a base built on a CPU: the seed report that
# takes a 2-core CPU hours (about 43 min a seed) in one command. Each train stage runs on CUDA with the preset's
# `train.mixed_precision: auto` (bf16 autocast over fp32 master weights), rollouts and evaluation with HF
# generate (no vLLM there), every job beside the others on the one GPU.
#
#   OUT=/path/for/results SEEDS=3,4,5 bash bench/gpu_tiny_grid.sh     # from the repository root
#
# Needs: a default base in results-gpu/base/model (copy it from a CPU run's results/base, and
# `carry: [.whl, results-gpu]`), the wheels of bench/gpu_wheels.sh in .whl/. Targets: tables/eval.csv (every
# stage's and the base's Acc@8, paired changes) and every stage's drift_params.csv; response drift and domain
# distance need the 92 MB sentence-embedding package, which cannot travel, so they are left out.
# Prints the evaluation table's goal report (`sdpocl goals`) and packs scores, samples, summaries, train logs,
# parameter drift, tables, logs and benchmarks into $OUT/tiny_grid.tar.gz (the goal report here: `tar xzf
# tiny_grid.tar.gz && sdpocl goals results-gpu`; with FULL_RUNS aggregate the scores first, docs/experiments/2026-12-04-goals-one-gpu.md).
#
# Environment: OUT (default /tmp/gpu_tiny_out), SITE (/tmp/site), SEEDS (3,4,5), GRID_RESULTS (results-gpu),
# BUDGET (seconds for the whole script, default 560: Snakemake gets what is left after the set-up, less 40 s),
# SKIP_INSTALL=1, FULL_RUNS (e.g. grpo,sdpo_a0: the chains of those runs and the first stage of the others, as
# scores; no tables/eval.csv), DRY_RUN=1 (Snakemake's -n: what would run; tests/test_config.py runs it on a CPU).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
START=$(date +%s)
BUDGET=${BUDGET:-560}
OUT=${OUT:-/tmp/gpu_tiny_out}
SITE=${SITE:-/tmp/site}
SEEDS=${SEEDS:-3,4,5}
R=${GRID_RESULTS:-results-gpu}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/sdpocl-tiny.XXXXXX)
CFG=$WORK/tiny-gpu.yaml

# shellcheck source=bench/gpu_env.sh
source "$ROOT/bench/gpu_env.sh"

main() {
    local rc=0 have_gpu=0
    gpu_env || return $?
    [ -f "$R/base/model/model.safetensors" ] || {
        echo "FAILED: no base in $R/base/model (copy a CPU run's results/base there and carry $R)"
        return 12
    }

    # the default preset as it is, with its results folder, the seeds and the HF evaluation backend
    python3 - "$CFG" "$R" "$SEEDS" <<'EOF' || return 13
import sys, yaml
out, results, seeds = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3].split(",")]
c = yaml.safe_load(open("config/config.yaml"))
c["results"], c["seeds"] = results, seeds
c["evaluate"]["backend"] = "hf"  # vLLM cannot travel; `auto` on a GPU without it stops
yaml.safe_dump(c, open(out, "w"), sort_keys=False)
EOF
    local targets
    targets=$(python3 - "$CFG" <<'EOF'
import os, sys
from sdpocl.config import chains_for, expand_runs, load_config
c = load_config(sys.argv[1])
full = os.environ.get("FULL_RUNS")  # e.g. grpo,sdpo_a0: those runs' chains, every other run's first stage only
if not full:
    t = [f"{c['results']}/tables/eval.csv"]
    t += [f"{c['results']}/runs/{r.name}/{'/'.join(ch)}/drift_params.csv" for r in expand_runs(c) for ch in chains_for(c, r)]
else:
    t = [f"{c['results']}/base/eval/seed-{s}/scores.json" for s in c["seeds"]]
    for r in expand_runs(c):
        for ch in chains_for(c, r)[: None if r.name.rsplit("_s", 1)[0] in full.split(",") else 1]:
            t += [f"{c['results']}/runs/{r.name}/{'/'.join(ch)}/{f}" for f in ("eval/final/scores.json", "drift_params.csv")]
print(" ".join(t))
EOF
)
    [ -n "$targets" ] || return 14
    step "$(echo "$targets" | wc -w) targets, seeds $SEEDS$([ -n "${FULL_RUNS:-}" ] && echo ", whole chains of $FULL_RUNS")"

    if [ "$have_gpu" = 1 ]; then
        (while sleep 5; do
            echo "$(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits), $(nvidia-smi \
                --query-compute-apps=pid --format=csv,noheader | wc -l)"
        done >"$WORK/smi.txt" 2>&1) &
        local sampler=$!
    fi
    local left=$((BUDGET - $(elapsed) - 40)) # kept back: the goal report and the tarball
    [ "$left" -gt 60 ] || left=60
    step "snakemake on $(nproc) cores, time limit ${left}s (log: snakemake.log in the tarball)"
    # shellcheck disable=SC2086
    timeout -k 15 "$left" snakemake --profile profiles/local --cores "$(nproc)" --retries 0 \
        $([ "${DRY_RUN:-0}" = 1 ] && echo --dry-run) --configfile "$CFG" -- $targets >"$WORK/snakemake.log" 2>&1
    local src=$?
    [ -n "${sampler:-}" ] && kill "$sampler" 2>/dev/null
    step "snakemake exit status $src$([ $src -eq 124 ] && echo ' (TIME LIMIT)')"
    grep -E "steps \([0-9]+%\) done" "$WORK/snakemake.log" | tail -1
    [ "${DRY_RUN:-0}" = 1 ] && sed -n '/^Job stats:/,/^$/p' "$WORK/snakemake.log"
    if [ $src -ne 0 ]; then
        grep -n -E "Error in rule|Exiting because|MissingOutput|Traceback|Error:" "$WORK/snakemake.log" | head -20
        tail -15 "$WORK/snakemake.log" | cut -c1-300
        rc=30
    fi
    [ -s "$WORK/smi.txt" ] && awk -F', ' '{u=$1+0; m=$2+0; p=$3+0; if (u>pu) pu=u; if (m>pm) pm=m; if (p>pp) pp=p; su+=u; n++}
        END {printf "GPU: utilisation mean %.0f%%, max %d%%; memory.used max %d MiB; up to %d processes on it (%d samples, 5 s apart)\n",
             su/n, pu, pm, pp, n}' "$WORK/smi.txt"

    step "train stages: steps done, seconds per rollout step, training reward first -> last fifth (summary.json)"
    python3 - "$R" <<'EOF'
import json, sys
from pathlib import Path
rows = []
for p in sorted(Path(sys.argv[1], "runs").glob("*/**/summary.json")):
    s = json.loads(p.read_text())
    rows.append(f"  {str(p.parent.relative_to(Path(sys.argv[1], 'runs'))):50} {s['steps_done']}/{s['steps_planned']} "
                f"{s['seconds_per_step']:.3f} s/step, reward {s['reward_first_fifth']:.3f} -> {s['reward_last_fifth']:.3f}"
                + ("" if s.get("finite_weights", True) else " NON-FINITE WEIGHTS"))
print("\n".join(rows) or "  none finished")
EOF
    if [ -s "$R/tables/eval.csv" ]; then
        step "sdpocl goals $R"
        timeout 60 sdpocl goals "$R" 2>&1 | tee "$OUT/goals.md"
    else
        echo "no tables/eval.csv ($([ -n "${FULL_RUNS:-}" ] && echo "FULL_RUNS asks for scores only" ||
            echo "the grid did not finish")): aggregate the scores from the tarball (docs/experiments/2026-12-04-goals-one-gpu.md)"
    fi
    return $rc
}

pack() {
    step "pack into $OUT/tiny_grid.tar.gz"
    cp "$WORK/snakemake.log" "$CFG" "$R/" 2>/dev/null
    find "$R" -type f \( -path "$R/logs/*" -o -path "$R/benchmarks/*" -o -path "$R/tables/*" -o -path '*/samples/*' \
        -o -name summary.json -o -name resolved_config.json -o -name train_log.jsonl -o -name scores.json \
        -o -name 'drift_params*.csv' -o -name report.json -o -name snakemake.log -o -name tiny-gpu.yaml \) \
        ! -path '*/checkpoints/*' ! -path '*/model/*' >"$WORK/pack.list"
    tar czf "$OUT/tiny_grid.tar.gz" -T "$WORK/pack.list"
    ls -la "$OUT"
}

run_and_pack gpu_tiny_grid
