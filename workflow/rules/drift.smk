"""compute-drift: parameter drift of every checkpoint of a stage against the base model."""


rule compute_drift:
    input:
        base=BASE_MODEL,
        model=f"{RESULTS}/runs/{{run}}/{{chain}}/model",
        checkpoints=f"{RESULTS}/runs/{{run}}/{{chain}}/checkpoints",
    output:
        summary=f"{RESULTS}/runs/{{run}}/{{chain}}/drift_params.csv",
        matrices=f"{RESULTS}/runs/{{run}}/{{chain}}/drift_params_matrices.csv",
    log:
        f"{RESULTS}/logs/drift/{{run}}/{{chain}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/drift/{{run}}/{{chain}}.tsv"
    conda:
        "../../envs/sdpocl.yaml"
    resources:
        **job_resources(config, "compute_drift"),  # batched SVDs on the GPU when the grid has GPUs
    params:
        base=lambda wc: BASE_MODEL,
        stage=lambda wc: stage_dir(RESULTS, wc.run, wc.chain),
        top_k=config["drift"]["top_k"],
        mask_frac=config["drift"]["mask_frac"],
        tol=config["drift"]["tol"],
        update_rule=config["drift"]["update_rule"],
    shell:
        "sdpocl compute-drift --base {params.base} --stage {params.stage} --top-k {params.top_k} "
        "--mask-frac {params.mask_frac} --tol {params.tol} --update-rule {params.update_rule} --out {output.summary} "
        "--out-matrices {output.matrices} > {log} 2>&1"


rule response_drift:
    input:
        base=run_base_samples,
        stages=run_eval_samples,
    output:
        f"{RESULTS}/runs/{{run}}/response_drift.csv",
    log:
        f"{RESULTS}/logs/response_drift/{{run}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/response_drift/{{run}}.tsv"
    conda:
        "../../envs/sdpocl.yaml"
    threads: THREADS
    params:
        chains=lambda wc: [chain_str(chain) for run, chain in all_stages() if run == wc.run],
        meta=run_meta,
        domains=config["domains"],
        model=config["drift"]["embedding_model"],
        n_samples=config["drift"]["response_samples"],
        # no flag at the default (null: every judged prompt)
        n_prompts=(
            "" if config["drift"]["response_prompts"] is None else f"--n-prompts {config['drift']['response_prompts']}"
        ),
    shell:
        "sdpocl response-drift --base {input.base} --chains {params.chains} --samples {input.stages} "
        "--meta {params.meta:q} --domains {params.domains} --embedding-model {params.model} "
        "--n-samples {params.n_samples} {params.n_prompts} --threads {threads} --out {output} > {log} 2>&1"


rule domain_distance:
    input:
        unpack(distance_datasets),
    output:
        mmd=f"{RESULTS}/tables/domain_mmd.csv",
        tsne=f"{RESULTS}/tables/tsne.csv",
    log:
        f"{RESULTS}/logs/domain_distance.log",
    benchmark:
        f"{RESULTS}/benchmarks/domain_distance.tsv"
    conda:
        "../../envs/sdpocl.yaml"
    threads: THREADS
    params:
        datasets=lambda wc, input: [f"{name}={DATASET_ROLES[name]}:{path}" for name, path in input.items()],
        model=config["drift"]["embedding_model"],
        n=config["drift"]["distance_prompts"],
        seed=config["data"]["seed"],
        bandwidth=(
            "" if config["drift"]["mmd_bandwidth"] is None else f"--bandwidth {config['drift']['mmd_bandwidth']}"
        ),
        perplexity=config["drift"]["tsne_perplexity"],
    shell:
        "sdpocl domain-distance --dataset {params.datasets} --embedding-model {params.model} --n-prompts {params.n} "
        "--seed {params.seed} {params.bandwidth} --perplexity {params.perplexity} --threads {threads} "
        "--out-mmd {output.mmd} --out-tsne {output.tsne} > {log} 2>&1"


rule aggregate_drift:
    input:
        params=all_drift_outputs(),
        responses=[f"{RESULTS}/runs/{run}/response_drift.csv" for run in RUNS],
    output:
        params=f"{RESULTS}/tables/drift_params.csv",
        responses=f"{RESULTS}/tables/drift_responses.csv",
    log:
        f"{RESULTS}/logs/aggregate_drift.log",
    localrule: True  # seconds of work (or hub downloads): on the submit node under Slurm
    conda:
        "../../envs/sdpocl.yaml"
    params:
        grid=DRIFT_GRID,
        results=lambda wc: RESULTS,
    shell:
        "sdpocl aggregate-drift --params {input.params} --responses {input.responses} --results {params.results} "
        "--grid {params.grid:q} --out-params {output.params} --out-responses {output.responses} > {log} 2>&1"
