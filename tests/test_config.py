"""Config validation: every bad input stops with one message naming the key."""

from pathlib import Path

import pytest

from sdpocl.config import (
    ConfigError,
    chains_for,
    coerce_overrides,
    expand_runs,
    load_config,
    stage_settings,
    train_size_for,
    validate_config,
)
from sdpocl.plot.style import method_styles

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "name", ["config.yaml", "tiny-full.yaml", "tiny-seeds.yaml", "tiny-collapse.yaml", "smoke.yaml", "paper.yaml"]
)
def test_shipped_configs_validate(name):
    config = load_config(ROOT / "config" / name)
    assert expand_runs(config)


def test_the_default_grid_is_the_headline_and_tiny_full_adds_the_rest():
    """config/config.yaml runs the paper's headline methods (GRPO, SDPO_0, SDPO_5%, StableSDPO chains);
    config/tiny-full.yaml is the same preset with every other run of the grid: nothing but the runs differ."""
    default, full = load_config(ROOT / "config" / "config.yaml"), load_config(ROOT / "config" / "tiny-full.yaml")
    assert {k: v for k, v in default.items() if k not in ("runs", "single_domain_runs")} == {
        k: v for k, v in full.items() if k not in ("runs", "single_domain_runs")
    }
    labels = [run.label for run in expand_runs(default)]
    assert labels == ["GRPO", "SDPO_0", "SDPO_5%", "StableSDPO"]
    assert default["single_domain_runs"] == []
    full_runs = {run.name: run for run in expand_runs(full)}
    assert {run.name for run in expand_runs(default)} < set(full_runs)
    assert any(r.cot for r in full_runs.values()) and any(r.mask_prob for r in full_runs.values())
    assert full["single_domain_runs"]


def test_the_three_seed_config_is_the_default_on_the_report_seeds_with_the_headline_pair():
    """config/tiny-seeds.yaml: the default's settings, GRPO and SDPO_0 on seeds 3-5 (the seeds no default
    was tuned on), in a results directory of its own so the default's tables are not overwritten."""
    default, seeds = load_config(ROOT / "config" / "config.yaml"), load_config(ROOT / "config" / "tiny-seeds.yaml")
    own = ("runs", "single_domain_runs", "seeds", "results")
    assert {k: v for k, v in default.items() if k not in own} == {k: v for k, v in seeds.items() if k not in own}
    assert seeds["seeds"] == [3, 4, 5] and seeds["results"] != default["results"]
    default_runs = {run.name: run for run in expand_runs(default)}
    assert {(r.label, r.seed) for r in expand_runs(seeds)} == {
        (label, seed) for label in ("GRPO", "SDPO_0") for seed in (3, 4, 5)
    }

    def spec(run):  # a run as the default grid has it, seed and name aside
        return {k: v for k, v in run.to_dict().items() if k not in ("name", "seed")}

    for run in expand_runs(seeds):
        assert spec(run) == spec(default_runs[run.name.rsplit("_s", 1)[0] + "_s0"]), run.name


def test_the_collapse_config_is_the_default_at_a_higher_lr_with_grpo_and_five_teachers():
    """config/tiny-collapse.yaml: the default's settings but for the lr (1e-4) and the rollout steps (the paper's
    50 / 50 / - / 20, TOOLUSE 150), GRPO at that lr and the SDPO teachers frozen, EMA 5%, EMA 20% and StableSDPO
    (K 20, K 60) on the report seeds, in a results directory of its own, each in its own colour
    (docs/experiments/2026-12-07-goals-teacher-rate-lr-1e-4.md)."""
    default, collapse = (
        load_config(ROOT / "config" / "config.yaml"),
        load_config(ROOT / "config" / "tiny-collapse.yaml"),
    )
    own = ("runs", "single_domain_runs", "seeds", "results", "train")
    assert {k: v for k, v in default.items() if k not in own} == {k: v for k, v in collapse.items() if k not in own}
    changed = {"lr": 1.0e-4, "steps": {"math": 50, "science": 50, "tooluse": 150, "code": 20}}
    assert {k: v for k, v in default["train"].items() if k not in changed} == {
        k: v for k, v in collapse["train"].items() if k not in changed
    }
    assert {k: collapse["train"][k] for k in changed} == changed
    assert collapse["seeds"] == [3, 4, 5] and collapse["results"] != default["results"]
    assert collapse["single_domain_runs"] == []
    labels = {run.label for run in expand_runs(collapse)}
    assert labels == {"GRPO", "SDPO_0", "SDPO_5%", "SDPO_20%", "StableSDPO", "StableSDPO K=60"}
    assert all("lr" not in run for run in collapse["runs"]), "GRPO and SDPO share the lr, as in the paper"
    colours = [colour for colour, _ in method_styles(labels).values()]
    assert len(set(colours)) == len(labels), "two of the collapse config's runs share a colour in the figures"


def test_defaults_are_filled(smoke_config):
    config = validate_config(smoke_config)
    assert config["train"]["weight_decay"] == 0.01
    assert config["train"]["max_grad_norm"] == 1.0
    assert config["seeds"] == [0]
    # GPUs per job: null = the preset's (sdpocl.resources.gpus_per_job): tiny 0, paper 4 and 1
    assert config["train"]["gpus_per_job"] is None and config["evaluate"]["gpus_per_job"] is None
    paper = load_config(ROOT / "config" / "paper.yaml")
    assert (paper["train"]["gpus_per_job"], paper["evaluate"]["gpus_per_job"]) == (4, 1)


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda c: c["runs"].append({"method": "ppo"}), "runs[5].method"),
        (lambda c: c.update(domains=["math", "biology"]), "domains[1]"),
        (lambda c: c["runs"][1].update(alpha=1.5), "runs[1].alpha"),
        (lambda c: c["runs"][1].update(alpha=-0.1), "runs[1].alpha"),
        (lambda c: c["train"].update(lr="1e-5"), "train.lr"),
        (lambda c: c["train"].update(prompts_per_step="eight"), "train.prompts_per_step"),
        (lambda c: c["train"].update(colour="red"), "train"),
        (lambda c: c["runs"][0].update(alpha=0.1), "runs[0].alpha"),
        (lambda c: c["runs"][1].pop("alpha"), "runs[1].alpha"),
        (lambda c: c["train"]["steps"].pop("code"), "train.steps"),
        (lambda c: c.update(single_domain_runs=["nope"]), "single_domain_runs"),
        (lambda c: c["runs"].append({"method": "sdpo", "alpha": 0.0}), "runs"),
        (lambda c: c["train"].update(gpus_per_job=-1), "train.gpus_per_job"),
        (lambda c: c.setdefault("evaluate", {}).update(gpus_per_job=1.5), "evaluate.gpus_per_job"),
    ],
)
def test_bad_values_name_the_key(smoke_config, mutate, key):
    mutate(smoke_config)
    with pytest.raises(ConfigError) as err:
        validate_config(smoke_config)
    assert f"'{key}'" in str(err.value)


def test_yaml_exponent_string_gets_a_hint(tmp_path):
    text = (ROOT / "config" / "smoke.yaml").read_text().replace("lr: 1.0e-4", "lr: 1e-4")
    assert "lr: 1e-4" in text
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"train\.lr.*1\.0e-5"):
        load_config(path)


def test_grid_shape(smoke_config):
    config = validate_config(smoke_config)
    runs = expand_runs(config)
    assert [r.name for r in runs] == [
        "grpo_s0",
        "sdpo_a0_s0",
        "sdpo_a0.05_s0",
        "stable-sdpo_a0.05_s0",
        "sdpo-cot_a0_s0",
    ]
    assert [r.label for r in runs] == ["GRPO", "SDPO_0", "SDPO_5%", "StableSDPO", "SDPO_0^CoT"]
    n_stages = sum(len(chains_for(config, r)) for r in runs)
    assert n_stages == 5 * 4 + 2 * 3


def test_seeds_are_an_axis(smoke_config):
    smoke_config["seeds"] = [0, 1, 2]
    config = validate_config(smoke_config)
    names = [r.name for r in expand_runs(config)]
    assert len(names) == 15 and "grpo_s2" in names


def test_stage_settings_are_key_order_stable(smoke_config):
    config = validate_config(smoke_config)
    run = expand_runs(config)[1]
    a = stage_settings(config, run, ("math", "science")).to_json()
    reordered = dict(reversed(list(smoke_config["train"].items())))
    smoke_config["train"] = reordered
    b = stage_settings(validate_config(smoke_config), run, ("math", "science")).to_json()
    assert a == b


def test_stage_settings_change_only_for_the_edited_run(smoke_config):
    config = validate_config(smoke_config)
    before = {r.name: stage_settings(config, r, ("math",)).to_json() for r in expand_runs(config)}
    smoke_config["runs"][0]["lr"] = 3.0e-4
    config = validate_config(smoke_config)
    after = {r.name: stage_settings(config, r, ("math",)).to_json() for r in expand_runs(config)}
    changed = [name for name in before if before[name] != after[name]]
    assert changed == ["grpo_s0"]


def test_reward_limits_reach_only_their_domains_stages(smoke_config):
    """rewards.* is one block for training and evaluation; a stage holds its domain's keys only."""
    config = validate_config(smoke_config)
    assert config["rewards"] == {"code_timeout_s": 1.0, "code_memory_mb": 1024, "math_timeout_s": 5.0}
    run = expand_runs(config)[0]
    assert stage_settings(config, run, ("math", "science", "tooluse", "code")).rewards == {
        "code_timeout_s": 1.0,
        "code_memory_mb": 1024,
    }
    assert stage_settings(config, run, ("math",)).rewards == {"math_timeout_s": 5.0}
    assert stage_settings(config, run, ("math", "science")).rewards == {}
    before = {d: stage_settings(config, run, (d,)).to_json() for d in ("math", "science", "code")}
    smoke_config["rewards"]["code_memory_mb"] = 2048
    config = validate_config(smoke_config)
    after = {d: stage_settings(config, run, (d,)).to_json() for d in ("math", "science", "code")}
    assert [d for d in before if before[d] != after[d]] == ["code"]


def test_old_train_code_timeout_names_its_new_place(smoke_config):
    smoke_config["train"]["code_timeout_s"] = 1.0
    with pytest.raises(ConfigError, match=r"train\.code_timeout_s.*rewards\.code_timeout_s"):
        validate_config(smoke_config)


def test_command_line_overrides_get_the_schema_types(smoke_config):
    """`snakemake --config seeds=[0,1,2]` hands list items (and values in mappings) over as strings."""
    overrides = {
        "seeds": ["0", "1", "2"],
        "train": {"lr": "1e-5", "steps": {"math": "3"}, "stop_on_collapse": "true"},
        "evaluate": {"n_prompts": "null"},
        "runs": [{"method": "sdpo", "alpha": "0.05", "name": "007"}],
    }
    smoke_config.update(seeds=overrides["seeds"], runs=overrides["runs"], single_domain_runs=[])
    smoke_config["train"].update(lr="1e-5", stop_on_collapse="true")
    smoke_config["train"]["steps"]["math"] = "3"
    smoke_config.setdefault("evaluate", {})["n_prompts"] = "null"
    coerce_overrides(smoke_config, overrides)
    config = validate_config(smoke_config)
    assert config["seeds"] == [0, 1, 2]
    assert config["train"]["lr"] == 1e-5 and config["train"]["steps"]["math"] == 3
    assert config["train"]["stop_on_collapse"] is True and config["evaluate"]["n_prompts"] is None
    assert config["runs"] == [{"method": "sdpo", "alpha": 0.05, "name": "007"}]  # a name stays a string


def test_values_from_a_file_are_not_coerced(smoke_config):
    """Only what came from --config is coerced: a YAML `1e-5` in a file is still refused."""
    smoke_config["train"]["lr"] = "1e-5"
    coerce_overrides(smoke_config, {"seeds": [0]})
    with pytest.raises(ConfigError, match=r"train\.lr"):
        validate_config(smoke_config)


@pytest.mark.parametrize(
    "value",
    [None, 1, 32, {"domains": 100, "ood": 32}, {"domains": None, "ood": 8}, {"domains": 100, "ood": None}],
)
def test_n_prompts_is_a_limit_or_one_per_kind(smoke_config, value):
    """evaluate.n_prompts: an integer >= 1 or null for every benchmark, or {domains: N, ood: M}."""
    smoke_config.setdefault("evaluate", {})["n_prompts"] = value
    assert validate_config(smoke_config)["evaluate"]["n_prompts"] == value


@pytest.mark.parametrize(
    "value, key, says",
    [
        (0, "evaluate.n_prompts", "less than the minimum of 1"),
        ({"domains": 0, "ood": 32}, "evaluate.n_prompts.domains", "less than the minimum of 1"),
        ({"domains": 100, "ood": 0}, "evaluate.n_prompts.ood", "less than the minimum of 1"),
        ({"domains": 100, "ood": 32, "math": 5}, "evaluate.n_prompts", "'math' was unexpected"),
        ({"domain": 100, "ood": 32}, "evaluate.n_prompts", "'domain' was unexpected"),
        ({"domains": 100}, "evaluate.n_prompts", "'ood' is a required property"),
        ({"domains": 2.5, "ood": 32}, "evaluate.n_prompts.domains", "not of type"),
        ("all", "evaluate.n_prompts", "not of type"),
    ],
)
def test_bad_n_prompts_names_the_key(smoke_config, value, key, says):
    smoke_config.setdefault("evaluate", {})["n_prompts"] = value
    with pytest.raises(ConfigError) as err:
        validate_config(smoke_config)
    assert f"config error at '{key}'" in str(err.value) and says in str(err.value)


def test_n_prompts_per_kind_from_the_command_line(smoke_config):
    """`--config 'evaluate={n_prompts: {domains: 100, ood: null}}'` hands the values over as strings."""
    overrides = {"evaluate": {"n_prompts": {"domains": "100", "ood": "null"}}}
    smoke_config.setdefault("evaluate", {})["n_prompts"] = {"domains": "100", "ood": "null"}
    coerce_overrides(smoke_config, overrides)
    assert validate_config(smoke_config)["evaluate"]["n_prompts"] == {"domains": 100, "ood": None}


def test_train_size_is_one_number_or_one_per_domain(smoke_config):
    """data.train_size: an integer for every domain, or a mapping naming every domain of the run."""
    assert train_size_for(validate_config(smoke_config), "code") == smoke_config["data"]["train_size"]
    sizes = {d: 100 * (i + 1) for i, d in enumerate(smoke_config["domains"])}
    smoke_config["data"]["train_size"] = dict(sizes)
    config = validate_config(smoke_config)
    assert {d: train_size_for(config, d) for d in config["domains"]} == sizes


@pytest.mark.parametrize(
    "value, key, says",
    [
        ({"math": 2400}, "data.train_size", "no size for domain(s)"),
        ({"math": 0, "science": 5, "tooluse": 5, "code": 5}, "data.train_size.math", "less than the minimum of 1"),
        ({"math": 5, "science": 5, "tooluse": 5, "code": 5, "logic": 5}, "data.train_size", "'logic' does not match"),
        (0, "data.train_size", "less than the minimum of 1"),
    ],
)
def test_bad_train_size_names_the_key(smoke_config, value, key, says):
    smoke_config["data"]["train_size"] = value
    with pytest.raises(ConfigError) as err:
        validate_config(smoke_config)
    assert f"config error at '{key}'" in str(err.value) and says in str(err.value)


def test_train_size_per_domain_from_the_command_line(smoke_config):
    """`--config 'data={train_size: {math: 2400, ...}}'` hands the sizes over as strings."""
    sizes = {d: "64" for d in smoke_config["domains"]} | {"math": "2400"}
    smoke_config["data"]["train_size"] = dict(sizes)
    coerce_overrides(smoke_config, {"data": {"train_size": dict(sizes)}})
    assert train_size_for(validate_config(smoke_config), "math") == 2400


@pytest.mark.parametrize("extra", [[], ["--no-job-server", "--core-runs"]])
def test_the_gpu_rehearsal_config_validates(tmp_path, extra):
    """bench/gpu_rehearsal.sh runs config/rehearsal.yaml on one GPU through a derived config (HF backend, one
    GPU per job, a stub embedding model): it must stay a valid config as the schema changes."""
    import subprocess
    import sys

    out = tmp_path / "gpu.yaml"
    args = ["config", "--results", str(tmp_path / "r"), "--base", "standin", "--embedder", "emb", "--out", str(out)]
    subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_rehearsal_tools.py"), *args, *extra], check=True)
    config = load_config(out)
    assert config["evaluate"]["backend"] == "hf" and config["train"]["gpus_per_job"] == 1
    assert config["job_server"] is not bool(extra)
    assert any(r.cot for r in expand_runs(config)) is not bool(extra)  # --core-runs: the headline four only


@pytest.mark.parametrize("full_runs", ["", "grpo,sdpo_a0"])
def test_the_gpu_tiny_grid_resolves_its_targets(tmp_path, full_runs):
    """bench/gpu_tiny_grid.sh (the default grid on seeds 3-5 on one GPU) as a dry run on a CPU: its derived config
    validates and Snakemake resolves its targets from a carried base, without building a base of its own;
    with FULL_RUNS the other runs stop after their first stage."""
    import os
    import subprocess
    import sys

    results = tmp_path / "results-gpu"
    (results / "base" / "model").mkdir(parents=True)
    (results / "base" / "model" / "model.safetensors").write_bytes(b"")  # a dry run never reads it
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "OUT": str(tmp_path / "out"),
        "SITE": str(tmp_path / "site"),
        "SKIP_INSTALL": "1",
        "DRY_RUN": "1",
        "GRID_RESULTS": str(results),
        "FULL_RUNS": full_runs,
        "BUDGET": "300",
    }
    env.pop("SDPOCL_JOB_SERVER", None)
    run = subprocess.run(
        ["bash", "bench/gpu_tiny_grid.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=280
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    stats = dict(
        line.split()
        for line in run.stdout.split("Job stats:")[1].split("\n\n")[0].splitlines()
        if len(line.split()) == 2 and line.split()[1].isdigit()
    )
    assert "build_base" not in stats  # the carried base is used
    # 4 runs x 3 seeds: every stage of every chain, or 2 runs' chains and the others' first stage
    assert int(stats["train_stage"]) == (48 if not full_runs else 2 * 3 * 4 + 2 * 3)
    assert int(stats["evaluate_base"]) == 3
    assert ("aggregate_eval" in stats) is not bool(full_runs)
