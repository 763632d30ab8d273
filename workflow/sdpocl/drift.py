"""Parameter drift of one weight matrix between the base (W0) and a checkpoint (Wt).

Definitions from PAPER.md (Diagnostics), W = U S V^T:
- NSS, normalized spectral shift: ||s(Wt) - s(W0)||_2 / ||s(W0)||_2;
- Max PA: the largest principal angle (degrees) between the top-k left singular subspaces;
- principal mask: the top ``mask_frac`` entries of |U_k S_k V_k^T|;
  PM overlap: % of W0's principal mask still principal in Wt;
  PM update: % of the updated entries (|Wt - W0| > tol) that lie in W0's principal mask.
A matrix with fewer than ``top_k`` singular values uses all of them. SVDs run in float32 with
``torch.linalg`` on whatever device the tensors are on.
"""

from __future__ import annotations

import math

import torch


def _top_k_svd(w: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    u, s, vh = torch.linalg.svd(w, full_matrices=False)
    return u[:, :k], s[:k], vh[:k, :], s


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


def param_drift(w0: torch.Tensor, wt: torch.Tensor, *, top_k: int = 32, mask_frac: float = 0.05,
                tol: float = 1e-6) -> dict:
    """Drift metrics of ``wt`` against ``w0`` (2-D tensors of one shape); see the module docstring."""
    if w0.dim() != 2 or w0.shape != wt.shape:
        raise ValueError(f"param_drift needs two 2-D tensors of one shape, got {tuple(w0.shape)} and {tuple(wt.shape)}")
    if not 0 < mask_frac <= 1:
        raise ValueError(f"mask_frac must be in (0, 1], got {mask_frac}")
    w0, wt = w0.detach().float(), wt.detach().float()
    k = max(1, min(top_k, min(w0.shape)))
    u0, s0k, vh0, s0 = _top_k_svd(w0, k)
    ut, stk, vht, st = _top_k_svd(wt, k)

    nss = (torch.linalg.vector_norm(st - s0) / torch.linalg.vector_norm(s0).clamp(min=1e-30)).item()
    mask0 = principal_mask(u0, s0k, vh0, mask_frac)
    maskt = principal_mask(ut, stk, vht, mask_frac)
    updated = (wt - w0).abs() > tol
    n_updated = int(updated.sum())
    return {
        "nss": nss,
        "max_pa_deg": max_principal_angle_deg(u0, ut),
        "pm_overlap": 100.0 * (mask0 & maskt).sum().item() / mask0.sum().item(),
        "pm_update": 100.0 * (updated & mask0).sum().item() / n_updated if n_updated else 0.0,
        "n_updated": n_updated,
        "top_k": k,
    }
