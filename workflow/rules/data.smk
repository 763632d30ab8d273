"""prepare-data and build-base (tiny preset)."""


rule prepare_data:
    output:
        f"{RESULTS}/data/{{domain}}/{{split}}.jsonl",
    log:
        f"{RESULTS}/logs/prepare_data/{{domain}}_{{split}}.log",
    priority: DATA_PRIORITY  # read by every stage and evaluation (sdpocl.priorities)
    localrule: True  # seconds of work (or hub downloads): on the submit node under Slurm
    conda:
        "../../envs/sdpocl.yaml"
    params:
        n=lambda wc: train_size_for(config, wc.domain) if wc.split == "train" else config["data"]["test_size"],
        seed=config["data"]["seed"],
        preset=config["preset"],
        # one string with the difficulty flag: empty at the defaults, so this rule's params and command are
        # those of results made before data.difficulty existed (Snakemake compares the set of param values)
        sources=lambda wc: DATA_SOURCES + difficulty_flag(wc.domain),
    shell:
        "sdpocl prepare-data --preset {params.preset} --domain {wildcards.domain} --split {wildcards.split} "
        "--n {params.n} --seed {params.seed} {params.sources} --out {output} > {log} 2>&1"


if TINY:

    rule build_base:
        output:
            model=directory(BASE_MODEL),
            report=f"{RESULTS}/base/report.json",
        log:
            f"{RESULTS}/logs/build_base.log",
        benchmark:
            f"{RESULTS}/benchmarks/build_base.tsv"
        priority: BASE_PRIORITY  # every stage waits for it: before the data and benchmark jobs (sdpocl.priorities)
        conda:
            "../../envs/sdpocl.yaml"
        threads: 2  # fixed, not `workflow.cores`: the same base on every machine, and --report needs no --cores
        params:
            settings=stable_json(  # what build_base reads (the difficulty only where it is not the default)
                {
                    "base": config["base"],
                    "data": {"seed": config["data"]["seed"]}
                    | ({"difficulty": DATA_DIFFICULTY} if DATA_DIFFICULTY else {}),
                }
            ),
        shell:
            "sdpocl build-base --settings {params.settings:q} "
            "--out {output.model} --report {output.report} --threads {threads} > {log} 2>&1"

else:

    # the paper preset's base model (hub id or local copy) as one local directory
    rule fetch_base_model:
        output:
            directory(BASE_MODEL),
        log:
            f"{RESULTS}/logs/fetch_base_model.log",
        localrule: True  # a hub download: on the submit node, which has network, under Slurm
        conda:
            "../../envs/sdpocl.yaml"
        params:
            model=config["base"]["model"],
            source=f"--source {config['base']['source']}" if config["base"]["source"] else "",
        shell:
            "sdpocl fetch-base --model {params.model:q} {params.source} --out {output} > {log} 2>&1"
