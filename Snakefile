"""sdpocl: continual post-training (GRPO vs SDPO) as a Snakemake workflow. See README.md."""

from snakemake.utils import min_version

min_version("9.0")


# The default preset unless --configfile names another: a second config file would be
# *merged* into config/config.yaml, which silently mixes presets. (--config KEY=VALUE still
# overrides single keys of whichever file is used.)
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/drift.smk"
include: "workflow/rules/plot.smk"
include: "workflow/rules/preflight.smk"
include: "workflow/rules/jobserver.smk"


report: "workflow/report/workflow.rst"


rule all:
    default_target: True
    input:
        all_train_outputs(),
        all_figure_outputs(),


rule figures:
    """Only the figures (from the cached tables)."""
    input:
        all_figure_outputs(),
