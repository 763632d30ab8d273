"""The GPU settings a job makes where it sets up its device (train, evaluation with transformers, the teacher
check): torch's cuDNN attention kernel off. On an H200 (torch 2.11, bf16 autocast, padded batches) it made the
tiny preset's weights non-finite within 20-31 rollout steps (GRPO and SDPO_0 alike, then a device-side assert in
sampling), where the flash, memory-efficient and math kernels trained the same stages cleanly
(docs/paper-preset.md, "The rehearsal on a GPU"). Nothing on a CPU."""

from __future__ import annotations


def use_gpu_kernels() -> bool:
    """Where a GPU is visible, every ``scaled_dot_product_attention`` kernel but cuDNN's; returns whether one is."""
    import torch

    if not torch.cuda.is_available():
        return False
    torch.backends.cuda.enable_cudnn_sdp(False)
    return True
