"""train-stage: one stage of one run, starting from its parent stage's final model."""


rule train_stage:
    input:
        parent=parent_model,
        data=train_data,
        replay=replay_data,
        reference=reference_model,
    output:
        model=directory(f"{RESULTS}/runs/{{run}}/{{chain}}/model"),
        checkpoints=directory(f"{RESULTS}/runs/{{run}}/{{chain}}/checkpoints"),
        log=f"{RESULTS}/runs/{{run}}/{{chain}}/train_log.jsonl",
        summary=f"{RESULTS}/runs/{{run}}/{{chain}}/summary.json",
        resolved=f"{RESULTS}/runs/{{run}}/{{chain}}/resolved_config.json",
    log:
        f"{RESULTS}/logs/train/{{run}}/{{chain}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train/{{run}}/{{chain}}.tsv"
    priority: train_priority  # the stages left in the run: the critical path first (sdpocl.priorities)
    conda:
        MODEL_ENV
    threads: THREADS
    resources:
        **job_resources(config, "train_stage"),  # config train.gpus_per_job: --gpus=N on one node
    params:
        settings=train_settings,
        parent=parent_path,
        stage=lambda wc: stage_dir(RESULTS, wc.run, wc.chain),
        state=lambda wc: state_dir(RESULTS, wc.run, wc.chain),
        mitigation_inputs=mitigation_args,
    shell:
        "sdpocl train-stage --settings {params.settings:q} --parent {params.parent} "
        "--data {input.data} {params.mitigation_inputs} --out {params.stage} --state {params.state} "
        "--threads {threads} > {log} 2>&1"


rule teacher_check:
    """On demand (not in `all`): before a stage, is its SDPO teacher better than its student?"""
    input:
        parent=parent_model,
        data=train_data,
    output:
        f"{RESULTS}/runs/{{run}}/{{chain}}/teacher_check.json",
    log:
        f"{RESULTS}/logs/teacher_check/{{run}}/{{chain}}.log",
    conda:
        MODEL_ENV
    threads: THREADS
    resources:
        **job_resources(config, "teacher_check"),
    params:
        settings=train_settings,
        parent=parent_path,
    shell:
        "sdpocl teacher-check --settings {params.settings:q} --model {params.parent} --data {input.data} "
        "--out {output} --threads {threads} > {log} 2>&1"
