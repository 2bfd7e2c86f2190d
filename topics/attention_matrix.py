"""The causal mask and one small single-head attention matrix."""

DEPENDS = ["mha_ref/numpy_ref.py", "mha_ref/checks.py"]


def compute():
    import numpy as np

    from mha_ref import numpy_ref

    # four tokens, head size 2, small integers so a reader can redo it
    q = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]])
    k = np.array([[1.0, 1.0], [0.0, 2.0], [-1.0, 1.0], [1.0, 0.0]])
    v = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 2.0]])
    t, d = q.shape
    mask = numpy_ref.causal_mask(t)
    output, weights = numpy_ref.attention(q, k, v, mask)
    scores = q @ k.T / np.sqrt(d)  # before the mask
    return {
        "t": 3,
        "causal_mask": numpy_ref.causal_mask(3),
        "example": {
            "t": t,
            "d_k": d,
            "q": q,
            "k": k,
            "v": v,
            "mask": mask,
            "scores": scores,
            "masked_scores": np.where(mask, -np.inf, scores),
            "weights": weights,
            "row_sums": weights.sum(axis=-1),
            "output": output,
            "future_weight": float(weights[mask].max()),
        },
    }
