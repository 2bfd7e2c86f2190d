"""torch_ref.attention and the causal masks, against SDPA and NumPy.

The input checks both mirrors share run once per mirror (numpy_ref and
torch_ref), as do the edge inputs they refuse: no keys, no head size,
a row of -inf scores, foreign types and dtypes. float16 scores are
computed in float32, as SDPA computes them. empty_rows="zero" is held
to SDPA's boolean mask in every forward pass, plain and tiled.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_ref import numpy_ref, torch_ref
from mha_ref.tolerances import atol

B, H, TQ, TK, D = 2, 3, 4, 5, 6
ATOL64 = 1e-10  # float64 against SDPA or autograd: ~1e-15 in practice


def qkv(make_tensor, dv=D, dtype=torch.float64):
    return (
        make_tensor((B, H, TQ, D), dtype=dtype, seed=1),
        make_tensor((B, H, TK, D), dtype=dtype, seed=2),
        make_tensor((B, H, TK, dv), dtype=dtype, seed=3),
    )


def as_numpy(x):
    return x.detach().double().numpy() if isinstance(x, torch.Tensor) else x


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


# float16 scores are computed in float32 (as SDPA does) and no longer
# overflow: test_attention_fp16_overflowing_row_matches_sdpa_not_nan
# below checks their right answer


def overflowing_fp16(requires_grad=False):
    """q . k = -99,000 and -102,000: beyond fp16's 65,504 for both keys."""
    q = torch.tensor([[300.0, 0.0]], dtype=torch.float16)
    k = torch.tensor([[-330.0, 0.0], [-340.0, 0.0]], dtype=torch.float16)
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float16)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def test_attention_fp16_overflowing_row_matches_sdpa_not_nan():
    q, k, v = overflowing_fp16()
    out, weights = torch_ref.attention(q, k, v)
    sdpa = F.scaled_dot_product_attention(q[None], k[None], v[None])[0]
    expected, _ = torch_ref.attention(q.double(), k.double(), v.double())
    assert out.dtype == weights.dtype == torch.float16
    # the larger score (-99,000) takes all the weight: out = v[0]
    torch.testing.assert_close(out.double(), expected, atol=0, rtol=0)
    torch.testing.assert_close(out, sdpa, atol=0, rtol=0)
    torch.testing.assert_close(
        weights, torch.tensor([[1.0, 0.0]], dtype=torch.float16)
    )


def test_attention_fp16_overflowing_row_has_finite_gradients():
    q, k, v = overflowing_fp16(requires_grad=True)
    out, _ = torch_ref.attention(q, k, v)
    out.sum().backward()
    for grad in (q.grad, k.grad, v.grad):
        assert grad.dtype == torch.float16
        assert grad.isfinite().all()
    # all the weight on key 0: v[0] gets the whole upstream gradient
    torch.testing.assert_close(
        v.grad, torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float16)
    )


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


# Edge inputs of both mirrors: a right answer or an error naming them


# empty_rows="zero": a row with no allowed key gives 0, as SDPA


def test_attention_empty_rows_zero_matches_sdpa(
    forward_pass, empty_rows_case, sdpa_reference
):
    q, k, v, dout, mask = empty_rows_case
    expected, _ = sdpa_reference(q, k, v, dout, mask)
    empty = mask.all(axis=-1)
    assert empty.any()
    assert not empty.all()
    out = as_numpy(forward_pass(q, k, v, mask, empty_rows="zero"))
    np.testing.assert_allclose(out, expected, rtol=0, atol=ATOL64)
    rows = np.broadcast_to(empty, out.shape[:-1])
    assert (out[rows] == 0).all()  # exactly 0, not merely small
    assert np.abs(out[~rows]).min() > 0


def test_torch_attention_empty_rows_zero_autograd_matches_sdpa(
    masked_row_case, sdpa_reference
):
    # the softmax of an empty row is NaN before it is zeroed: autograd
    # through torch_ref.attention must still give SDPA's gradients
    q, k, v, dout, mask = masked_row_case
    _, expected = sdpa_reference(q, k, v, dout, mask)
    leaves = [torch.from_numpy(a).clone().requires_grad_() for a in (q, k, v)]
    out, weights = torch_ref.attention(
        *leaves, torch.from_numpy(mask), empty_rows="zero"
    )
    out.backward(torch.from_numpy(dout))
    for name, leaf, e in zip("qkv", leaves, expected, strict=True):
        np.testing.assert_allclose(
            leaf.grad.numpy(), e, rtol=0, atol=ATOL64, err_msg=f"d{name}"
        )
    assert (weights[:, :, 2] == 0).all()
    torch.testing.assert_close(
        weights[:, :, [0, 1, 3]].sum(-1),
        torch.ones(2, 3, 3, dtype=torch.float64),
    )
