"""evaluate-checkpoint: Acc@k of every stage checkpoint (and the base) on every benchmark, via lm-eval."""


rule prepare_benchmark:
    output:
        data=f"{RESULTS}/data/{{bench}}/test.jsonl",
        meta=f"{RESULTS}/data/{{bench}}/meta.json",  # counts: records, rows skipped (per BFCL category)
    log:
        f"{RESULTS}/logs/prepare_benchmark/{{bench}}.log",
    priority: DATA_PRIORITY  # read by every stage and evaluation (sdpocl.priorities)
    localrule: True  # seconds of work (or hub downloads): on the submit node under Slurm
    conda:
        "../../envs/sdpocl.yaml"
    params:
        n=config["evaluate"]["ood_size"],
        seed=config["data"]["seed"],
        preset=config["preset"],
        sources=DATA_SOURCES,
    shell:
        "sdpocl prepare-benchmark --preset {params.preset} --name {wildcards.bench} --n {params.n} --seed {params.seed} "
        "{params.sources} --out {output.data} --meta {output.meta} > {log} 2>&1"


rule write_eval_task:
    input:
        data=f"{RESULTS}/data/{{benchmark}}/test.jsonl",
    output:
        f"{RESULTS}/eval_tasks/{{benchmark}}.yaml",
    log:
        f"{RESULTS}/logs/write_eval_task/{{benchmark}}.log",
    priority: DATA_PRIORITY  # read by every stage and evaluation (sdpocl.priorities)
    localrule: True  # seconds of work (or hub downloads): on the submit node under Slurm
    conda:
        "../../envs/sdpocl.yaml"
    params:
        settings=EVAL_SETTINGS,
    shell:
        "sdpocl write-eval-task --benchmark {wildcards.benchmark} --data {input.data} "
        "--settings {params.settings:q} --out {output} > {log} 2>&1"


rule evaluate_checkpoint:
    input:
        model=eval_model_input,
        tasks=eval_task_files(),
    output:
        scores=f"{RESULTS}/runs/{{run}}/{{chain}}/eval/{{ckpt}}/scores.json",
        samples=directory(f"{RESULTS}/runs/{{run}}/{{chain}}/eval/{{ckpt}}/samples"),
    log:
        f"{RESULTS}/logs/evaluate/{{run}}/{{chain}}/{{ckpt}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/evaluate/{{run}}/{{chain}}/{{ckpt}}.tsv"
    conda:
        MODEL_ENV
    threads: THREADS
    resources:
        **job_resources(config, "evaluate_checkpoint"),  # config evaluate.gpus_per_job
    params:
        model=eval_model_path,
        meta=eval_meta,
        settings=run_eval_settings,
        benchmarks=BENCHMARK_NAMES,
        out=lambda wc, output: os.path.dirname(output.scores),
        # a function of output, so Snakemake does not track it (like mitigation_args): never a rerun
        state=lambda wc, output: eval_state_dir(wc.run, wc.chain, wc.ckpt),
        tasks=lambda wc, input: os.path.dirname(input.tasks[0]),
    shell:
        "sdpocl evaluate --model {params.model} --tasks {params.tasks} --benchmarks {params.benchmarks} "
        "--settings {params.settings:q} --meta {params.meta:q} --out {params.out} --state {params.state} "
        "--threads {threads} > {log} 2>&1"


# once per training seed, with that seed's sampling seed (eval_settings): a seed's stage-1 change is paired
# with its own base draw, and the seed CI sees the base's sampling error
rule evaluate_base:
    input:
        model=BASE_MODEL,
        tasks=eval_task_files(),
    output:
        scores=base_eval_path("{seed}"),
        samples=directory(base_eval_path("{seed}", "samples")),
    log:
        f"{RESULTS}/logs/evaluate/base/seed-{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/evaluate/base/seed-{{seed}}.tsv"
    conda:
        MODEL_ENV
    threads: THREADS
    resources:
        **job_resources(config, "evaluate_base"),  # config evaluate.gpus_per_job
    params:
        model=lambda wc: BASE_MODEL,
        out=lambda wc, output: os.path.dirname(output.scores),
        state=lambda wc, output: eval_state_dir("base", f"seed-{wc.seed}"),
        tasks=lambda wc, input: os.path.dirname(input.tasks[0]),
        meta=lambda wc: stable_json({**BASE_META, "seed": int(wc.seed)}),
        settings=lambda wc: eval_settings(int(wc.seed)),
        benchmarks=BENCHMARK_NAMES,
    shell:
        "sdpocl evaluate --model {params.model} --tasks {params.tasks} "
        "--benchmarks {params.benchmarks} --settings {params.settings:q} --meta {params.meta:q} "
        "--out {params.out} --state {params.state} --threads {threads} > {log} 2>&1"


rule aggregate_eval:
    input:
        base=[base_eval_path(seed) for seed in SEEDS],
        scores=all_eval_outputs(),
        # read beside the scores: per-prompt Acc@k for the paired change against each stage's parent
        samples=[
            os.path.join(os.path.dirname(f), "samples")
            for f in [*(base_eval_path(seed) for seed in SEEDS), *all_eval_outputs()]
        ],
    output:
        eval=f"{RESULTS}/tables/eval.csv",
        teacher=f"{RESULTS}/tables/teacher_stability.csv",
    log:
        f"{RESULTS}/logs/aggregate_eval.log",
    localrule: True  # seconds of work (or hub downloads): on the submit node under Slurm
    conda:
        "../../envs/sdpocl.yaml"
    params:
        domains=config["domains"],
        variants=VARIANT_RUNS,
        labels=RUN_LABELS,
    shell:
        "sdpocl aggregate-eval --scores {input.base} {input.scores} --domains {params.domains} "
        "--variant-runs {params.variants} --labels {params.labels:q} --out {output.eval} "
        "--out-teacher {output.teacher} > {log} 2>&1"
