"""numpy_ref.MultiHeadAttention against a head-by-head loop.

It also takes x as a nested list and names a NaN in x. Its uneven head
split is checked with torch_ref's, in test_torch_ref_mha.py.
"""

import numpy as np
import pytest

from mha_ref import numpy_ref
from mha_ref.tolerances import atol

TOL = {"atol": atol(np.float64), "rtol": 0}
B, TQ, TK, D_MODEL, N_HEAD = 2, 4, 6, 12, 3


def loop_oracle(m, x, context, mask):
    """The paper's formula one head at a time, scalar loops for softmax."""

    def lin(a, w, b):
        return a @ w + (0 if b is None else b)

    q, k, v = (
        lin(x, m.Wq, m.bq),
        lin(context, m.Wk, m.bk),
        lin(context, m.Wv, m.bv),
    )
    dh = m.d_head
    heads = np.zeros_like(q)
    for b in range(x.shape[0]):
        for h in range(m.n_head):
            cols = slice(h * dh, (h + 1) * dh)
            for i in range(x.shape[1]):
                scores = [
                    q[b, i, cols] @ k[b, j, cols] / np.sqrt(dh)
                    for j in range(context.shape[1])
                ]
                allowed = [
                    j
                    for j in range(len(scores))
                    if mask is None or not mask[b, h, i, j]
                ]
                top = max(scores[j] for j in allowed)
                e = {j: np.exp(scores[j] - top) for j in allowed}
                total = sum(e.values())
                heads[b, i, cols] = sum(
                    e[j] / total * v[b, j, cols] for j in allowed
                )
    return lin(heads, m.Wo, m.bo)


@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
@pytest.mark.parametrize("masked", [False, True], ids=["none", "mask"])
def test_mha_matches_head_by_head_loop(bias, cross, masked, rng):
    module = numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD, bias=bias, seed=3)
    if bias:  # the init's biases are small: make them matter
        module.bq, module.bk, module.bv, module.bo = (
            rng.standard_normal(D_MODEL) for _ in range(4)
        )
    tk = TK if cross else TQ
    x = rng.standard_normal((B, TQ, D_MODEL))
    context = rng.standard_normal((B, tk, D_MODEL)) if cross else None
    mask = None
    if masked:
        mask = rng.random((B, N_HEAD, TQ, tk)) < 0.5
        mask[..., 0] = False
    y, weights = module(x, mask, context)
    expected = loop_oracle(module, x, x if context is None else context, mask)
    np.testing.assert_allclose(y, expected, **TOL)
    np.testing.assert_allclose(weights.sum(-1), 1.0, **TOL)
    if masked:
        assert (weights[mask] == 0).all()


def test_mha_init_is_seeded_and_in_linear_range():
    a = numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD, bias=True, seed=7)
    b = numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD, bias=True, seed=7)
    c = numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD, bias=True, seed=8)
    np.testing.assert_array_equal(a.Wq, b.Wq)
    np.testing.assert_array_equal(a.bo, b.bo)
    assert not np.allclose(a.Wq, c.Wq)
    bound = 1 / np.sqrt(D_MODEL)
    for w in (a.Wq, a.Wk, a.Wv, a.Wo, a.bq, a.bk, a.bv, a.bo):
        assert np.abs(w).max() <= bound
    assert not np.allclose(a.Wq, a.Wk)  # four distinct draws
    assert a.d_head == D_MODEL // N_HEAD


def test_mha_without_bias_has_no_bias_arrays():
    module = numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD)
    assert module.bq is module.bk is module.bv is module.bo is None


def test_mha_split_heads_takes_each_heads_columns(rng):
    module = numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD)
    x = rng.standard_normal((B, TQ, D_MODEL))
    heads = module.split_heads(x)  # (B, H, T, dh)
    dh = module.d_head
    for h in range(N_HEAD):
        np.testing.assert_array_equal(
            heads[:, h], x[..., h * dh : (h + 1) * dh]
        )
    np.testing.assert_array_equal(module.merge_heads(heads), x)


def test_mha_forward_and_backward_read_iterator_positions_once():
    # apply_rope read the iterator for q, then found it empty for k
    m = numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD, rope=True, seed=3)
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((2, B, TQ, D_MODEL))
    at = [5, 2, 9, 7]
    mask = numpy_ref.causal_mask(TQ)
    want = m(x, mask, positions=np.array(at))[0]
    np.testing.assert_array_equal(m(x, mask, positions=iter(at))[0], want)
    grads = m.backward(x, dy, mask, positions=np.array(at))
    got = m.backward(x, dy, mask, positions=iter(at))
    for name, grad in grads.items():
        np.testing.assert_array_equal(got[name], grad)
    # the gradient of x against central differences (float64)
    step, i = 1e-6, (0, 1, 2)
    up, down = x.copy(), x.copy()
    up[i] += step
    down[i] -= step
    slope = m(up, mask, positions=at)[0] - m(down, mask, positions=at)[0]
    np.testing.assert_allclose(
        grads["x"][i], np.sum(slope * dy) / (2 * step), rtol=1e-6
    )
