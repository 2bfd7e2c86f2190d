"""numpy_ref.attention and the causal masks, against PyTorch's SDPA."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_ref import numpy_ref
from mha_ref.tolerances import atol

TOL = {"atol": atol(np.float64), "rtol": 0}
B, H, TQ, TK, D = 2, 3, 4, 5, 6


def sdpa(q, k, v, mask=None):
    """PyTorch's kernel on NumPy arrays; our mask is True = blocked."""
    allowed = None if mask is None else torch.from_numpy(~mask)
    out = F.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v)), attn_mask=allowed
    )
    return out.numpy()


@pytest.mark.parametrize("dv", [D, 1, 9], ids=lambda dv: f"dv={dv}")
def test_attention_matches_sdpa_with_any_value_width(dv, rng):
    q = rng.standard_normal((B, H, TQ, D))
    k = rng.standard_normal((B, H, TK, D))
    v = rng.standard_normal((B, H, TK, dv))
    out, weights = numpy_ref.attention(q, k, v)
    assert out.shape == (B, H, TQ, dv)  # dv, not d
    np.testing.assert_allclose(out, sdpa(q, k, v), **TOL)
    np.testing.assert_allclose(out, weights @ v, **TOL)


def test_attention_scales_by_the_last_dim_of_q(rng):
    q = rng.standard_normal((TQ, D))
    k = rng.standard_normal((TK, D))
    _, weights = numpy_ref.attention(q, k, np.eye(TK))
    expected = numpy_ref.softmax(q @ k.T / np.sqrt(D))
    np.testing.assert_allclose(weights, expected, **TOL)


def test_attention_broadcasts_batch_dims_of_q_k_v(rng):
    q = rng.standard_normal((B, H, TQ, D))
    k = rng.standard_normal((1, H, TK, D))  # shared by the batch
    v = rng.standard_normal((TK, D))  # shared by everything
    out, _ = numpy_ref.attention(q, k, v)
    full = np.broadcast_to
    expected = sdpa(
        q, full(k, (B, H, TK, D)).copy(), full(v, (B, H, TK, D)).copy()
    )
    np.testing.assert_allclose(out, expected, **TOL)


@pytest.mark.parametrize(
    "shape",
    [
        (TQ, TK),
        (B, 1, TQ, TK),
        (1, H, TQ, TK),
        (B, H, TQ, TK),
        (B, 1, 1, TK),
        (TK,),
    ],
    ids=["shared", "per-batch", "per-head", "full", "key-padding", "keys"],
)
def test_attention_mask_broadcasts_like_the_full_mask(shape, rng):
    q = rng.standard_normal((B, H, TQ, D))
    k = rng.standard_normal((B, H, TK, D))
    v = rng.standard_normal((B, H, TK, D))
    mask = rng.random(shape) < 0.4
    mask[..., 0] = False  # every row keeps key 0
    out, weights = numpy_ref.attention(q, k, v, mask)
    full = np.broadcast_to(mask, (B, H, TQ, TK)).copy()
    out_full, _ = numpy_ref.attention(q, k, v, full)
    np.testing.assert_array_equal(out, out_full)
    np.testing.assert_allclose(out, sdpa(q, k, v, full), **TOL)
    assert (weights[full] == 0).all()
    np.testing.assert_allclose(weights.sum(-1), 1.0, **TOL)


def test_attention_mask_blocks_before_softmax(rng):
    q = rng.standard_normal((TQ, D))
    k = rng.standard_normal((TK, D))
    mask = np.zeros((TQ, TK), dtype=bool)
    mask[:, -2:] = True  # drop the last two keys
    _, weights = numpy_ref.attention(q, k, np.eye(TK), mask)
    _, kept = numpy_ref.attention(q, k[:-2], np.eye(TK - 2))
    np.testing.assert_allclose(weights[:, :-2], kept, **TOL)


@pytest.mark.parametrize(
    "mask",
    [
        np.zeros((TQ, TK), dtype=int),
        np.zeros((TQ, TK)),
        np.zeros((TQ, TK), dtype=np.uint8),
    ],
    ids=["int", "float", "uint8"],
)
def test_attention_rejects_non_bool_mask(mask, rng):
    q = rng.standard_normal((TQ, D))
    k = v = rng.standard_normal((TK, D))
    with pytest.raises(TypeError, match="boolean with True = blocked"):
        numpy_ref.attention(q, k, v, mask)


@pytest.mark.parametrize("shape", [(TK, TQ), (3, TQ, TK), (TQ, 1, TK)])
def test_attention_rejects_non_broadcasting_mask(shape, rng):
    q = rng.standard_normal((B, TQ, D))
    k = v = rng.standard_normal((B, TK, D))
    pattern = (
        rf"mask of shape \({shape[0]}, .*\(\.\.\., Tq, Tk\) = "
        rf"\({B}, {TQ}, {TK}\)"
    )
    with pytest.raises(ValueError, match=pattern):
        numpy_ref.attention(q, k, v, np.zeros(shape, dtype=bool))


def test_attention_rejects_fully_masked_row_naming_it(rng):
    q = rng.standard_normal((B, H, TQ, D))
    k = v = rng.standard_normal((B, H, TK, D))
    mask = np.zeros((B, 1, TQ, TK), dtype=bool)
    mask[1, 0, 2] = True  # batch 1, every head, query 2
    with pytest.raises(
        ValueError,
        match=r"query row at index \(1, 0, 2\) "
        rf"\(of {H} such rows",
    ):
        numpy_ref.attention(q, k, v, mask)


@pytest.mark.parametrize(
    ("q", "k", "v", "message"),
    [
        ((TQ,), (TK, D), (TK, D), r"q must have at least 2 dims"),
        ((TQ, D), (TK, D + 1), (TK, D), r"same last dim .*\(4, 6\) vs k"),
        ((TQ, D), (TK, D), (TK + 1, D), r"number of keys Tk: k \(5, 6\)"),
        ((2, TQ, D), (3, TK, D), (3, TK, D), r"batch dims .* broadcast"),
    ],
)
def test_attention_rejects_mismatched_shapes(q, k, v, message, rng):
    arrays = (rng.standard_normal(s) for s in (q, k, v))
    with pytest.raises(ValueError, match=message):
        numpy_ref.attention(*arrays)


@pytest.mark.parametrize("name", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_attention_rejects_non_finite_inputs_naming_them(name, bad, rng):
    arrays = {n: rng.standard_normal((TQ, D)) for n in "qkv"}
    arrays[name][1, 3] = bad
    with pytest.raises(
        ValueError,
        match=rf"{name} of shape \(4, 6\) "
        rf"holds {bad} at index \(1, 3\)",
    ):
        numpy_ref.attention(arrays["q"], arrays["k"], arrays["v"])


def test_attention_rejects_overflowing_scores():
    q = k = np.array([[1e200, 0.0]])
    with (
        np.errstate(over="ignore"),
        pytest.raises(ValueError, match=r"hold inf at index \(0, 0\)"),
    ):
        numpy_ref.attention(q, k, np.ones((1, 2)))


def test_causal_mask_is_strict_upper_triangle():
    expected = np.array(
        [[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 0]], dtype=bool
    )
    np.testing.assert_array_equal(numpy_ref.causal_mask(4), expected)
    assert numpy_ref.causal_mask(4).dtype == bool
    np.testing.assert_array_equal(numpy_ref.causal_mask(1), [[False]])


def test_causal_mask_for_positions_blocks_later_keys():
    got = numpy_ref.causal_mask_for_positions([3, 4], range(5))
    np.testing.assert_array_equal(got, [[0, 0, 0, 0, 1], [0, 0, 0, 0, 0]])
    square = numpy_ref.causal_mask_for_positions(range(6), range(6))
    np.testing.assert_array_equal(square, numpy_ref.causal_mask(6))
    # positions need not be sorted or contiguous
    got = numpy_ref.causal_mask_for_positions([7, 2], [0, 5, 9])
    np.testing.assert_array_equal(got, [[0, 0, 1], [0, 1, 1]])
