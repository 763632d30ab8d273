"""sdpocl: continual post-training (GRPO vs SDPO) as a Snakemake workflow. See README.md."""

from snakemake.utils import min_version

min_version("9.0")


# The default preset unless --configfile/--config gave a complete config: a second config
# file would be *merged* into config/config.yaml, which silently mixes presets.
if not config:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"


rule all:
    default_target: True
    input:
        all_train_outputs(),
