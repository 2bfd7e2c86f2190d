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


@pytest.mark.parametrize(("axis", "row"), [(-1, r"\(1,\)"), (0, r"\(0,\)")])
def test_softmax_rejects_all_minus_inf_row_naming_it(axis, row):
    logits = np.array([[-np.inf, 0.0], [-np.inf, -np.inf]])
    with pytest.raises(
        ValueError,
        match=rf"logits row at index {row}.* "
        r"every key masked",
    ):
        numpy_ref.softmax(logits, axis=axis)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_softmax_rejects_nan_and_plus_inf_naming_index(bad):
    with pytest.raises(ValueError, match=rf"hold {bad} at index \(0, 2\)"):
        numpy_ref.softmax(np.array([[0.0, 1.0, bad]]))


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


@pytest.mark.parametrize(
    "logits",
    [
        np.array([0, 2**53 + 1], dtype=np.int64),
        np.array([2**63 - 1, 0], dtype=np.int64),
    ],
)
def test_softmax_rejects_int64_not_exact_in_float64(logits):
    with pytest.raises(ValueError, match="not exactly representable"):
        numpy_ref.softmax(logits)


@pytest.mark.parametrize(
    ("logits", "kind"),
    [
        ([1 + 2j, 0j], "complex"),
        (np.array([1.0], dtype=object), "object"),
        (["a", "b"], "<U1"),
    ],
)
def test_softmax_rejects_complex_object_and_str(logits, kind):
    with pytest.raises(TypeError, match=f"got dtype {kind}"):
        numpy_ref.softmax(logits)


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


def test_softmax_backward_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"\(2,\) and upstream \(3,\)"):
        numpy_ref.softmax_backward(np.ones(2) / 2, np.ones(3))


def test_softmax_empty_rows_zero_on_any_axis():
    logits = np.array([[0.0, -np.inf], [1.0, -np.inf], [-np.inf, -np.inf]])
    got = numpy_ref.softmax(logits.T, axis=0, empty_rows="zero").T
    np.testing.assert_array_equal(got, [[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match=r"logits row at index \(2,\)"):
        numpy_ref.softmax(logits)


def test_softmax_rejects_empty_and_scalar_logits():
    with pytest.raises(
        ValueError,
        match=r"logits of shape \(0,\) hold no "
        r"value along axis -1",
    ):
        numpy_ref.softmax([])
    with pytest.raises(ValueError, match=r"shape \(2, 0\) hold no value"):
        numpy_ref.softmax(np.zeros((2, 0)))
    with pytest.raises(
        ValueError,
        match=r"axis -1 does not exist for "
        r"logits of shape \(\)",
    ):
        numpy_ref.softmax(np.float64(1.0))
