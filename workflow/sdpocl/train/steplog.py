"""The per-step log of a stage: TRL's log entries renamed to our columns on the rollout-step axis
(``train_log.jsonl``), the progress line each step prints, the collapse rule, and the stage summary."""

from __future__ import annotations

import math
import time

from sdpocl.train.plan import BatchPlan

__all__ = ["LOG_KEYS", "log_row", "step_log", "summarize", "progress_callback"]


def progress_callback(tag: str, plan: BatchPlan, patience: int, stop_on_collapse: bool):
    """Prints one readable line per rollout step; stops the stage on a non-finite loss, and on a collapse
    (``patience`` steps of zero mean reward) when ``stop_on_collapse``; warns halfway to a collapse."""
    from transformers import TrainerCallback

    warn_at = max(1, (patience + 1) // 2)

    class Progress(TrainerCallback):
        def __init__(self):
            self.t_last = time.time()
            self.zero_run = 0

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs:
                return
            now = time.time()
            row = log_row(logs)
            reward = row.get("reward", float("nan"))
            loss = row.get("loss", float("nan"))
            step, total = plan.rollout_step(state.global_step), plan.rollout_step(state.max_steps)
            if state.is_world_process_zero:
                print(
                    f"[{tag}] step {step}/{total} reward {reward:.3f} loss {loss:.4f} "
                    f"len {row.get('completion_length', float('nan')):.1f} ({now - self.t_last:.2f}s)",
                    flush=True,
                )
            self.t_last = now
            if not math.isfinite(loss):
                print(f"[{tag}] non-finite loss at step {step}: stopping this stage", flush=True)
                control.should_training_stop = True
            self.zero_run = self.zero_run + 1 if reward == 0 else 0
            if state.is_world_process_zero and self.zero_run in (warn_at, patience):
                print(
                    f"[{tag}] collapse {'warning' if self.zero_run < patience else 'rule met'}: mean reward 0 for "
                    f"{self.zero_run} consecutive steps (the stage is recorded as collapsed at {patience}, "
                    "train.collapse_patience)",
                    flush=True,
                )
            if self.zero_run >= patience and stop_on_collapse:
                control.should_training_stop = True

    return Progress()


def summarize(log: list[dict], steps_planned: int, patience: int) -> dict:
    """Stage summary from the per-step log: collapse status and reward in the first / last fifth."""
    rewards = [r["reward"] for r in log if "reward" in r]
    losses = [r["loss"] for r in log if "loss" in r]
    out = {
        "steps_planned": steps_planned,
        "steps_done": len(log),
        "collapsed": False,
        "collapse_step": None,
        "collapse_reason": None,
    }
    nan_at = next((r["step"] for r in log if not math.isfinite(r.get("loss", 0.0))), None)
    if nan_at is not None:
        out.update(collapsed=True, collapse_step=nan_at, collapse_reason="non-finite loss")
    else:
        run = 0
        for r in log:
            run = run + 1 if r.get("reward", 1.0) == 0 else 0
            if run >= patience:
                out.update(collapsed=True, collapse_step=r["step"], collapse_reason=f"reward 0 for {patience} steps")
                break
    if rewards:
        k = max(1, len(rewards) // 5)
        out["reward_first_fifth"] = sum(rewards[:k]) / k
        out["reward_last_fifth"] = sum(rewards[-k:]) / k
    if losses:
        out["loss_last"] = losses[-1]
    return out


#: TRL log keys -> our per-step log columns (GRPO and SDPO name some metrics differently).
LOG_KEYS = {
    "reward": "reward",
    "self_distillation/reward_mean": "reward",
    "self_distillation/rewards/boxed_count": "boxed_per_completion",
    "loss": "loss",
    "completions/mean_length": "completion_length",
    "completions/clipped_ratio": "truncated_fraction",
    "rewards/boxed_count/mean": "boxed_per_completion",
    "distill_token_fraction": "distill_token_fraction",
    "self_distillation/reprompt_sample_fraction": "distill_sample_fraction",
    "self_distillation/success_group_fraction": "success_group_fraction",
    "self_distillation/distillation_loss": "distillation_loss",
    "learning_rate": "lr",
    "grad_norm": "grad_norm",
    "self_distillation/policy_loss": "policy_loss",
    "kl": "kl",
    "confidence_kept_fraction": "confidence_kept_fraction",
    # vLLM rollouts: the trainer's vs vLLM's log-probs of the sampled tokens, and the rollout correction's weights
    "sampling/sampling_logp_difference/mean": "rollout_logp_abs_diff",
    "sampling/sampling_logp_difference/max": "rollout_logp_abs_diff_max",
    "sampling/importance_sampling_ratio/mean": "rollout_is_weight_mean",
    "sampling/importance_sampling_ratio/min": "rollout_is_weight_min",
    "sampling/importance_sampling_ratio/max": "rollout_is_weight_max",
    "sampling/importance_sampling_ratio/clipped_fraction": "rollout_is_clipped_fraction",
}


def log_row(entry: dict) -> dict:
    """One TRL log entry renamed to our per-step columns."""
    return {dst: entry[src] for src, dst in LOG_KEYS.items() if src in entry}


def step_log(log_history: list[dict], plan: BatchPlan | None = None) -> list[dict]:
    """Per-rollout-step rows (named for the paper's diagnostics) from the trainer's log history."""
    to_rollout = plan.rollout_step if plan is not None else (lambda step: step)
    return [{"step": to_rollout(e["step"]), **log_row(e)} for e in log_history if "loss" in e and "step" in e]
