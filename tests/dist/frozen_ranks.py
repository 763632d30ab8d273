"""Run under ``torchrun --nproc_per_node 2`` (gloo, CPU) by tests/test_two_ranks.py: the FSDP2 pieces of
:mod:`sdpocl.train.frozen` on two ranks, with the environment accelerate's FSDP launch sets
(``ACCELERATE_USE_FSDP``, ``FSDP_CPU_RAM_EFFICIENT_LOADING``), so transformers loads zeros on rank 1.

Usage: frozen_ranks.py MODEL_DIR WORK_DIR CASE...   (CASE: trl | frozen | ema | resume | prefix | finite | reference;
one launch runs them all)
Each case prints ``RESULT <case> rank <r> <json>`` lines and exits non-zero on a failed check.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh


def report(case, **values):
    print(f"RESULT {case} rank {dist.get_rank()} {json.dumps(values, sort_keys=True)}", flush=True)


def full_state(model) -> dict:
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def main(model_dir: str, work: str, *cases: str) -> None:
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for case in cases:
        run_case(model_dir, work, case, mesh)
        dist.barrier()
    dist.destroy_process_group()


def run_case(model_dir: str, work: str, case: str, mesh) -> None:
    from torch.distributed.fsdp import fully_shard
    from trl.trainer.utils import create_model_from_path

    from sdpocl.train.frozen import WrongWeightsError, build_frozen_copy, check_shards, load_from_rank0

    rank = dist.get_rank()
    kwargs = {"dtype": torch.float32}

    if case == "trl":
        # what TRL does for SDPO's teacher and GRPO's reference: create_model_from_path + a bare fully_shard
        model = create_model_from_path(model_dir, **kwargs)
        fully_shard(model, mesh=mesh)
        emb = model.get_input_embeddings().weight.to_local()
        try:
            check_shards(model, model_dir, "teacher")
            caught = None
        except WrongWeightsError as exc:
            caught = str(exc)
        report(case, local_embedding_abs_sum=float(emb.abs().sum()), error=caught)
    elif case == "frozen":
        model = build_frozen_copy(model_dir, "teacher", shard=True, mesh=mesh, **kwargs)
        emb = model.get_input_embeddings().weight.to_local()
        n = check_shards(model, model_dir, "teacher")
        inv = [float(b.abs().sum()) for name, b in model.named_buffers() if name.endswith("inv_freq")]
        report(case, local_embedding_abs_sum=float(emb.abs().sum()), checked=n, inv_freq_abs_sums=inv)
    elif case in ("ema", "resume"):
        from trl.trainer.callbacks import SyncRefModelCallback

        teacher = build_frozen_copy(model_dir, "teacher", shard=True, mesh=mesh, **kwargs)
        student = build_frozen_copy(model_dir, "student", shard=True, mesh=mesh, **kwargs)
        with torch.no_grad():
            for p in student.parameters():
                p.add_(0.25)  # a DTensor add: every element of the full tensor moves by 0.25
        # the EMA of TRL's SDPO teacher callback (sync_target_model without DeepSpeed)
        SyncRefModelCallback._sync_target_model(student, teacher, 0.05)
        state = full_state(teacher)
        saved = os.path.join(work, "teacher.safetensors")
        if rank == 0:
            from safetensors.torch import save_file

            from sdpocl.train.weights import load_tensors

            parent = load_tensors(model_dir)
            err = max(float((state[k] - (parent[k].float() + 0.0125)).abs().max()) for k in parent)
            save_file({k: v.contiguous() for k, v in state.items()}, saved)
            report(case, ema_max_abs_error=err)
        dist.barrier()
        if case == "resume":
            # a resumed stage: a fresh copy of the parent, then the saved teacher broadcast into it
            again = build_frozen_copy(model_dir, "teacher", shard=True, mesh=mesh, **kwargs)
            load_from_rank0(again, saved)
            n = check_shards(again, saved, "teacher")
            back = full_state(again)
            if rank == 0:
                diff = max(float((back[k] - state[k]).abs().max()) for k in state)
                report(case, checked=n, resumed_max_abs_diff=diff)
            else:
                report(case, checked=n)
    elif case == "prefix":
        # sdpocl.train.prefix on sharded models: a frozen teacher (no grad) and a student (grad), each rank its own rows
        from sdpocl.generation.prefix import shared_prefix_logits

        ids, mask, keep = group_batch(seed=rank)
        teacher = build_frozen_copy(model_dir, "teacher", shard=True, mesh=mesh, **kwargs)
        with torch.no_grad():
            full = full_logits(teacher, ids, mask, keep)
            shared = shared_prefix_logits(teacher, ids, mask, keep)
        values = {"teacher_max_abs_diff": float((full - shared).abs().max()), "scale": float(full.abs().max())}
        student = create_model_from_path(model_dir, **kwargs)
        for layer in student.model.layers:  # as accelerate's FSDP2 wraps a decoder: each layer, then the root
            fully_shard(layer, mesh=mesh)
        fully_shard(student, mesh=mesh)
        grads = []
        for forward in (full_logits, shared_prefix_logits):
            student.zero_grad()
            forward(student, ids, mask, keep).log_softmax(-1)[:, :, 3].sum().backward()
            grads.append(torch.cat([p.grad.to_local().flatten() for p in student.parameters()]))
        values["student_grad_rel_diff"] = float((grads[0] - grads[1]).norm() / grads[0].norm())
        # DDP (accelerate's CPU ranks): the prefix runs on the wrapped module, the tail through the wrapper
        ddp = torch.nn.parallel.DistributedDataParallel(create_model_from_path(model_dir, **kwargs))
        grads = []
        for forward in (full_logits, shared_prefix_logits):
            ddp.zero_grad()
            forward(ddp, ids, mask, keep).log_softmax(-1)[:, :, 3].sum().backward()
            grads.append(torch.cat([p.grad.flatten() for p in ddp.parameters()]))
        values["ddp_grad_rel_diff"] = float((grads[0] - grads[1]).norm() / grads[0].norm())
        report(case, **values)
    elif case == "reference":
        # GRPO's KL reference under FSDP (SchedGRPOTrainer._load_reference): a frozen copy sharded per decoder layer
        # with TRL's fused LM head, scoring each rank's own rows as TRL's reference forward does
        from trl.trainer.utils import add_fused_lm_head

        ids, mask, keep = group_batch(seed=rank)
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, :-keep] = -100
        reference = build_frozen_copy(model_dir, "KL reference", shard=True, mesh=mesh, **kwargs)
        add_fused_lm_head(reference, temperature=0.7)
        plain = create_model_from_path(model_dir, **kwargs).eval()
        load_from_rank0(plain, model_dir)  # transformers left zeros on rank 1 (cpu-ram-efficient loading)
        with torch.no_grad():
            fused = reference(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True).log_probs
            logits = plain(input_ids=ids, attention_mask=mask).logits[:, :-1] / 0.7
            full = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        scored = labels[:, 1:] != -100
        fused = fused[:, -scored.size(1) :] if fused.size(1) != scored.size(1) else fused
        report(case, max_abs_diff=float((fused[scored] - full[scored]).abs().max()), scored=int(scored.sum()))
    elif case == "finite":
        # a diverged shard on rank 1 only: today's rank-local test against sdpocl's decision across ranks
        from sdpocl.train.frozen import weights_finite

        model = build_frozen_copy(model_dir, "student", shard=True, mesh=mesh, **kwargs)
        if rank == 1:
            with torch.no_grad():
                next(model.parameters()).to_local().view(-1)[0] = float("nan")
        local = all(bool(torch.isfinite(p).all()) for p in model.parameters())
        report(case, rank_local=local, across_ranks=weights_finite(model))
    else:
        raise SystemExit(f"unknown case {case}")


def group_batch(seed: int, groups: int = 3, samples: int = 4, prompt: int = 9, completion: int = 6):
    """Rows as SDPO's forwards see them: ``samples`` rows per left-padded prompt, right-padded completions."""
    gen = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, 60, (groups, prompt), generator=gen)
    prompt_mask = torch.ones_like(prompts)
    for g in range(groups):
        prompt_mask[g, : g + 1] = 0
    ids = torch.cat([prompts.repeat_interleave(samples, 0), torch.randint(3, 60, (groups * samples, completion))], 1)
    mask = torch.cat([prompt_mask.repeat_interleave(samples, 0), torch.ones(groups * samples, completion)], 1).long()
    mask[::2, -2:] = 0
    return ids, mask, completion


def full_logits(model, ids, mask, keep):
    return model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1][:, -keep:]


if __name__ == "__main__":
    main(*sys.argv[1:])
