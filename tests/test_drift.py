"""Invariants of sdpocl.drift.param_drift on synthetic matrices."""

import math

import pytest
import torch

from sdpocl.drift.params import param_drift, principal_mask


def matrix(m=64, n=48, seed=0, decay=0.9):
    """W0 = U diag(s) V^T with a known, well-separated spectrum."""
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(m, m, generator=g))
    v, _ = torch.linalg.qr(torch.randn(n, n, generator=g))
    s = torch.tensor([10.0 * decay**i for i in range(min(m, n))])
    return u, s, v, (u[:, : len(s)] * s) @ v[:, : len(s)].T


def test_identical_weights():
    _, _, _, w0 = matrix()
    d = param_drift(w0, w0.clone(), top_k=8)
    assert d["nss"] == pytest.approx(0.0, abs=1e-6)
    assert d["max_pa_deg"] == pytest.approx(0.0, abs=0.05)
    assert d["pm_overlap"] == 100.0
    assert d["n_updated"] == 0 and d["pm_update"] == 0.0


@pytest.mark.parametrize("scale", [1.5, 0.8, 1.01])
def test_rescaling_is_a_pure_spectral_shift(scale):
    _, _, _, w0 = matrix()
    d = param_drift(w0, scale * w0, top_k=8)
    assert d["nss"] == pytest.approx(abs(scale - 1), rel=1e-4)
    assert d["max_pa_deg"] == pytest.approx(0.0, abs=0.05)
    assert d["pm_overlap"] == 100.0


@pytest.mark.parametrize("degrees", [1.0, 5.0, 30.0])
def test_rotation_out_of_the_top_k_subspace_gives_that_angle(degrees):
    u, s, v, w0 = matrix()
    k = 8
    theta = math.radians(degrees)
    # rotate u_k (inside the top-k subspace) towards u_{k+1} (outside it) by theta
    rot = torch.eye(u.shape[0])
    a, b = u[:, k - 1 : k], u[:, k : k + 1]
    rot = rot + (math.cos(theta) - 1) * (a @ a.T + b @ b.T) + math.sin(theta) * (b @ a.T - a @ b.T)
    wt = rot @ w0
    d = param_drift(w0, wt, top_k=k)
    assert d["max_pa_deg"] == pytest.approx(degrees, abs=0.05)
    assert d["nss"] == pytest.approx(0.0, abs=1e-5)  # a rotation keeps the spectrum


def test_rotation_within_the_top_k_subspace_is_no_angle():
    u, s, v, w0 = matrix()
    k = 8
    a, b = u[:, 0:1], u[:, 1:2]
    theta = math.radians(20)
    rot = torch.eye(u.shape[0]) + (math.cos(theta) - 1) * (a @ a.T + b @ b.T) + math.sin(theta) * (b @ a.T - a @ b.T)
    assert param_drift(w0, rot @ w0, top_k=k)["max_pa_deg"] == pytest.approx(0.0, abs=0.05)


def test_sparse_update_inside_or_outside_the_principal_mask():
    u, s, v, w0 = matrix()
    k, frac = 8, 0.05
    u0, s0, vh0 = torch.linalg.svd(w0, full_matrices=False)
    mask0 = principal_mask(u0[:, :k], s0[:k], vh0[:k], frac)
    inside = torch.nonzero(mask0)[:10]
    outside = torch.nonzero(~mask0)[:10]
    for where, expected in [(inside, 100.0), (outside, 0.0)]:
        wt = w0.clone()
        wt[where[:, 0], where[:, 1]] += 1e-3  # small: the masks themselves barely move
        d = param_drift(w0, wt, top_k=k, mask_frac=frac, tol=1e-5)
        assert d["n_updated"] == 10
        assert d["pm_update"] == expected
        assert d["pm_overlap"] > 95.0


def test_small_matrices_use_all_singular_values():
    w0 = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    d = param_drift(w0, w0 * 2, top_k=32)
    assert d["top_k"] == 3 and d["nss"] == pytest.approx(1.0, rel=1e-5)


def test_bad_shapes():
    with pytest.raises(ValueError, match="2-D"):
        param_drift(torch.zeros(3, 3), torch.zeros(3, 4))


def test_batched_stage_drift_equals_per_matrix_param_drift(tmp_path):
    from safetensors.torch import save_file

    from sdpocl.drift.params import param_drift, stage_param_drift

    g = torch.Generator().manual_seed(0)
    names = [
        f"model.layers.{i}.{part}.weight"
        for i in range(3)
        for part in ("self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj")
    ]
    shapes = {"q_proj": (16, 16), "k_proj": (8, 16), "down_proj": (16, 24)}
    base = {n: torch.randn(*shapes[n.split(".")[-2]], generator=g) for n in names}
    base["model.embed_tokens.weight"] = torch.randn(10, 16, generator=g)  # not a block matrix: ignored
    _save_sharded(base, tmp_path / "base", shards=3)  # a hub-style sharded base
    stage = tmp_path / "stage"
    ckpts = {}
    for step in (2, "final"):
        w = {n: t + 0.01 * torch.randn(t.shape, generator=g) for n, t in base.items()}
        d = stage / ("model" if step == "final" else f"checkpoints/step-{step}")
        if step == 2:
            _save_sharded(w, d, shards=2)
        else:
            d.mkdir(parents=True)
            save_file(w, str(d / "model.safetensors"))
        ckpts[str(step)] = w
    rows, summary = stage_param_drift(tmp_path / "base", stage, top_k=4, mask_frac=0.1, tol=1e-6, update_rule="abs")
    assert len(rows) == 2 * len(names) and set(rows.matrix) == set(names)
    for r in rows.itertuples():
        want = param_drift(base[r.matrix], ckpts[r.checkpoint][r.matrix], top_k=4, mask_frac=0.1, tol=1e-6)
        assert r.nss == pytest.approx(want["nss"], rel=1e-4, abs=1e-7)
        assert r.max_pa_deg == pytest.approx(want["max_pa_deg"], rel=1e-3, abs=1e-3)
        assert r.pm_overlap == pytest.approx(want["pm_overlap"]) and r.pm_update == pytest.approx(want["pm_update"])
    assert set(summary.matrix_type) == {"all", "q_proj", "k_proj", "down_proj"}


def _save_sharded(tensors: dict, out, shards: int) -> None:
    """Save as ``model-0000i-of-0000n.safetensors`` + ``model.safetensors.index.json``, as the hub does."""
    import json

    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    weight_map = {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i::shards]}
        save_file(part, str(out / file))
        weight_map.update(dict.fromkeys(part, file))
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def test_pm_update_rules():
    """bf16: an entry counts when its bf16-rounded value changes; abs/rel: by a tolerance."""
    from sdpocl.drift.params import updated_entries

    w0 = torch.tensor([[1.0, 1.0, 100.0, 0.0]])
    wt = torch.tensor([[1.0 + 1e-4, 1.0 + 2**-6, 100.0 + 1e-4, 1e-9]])  # bf16 spacing near 1 is 2^-7
    assert updated_entries(w0, wt, "bf16").tolist() == [[False, True, False, True]]
    assert updated_entries(w0, wt, "abs", 1e-5).tolist() == [[True, True, True, False]]
    assert updated_entries(w0, wt, "rel", 1e-5).tolist() == [[True, True, False, True]]
    with pytest.raises(ValueError, match="unknown update rule"):
        updated_entries(w0, wt, "median")
