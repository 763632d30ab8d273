"""preflight: on demand (not in `all`), before the grid, on the node the jobs will run on."""

import time


rule preflight:
    """`snakemake preflight --configfile config/paper.yaml` on a GPU node (a local rule: it runs where
    Snakemake runs, so leave out --profile slurm here): GPUs visible vs requested, vLLM, the base model
    readable offline, the memory estimate, free disk for the grid's checkpoints and profiles/slurm's
    requests per rule family (sdpocl.preflight, as `sdpocl preflight`). The job fails when a check fails;
    the report is printed and kept in the log. It checks the machine as it is now, so it runs again every
    time it is asked for."""
    output:
        f"{RESULTS}/preflight.txt",
    log:
        f"{RESULTS}/logs/preflight.log",
    localrule: True
    params:
        profile=str(Path(workflow.basedir) / "profiles" / "slurm"),
        # a param that differs on every run: Snakemake reruns a job whose params changed
        checked_at=lambda wc: time.time(),
    run:
        from sdpocl.preflight import preflight_rule

        preflight_rule(config, params.profile, RESULTS, workflow.configfiles, output[0], log[0])
