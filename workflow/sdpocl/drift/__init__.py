"""compute-drift, response-drift, domain-distance and aggregate-drift: parameter drift
(:mod:`.params`), sentence embeddings (:mod:`.embeddings`), MMD / t-SNE / response similarity
(:mod:`.distance`) and the drift tables (:mod:`.tables`).

``sdpocl.drift.param_drift(w0, wt, *, top_k, mask_frac, tol)`` is a public contract (DESIGN.md).
"""

from sdpocl.drift.params import param_drift

__all__ = ["param_drift"]
