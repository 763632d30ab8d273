#!/usr/bin/env bash
# Shared set-up of the GPU-machine scripts (bench/gpu_rehearsal.sh, bench/gpu_tiny_grid.sh), sourced by them:
# the machine line, the carried wheels (.whl/, bench/gpu_wheels.sh) installed with --no-deps into $SITE and put
# first on PYTHONPATH, the working tree's workflow/ on PYTHONPATH with an `sdpocl` shim, offline HF settings, HF
# rollouts (no vLLM there), and the versions found (gpu_env: needs ROOT, WORK, SITE; sets have_gpu; returns 10 when
# the wheel install failed, 11 when torch does not import); the console helpers `elapsed` and `step` (START); and
# `run_and_pack NAME`, which runs the script's `main` and then its `pack` into $OUT/console.txt and exits with main's
# status.

elapsed() { echo $(($(date +%s) - START)); }
step() { echo "--- [$(elapsed)s] $*"; }

run_and_pack() {
    main 2>&1 | tee "$OUT/console.txt"
    local status=${PIPESTATUS[0]}
    pack 2>&1 | tee -a "$OUT/console.txt"
    echo "=== $1: exit status $status after $(elapsed)s ===" | tee -a "$OUT/console.txt"
    exit "$status"
}

gpu_env() {
    have_gpu=0
    step "machine: $(uname -m), $(nproc) CPUs, $(free -g | awk '/^Mem:/{print $2}') GiB RAM; work dir $WORK"
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
        have_gpu=1
        nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,compute_cap --format=csv
    else
        echo "no GPU (nvidia-smi absent or failing): the run reports device=cpu"
    fi

    if [ "${SKIP_INSTALL:-0}" != 1 ]; then
        step "install $(ls .whl/*.whl | wc -l) wheels ($(du -sh .whl | cut -f1)) into $SITE"
        timeout 240 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" .whl/*.whl 2>&1 | grep -v -e "^WARNING: Target directory" -e "already exists"
        [ "${PIPESTATUS[0]}" -eq 0 ] || {
            echo "FAILED: wheel install"
            return 10
        }
    fi
    export PYTHONPATH="$SITE:$ROOT/workflow${PYTHONPATH:+:$PYTHONPATH}"
    mkdir -p "$WORK/bin"
    printf '#!%s\nimport sys\nfrom sdpocl.cli import main\nsys.exit(main())\n' "$(command -v python3)" >"$WORK/bin/sdpocl"
    chmod +x "$WORK/bin/sdpocl"
    export PATH="$WORK/bin:$SITE/bin:$PATH"
    # no network there: never wait on the hub; transformers' generate for rollouts (no vLLM)
    export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_EVALUATE_OFFLINE=1
    export HF_HUB_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg
    export PYTHONUNBUFFERED=1 SDPOCL_ROLLOUTS=hf SITE

    step "versions"
    timeout 120 python3 - <<'EOF' || return 11
import importlib, importlib.metadata as md, os, platform, sys
import torch
cuda = torch.cuda.is_available()
print(f"python {platform.python_version()} ({sys.executable})")
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), cuda available: {cuda}"
      + (f", {torch.cuda.get_device_name(0)}, bf16 supported: {torch.cuda.is_bf16_supported()}" if cuda else ""))
for pkg, mod in [("transformers", "transformers"), ("trl", "trl"), ("accelerate", "accelerate"),
                 ("datasets", "datasets"), ("lm_eval", "lm_eval"), ("snakemake", "snakemake"), ("numpy", "numpy"),
                 ("pandas", "pandas"), ("tokenizers", "tokenizers"), ("math-verify", "math_verify"),
                 ("jsonschema", "jsonschema"), ("tensorboard", "tensorboard"), ("scipy", "scipy")]:
    try:
        m = importlib.import_module(mod)
        where = "carried" if (m.__file__ or "").startswith(os.environ["SITE"]) else "machine"
        print(f"  {pkg:13} {md.version(pkg):12} {where}")
    except Exception as exc:  # noqa: BLE001
        print(f"  {pkg:13} IMPORT FAILED: {type(exc).__name__}: {exc}")
EOF
}
