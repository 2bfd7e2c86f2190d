"""The opening example: one weighted sum of two value vectors."""

DEPENDS = ["mha_ref/numpy_ref.py", "mha_ref/checks.py"]


def compute():
    import numpy as np

    from mha_ref import numpy_ref

    values = np.array([[2.0, 0.0], [0.0, 4.0]])  # one row per position
    weights = np.array([0.75, 0.25])
    output = weights @ values  # sum_j w_j v_j
    # scores whose softmax gives those weights: a gap of ln 3
    scores = np.array([np.log(3.0), 0.0])
    return {
        "values": values,
        "weights": weights,
        "output": output,
        "scores": scores,
        "softmax_of_scores": numpy_ref.softmax(scores),
        "weights_sum": float(weights.sum()),
    }
