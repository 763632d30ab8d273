"""The exact shortcuts of `sdpocl.train.trainers` (module docstring) change nothing that is optimised:
from one seed, the trainers with and without them (``shortcuts = False``: TRL's own computation) give
the same per-step rewards, losses and metrics and weights equal to float rounding; the work they skip is
really skipped; they switch themselves off where they would not be exact. Tiny random model through the
stage's own trainer construction (`sdpocl.train.stage.build_trainer`), seconds per run."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from sdpocl.config import expand_runs, stage_settings, validate_config
from sdpocl.config.methods import RunSpec
from sdpocl.rewards import code as code_rewards
from sdpocl.train import grpo, sdpo, shortcuts, trainers
from sdpocl.train.grpo import SchedGRPOTrainer
from sdpocl.train.plan import batch_plan
from sdpocl.train.shortcuts import select_rows
from sdpocl.train.stage import build_trainer
from sdpocl.train.steplog import step_log


def flat_or_parity(completions, flat, **kwargs):
    """Deterministic. Prompts marked flat score 0 for every sample (a group without advantage and without
    a demonstration); the others score the parity of the completion's length (mixed groups, successes)."""
    return [0.0 if f else float(len(c) % 2) for c, f in zip(completions, flat)]


def _settings(smoke_config, method: str, **knobs):
    cfg = validate_config(copy.deepcopy(smoke_config))
    run = next(r for r in expand_runs(cfg) if r.method == method and r.alpha in (None, 0.0) and not r.cot)
    s = stage_settings(cfg, RunSpec(**{**run.to_dict(), **knobs}), ("math",))
    return s.replace(
        steps=3,
        save_every=100,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=10,
        max_grad_norm=1.0,
        warmup_steps=0,
        lr=3e-3,
    )


def _train(settings, tiny_standin, out, shortcuts: bool, cls_extra: dict | None = None):
    """Train from the seed; returns (trainer, per-step log, weights)."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    model_dir, recs = tiny_standin
    tok = AutoTokenizer.from_pretrained(model_dir)
    data = Dataset.from_dict(
        {
            "prompt": [r["prompt"] for r in recs],
            "answer": [r["answer"] for r in recs],
            "flat": [i % 2 == 0 for i in range(len(recs))],
        }
    )
    family = trainers.FAMILIES[settings.family]
    trainer_cls = type("Under" + family[1].__name__, (family[1],), {"shortcuts": shortcuts, **(cls_extra or {})})
    saved = dict(trainers.FAMILIES)
    trainers.FAMILIES[settings.family] = (family[0], trainer_cls)
    try:
        torch.manual_seed(0)
        trainer = build_trainer(settings, model_dir, data, tok, [flat_or_parity], out)
    finally:
        trainers.FAMILIES.update(saved)
    trainer.train()
    weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return trainer, step_log(trainer.state.log_history, batch_plan(settings)), weights


def _same_run(original, fast, keys, weight_atol=5e-6):
    (_, log_o, w_o), (_, log_f, w_f) = original, fast
    assert len(log_o) == len(log_f) == 3
    for a, b in zip(log_o, log_f):
        assert a["step"] == b["step"]
        for k in keys:
            assert b[k] == pytest.approx(a[k], rel=1e-5, abs=1e-6), (a["step"], k, a[k], b[k])
    assert w_o.keys() == w_f.keys()
    moved = max(float((w_o[k] - w_f[k]).abs().max()) for k in w_o)
    assert moved <= weight_atol, moved


def _spy(monkeypatch, owner, name):
    """Count the calls of owner.name, made with gradients on and off."""
    calls = {"grad": 0, "no_grad": 0}
    orig = getattr(owner, name)

    def spy(*a, **k):
        calls["grad" if torch.is_grad_enabled() else "no_grad"] += 1
        return orig(*a, **k)

    monkeypatch.setattr(owner, name, spy)
    return calls


def _rows_spy(monkeypatch):
    """Rows of every batch the row shortcuts cut down (kept, all)."""
    seen = []
    orig = shortcuts.select_rows

    def spy(inputs, rows):
        seen.append((rows.numel(), inputs["completion_ids"].size(0)))
        return orig(inputs, rows)

    for family in (grpo, sdpo):
        monkeypatch.setattr(family, "select_rows", spy)
    return seen


# ----------------------------------------------------------------------------------------------
# GRPO

ROWS_ONLY = {"share_prefixes": False}  # the other shortcuts alone: shared prefixes have their own tests below


def test_grpo_shortcuts_are_exact_and_skip_the_work(tiny_standin, smoke_config, tmp_path, monkeypatch):
    """4 optimizer steps per rollout step: the old log-probs come from generate (no second no-grad
    forward), zero-advantage rows stay out of the forward/backward; rewards, losses, grad norms, clip
    ratios and weights as TRL's own."""
    from trl import GRPOTrainer

    settings = _settings(smoke_config, "grpo")
    plan = batch_plan(settings)
    assert plan.optimizer_steps == 4 and plan.grad_accum == 1  # TRL computes old log-probs
    forwards = _spy(monkeypatch, GRPOTrainer, "_get_per_token_logps_and_entropies")
    original = _train(settings, tiny_standin, tmp_path / "o", shortcuts=False)
    assert forwards == {"no_grad": 3, "grad": 12}  # the old log-probs once per rollout step, one per update
    forwards.update(grad=0, no_grad=0)
    rows = _rows_spy(monkeypatch)
    fast = _train(settings, tiny_standin, tmp_path / "f", shortcuts=True, cls_extra=ROWS_ONLY)
    assert forwards == {"no_grad": 0, "grad": 12}  # the no-grad forward is gone
    assert rows and sum(k for k, _ in rows) < sum(n for _, n in rows)  # some rows were left out
    _same_run(original, fast, ("reward", "loss", "grad_norm", "completion_length"))
    trainer_o, trainer_f = original[0], fast[0]
    for key in ("clip_ratio/region_mean", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/low_min"):
        o = [e[key] for e in trainer_o.state.log_history if key in e]
        f = [e[key] for e in trainer_f.state.log_history if key in e]
        assert f == pytest.approx(o, abs=1e-6), key


@pytest.mark.parametrize("knobs", [{}, {"kl_beta": 0.1}], ids=["grpo", "kl"])
def test_grpo_shared_prefixes_train_the_same_model(tiny_standin, smoke_config, tmp_path, knobs):
    """Each distinct prompt forwarded once in GRPO's training forward (and the KL reference's), its log-probs
    and entropies computed as TRL's fused LM head computes them: every step's log to 1e-5 and the update
    vector after three rollout steps (12 optimizer steps) to 1e-2 relative, as SDPO's shared prefixes below.
    A wrong mask, position or temperature moves the first step's loss by orders more."""
    settings = _settings(smoke_config, "grpo", **knobs)
    plain = _train(settings, tiny_standin, tmp_path / "o", shortcuts=True, cls_extra=ROWS_ONLY)
    shared = _train(settings, tiny_standin, tmp_path / "f", shortcuts=True)
    assert plain[0].prefix_forwards == 0
    assert shared[0].prefix_forwards > 0  # TRL shuffles a rollout batch into mini-batches: some share no prompt
    keys = ("reward", "loss", "grad_norm", "completion_length") + (("kl",) if knobs else ())
    _same_run(plain, shared, keys, weight_atol=float("inf"))
    assert shared[1][0]["grad_norm"] == pytest.approx(plain[1][0]["grad_norm"], rel=1e-6)
    entropy = [[e["entropy"] for e in run[0].state.log_history if "entropy" in e] for run in (plain, shared)]
    assert len(entropy[0]) == 3 and entropy[1] == pytest.approx(entropy[0], rel=1e-5)  # the metric, as TRL's
    _same_update(plain, shared, tiny_standin, "grpo shared prefixes")


def test_grpo_shared_prefixes_leave_large_logits_to_trls_fused_head(tiny_standin, smoke_config, tmp_path, monkeypatch):
    """Completion logits above SHARED_LOGITS_MAX (a paper-sized vocabulary) keep TRL's fused LM head, which never
    holds them: no shared forward, and the run is the one without sharing."""
    monkeypatch.setattr(grpo, "SHARED_LOGITS_MAX", 1)
    settings = _settings(smoke_config, "grpo")
    plain = _train(settings, tiny_standin, tmp_path / "o", shortcuts=True, cls_extra=ROWS_ONLY)
    capped = _train(settings, tiny_standin, tmp_path / "f", shortcuts=True)
    assert capped[0].prefix_forwards == 0
    _same_run(plain, capped, ("reward", "loss", "grad_norm", "completion_length"))


def test_generation_logps_equal_trls_forward_also_with_sampling_processors(tiny_standin, smoke_config, tmp_path):
    """The log-probs recorded while sampling are log_softmax(logits / T) of the raw logits, what TRL's
    forward computes: equal to it, also when top-k / top-p / a repetition penalty shape the sampling."""
    diffs = []

    def compare(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, **kw):
        kept = self._rollout_logps
        out = SchedGRPOTrainer._get_per_token_logps_and_entropies(
            self, model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size, **kw
        )
        if kept is not None and not torch.is_grad_enabled():
            trl = super(SchedGRPOTrainer, self)._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size, **kw
            )
            diffs.append(float((out[0] - trl[0]).abs().max()))
        return out

    for i, sampler in enumerate(({}, {"top_k": 5, "top_p": 0.9, "repetition_penalty": 1.3, "temperature": 0.7})):
        settings = _settings(smoke_config, "grpo", temperature=sampler.pop("temperature", None))
        settings = settings.replace(steps=1, method_settings={**settings.method_settings, **sampler})
        spy = {"_get_per_token_logps_and_entropies": compare}
        trainer, _, _ = _train(settings, tiny_standin, tmp_path / str(i), True, spy)
        assert trainer.generation_config.top_k == sampler.get("top_k", 0) or not sampler
        assert len(diffs) == i + 1 and diffs[-1] < 1e-5, diffs


def test_grpo_shortcuts_switch_off_where_not_exact(tiny_standin, smoke_config, tmp_path, monkeypatch):
    """KL anchor (beta > 0): every row has a KL term, so no row is skipped (the old log-probs still come
    from generate); the run equals TRL's own. The conditions of each shortcut, one by one."""
    settings = _settings(smoke_config, "grpo", kl_beta=0.1)
    settings = settings.replace(steps=3)
    original = _train(settings, tiny_standin, tmp_path / "o", shortcuts=False)
    rows = _rows_spy(monkeypatch)
    fast = _train(settings, tiny_standin, tmp_path / "f", shortcuts=True, cls_extra=ROWS_ONLY)
    assert rows == []
    _same_run(original, fast, ("reward", "loss", "grad_norm", "kl"))

    trainer = fast[0]
    batch = {
        "prompt_ids": torch.zeros(2, 1, dtype=torch.long),
        "prompt_mask": torch.ones(2, 1, dtype=torch.long),
        "completion_ids": torch.zeros(2, 2, dtype=torch.long),
        "completion_mask": torch.ones(2, 2, dtype=torch.long),
        "advantages": torch.tensor([0.0, 1.0]),
        "num_items_in_batch": torch.tensor(4),
    }
    assert trainer.beta > 0 and not trainer.zero_advantage_rows_skippable(batch)
    trainer.beta = 0.0
    assert trainer.zero_advantage_rows_skippable(batch) and trainer.generation_logps_usable()
    for attr, value in (
        ("loss_type", "bnpo"),
        ("loss_type", "dapo"),
        ("top_entropy_quantile", 0.5),
        ("_entropy_bonus_enabled", True),
        ("aux_loss_enabled", True),
        ("_dropout_free", False),
        ("shortcuts", False),
    ):
        old = getattr(trainer, attr)
        setattr(trainer, attr, value)
        assert not trainer.zero_advantage_rows_skippable(batch), attr
        setattr(trainer, attr, old)
    assert not trainer.zero_advantage_rows_skippable({**batch, "pixel_values": torch.zeros(2, 3)})
    assert not trainer.zero_advantage_rows_skippable({**batch, "advantages": torch.zeros(2, 2)})
    for attr, value in (("use_vllm", True), ("tools", [print]), ("_dropout_free", False), ("shortcuts", False)):
        old = getattr(trainer, attr)
        setattr(trainer, attr, value)
        assert not trainer.generation_logps_usable(), attr
        setattr(trainer, attr, old)
    assert not trainer.generation_logps_usable(images=[None])
    trainer.args.bf16 = True
    assert not trainer.generation_logps_usable()
    trainer.args.bf16 = False
    trainer.args.gradient_accumulation_steps = trainer.args.steps_per_generation  # TRL computes none
    assert not trainer.generation_logps_usable()


# ----------------------------------------------------------------------------------------------
# SDPO


SDPO_KEYS = ("reward", "loss", "grad_norm", "distill_token_fraction", "distill_sample_fraction", "distillation_loss")


@pytest.mark.parametrize(
    "knobs, extra",
    [
        ({}, {}),
        ({"mask_prob": 0.3, "confidence_threshold": 0.0058}, {"confidence_kept_fraction": True}),
    ],
    ids=["sdpo0", "sdpo0+mask+confidence"],
)
def test_sdpo_distils_only_demonstrated_rows_exactly(tiny_standin, smoke_config, tmp_path, monkeypatch, knobs, extra):
    """SDPO_0: only rows with a demonstration go through the student and teacher forwards; token masking
    draws the same masks over the whole batch and the confidence filter stays exact; rewards, losses, the
    distilled-token fraction, the filter's kept share and the weights as TRL's own."""
    settings = _settings(smoke_config, "sdpo", **knobs)
    assert settings.method_settings["distillation_weight"] == 1.0
    original = _train(settings, tiny_standin, tmp_path / "o", shortcuts=False)
    rows = _rows_spy(monkeypatch)
    fast = _train(settings, tiny_standin, tmp_path / "f", shortcuts=True, cls_extra=ROWS_ONLY)
    assert rows and sum(k for k, _ in rows) < sum(n for _, n in rows)
    assert any(k > 0 for k, _ in rows)  # and some were distilled
    _same_run(original, fast, SDPO_KEYS + tuple(extra))
    if knobs:
        fractions = [r["distill_token_fraction"] for r in fast[1]]
        assert all(0 < f < 1 for f in fractions)
        kept = [r["confidence_kept_fraction"] for r in fast[1]]
        assert all(0 < k < 1 for k in kept), kept


@pytest.mark.parametrize("knobs", [{"distillation_weight": 0.5}, {"kl_beta": 0.1}], ids=["hybrid", "kl"])
def test_sdpo_row_selection_is_off_when_every_row_counts(tiny_standin, smoke_config, tmp_path, monkeypatch, knobs):
    """Hybrid (a policy term over every row) and the KL anchor (a KL term over every row): the unchanged
    path, equal to the original."""
    settings = _settings(smoke_config, "sdpo", **knobs)
    settings = settings.replace(steps=3)
    original = _train(settings, tiny_standin, tmp_path / "o", shortcuts=False)
    rows = _rows_spy(monkeypatch)
    fast = _train(settings, tiny_standin, tmp_path / "f", shortcuts=True, cls_extra=ROWS_ONLY)
    assert rows == []
    keys = ("reward", "loss", "grad_norm", "distill_token_fraction") + (("kl",) if "kl_beta" in knobs else ())
    _same_run(original, fast, keys, weight_atol=0.0)
    trainer = fast[0]
    batch = {"completion_ids": torch.zeros(2, 1), "self_distillation_mask": torch.tensor([1.0, 0.0])}
    assert trainer.distilled_rows(batch) is None


def test_sdpo_distilled_rows_conditions(tiny_standin, smoke_config, tmp_path):
    settings = _settings(smoke_config, "sdpo")
    settings = settings.replace(steps=1)
    trainer, _, _ = _train(settings, tiny_standin, tmp_path / "t", shortcuts=True)
    batch = {
        "completion_ids": torch.zeros(3, 1, dtype=torch.long),
        "completion_mask": torch.ones(3, 1, dtype=torch.long),
        "self_distillation_mask": torch.tensor([1.0, 0.0, 1.0]),
    }
    assert trainer.distilled_rows(batch).tolist() == [0, 2]
    assert trainer.distilled_rows({**batch, "self_distillation_mask": torch.ones(3)}) is None  # nothing to skip
    assert trainer.distilled_rows({k: v for k, v in batch.items() if k != "self_distillation_mask"}) is None
    assert trainer.distilled_rows({**batch, "something_new": torch.zeros(3)}) is None
    for attr, value in (("use_teacher_server", True), ("_dropout_free", False), ("shortcuts", False)):
        old = getattr(trainer, attr)
        setattr(trainer, attr, value)
        assert trainer.distilled_rows(batch) is None, attr
        setattr(trainer, attr, old)
    trainer.args.distillation_weight = 0.5
    assert trainer.distilled_rows(batch) is None
    trainer.args.distillation_weight = 1.0
    trainer.ref_model = torch.nn.Linear(1, 1)
    assert trainer.distilled_rows(batch) is None


def test_token_masks_are_drawn_over_the_whole_batch(tiny_standin, smoke_config, tmp_path):
    """The keep mask a row gets does not depend on which rows go through the forwards."""
    settings = _settings(smoke_config, "sdpo", mask_prob=0.5)
    settings = settings.replace(steps=1)
    trainer, _, _ = _train(settings, tiny_standin, tmp_path / "t", shortcuts=True)
    full = trainer.token_keep((6, 5))
    assert torch.equal(full, trainer.token_keep((6, 5)))
    batch = {
        "completion_ids": torch.ones(6, 5, dtype=torch.long),
        "completion_mask": torch.ones(6, 5, dtype=torch.long),
        "token_keep": full,
    }
    sub = select_rows(batch, torch.tensor([1, 4]))
    assert torch.equal(sub["token_keep"], full[[1, 4]])


# ----------------------------------------------------------------------------------------------
# batch selection and the code reward


def test_select_rows_cuts_padding_only():
    batch = {
        "prompt_ids": torch.tensor([[0, 3], [3, 3], [0, 0]]),
        "completion_ids": torch.tensor([[5, 6, 0, 0], [7, 0, 0, 0], [8, 9, 9, 0]]),
        "completion_mask": torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]]),
        "teacher_input_ids": torch.tensor([[1, 2, 5, 6, 0, 0], [1, 3, 7, 0, 0, 0], [4, 4, 8, 9, 9, 0]]),
        "advantages": torch.tensor([0.5, -0.5, 0.0]),
        "num_items_in_batch": torch.tensor(6),
    }
    sub = select_rows(batch, torch.tensor([0, 1]))
    assert sub["prompt_ids"].tolist() == [[0, 3], [3, 3]]  # the prompt keeps its left padding
    assert sub["completion_ids"].tolist() == [[5, 6], [7, 0]]
    assert sub["teacher_input_ids"].tolist() == [[1, 2, 5, 6], [1, 3, 7, 0]]
    assert sub["advantages"].tolist() == [0.5, -0.5] and int(sub["num_items_in_batch"]) == 6
    with pytest.raises(ValueError, match="unknown"):
        select_rows({**batch, "pixel_values": torch.zeros(3, 2)}, torch.tensor([0]))


def test_identical_programs_run_once_per_code_reward_call(monkeypatch):
    """Samples of a group that wrote the same code (with the same tests) make one sandbox program;
    every copy gets its result, which is what each copy would have scored on its own."""
    from sdpocl.rewards import sandbox

    ok = "```python\ndef f(x):\n    return x + 1\n```"
    wrong = "```python\ndef f(x):\n    return x\n```"
    tests = json.dumps(["assert f(1) == 2", "assert f(2) == 3"])
    other_tests = json.dumps(["assert f(1) == 1"])
    completions = [ok, wrong, ok, "no code", wrong, ok, ok, wrong]
    columns = [tests, tests, tests, tests, other_tests, tests, other_tests, tests]
    expected = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    runs = []
    orig = sandbox.run_batch

    def spy(programs, **kw):
        runs.append(len(programs))
        return orig(programs, **kw)

    monkeypatch.setattr(sandbox, "run_batch", spy)
    reward = code_rewards.make_code_reward(timeout_s=5.0, memory_mb=256)
    assert reward(completions, tests=columns) == expected
    assert runs == [4]  # (ok, tests), (wrong, tests), (wrong, other), (ok, other); 7 programs before
    one_by_one = [reward([c], tests=[t])[0] for c, t in zip(completions, columns)]
    assert one_by_one == expected


@pytest.mark.parametrize("knobs", [{}, {"kl_beta": 0.1}], ids=["sdpo0", "kl"])
def test_sdpo_shared_prefixes_train_the_same_model(tiny_standin, smoke_config, tmp_path, knobs):
    """Each distinct (re-)prompt forwarded once (:mod:`sdpocl.train.prefix`) for the student, the teacher and
    the KL reference: the first step's gradient norm equal to float rounding, every step's log to 1e-5, and
    the update vector after three steps to 1e-2 relative. (Adam's first steps divide each gradient by its own
    size, so rounding in near-zero coordinates grows: measured 1e-5 without and 1.3e-3 with the KL term,
    whose gradients are ~100x smaller here; a wrong mask or position moves the first step's loss and
    gradient by orders more.)"""
    settings = _settings(smoke_config, "sdpo", **knobs)
    plain = _train(settings, tiny_standin, tmp_path / "o", shortcuts=True, cls_extra=ROWS_ONLY)
    shared = _train(settings, tiny_standin, tmp_path / "f", shortcuts=True)
    assert plain[0].prefix_forwards == 0
    assert shared[0].prefix_forwards >= 2 * 3  # student and teacher, every step (and the reference with KL)
    keys = SDPO_KEYS + (("kl",) if knobs else ())
    _same_run(plain, shared, keys, weight_atol=float("inf"))
    assert shared[1][0]["grad_norm"] == pytest.approx(plain[1][0]["grad_norm"], rel=1e-6)
    _same_update(plain, shared, tiny_standin, "shared prefixes")


def _same_update(plain, shared, tiny_standin, label: str) -> None:
    """The two runs' updates from the parent weights agree to 1e-2 relative (and the update is not tiny)."""
    parent = _parent_weights(tiny_standin)
    d_plain = torch.cat([(plain[2][k] - parent[k]).flatten() for k in parent])
    d_shared = torch.cat([(shared[2][k] - parent[k]).flatten() for k in parent])
    assert d_plain.norm() > 1e-2
    rel = float((d_shared - d_plain).norm() / d_plain.norm())
    print(f"[{label}] update {float(d_plain.norm()):.3e}, relative difference {rel:.2e}")
    assert rel <= 1e-2, rel


def _parent_weights(tiny_standin) -> dict:
    from sdpocl.train.weights import load_tensors

    return {k: v.float() for k, v in load_tensors(tiny_standin[0]).items()}
