"""Parameter drift of one weight matrix between the base (W0) and a checkpoint (Wt).

Definitions from docs/paper.md ("Diagnostics"), W = U S V^T:
- NSS, normalized spectral shift: ||s(Wt) - s(W0)||_2 / ||s(W0)||_2;
- Max PA: the largest principal angle (degrees) between the top-k left singular subspaces;
- principal mask: the top ``mask_frac`` entries of |U_k S_k V_k^T|;
  PM overlap: % of W0's principal mask still principal in Wt;
  PM update: % of the updated entries that lie in W0's principal mask. An entry counts as updated
  by ``update_rule``: ``bf16`` (default) when its bf16-rounded value changed -- what the paper's bf16
  checkpoints see; with fp32 master weights nearly every entry moves by a little, so ``|dW| > 0``
  would count the whole matrix and PM update would equal the mask fraction --, ``abs`` when
  |Wt - W0| > tol, ``rel`` when |Wt - W0| > tol * |W0|.
A matrix with fewer than ``top_k`` singular values uses all of them. SVDs run in float32 with
``torch.linalg`` on whatever device the tensors are on.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch


def principal_mask(u_k: torch.Tensor, s_k: torch.Tensor, vh_k: torch.Tensor, mask_frac: float) -> torch.Tensor:
    """Boolean mask of the top ``mask_frac`` entries (by magnitude) of the rank-k reconstruction."""
    recon = (u_k * s_k) @ vh_k
    n = max(1, round(mask_frac * recon.numel()))
    idx = torch.topk(recon.abs().flatten(), n).indices
    mask = torch.zeros(recon.numel(), dtype=torch.bool, device=recon.device)
    mask[idx] = True
    return mask.view_as(recon)


def max_principal_angle_deg(u0: torch.Tensor, ut: torch.Tensor) -> float:
    """Largest principal angle between span(u0) and span(ut) (orthonormal columns, same count).

    Computed as arcsin of the largest singular value of (I - Ut Ut^T) U0, which is accurate for
    small angles where arccos of sigma_min(U0^T Ut) loses all float32 precision."""
    residual = u0 - ut @ (ut.T @ u0)
    sin_max = torch.linalg.matrix_norm(residual, ord=2).clamp(max=1.0).item()
    return math.degrees(math.asin(sin_max))


def _check(w0: torch.Tensor, wt: torch.Tensor, mask_frac: float) -> None:
    if w0.dim() != 2 or w0.shape != wt.shape:
        raise ValueError(f"param_drift needs two 2-D tensors of one shape, got {tuple(w0.shape)} and {tuple(wt.shape)}")
    if not 0 < mask_frac <= 1:
        raise ValueError(f"mask_frac must be in (0, 1], got {mask_frac}")


def decompose(ws: torch.Tensor, top_k: int, mask_frac: float) -> list[dict]:
    """Batched float32 SVD of a stack of same-shape matrices (B, m, n): per matrix the singular
    values, the top-k left singular vectors and the principal mask (computed once per base matrix)."""
    ws = ws.detach().float()
    k = max(1, min(top_k, min(ws.shape[-2:])))
    u, s, vh = torch.linalg.svd(ws, full_matrices=False)
    return [
        {"s": s[i], "u_k": u[i, :, :k], "mask": principal_mask(u[i, :, :k], s[i, :k], vh[i, :k, :], mask_frac), "k": k}
        for i in range(ws.shape[0])
    ]


UPDATE_RULES = ("bf16", "abs", "rel")


def updated_entries(w0: torch.Tensor, wt: torch.Tensor, rule: str = "bf16", tol: float = 0.0) -> torch.Tensor:
    """Boolean mask of the entries that count as updated (see the module docstring)."""
    if rule == "bf16":
        return w0.to(torch.bfloat16) != wt.to(torch.bfloat16)
    delta = (wt.float() - w0.float()).abs()
    if rule == "abs":
        return delta > tol
    if rule == "rel":
        return delta > tol * w0.float().abs()
    raise ValueError(f"unknown update rule {rule!r}; one of {', '.join(UPDATE_RULES)}")


def drift_metrics(w0: torch.Tensor, wt: torch.Tensor, d0: dict, dt: dict, tol: float, update_rule: str = "abs") -> dict:
    """The four drift metrics from two decompositions (see :func:`decompose`)."""
    nss = (torch.linalg.vector_norm(dt["s"] - d0["s"]) / torch.linalg.vector_norm(d0["s"]).clamp(min=1e-30)).item()
    updated = updated_entries(w0, wt, update_rule, tol)
    n_updated = int(updated.sum())
    return {
        "nss": nss,
        "max_pa_deg": max_principal_angle_deg(d0["u_k"], dt["u_k"]),
        "pm_overlap": 100.0 * (d0["mask"] & dt["mask"]).sum().item() / d0["mask"].sum().item(),
        "pm_update": 100.0 * (updated & d0["mask"]).sum().item() / n_updated if n_updated else 0.0,
        "n_updated": n_updated,
        "top_k": d0["k"],
    }


def param_drift(
    w0: torch.Tensor,
    wt: torch.Tensor,
    *,
    top_k: int = 32,
    mask_frac: float = 0.05,
    tol: float = 1e-6,
    update_rule: str = "abs",
) -> dict:
    """Drift metrics of ``wt`` against ``w0`` (2-D tensors of one shape); see the module docstring.
    (``update_rule`` defaults to ``abs`` here, the contract's original meaning of ``tol``.)"""
    _check(w0, wt, mask_frac)
    d0, dt = decompose(torch.stack([w0.detach(), wt.detach()]), top_k, mask_frac)
    return drift_metrics(w0.detach(), wt.detach(), d0, dt, tol, update_rule)


def _by_shape(mats: dict[str, torch.Tensor]) -> dict[tuple, list[str]]:
    groups: dict[tuple, list[str]] = {}
    for name, w in mats.items():
        groups.setdefault(tuple(w.shape), []).append(name)
    return groups


def batched_decompositions(mats: dict[str, torch.Tensor], top_k: int, mask_frac: float) -> dict[str, dict]:
    """:func:`decompose` of every matrix, one batched SVD per distinct shape (e.g. all q_proj)."""
    out = {}
    for names in _by_shape(mats).values():
        out.update(zip(names, decompose(torch.stack([mats[n] for n in names]), top_k, mask_frac)))
    return out


#: 2-D weights of the transformer blocks (attention and MLP projections); embeddings and norms excluded.
BLOCK_MATRIX = r"^model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+_proj)\.weight$"


def block_matrices(state_dict: dict) -> dict[str, torch.Tensor]:
    rx = re.compile(BLOCK_MATRIX)
    return {k: v for k, v in state_dict.items() if rx.match(k) and v.dim() == 2}


def stage_checkpoints(stage_dir) -> list[tuple[int | str, Path]]:
    """(step, model directory) of every intermediate checkpoint of a stage, then ('final', model)."""
    from sdpocl.train.weights import has_weights

    stage_dir = Path(stage_dir)
    steps = sorted(
        (p for p in stage_dir.glob("checkpoints/step-*") if p.name[5:].isdigit() and has_weights(p)),
        key=lambda p: int(p.name[5:]),
    )
    return [(int(p.name[5:]), p) for p in steps] + [("final", stage_dir / "model")]


def _block_weights(model_dir) -> dict[str, torch.Tensor]:
    """The block matrices of a model directory (single-file or sharded), read without the rest."""
    from sdpocl.train.weights import load_tensors

    rx = re.compile(BLOCK_MATRIX)
    return {k: v for k, v in load_tensors(model_dir, keep=lambda name: bool(rx.match(name))).items() if v.dim() == 2}


def stage_param_drift(base_dir, stage_dir, *, top_k: int, mask_frac: float, tol: float, update_rule: str = "bf16"):
    """Per (checkpoint, matrix) drift rows of one stage against the base, and their aggregate.

    The base weights are loaded once; each checkpoint once. Returns (rows, summary) DataFrames;
    the summary has mean, median, p10 and p90 per checkpoint and metric, over all matrices
    (``matrix_type == "all"``) and per projection type (q_proj, ..., down_proj)."""
    import pandas as pd

    if not 0 < mask_frac <= 1:
        raise ValueError(f"mask_frac must be in (0, 1], got {mask_frac}")
    if update_rule not in UPDATE_RULES:
        raise ValueError(f"unknown update rule {update_rule!r}; one of {', '.join(UPDATE_RULES)}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    base = {k: v.to(device).float() for k, v in _block_weights(base_dir).items()}
    if not base:
        raise ValueError(f"{base_dir} has no transformer block matrices ({BLOCK_MATRIX})")
    base_dec = batched_decompositions(base, top_k, mask_frac)  # the base is decomposed once per job
    rows = []
    for step, path in stage_checkpoints(stage_dir):
        ckpt = _block_weights(path)
        missing = sorted(set(base) - set(ckpt))
        if missing:
            raise ValueError(f"{path} lacks {len(missing)} block matrices of the base, e.g. {missing[0]}")
        ckpt = {name: ckpt[name].to(device).float() for name in base}
        ckpt_dec = batched_decompositions(ckpt, top_k, mask_frac)
        for name, w0 in base.items():
            d = drift_metrics(w0, ckpt[name], base_dec[name], ckpt_dec[name], tol, update_rule)
            rows.append({"checkpoint": str(step), "matrix": name, "matrix_type": name.split(".")[-2], **d})
    frame = pd.DataFrame(rows)
    metrics = ["nss", "max_pa_deg", "pm_overlap", "pm_update"]
    parts = []
    for matrix_type, grouped in [("all", frame), *frame.groupby("matrix_type")]:
        g = grouped.groupby("checkpoint", sort=False)[metrics]
        agg = pd.concat(
            {"mean": g.mean(), "median": g.median(), "p10": g.quantile(0.1), "p90": g.quantile(0.9)}, axis=1
        )
        agg.columns = [f"{metric}_{stat}" for stat, metric in agg.columns]
        parts.append(agg.reset_index().assign(matrix_type=matrix_type))
    return frame, pd.concat(parts, ignore_index=True)
