"""numpy_ref.attention and the causal masks, against PyTorch's SDPA.

Integer, bool and list inputs compute in float (torch tensors are
refused), and empty_rows="zero" gives a row with no key zero weights.
The input checks it shares with torch_ref run for both mirrors in
test_torch_ref_attention.py.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_ref import numpy_ref, tiled
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


# Integer, bool and list inputs compute in float; tensors are refused

INT8_Q = np.array([[10, 10]], dtype=np.int8)  # q . k = 200 wraps in int8
INT8_K = np.array([[10, 10], [-10, 10]], dtype=np.int8)
INT8_V = np.array([[1, 0], [0, 1]], dtype=np.int8)
BOOL_Q = np.array([[True, True]])  # q . k = 2 and 1; bool @ gives OR
BOOL_K = np.array([[True, True], [True, False]])
BOOL_V = np.array([[True, False], [False, True]])


@pytest.mark.parametrize(
    ("q", "k", "v"),
    [(INT8_Q, INT8_K, INT8_V), (BOOL_Q, BOOL_K, BOOL_V)],
    ids=["int8", "bool"],
)
@pytest.mark.parametrize(
    "attend",
    [
        lambda q, k, v: numpy_ref.attention(q, k, v)[0],
        tiled.tiled_attention_numpy,
    ],
    ids=["attention", "tiled"],
)
def test_numpy_attention_upcasts_int_and_bool_inputs(attend, q, k, v):
    expected, _ = numpy_ref.attention(
        *(a.astype(np.float64) for a in (q, k, v))
    )
    out = attend(q, k, v)
    assert out.dtype == np.float32  # NumPy's promotion with float32
    np.testing.assert_allclose(out, expected, atol=atol("float32"), rtol=0)
    assert abs(out[0, 0] - out[0, 1]) > 0.1  # not the 50/50 of a wrap


def test_numpy_attention_empty_rows_zero_weights_are_zero_rows(
    masked_row_case,
):
    q, k, v, _, mask = masked_row_case
    out, weights = numpy_ref.attention(q, k, v, mask, empty_rows="zero")
    assert (weights[:, :, 2] == 0).all()
    np.testing.assert_allclose(weights[:, :, [0, 1, 3]].sum(-1), 1.0)
    expected = np.where(mask, 0.0, weights) @ v  # blocked keys weigh 0
    np.testing.assert_allclose(out, expected, **TOL)
