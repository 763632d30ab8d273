"""sdpocl: continual post-training study (GRPO vs SDPO) as a Snakemake workflow."""

__version__ = "0.1.0"
