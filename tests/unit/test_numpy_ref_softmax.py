"""numpy_ref.softmax and softmax_backward against PyTorch.

Also its edges: empty_rows="zero" on any axis, and logits with no value
along the axis (or no axis at all) refused.
"""

import numpy as np
import pytest
import torch

from mha_ref import numpy_ref
from mha_ref.tolerances import atol

TOL = {"atol": atol(np.float64), "rtol": 0}


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_matches_torch_on_any_axis(axis, rng):
    logits = 5 * rng.standard_normal((3, 4, 5))
    expected = torch.from_numpy(logits).softmax(dim=axis).numpy()
    np.testing.assert_allclose(
        numpy_ref.softmax(logits, axis), expected, **TOL
    )


def test_softmax_is_stable_for_huge_logits():
    logits = np.array([[1000.0, 1000.0], [-1e308, 0.0], [1e308, 1e308]])
    with np.errstate(over="raise", invalid="raise"):
        weights = numpy_ref.softmax(logits)
    np.testing.assert_array_equal(weights, [[0.5, 0.5], [0, 1], [0.5, 0.5]])


def test_softmax_minus_inf_means_masked():
    weights = numpy_ref.softmax(np.array([[-np.inf, 0.0, 0.0]]))
    np.testing.assert_array_equal(weights, [[0.0, 0.5, 0.5]])


def test_softmax_keeps_float32_and_float16_promotes():
    logits = np.array([1.0, 2.0])
    assert numpy_ref.softmax(logits.astype(np.float32)).dtype == np.float32
    assert numpy_ref.softmax(logits.astype(np.float16)).dtype == np.float32


def test_softmax_accepts_bool_and_int_logits():
    e = np.e
    np.testing.assert_allclose(
        numpy_ref.softmax(np.array([True, False])),
        [e / (e + 1), 1 / (e + 1)],
        rtol=1e-6,
    )
    ints = np.array([3, 1, 2], dtype=np.int32)
    np.testing.assert_allclose(
        numpy_ref.softmax(ints),
        numpy_ref.softmax(ints.astype(float)),
        **TOL,
    )


def test_softmax_accepts_large_exact_int64():
    # 2**53 and 2**60 are exact in float64: accepted, one-hot result
    weights = numpy_ref.softmax(np.array([2**60, 2**53], dtype=np.int64))
    np.testing.assert_array_equal(weights, [1.0, 0.0])


def test_softmax_backward_matches_torch_autograd(rng):
    logits = rng.standard_normal((3, 2, 6))
    upstream = rng.standard_normal((3, 2, 6))
    scores = torch.from_numpy(logits).requires_grad_()
    scores.softmax(dim=-1).backward(torch.from_numpy(upstream))
    got = numpy_ref.softmax_backward(numpy_ref.softmax(logits), upstream)
    np.testing.assert_allclose(got, scores.grad.numpy(), **TOL)


def test_softmax_backward_of_constant_upstream_is_zero(rng):
    p = numpy_ref.softmax(rng.standard_normal((4, 5)))
    got = numpy_ref.softmax_backward(p, np.full((4, 5), 3.0))
    np.testing.assert_allclose(got, np.zeros((4, 5)), **TOL)
