"""sdpocl.plot.figures on synthetic tables in the exact sdpocl.plot.tables schemas: every figure is written, styles
are stable, the compressive axis is invertible, and missing data still give a figure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sdpocl.plot import figures as plots
from sdpocl.plot import tables

DOMAINS = ["math", "science", "tooluse", "code"]
STEPS = {"math": 50, "science": 50, "tooluse": 50, "code": 20}
IN_DOMAIN = {
    "aime24": "math",
    "aime25": "math",
    "sciknoweval": "science",
    "toolalpaca": "tooluse",
    "code_heldout": "code",
}
OOD = {
    "math500": "math",
    "gpqa": "science",
    "bfcl": "tooluse",
    "lcb": "code",
    "zebralogic": "math",
    "mmlu_redux": "science",
}
RUNS = [  # label, method, alpha, run stem, forgetting strength, collapses
    ("GRPO", "grpo", np.nan, "grpo", 0.2, False),
    ("SDPO_0", "sdpo", 0.0, "sdpo_a0", 0.6, False),
    ("SDPO_5%", "sdpo", 0.05, "sdpo_a0.05", 1.0, True),
    ("StableSDPO", "stable_sdpo", 0.05, "stable-sdpo_a0.05", 0.5, False),
    ("SDPO_0^CoT", "sdpo", 0.0, "sdpo-cot_a0", 0.7, False),
]
SINGLE = ["SDPO_0", "SDPO_5%"]
SEEDS = [0, 1]


def _identity(label, method, alpha, stem, seed, chain, stage, continual, single):
    if label == "Base":
        return {
            "run": "base",
            "label": "Base",
            "method": "base",
            "alpha": np.nan,
            "seed": np.nan,
            "chain": "",
            "stage": 0,
            "domain": "",
            "continual": True,
            "single_domain": False,
        }
    return {
        "run": f"{stem}_s{seed}",
        "label": label,
        "method": method,
        "alpha": alpha,
        "seed": seed,
        "chain": "/".join(chain),
        "stage": stage,
        "domain": chain[-1],
        "continual": continual,
        "single_domain": single,
    }


def _chains():
    """(chain, stage, continual, single_domain, runs) of the grid."""
    out = [(DOMAINS[:s], s, True, s == 1, [r for r in RUNS]) for s in range(1, 5)]
    out += [([d], 1, False, True, [r for r in RUNS if r[0] in SINGLE]) for d in DOMAINS[1:]]
    return out


def synthetic_tables(seed: int = 0) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    benches = {**{b: ("in-domain", d) for b, d in IN_DOMAIN.items()}, **{b: ("ood", d) for b, d in OOD.items()}}
    base_acc = {b: rng.uniform(0.08, 0.5) for b in benches}

    def artifacts(level):
        return {
            "boxed_per_response": 1 + 2.5 * level + rng.uniform(0, 0.2),
            "multi_boxed_share": min(1.0, 0.05 + 0.8 * level),
            "ngram_repeat": min(1.0, 0.02 + 0.5 * level),
            "truncation_rate": min(1.0, 0.03 + 0.7 * level),
            "mean_length": 300 + 900 * level,
        }

    ev = []
    for b, (kind, bd) in benches.items():
        ev.append(
            {
                **_identity("Base", *[None] * 8),
                "checkpoint": "final",
                "benchmark": b,
                "kind": kind,
                "bench_domain": bd,
                "acc": base_acc[b],
                "stderr": 0.02,
                "n_prompts": 32,
                "n_samples": 8,
                **artifacts(0.0),
                "base_acc": base_acc[b],
                "relperf": 0.0,
                "gain": 0.0,
                "forgetting": 0.0,
            }
        )
    for chain, stage, cont, single, runs in _chains():
        for label, method, alpha, stem, forget, collapse in runs:
            for s in SEEDS:
                level = (stage / 4) ** 2 if collapse and cont else 0.05 * stage
                for b, (kind, bd) in benches.items():
                    learned = bd in chain
                    rel = (60 if bd == chain[-1] else 20 if learned else -25 * forget * stage) + rng.normal(0, 8)
                    if collapse and cont and stage >= 3:
                        rel = -80 + rng.normal(0, 5)
                    if not cont:  # single-domain runs: gain near the trained domain, forgetting far from it
                        rel = (70 if bd == chain[-1] else -40 * forget) + rng.normal(0, 10)
                    acc = float(np.clip(base_acc[b] * (1 + rel / 100), 0, 1))
                    rel = 100 * (acc - base_acc[b]) / base_acc[b]
                    for ckpt in ("step-10", "final"):
                        ev.append(
                            {
                                **_identity(label, method, alpha, stem, s, chain, stage, cont, single),
                                "checkpoint": ckpt,
                                "benchmark": b,
                                "kind": kind,
                                "bench_domain": bd,
                                "acc": acc,
                                "stderr": 0.03,
                                "n_prompts": 32,
                                "n_samples": 8,
                                **artifacts(level),
                                "base_acc": base_acc[b],
                                "relperf": rel,
                                "gain": max(rel, 0),
                                "forgetting": max(-rel, 0),
                            }
                        )
    drift, responses = [], []
    point_index = 0
    for stage, dom in enumerate(DOMAINS, 1):
        steps = [*range(10, STEPS[dom] + 1, 10)]
        for step in steps:
            point_index += 1
            for label, method, alpha, stem, forget, _ in RUNS:
                for s in SEEDS:
                    scale = point_index * (1 + forget) * (1 + 0.05 * s)
                    for mtype in ("all", "q_proj"):
                        row = {
                            **_identity(label, method, alpha, stem, s, DOMAINS[:stage], stage, True, stage == 1),
                            "checkpoint": f"step-{step}",
                            "point": f"{dom}@{step}",
                            "point_index": point_index,
                            "matrix_type": mtype,
                        }
                        centre = {
                            "nss": 3e-6 * scale,
                            "max_pa_deg": 0.15 * scale,
                            "pm_overlap": 100 - 0.03 * scale,
                            "pm_update": 5 + 0.1 * scale,
                        }
                        for m, v in centre.items():
                            row[f"{m}_mean"] = v
                            row[f"{m}_median"] = v * 0.98
                            row[f"{m}_p10"] = v * 0.8 if m != "pm_overlap" else v - 0.3
                            row[f"{m}_p90"] = v * 1.2 if m != "pm_overlap" else min(100.0, v + 0.3)
                        drift.append(row)
        for label, method, alpha, stem, forget, _ in RUNS:
            for s in SEEDS:
                for b, (kind, _bd) in benches.items():
                    for doc in range(6):
                        responses.append(
                            {
                                **_identity(label, method, alpha, stem, s, DOMAINS[:stage], stage, True, stage == 1),
                                "benchmark": b,
                                "kind": kind,
                                "doc_id": doc,
                                "similarity": float(np.clip(95 - 6 * stage * forget + rng.normal(0, 6), 0, 100)),
                            }
                        )
    datasets = [(f"{d}_train", "train") for d in DOMAINS] + [(b, r) for b, (r, _) in benches.items()]
    centres = {name: rng.normal(0, 1, 2) for name, _ in datasets}
    mmd = [
        {
            "dataset_a": a,
            "role_a": ra,
            "dataset_b": b,
            "role_b": rb,
            "mmd": 0.0 if a == b else float(np.linalg.norm(centres[a] - centres[b]) ** 2 / 20),
            "bandwidth": 0.8,
        }
        for a, ra in datasets
        for b, rb in datasets
    ]
    tsne = [
        {
            "dataset": name,
            "role": role,
            "index": i,
            "x": centres[name][0] * 10 + rng.normal(),
            "y": centres[name][1] * 10 + rng.normal(),
        }
        for name, role in datasets
        for i in range(30)
    ]
    teachers = [
        ("Base", "base", np.nan, "base", 0.327),
        ("Frozen", "sdpo", 0.0, "sdpo_a0", 0.564),
        ("EMA 5%", "sdpo", 0.05, "sdpo_a0.05", 0.344),
        ("StableSDPO", "stable_sdpo", 0.05, "stable-sdpo_a0.05", 0.55),
    ]
    teacher = [
        {
            "teacher": t,
            "run": f"{stem}_s{s}",
            "method": meth,
            "alpha": a,
            "seed": s,
            "benchmark": "aime24",
            "acc": acc + rng.normal(0, 0.01),
            "stderr": 0.02,
        }
        for t, meth, a, stem, acc in teachers
        for s in SEEDS
    ]
    out = {
        "eval": ev,
        "drift_params": drift,
        "drift_responses": responses,
        "domain_mmd": mmd,
        "tsne": tsne,
        "teacher_stability": teacher,
    }
    return {name: pd.DataFrame(rows, columns=plots.TABLE_COLUMNS[name]) for name, rows in out.items()}


def write_tables(frames: dict[str, pd.DataFrame], directory) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, df in frames.items():
        df.to_csv(directory / f"{name}.csv", index=False)


STYLE = {
    "formats": ["png", "pdf"],
    "dpi": 60,
    "context": "paper",
    "font_scale": 1.0,
    "style": "whitegrid",
    "palette": "colorblind",
}


def assert_valid(paths, formats=("png", "pdf")):
    assert [p.suffix[1:] for p in paths] == list(formats)
    for p in paths:
        data = p.read_bytes()
        if p.suffix == ".png":
            assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, p
            import matplotlib.image as mpimg

            img = mpimg.imread(p)
            assert img.shape[0] > 100 and img.shape[1] > 100 and img[..., :3].std() > 0.02, p
        else:
            assert data[:5] == b"%PDF-" and b"%%EOF" in data[-64:] and len(data) > 2000, p


@pytest.fixture(scope="module")
def tables_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tables")
    write_tables(synthetic_tables(), directory)
    return directory


def test_synthetic_tables_follow_the_contracts():
    frames = synthetic_tables()
    assert list(frames["eval"].columns) == tables.EVAL_COLUMNS
    assert list(frames["drift_params"].columns) == tables.DRIFT_PARAM_COLUMNS
    assert set(plots.TABLE_COLUMNS) == {name for _, needs in plots.FIGURES.values() for name in needs}
    for name, df in frames.items():
        assert not df.empty and list(df.columns) == plots.TABLE_COLUMNS[name]


@pytest.mark.parametrize("name", list(plots.FIGURES))
def test_every_figure_from_csv_tables(name, tables_dir, tmp_path):
    paths = plots.make_figure(name, tables_dir, STYLE, tmp_path / "figures")
    assert paths == [tmp_path / "figures" / f"{name}.png", tmp_path / "figures" / f"{name}.pdf"]
    assert_valid(paths)


def test_unknown_figure_is_a_clear_error(tables_dir, tmp_path):
    with pytest.raises(ValueError, match="unknown figure 'nope'.*cl_performance"):
        plots.make_figure("nope", tables_dir, STYLE, tmp_path)


def test_method_styles_are_stable_across_subsets():
    full = plots.method_styles(["StableSDPO", "GRPO", "SDPO_0", "custom-x", "SDPO_5%", "SDPO_0^CoT", "Base"])
    for subset in (["SDPO_0"], ["custom-x", "SDPO_5%"], ["SDPO_0^CoT", "GRPO", "weird"]):
        part = plots.method_styles(subset)
        for label in subset:
            if label in full:
                assert part[label] == full[label], label
    assert list(full)[:6] == ["Base", "GRPO", "SDPO_0", "SDPO_5%", "StableSDPO", "SDPO_0^CoT"]
    canon = [full[x] for x in plots.CANONICAL_METHODS]
    assert len({c for c, _ in canon}) == len(canon) and len({m for _, m in canon}) == len(canon)
    assert plots.method_styles(["custom-x"])["custom-x"] == plots.method_styles(["zz", "custom-x"])["custom-x"]
    assert plots.method_styles(["GRPO"], "deep")["GRPO"][0] != full["GRPO"][0]  # the configured palette is used


@pytest.mark.parametrize(
    "label,expected",
    [
        ("GRPO", "GRPO"),
        ("SDPO_0", "SDPO$_0$"),
        ("SDPO_5%", r"SDPO$_{5\%}$"),
        ("SDPO_0^CoT", "SDPO$_0^{CoT}$"),
        ("StableSDPO", "StableSDPO"),
        ("SDPO_0+mask0.5", "SDPO$_0$+mask0.5"),
        ("GRPO (lr 1e-6)", "GRPO (lr 1e-6)"),
    ],
)
def test_pretty_labels_are_valid_mathtext(label, expected):
    from matplotlib.mathtext import MathTextParser

    assert plots.pretty_label(label) == expected
    MathTextParser("agg").parse(plots.pretty_label(label))


def test_compressive_scale_is_a_symmetric_inverse_pair():
    x = np.array([-1e5, -250.0, -3.2, -1e-3, 0.0, 1e-3, 0.5, 42.0, 1e5])
    np.testing.assert_allclose(plots.expand(plots.compress(x)), x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(plots.compress(plots.expand(plots.compress(x))), plots.compress(x), rtol=1e-12)
    np.testing.assert_allclose(plots.compress(-x), -plots.compress(x))
    np.testing.assert_allclose(plots.expand(-x[:4] / 1e3), -plots.expand(x[:4] / 1e3))
    assert np.all(np.diff(plots.compress(np.sort(x))) > 0)  # monotone
    assert plots.compress(1000.0) < 10 and plots.compress(0.0) == 0


def test_missing_methods_and_single_domain_rows_still_give_figures(tmp_path):
    frames = synthetic_tables(seed=1)
    ev = frames["eval"]
    frames["eval"] = ev[~ev["single_domain"].astype(bool) & (ev["label"] != "GRPO")]
    for name in ("drift_params", "drift_responses"):
        frames[name] = frames[name][frames[name]["label"].isin(["SDPO_5%"])]
    frames["teacher_stability"] = frames["teacher_stability"][frames["teacher_stability"]["seed"] == 0]
    style = {**STYLE, "formats": ["png"]}
    for name, (func, needs) in plots.FIGURES.items():
        assert_valid(func({t: frames[t] for t in needs}, style, tmp_path / name), ("png",))


def test_the_default_grid_draws_every_figure_from_its_headline_runs_only(tmp_path):
    """config/config.yaml runs the headline methods only, no variants, no single-domain runs beyond each
    chain's first stage: every figure of the default grid still renders from such tables."""
    from pathlib import Path

    from sdpocl.config import expand_runs, load_config

    config = load_config(Path(__file__).resolve().parents[1] / "config" / "config.yaml")
    headline = {run.label for run in expand_runs(config)} | {"Base"}
    assert not config["single_domain_runs"]
    frames = synthetic_tables(seed=2)
    for name, df in frames.items():
        if "label" in df:
            df = df[df["label"].isin(headline)]
        if "stage" in df and "single_domain" in df:  # a chain's first stage is its only single-domain stage
            df = df[~df["single_domain"].astype(bool) | (df["stage"] <= 1)]
        frames[name] = df
    assert set(frames["eval"]["label"]) == headline
    style = {**STYLE, "formats": ["png"]}
    for name, (func, needs) in plots.FIGURES.items():
        assert_valid(func({t: frames[t] for t in needs}, style, tmp_path / name), ("png",))


def test_teacher_stability_names_the_tables_samples_per_prompt(tmp_path, monkeypatch):
    """Table 1's figure says Acc@k with the k its table was scored with (the tiny preset's 3, the paper's 8)."""
    from sdpocl.plot import continual

    figures = []
    monkeypatch.setattr(continual, "save", lambda fig, stem, st: figures.append(fig) or [])
    teacher = synthetic_tables(seed=3)["teacher_stability"]
    for k in (3, 8):
        continual.plot_teacher_stability({"teacher_stability": teacher.assign(n_samples=k)}, STYLE, tmp_path / "t")
        assert figures[-1].axes[0].get_ylabel() == f"Acc@{k} (%)"
        assert f"Acc@{k} after the MATH stage" in figures[-1]._suptitle.get_text()
    continual.plot_teacher_stability({"teacher_stability": teacher}, STYLE, tmp_path / "t")  # no n_samples column
    assert figures[-1].axes[0].get_ylabel() == "Acc@k (%)"


def test_empty_or_absent_tables_give_a_no_data_figure(tmp_path):
    directory = tmp_path / "tables"
    write_tables(
        {name: pd.DataFrame(columns=cols) for name, cols in plots.TABLE_COLUMNS.items() if name != "tsne"}, directory
    )  # tsne.csv absent altogether
    (directory / "teacher_stability.csv").write_text("")  # a zero-byte file
    for name in plots.FIGURES:
        assert_valid(plots.make_figure(name, directory, {"formats": ["png"], "dpi": 50}, tmp_path / "out"), ("png",))


def test_every_figure_has_a_report_caption():
    report = plots.Path(__file__).resolve().parents[1] / "workflow" / "report"
    assert (report / "workflow.rst").is_file()
    for name in plots.FIGURES:
        text = (report / f"{name}.rst").read_text()
        assert "results/tables/" in text and 150 < len(text) < 1200, name
