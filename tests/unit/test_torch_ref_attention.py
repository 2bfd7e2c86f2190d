"""torch_ref.attention and the causal masks, against SDPA and NumPy."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_ref import numpy_ref, torch_ref
from mha_ref.tolerances import atol

B, H, TQ, TK, D = 2, 3, 4, 5, 6


def qkv(make_tensor, dv=D, dtype=torch.float64):
    return (
        make_tensor((B, H, TQ, D), dtype=dtype, seed=1),
        make_tensor((B, H, TK, D), dtype=dtype, seed=2),
        make_tensor((B, H, TK, dv), dtype=dtype, seed=3),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("dv", [D, 1, 9], ids=lambda dv: f"dv={dv}")
def test_attention_matches_sdpa_and_numpy(dv, dtype, make_tensor):
    q, k, v = qkv(make_tensor, dv, dtype)
    out, weights = torch_ref.attention(q, k, v)
    tol = {"atol": atol(dtype), "rtol": 0}
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v), **tol
    )
    out_np, weights_np = numpy_ref.attention(q.numpy(), k.numpy(), v.numpy())
    np.testing.assert_allclose(out.numpy(), out_np, **tol)
    np.testing.assert_allclose(weights.numpy(), weights_np, **tol)


@pytest.mark.parametrize(
    "shape",
    [(TQ, TK), (B, 1, TQ, TK), (1, H, TQ, TK), (B, H, TQ, TK), (B, 1, 1, TK)],
    ids=["shared", "per-batch", "per-head", "full", "key-padding"],
)
def test_attention_mask_broadcasts_like_sdpa(shape, make_tensor, make_mask):
    q, k, v = qkv(make_tensor)
    mask = make_mask(shape, seed=4)
    out, weights = torch_ref.attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask)
    torch.testing.assert_close(out, expected, atol=atol(q.dtype), rtol=0)
    full = mask.expand(B, H, TQ, TK)
    assert (weights[full] == 0).all()
    out_np, _ = numpy_ref.attention(
        q.numpy(), k.numpy(), v.numpy(), mask.numpy()
    )
    np.testing.assert_allclose(out.numpy(), out_np, atol=atol(q.dtype), rtol=0)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.int64, torch.uint8], ids=str
)
def test_attention_rejects_non_bool_mask(dtype, make_tensor):
    q, k, v = qkv(make_tensor)
    with pytest.raises(TypeError, match="boolean with True = blocked"):
        torch_ref.attention(q, k, v, torch.zeros(TQ, TK, dtype=dtype))


def test_attention_rejects_non_broadcasting_mask(make_tensor):
    q, k, v = qkv(make_tensor)
    with pytest.raises(
        ValueError,
        match=r"mask of shape \(5, 4\) does not "
        r"broadcast .* \(2, 3, 4, 5\)",
    ):
        torch_ref.attention(q, k, v, torch.zeros(TK, TQ, dtype=torch.bool))


def test_attention_rejects_fully_masked_row_naming_it(make_tensor):
    q, k, v = qkv(make_tensor)
    mask = torch.zeros(B, H, TQ, TK, dtype=torch.bool)
    mask[0, 2, 1] = True
    with pytest.raises(
        ValueError,
        match=r"query row at index \(0, 2, 1\) "
        r"\(of 1 such rows",
    ):
        torch_ref.attention(q, k, v, mask)


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        (((TQ,), (TK, D), (TK, D)), r"q must have at least 2 dims"),
        (((TQ, D), (TK, D + 1), (TK, D)), r"q \(4, 6\) vs k \(5, 7\)"),
        (((TQ, D), (TK, D), (TK + 1, D)), r"k \(5, 6\) vs v \(6, 6\)"),
        (((2, TQ, D), (3, TK, D), (3, TK, D)), r"batch dims .* broadcast"),
    ],
)
def test_attention_rejects_mismatched_shapes(shapes, message, make_tensor):
    tensors = (make_tensor(s) for s in shapes)
    with pytest.raises(ValueError, match=message):
        torch_ref.attention(*tensors)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_attention_rejects_nan_inputs_naming_them(name, dtype, make_tensor):
    tensors = dict(zip("qkv", qkv(make_tensor, dtype=dtype), strict=True))
    tensors[name][1, 2, 3, 4] = float("nan")
    with pytest.raises(
        ValueError,
        match=rf"{name} of shape .* holds nan "
        r"at index \(1, 2, 3, 4\)",
    ):
        torch_ref.attention(*tensors.values())


# float16 scores are computed in float32 (as SDPA does) and no longer
# overflow: tests/unit/test_edge_inputs.py checks their right answer
@pytest.mark.parametrize("dtype", [torch.float32], ids=str)
def test_attention_rejects_overflowing_scores_instead_of_nan(dtype):
    big = torch.finfo(dtype).max ** 0.5 * 4  # q . k overflows to +inf
    q = k = torch.tensor([[big, 0.0]], dtype=dtype)
    with pytest.raises(ValueError, match=r"hold inf at index \(0, 0\)"):
        torch_ref.attention(q, k, torch.ones(1, 2, dtype=dtype))


def test_attention_gradient_of_masked_scores_is_zero(make_tensor):
    q, k, v = (t.requires_grad_() for t in qkv(make_tensor))
    mask = torch.zeros(TQ, TK, dtype=torch.bool)
    mask[:, -1] = True  # nobody sees the last key
    out, _ = torch_ref.attention(q, k, v, mask)
    out.sum().backward()
    assert (k.grad[..., -1, :] == 0).all()
    assert (v.grad[..., -1, :] == 0).all()
    assert k.grad[..., :-1, :].abs().max() > 0


def test_causal_mask_matches_numpy_and_is_bool():
    for t in (1, 2, 5):
        got = torch_ref.causal_mask(t)
        assert got.dtype == torch.bool
        np.testing.assert_array_equal(got.numpy(), numpy_ref.causal_mask(t))
    expected = [
        [False, True, True],
        [False, False, True],
        [False, False, False],
    ]
    assert torch_ref.causal_mask(3).tolist() == expected


def test_causal_mask_for_positions_matches_numpy():
    cases = [([3, 4], range(5)), (range(6), range(6)), ([7, 2], [0, 5, 9])]
    for query_positions, key_positions in cases:
        got = torch_ref.causal_mask_for_positions(
            torch.tensor(list(query_positions)), key_positions
        )
        expected = numpy_ref.causal_mask_for_positions(
            query_positions, key_positions
        )
        np.testing.assert_array_equal(got.numpy(), expected)
    got = torch_ref.causal_mask_for_positions([3, 4], torch.arange(5))
    assert got.tolist() == [[False] * 4 + [True], [False] * 5]
