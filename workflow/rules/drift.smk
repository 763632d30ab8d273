"""compute-drift: parameter drift of every checkpoint of a stage against the base model."""


rule compute_drift:
    input:
        base=[BASE_MODEL] if TINY else [],  # the paper preset names a hub model, not a file
        model=f"{RESULTS}/runs/{{run}}/{{chain}}/model",
        checkpoints=f"{RESULTS}/runs/{{run}}/{{chain}}/checkpoints",
    output:
        summary=f"{RESULTS}/runs/{{run}}/{{chain}}/drift_params.csv",
        matrices=f"{RESULTS}/runs/{{run}}/{{chain}}/drift_params_matrices.csv",
    params:
        base=lambda wc: BASE_MODEL,
        stage=lambda wc: stage_dir(RESULTS, wc.run, wc.chain),
        top_k=config["drift"]["top_k"],
        mask_frac=config["drift"]["mask_frac"],
        tol=config["drift"]["tol"],
    log:
        f"{RESULTS}/logs/drift/{{run}}/{{chain}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/drift/{{run}}/{{chain}}.tsv"
    conda:
        "../../envs/sdpocl.yaml"
    shell:
        "sdpocl compute-drift --base {params.base} --stage {params.stage} --top-k {params.top_k} "
        "--mask-frac {params.mask_frac} --tol {params.tol} --out {output.summary} "
        "--out-matrices {output.matrices} > {log} 2>&1"
