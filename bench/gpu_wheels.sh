#!/usr/bin/env bash
# The wheels bench/gpu_rehearsal.sh installs on a GPU machine without network (Python 3.12, x86-64, a
# machine that already has torch, transformers, numpy, pandas, pyarrow, scipy, tensorboard and the like):
# the workflow's pins (TRL, accelerate, datasets, lm-eval, Snakemake, math-verify) and what they need beyond
# that machine's packages, one version each, into .whl/ (about 40 MB; add `/.whl/` to .git/info/exclude).
# Four of them are source releases only; they are built here as pure-Python wheels.
#
#   bash bench/gpu_wheels.sh            # with network to the package index; WHEEL_DIR=dir for another folder
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${WHEEL_DIR:-.whl}
mkdir -p "$dest"
platform=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
source_only=(connection_pool==0.0.3 rouge_score==0.1.2 sqlitedict==2.1.0 word2number==1.1)
binary=(
    accelerate==1.16.0
    annotated_types==0.8.0
    antlr4_python3_runtime==4.13.2
    argparse_dataclass==2.0.0
    chardet==6.0.0.post1
    conda_inject==1.3.2
    configargparse==1.9.0
    dataproperty==1.1.1
    datasets==5.2.0
    defusedxml==0.7.1
    dill==0.4.1
    docutils==0.22.4
    dpath==2.2.0
    evaluate==0.4.6
    fastjsonschema==2.22.3
    gitdb==4.0.12
    gitpython==3.2.1
    greenlet==3.5.6
    humanfriendly==10.0
    immutables==0.21
    jsonschema==4.26.0
    jsonschema_specifications==2025.9.1
    jupyter_core==5.9.1
    latex2sympy2_extended==1.11.0
    lm_eval==0.4.13
    math_verify==0.9.0
    mbstrdecoder==1.1.5
    more_itertools==11.2.1
    multiprocess==0.70.19
    nbformat==5.11.1
    nltk==3.10.4
    pathvalidate==3.3.1
    platformdirs==4.14.9
    pulp==3.3.2
    pydantic==2.14.4
    pydantic_core==2.50.5
    pytablewriter==1.2.1
    referencing==0.37.0
    rpds_py==2026.9.1
    smart_open==7.7.1
    smmap==5.0.3
    snakemake==9.27.1
    snakemake_interface_common==1.23.0
    snakemake_interface_executor_plugins==9.4.0
    snakemake_interface_logger_plugins==2.1.0
    snakemake_interface_report_plugins==1.3.0
    snakemake_interface_scheduler_plugins==2.0.2
    snakemake_interface_storage_plugins==4.4.1
    sqlalchemy==2.0.58
    sqlmodel==0.0.37
    tabledata==1.3.5
    tcolorpy==0.1.7
    tenacity==9.2.1
    throttler==1.2.3
    traitlets==5.16.1
    trl==1.16.0
    typepy==1.3.5
    typing_inspection==0.4.5
    yte==1.9.4
)
python3 -m pip download -q --no-deps --only-binary=:all: "${platform[@]}" -d "$dest" "${binary[@]}"
python3 -m pip wheel -q --no-deps -w "$dest" "${source_only[@]}"
echo "$(ls "$dest"/*.whl | wc -l) wheels, $(du -sh "$dest" | cut -f1) in $dest"
