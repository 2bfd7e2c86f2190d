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

from mha_ref import numpy_ref, tiled, torch_ref
from mha_ref.tolerances import atol

B, H, TQ, TK, D = 2, 3, 4, 5, 6
ATOL64 = 1e-10  # float64 against SDPA or autograd: ~1e-15 in practice
MIRRORS = pytest.mark.parametrize(
    "ref", [numpy_ref, torch_ref], ids=["numpy", "torch"]
)


def qkv(make_tensor, dv=D, dtype=torch.float64):
    return (
        make_tensor((B, H, TQ, D), dtype=dtype, seed=1),
        make_tensor((B, H, TK, D), dtype=dtype, seed=2),
        make_tensor((B, H, TK, dv), dtype=dtype, seed=3),
    )


def in_framework(ref, array):
    """A NumPy array as the mirror's own type: a tensor for torch_ref."""
    return array if ref is numpy_ref else torch.from_numpy(array)


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


@MIRRORS
@pytest.mark.parametrize(
    "dtype",
    [np.int64, np.float32, np.float64, np.uint8],
    ids=["int64", "float32", "float64", "uint8"],
)
def test_attention_rejects_non_bool_mask(ref, dtype, rng):
    q = rng.standard_normal((TQ, D))
    k = v = rng.standard_normal((TK, D))
    mask = np.zeros((TQ, TK), dtype=dtype)
    with pytest.raises(TypeError, match="boolean with True = blocked"):
        ref.attention(*(in_framework(ref, a) for a in (q, k, v, mask)))


@MIRRORS
@pytest.mark.parametrize(
    ("lead", "shape"),
    [
        ((B,), (TK, TQ)),
        ((B,), (3, TQ, TK)),
        ((B,), (TQ, 1, TK)),
        ((B, H), (TK, TQ)),
    ],
    ids=["Tk-Tq", "3-Tq-Tk", "Tq-1-Tk", "heads-Tk-Tq"],
)
def test_attention_rejects_non_broadcasting_mask(ref, lead, shape, rng):
    q = rng.standard_normal((*lead, TQ, D))
    k = v = rng.standard_normal((*lead, TK, D))
    mask = np.zeros(shape, dtype=bool)
    pattern = (
        rf"mask of shape \({', '.join(map(str, shape))}\) does not "
        rf"broadcast .*\(\.\.\., Tq, Tk\) = "
        rf"\({', '.join(map(str, (*lead, TQ, TK)))}\)"
    )
    with pytest.raises(ValueError, match=pattern):
        ref.attention(*(in_framework(ref, a) for a in (q, k, v, mask)))


@MIRRORS
@pytest.mark.parametrize(
    ("shape", "row", "n_rows"),
    [
        ((B, 1, TQ, TK), (1, 0, 2), H),  # batch 1, every head, query 2
        ((B, H, TQ, TK), (0, 2, 1), 1),  # batch 0, head 2, query 1
    ],
    ids=["every-head", "one-head"],
)
def test_attention_rejects_fully_masked_row_naming_it(
    ref, shape, row, n_rows, rng
):
    q = rng.standard_normal((B, H, TQ, D))
    k = v = rng.standard_normal((B, H, TK, D))
    mask = np.zeros(shape, dtype=bool)
    mask[row] = True
    where = ", ".join(map(str, row))
    with pytest.raises(
        ValueError,
        match=rf"query row at index \({where}\) \(of {n_rows} such rows",
    ):
        ref.attention(*(in_framework(ref, a) for a in (q, k, v, mask)))


@MIRRORS
@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        (((TQ,), (TK, D), (TK, D)), r"q must have at least 2 dims"),
        (
            ((TQ, D), (TK, D + 1), (TK, D)),
            r"same last dim .*q \(4, 6\) vs k \(5, 7\)",
        ),
        (
            ((TQ, D), (TK, D), (TK + 1, D)),
            r"number of keys Tk: k \(5, 6\) vs v \(6, 6\)",
        ),
        (((2, TQ, D), (3, TK, D), (3, TK, D)), r"batch dims .* broadcast"),
    ],
    ids=["q-1-d", "head-size", "keys", "batch"],
)
def test_attention_rejects_mismatched_shapes(ref, shapes, message, rng):
    arrays = (in_framework(ref, rng.standard_normal(s)) for s in shapes)
    with pytest.raises(ValueError, match=message):
        ref.attention(*arrays)


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
# overflow: test_attention_fp16_overflowing_row_matches_sdpa_not_nan
# below checks their right answer
@pytest.mark.parametrize("dtype", [torch.float32], ids=str)
def test_attention_rejects_overflowing_scores_instead_of_nan(dtype):
    big = torch.finfo(dtype).max ** 0.5 * 4  # q . k overflows to +inf
    q = k = torch.tensor([[big, 0.0]], dtype=dtype)
    with pytest.raises(ValueError, match=r"hold inf at index \(0, 0\)"):
        torch_ref.attention(q, k, torch.ones(1, 2, dtype=dtype))


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


def huge_negative_scores(to_torch=False):
    q = np.array([[1.0, 0.0], [1e200, 0.0]])  # row 1: scores -1e400
    k = np.array([[-1e200, 0.0], [-1e200, 1.0]])
    v = np.ones((2, 3))
    return [torch.from_numpy(a) for a in (q, k, v)] if to_torch else (q, k, v)


@pytest.mark.parametrize("to_torch", [False, True], ids=["numpy", "torch"])
def test_attention_all_minus_inf_row_names_overflow(to_torch):
    # a row of -inf scores without a mask: an overflow, not "every key
    # masked"
    attend = torch_ref.attention if to_torch else numpy_ref.attention
    with (
        np.errstate(over="ignore"),
        pytest.raises(
            ValueError,
            match=r"row at index \(1,\) is -inf, "
            r"though the row has unmasked keys: q @ k\^T "
            r"overflowed float64 to -inf",
        ) as error,
    ):
        attend(*huge_negative_scores(to_torch))
    assert "every key masked" not in str(error.value)


def test_attention_without_keys_raises_naming_tk():
    for attend, zeros in (
        (torch_ref.attention, torch.zeros),
        (numpy_ref.attention, np.zeros),
    ):
        with pytest.raises(
            ValueError,
            match=r"at least one query and one "
            r"key, got Tq=2, Tk=0 \(q \(2, 4\), k \(0, 4\)\)",
        ):
            attend(zeros((2, 4)), zeros((0, 4)), zeros((0, 3)))


def test_numpy_layer_rejects_empty_sequences_and_head_size():
    module = numpy_ref.MultiHeadAttention(8, 2)
    with pytest.raises(
        ValueError,
        match=r"x must hold at least one "
        r"position, got shape \(1, 0, 8\)",
    ):
        module(np.zeros((1, 0, 8)))
    with pytest.raises(ValueError, match=r"got Tq=0, Tk=0"):
        numpy_ref.attention(*(np.zeros((0, 4)),) * 3)
    for attend, zeros in (
        (numpy_ref.attention, np.zeros),
        (torch_ref.attention, torch.zeros),
    ):
        with pytest.raises(
            ValueError,
            match=r"head size d .* must be at "
            r"least 1, got q \(2, 0\) and k \(3, 0\)",
        ):
            attend(zeros((2, 0)), zeros((3, 0)), zeros((3, 1)))


@pytest.mark.parametrize(
    ("dtypes", "pattern"),
    [
        (
            (torch.int64,) * 3,
            r"q has dtype torch.int64; expected a real "
            r"floating dtype",
        ),
        ((torch.bool,) * 3, r"q has dtype torch.bool; expected"),
        ((torch.complex64,) * 3, r"q has dtype torch.complex64; expected"),
        (
            (torch.float32, torch.float64, torch.float32),
            r"q, k, v must share one dtype, got q torch.float32, "
            r"k torch.float64, v torch.float32",
        ),
    ],
    ids=["int", "bool", "complex", "mixed"],
)
@pytest.mark.parametrize(
    "attend",
    [
        torch_ref.attention,
        tiled.tiled_attention_torch,
    ],
    ids=["attention", "tiled"],
)
def test_torch_attention_rejects_non_float_dtypes_naming_them(
    attend, dtypes, pattern
):
    q, k, v = (torch.ones(2, 3).to(dtype) for dtype in dtypes)
    with pytest.raises(TypeError, match=pattern):
        attend(q, k, v)


def test_torch_attention_refuses_numpy_inputs_naming_type():
    with pytest.raises(
        TypeError,
        match=r"v must be a torch.Tensor, got "
        r"ndarray",
    ):
        torch_ref.attention(
            torch.ones(2, 3), torch.ones(2, 3), np.ones((2, 3))
        )


def test_mask_dtype_error_names_the_dtype():
    q = np.zeros((2, 4))
    with pytest.raises(
        TypeError,
        match=r"boolean with True = blocked, got "
        r"dtype float64",
    ):
        numpy_ref.attention(q, q, q, np.zeros((2, 2)))
    qt = torch.zeros(2, 4)
    with pytest.raises(TypeError, match=r"got dtype torch.uint8"):
        torch_ref.attention(qt, qt, qt, torch.zeros(2, 2, dtype=torch.uint8))


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


def test_empty_rows_default_still_refuses(
    forward_pass, backward_pass, masked_row_case
):
    q, k, v, dout, mask = masked_row_case
    where = r"index \(0, 0, 2\).*every key masked"
    with pytest.raises(ValueError, match=where):
        forward_pass(q, k, v, mask)
    with pytest.raises(ValueError, match=where):
        backward_pass(q, k, v, dout, mask)


@pytest.mark.parametrize("bad", ["ignore", "Zero", None, 0])
def test_empty_rows_unknown_value_is_refused_naming_it(
    forward_pass, backward_pass, bad, qkv_dout
):
    q, k, v, dout = qkv_dout
    words = r"empty_rows must be 'raise' .* or 'zero'"
    with pytest.raises(ValueError, match=words):
        forward_pass(q, k, v, empty_rows=bad)
    with pytest.raises(ValueError, match=words):
        backward_pass(q, k, v, dout, empty_rows=bad)


def test_empty_rows_zero_keeps_overflow_an_error(forward_pass, qkv_dout):
    # "zero" is for rows the mask empties, not for scores that overflow
    q, k, v, _ = qkv_dout
    q[0, 1, 2] = k[0, 1] = 1e200  # row 2 of batch 0, head 1 overflows
    mask = np.zeros((4, 5), dtype=bool)
    mask[3] = True  # row 3 is empty: allowed with "zero"
    with (
        np.errstate(over="ignore", invalid="ignore"),
        pytest.raises(ValueError, match="overflowed"),
    ):
        forward_pass(q, k, v, mask, empty_rows="zero")
