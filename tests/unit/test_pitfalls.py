"""Each pitfalls.wrong_* shows its symptom; the right code does not."""

import numpy as np
import pytest

from mha_ref import numpy_ref, pitfalls
from mha_ref.tolerances import atol

TOL = {"atol": atol(np.float64), "rtol": 0}
B, T, D_MODEL, N_HEAD = 2, 5, 12, 3


@pytest.fixture
def module():
    return numpy_ref.MultiHeadAttention(D_MODEL, N_HEAD, seed=1)


def test_wrong_split_heads_mixes_positions(module, rng):
    x = rng.standard_normal((B, T, D_MODEL))
    wrong = pitfalls.wrong_split_heads(x, N_HEAD)
    right = module.split_heads(x)
    assert wrong.shape == right.shape  # no error, right shape
    assert np.abs(wrong - right).max() > 0.1  # wrong numbers
    # head 0, row 1 of the wrong split holds columns 4..7 of position 0
    np.testing.assert_array_equal(wrong[0, 0, 1], x[0, 0, 4:8])
    np.testing.assert_array_equal(right[0, 0, 1], x[0, 1, 0:4])


def test_wrong_split_heads_changes_the_output(module, rng):
    x = rng.standard_normal((B, T, D_MODEL))
    y, _ = module(x)
    module.split_heads = lambda a: pitfalls.wrong_split_heads(a, N_HEAD)
    y_wrong, _ = module(x)  # runs without any error
    assert np.abs(y_wrong - y).max() > 1e-2


def test_wrong_scale_scores_flattens_the_weights(rng):
    d_head = D_MODEL // N_HEAD
    q = 2 * rng.standard_normal((B, N_HEAD, T, d_head))
    k = 2 * rng.standard_normal((B, N_HEAD, T, d_head))
    _, right = numpy_ref.attention(q, k, np.eye(T))
    wrong = numpy_ref.softmax(pitfalls.wrong_scale_scores(q, k, D_MODEL))
    # sqrt(12) > sqrt(4): every row is flatter, so its top weight drops
    assert (wrong.max(-1) < right.max(-1)).all()
    expected = numpy_ref.softmax(q @ np.swapaxes(k, -2, -1) / 2.0)
    np.testing.assert_allclose(right, expected, **TOL)


def test_wrong_scale_scores_is_harmless_with_one_head(rng):
    q = rng.standard_normal((T, D_MODEL))
    k = rng.standard_normal((T, D_MODEL))
    _, right = numpy_ref.attention(q, k, np.eye(T))
    wrong = numpy_ref.softmax(pitfalls.wrong_scale_scores(q, k, D_MODEL))
    np.testing.assert_allclose(wrong, right, **TOL)


def test_wrong_mask_after_softmax_leaks_weight(rng):
    scores = rng.standard_normal((T, T))
    mask = numpy_ref.causal_mask(T)
    wrong = pitfalls.wrong_mask_after_softmax(scores, mask)
    assert (wrong.sum(-1)[:-1] < 1 - 1e-3).all()  # only the last row is 1
    right = numpy_ref.softmax(np.where(mask, -np.inf, scores))
    np.testing.assert_allclose(right.sum(-1), 1.0, **TOL)
    renormalised = pitfalls.wrong_mask_after_softmax(scores, mask, True)
    np.testing.assert_allclose(renormalised, right, **TOL)  # exact maths


def test_wrong_mask_after_softmax_renormalised_underflows_to_nan():
    scores = np.array([[0.0, 800.0, 900.0]])
    mask = np.array([[False, True, True]])
    with np.errstate(invalid="ignore"):
        wrong = pitfalls.wrong_mask_after_softmax(scores, mask, True)
    assert np.isnan(wrong).all()
    right = numpy_ref.softmax(np.where(mask, -np.inf, scores))
    np.testing.assert_array_equal(right, [[1.0, 0.0, 0.0]])


def test_wrong_softmax_axis_normalises_columns(rng):
    scores = rng.standard_normal((B, T, T))
    wrong = pitfalls.wrong_softmax_axis(scores)
    np.testing.assert_allclose(wrong.sum(-2), 1.0, **TOL)  # columns
    assert np.abs(wrong.sum(-1) - 1).max() > 0.1  # rows do not
    right = numpy_ref.softmax(scores)
    np.testing.assert_allclose(right.sum(-1), 1.0, **TOL)


def test_wrong_softmax_axis_overweights_the_last_causal_row(rng):
    # the last column's only allowed query is the last row: weight 1
    scores = rng.standard_normal((T, T))
    masked = np.where(numpy_ref.causal_mask(T), -np.inf, scores)
    wrong = pitfalls.wrong_softmax_axis(masked)
    assert wrong[-1, -1] == 1.0
    assert wrong[-1].sum() > 1.1
    np.testing.assert_allclose(numpy_ref.softmax(masked).sum(-1), 1.0, **TOL)


def test_wrong_merge_heads_interleaves_positions(module, rng):
    x = rng.standard_normal((B, T, D_MODEL))
    heads = module.split_heads(x)
    np.testing.assert_array_equal(module.merge_heads(heads), x)  # inverse
    wrong = pitfalls.wrong_merge_heads(heads)
    assert wrong.shape == x.shape
    assert np.abs(wrong - x).max() > 0.1


def test_wrong_copy_from_linear_breaks_parity(make_module, make_tensor):
    torch_module = make_module(D_MODEL, N_HEAD, bias=False)
    x = make_tensor((B, T, D_MODEL), seed=1)
    y = torch_module(x)[0].detach().numpy()
    twin = numpy_ref.MultiHeadAttention.from_torch(torch_module)
    np.testing.assert_allclose(twin(x.numpy())[0], y, **TOL)  # right: .T
    weight = torch_module.wq.weight.detach().numpy()
    twin.Wq = pitfalls.wrong_copy_from_linear(weight)
    np.testing.assert_array_equal(twin.Wq, weight)  # (out, in), no .T
    assert np.abs(twin(x.numpy())[0] - y).max() > 1e-2
