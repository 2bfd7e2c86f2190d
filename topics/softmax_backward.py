"""The softmax gradient: raising one score lowers every other weight."""

DEPENDS = ["mha_ref/numpy_ref.py", "mha_ref/checks.py"]


def compute():
    import numpy as np
    import torch

    from mha_ref import numpy_ref

    p = np.array([0.5, 0.5])
    g = np.array([1.0, 0.0])  # loss = the first weight: dL/dp = [1, 0]
    jacobian = np.diag(p) - np.outer(p, p)  # dp_i / ds_j
    # treating softmax as elementwise keeps only the Jacobian's diagonal
    naive = p * (1 - p) * g

    # the formula against autograd, on random rows in float64
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(64, 10, generator=generator, dtype=torch.float64)
    upstream = torch.randn(64, 10, generator=generator, dtype=torch.float64)
    scores.requires_grad_(True)
    probabilities = scores.softmax(dim=-1)
    (autograd,) = torch.autograd.grad(probabilities, scores, upstream)
    formula = numpy_ref.softmax_backward(
        probabilities.detach().numpy(), upstream.numpy()
    )
    diff = np.abs(formula - autograd.numpy()).max()
    return {
        "probabilities": p,
        "upstream": g,
        "score_grad": numpy_ref.softmax_backward(p, g),
        "naive_grad": naive,
        "ones_grad": numpy_ref.softmax_backward(p, np.ones(2)),
        "jacobian": jacobian,
        "autograd_max_diff": float(diff),
        "autograd_shape": list(scores.shape),
    }
