"""Refusals of the doors of torch_ref.py (mha_ref/guards/torch_ref.py),
and of the attention passes shared by every mirror (the forward_pass
and backward_pass fixtures): one case per door, plus one per bad value."""

import numpy as np
import pytest
import torch
from test_backward import t
from test_grouped_heads import random_gqa_module
from test_score_modifiers import (
    case,
)
from test_torch_ref_attention import TK as TK_TRA
from test_torch_ref_attention import TQ, B, D, H, qkv
from test_torch_ref_mha import D_MODEL, N_HEAD, paths
from test_torch_ref_mha import TK as TK_TRM
from torch import nn

from conftest import BACKWARDS, FORWARDS
from mha_ref import numpy_ref, tiled, torch_ref


@pytest.fixture(params=["numpy", "torch"])
def ref(request):
    """numpy_ref or torch_ref: both mirrors share every behaviour."""
    return numpy_ref if request.param == "numpy" else torch_ref


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(31)


def test_torch_attention_names_a_numpy_mask():
    q = torch.zeros(1, 2, 4)
    with pytest.raises(TypeError, match=r"torch\.Tensor.*got ndarray"):
        torch_ref.attention(q, q, q, mask=np.zeros((2, 2), dtype=bool))


MIRRORS = pytest.mark.parametrize(
    "ref", [numpy_ref, torch_ref], ids=["numpy", "torch"]
)


def in_framework(ref, array):
    """A NumPy array as the mirror's own type: a tensor for torch_ref."""
    return array if ref is numpy_ref else torch.from_numpy(array)


@MIRRORS
@pytest.mark.parametrize(
    "dtype",
    [np.int64, np.float32, np.float64, np.uint8],
    ids=["int64", "float32", "float64", "uint8"],
)
def test_attention_rejects_non_bool_mask(ref, dtype, rng):
    q = rng.standard_normal((TQ, D))
    k = v = rng.standard_normal((TK_TRA, D))
    mask = np.zeros((TQ, TK_TRA), dtype=dtype)
    with pytest.raises(TypeError, match="boolean with True = blocked"):
        ref.attention(*(in_framework(ref, a) for a in (q, k, v, mask)))


@MIRRORS
@pytest.mark.parametrize(
    ("lead", "shape"),
    [
        ((B,), (TK_TRA, TQ)),
        ((B,), (3, TQ, TK_TRA)),
        ((B,), (TQ, 1, TK_TRA)),
        ((B, H), (TK_TRA, TQ)),
    ],
    ids=["Tk-Tq", "3-Tq-Tk", "Tq-1-Tk", "heads-Tk-Tq"],
)
def test_attention_rejects_non_broadcasting_mask(ref, lead, shape, rng):
    q = rng.standard_normal((*lead, TQ, D))
    k = v = rng.standard_normal((*lead, TK_TRA, D))
    mask = np.zeros(shape, dtype=bool)
    pattern = (
        rf"mask of shape \({', '.join(map(str, shape))}\) does not "
        rf"broadcast .*\(\.\.\., Tq, Tk\) = "
        rf"\({', '.join(map(str, (*lead, TQ, TK_TRA)))}\)"
    )
    with pytest.raises(ValueError, match=pattern):
        ref.attention(*(in_framework(ref, a) for a in (q, k, v, mask)))


@MIRRORS
@pytest.mark.parametrize(
    ("shape", "row", "n_rows"),
    [
        ((B, 1, TQ, TK_TRA), (1, 0, 2), H),  # batch 1, every head, query 2
        ((B, H, TQ, TK_TRA), (0, 2, 1), 1),  # batch 0, head 2, query 1
    ],
    ids=["every-head", "one-head"],
)
def test_attention_rejects_fully_masked_row_naming_it(
    ref, shape, row, n_rows, rng
):
    q = rng.standard_normal((B, H, TQ, D))
    k = v = rng.standard_normal((B, H, TK_TRA, D))
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
        (((TQ,), (TK_TRA, D), (TK_TRA, D)), r"q must have at least 2 dims"),
        (
            ((TQ, D), (TK_TRA, D + 1), (TK_TRA, D)),
            r"same last dim .*q \(4, 6\) vs k \(5, 7\)",
        ),
        (
            ((TQ, D), (TK_TRA, D), (TK_TRA + 1, D)),
            r"number of keys Tk: k \(5, 6\) vs v \(6, 6\)",
        ),
        (
            ((2, TQ, D), (3, TK_TRA, D), (3, TK_TRA, D)),
            r"batch dims .* broadcast",
        ),
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


@pytest.mark.parametrize("dtype", [torch.float32], ids=str)
def test_attention_rejects_overflowing_scores_instead_of_nan(dtype):
    big = torch.finfo(dtype).max ** 0.5 * 4  # q . k overflows to +inf
    q = k = torch.tensor([[big, 0.0]], dtype=dtype)
    with pytest.raises(ValueError, match=r"hold inf at index \(0, 0\)"):
        torch_ref.attention(q, k, torch.ones(1, 2, dtype=dtype))


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


# one case per door (the four forwards, then the four backwards), and
# one per bad value on a single door: the check is one line, shared
PASSES = [("forward", name) for name in FORWARDS] + [
    ("backward", name) for name in BACKWARDS
]


def run_pass(kind, name, q, k, v, dout, mask=None, **kw):
    """The forward or backward named, on q, k, v (and dout)."""
    if kind == "forward":
        return FORWARDS[name](q, k, v, mask, **kw)
    return BACKWARDS[name](q, k, v, dout, mask, **kw)


@pytest.mark.parametrize(("kind", "name"), PASSES)
def test_empty_rows_default_still_refuses(kind, name, masked_row_case):
    q, k, v, dout, mask = masked_row_case
    where = r"index \(0, 0, 2\).*every key masked"
    with pytest.raises(ValueError, match=where):
        run_pass(kind, name, q, k, v, dout, mask)


EMPTY_ROWS_WORDS = r"empty_rows must be 'raise' .* or 'zero'"


@pytest.mark.parametrize(("kind", "name"), PASSES)
def test_empty_rows_unknown_value_is_refused_by_every_pass(
    kind, name, qkv_dout
):
    q, k, v, dout = qkv_dout
    with pytest.raises(ValueError, match=EMPTY_ROWS_WORDS):
        run_pass(kind, name, q, k, v, dout, empty_rows="ignore")


@pytest.mark.parametrize("bad", ["ignore", "Zero", None, 0])
def test_empty_rows_unknown_value_is_refused_naming_it(bad, qkv_dout):
    q, k, v, _ = qkv_dout
    with pytest.raises(ValueError, match=EMPTY_ROWS_WORDS):
        numpy_ref.attention(q, k, v, empty_rows=bad)


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


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["numpy", "torch"])
@pytest.mark.parametrize(("d_model", "n_head"), [(10, 4), (12, 5)])
def test_mha_rejects_uneven_head_split(ref, d_model, n_head):
    with pytest.raises(
        ValueError,
        match=rf"d_model={d_model} is not divisible by "
        rf"n_head={n_head}",
    ):
        ref.MultiHeadAttention(d_model, n_head)
    with pytest.raises(TypeError, match=r"n_head must be an int"):
        ref.MultiHeadAttention(12, 3.0)


@pytest.mark.parametrize("path", ["module", "sdpa", "library"])
def test_mha_paths_reject_fully_masked_row_naming_it(
    path, make_module, make_tensor
):
    forward = paths(make_module(D_MODEL, N_HEAD))[path]
    x = make_tensor((B, TQ, D_MODEL), seed=1)
    mask = torch.zeros(B, 1, TQ, TQ, dtype=torch.bool)
    mask[1, 0, 2] = True  # batch 1, every head, query 2: no key at all
    with pytest.raises(
        ValueError,
        match=r"query row at index \(1, 0, 2\) "
        rf"\(of {N_HEAD} such rows",
    ):
        forward(x, mask, None)


@pytest.mark.parametrize("path", ["module", "sdpa", "library"])
def test_mha_paths_reject_fully_masked_cross_row(
    path, make_module, make_tensor
):
    forward = paths(make_module(D_MODEL, N_HEAD))[path]
    x = make_tensor((B, TQ, D_MODEL), seed=1)
    context = make_tensor((B, TK_TRM, D_MODEL), seed=2)
    mask = torch.zeros(B, 1, 1, TK_TRM, dtype=torch.bool)
    mask[0] = True  # batch 0 pads every key
    with pytest.raises(ValueError, match=r"query row at index \(0, 0, 0\)"):
        forward(x, mask, context)


@pytest.mark.parametrize("path", ["module", "sdpa", "library"])
def test_mha_paths_reject_bad_masks(path, make_module, make_tensor):
    forward = paths(make_module(D_MODEL, N_HEAD))[path]
    x = make_tensor((B, TQ, D_MODEL), seed=1)
    with pytest.raises(TypeError, match="boolean with True = blocked"):
        forward(x, torch.zeros(TQ, TQ), None)
    with pytest.raises(
        ValueError,
        match=r"mask of shape \(5, 4, 4\) does "
        r"not broadcast .* \(2, 3, 4, 4\)",
    ):
        forward(x, torch.zeros(5, TQ, TQ, dtype=torch.bool), None)


@pytest.mark.parametrize("path", ["module", "sdpa"])
@pytest.mark.parametrize(
    "shape", [(TQ, D_MODEL), (B, TQ, D_MODEL + 1), (1, B, TQ, D_MODEL)]
)
def test_mha_paths_reject_wrong_input_shape_naming_it(
    path, shape, make_module, make_tensor
):
    forward = paths(make_module(D_MODEL, N_HEAD))[path]
    with pytest.raises(
        ValueError,
        match=r"x must have shape \(B, T, "
        rf"d_model=12\), got \({shape[0]}, ",
    ):
        forward(make_tensor(shape), None, None)


@pytest.mark.parametrize("path", ["module", "sdpa"])
def test_mha_paths_reject_bad_context_naming_shapes(
    path, make_module, make_tensor
):
    forward = paths(make_module(D_MODEL, N_HEAD))[path]
    x = make_tensor((B, TQ, D_MODEL), seed=1)
    with pytest.raises(
        ValueError,
        match=r"context batch \(3, 6, 12\) does "
        r"not match x batch \(2, 4, 12\)",
    ):
        forward(x, None, make_tensor((3, TK_TRM, D_MODEL)))
    with pytest.raises(ValueError, match=r"context must have shape"):
        forward(x, None, make_tensor((B, TK_TRM, D_MODEL - 1)))


@pytest.mark.parametrize("path", ["module", "sdpa"])
def test_mha_paths_reject_nan_input_naming_index(
    path, make_module, make_tensor
):
    forward = paths(make_module(D_MODEL, N_HEAD, bias=False))[path]
    x = make_tensor((B, TQ, D_MODEL), seed=1)
    x[1, 2, 0] = float("nan")  # reported in x, before it reaches q
    with pytest.raises(
        ValueError,
        match=r"x of shape \(2, 4, 12\) "
        r"holds nan at index \(1, 2, 0\)",
    ):
        forward(x, None, None)


@pytest.mark.parametrize("path", ["module", "sdpa"])
def test_mha_paths_reject_overflowing_scores(path, make_module, make_tensor):
    # q and k stay finite (~1e20) but q . k (~1e40) overflows float32
    forward = paths(make_module(D_MODEL, N_HEAD, dtype=torch.float32))[path]
    x = 1e20 * make_tensor((B, TQ, D_MODEL), dtype=torch.float32, seed=1)
    with pytest.raises(ValueError, match=r"holds? (inf|nan) at index \("):
        forward(x, None, None)


@pytest.mark.parametrize("path", ["module", "sdpa", "library"])
def test_mha_forwards_without_keys_raise_naming_context(
    path, make_module, make_tensor
):
    forward = paths(make_module(D_MODEL, N_HEAD))[path]
    x = make_tensor((B, TQ, D_MODEL))
    context = make_tensor((B, 0, D_MODEL))
    with pytest.raises(
        ValueError,
        match=r"context must hold at least one "
        rf"position, got shape \({B}, 0, {D_MODEL}\)",
    ):
        forward(x, None, context)


@pytest.mark.parametrize("path", ["module", "sdpa", "library"])
def test_mha_forwards_reject_bad_x_naming_it(path, make_module, make_tensor):
    forward = paths(make_module(D_MODEL, N_HEAD))[path]
    x = make_tensor((B, TQ, D_MODEL))  # float64, as the module
    with pytest.raises(
        TypeError,
        match=r"x has dtype torch.int64; "
        r"expected a real floating dtype",
    ):
        forward(x.long(), None, None)
    with pytest.raises(
        TypeError,
        match=r"x has dtype torch.float32 but "
        r"the module's weights are torch.float64",
    ):
        forward(x.float(), None, None)
    with pytest.raises(
        ValueError,
        match=r"x must have shape \(B, T, "
        rf"d_model={D_MODEL}\), got \({B}, {TQ}, 6\)",
    ):
        forward(x[..., :6], None, None)
    with pytest.raises(
        ValueError,
        match=rf"context batch \(1, {TQ}, {D_MODEL}\) does "
        rf"not match x batch \({B}, {TQ}, {D_MODEL}\)",
    ):
        forward(x, None, x[:1])
    x[1, 2, 0] = float("nan")
    with pytest.raises(
        ValueError,
        match=rf"x of shape \({B}, {TQ}, {D_MODEL}\) holds "
        r"nan at index \(1, 2, 0\)",
    ):
        forward(x, None, None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present")
def test_mha_on_missing_cuda_raises_naming_device():
    with pytest.raises(
        ValueError,
        match=r"device='cuda' asks for CUDA, "
        r"but torch.cuda.is_available\(\) is False",
    ):
        torch_ref.MultiHeadAttention(D_MODEL, N_HEAD, device="cuda")


def test_torch_ref_to_numpy_is_from_torch(make_module):
    module = make_module(D_MODEL, N_HEAD, bias=True)
    twin = torch_ref.to_numpy(module)
    assert isinstance(twin, numpy_ref.MultiHeadAttention)
    x = torch.randn(B, TQ, D_MODEL, dtype=torch.float64)
    np.testing.assert_allclose(
        twin(x.numpy())[0],
        numpy_ref.MultiHeadAttention.from_torch(module)(x.numpy())[0],
        atol=0,
        rtol=0,
    )
    with pytest.raises(
        TypeError,
        match=r"torch_ref\.MultiHeadAttention.*"
        r"got Linear",
    ):
        torch_ref.to_numpy(nn.Linear(2, 2))


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present")
def test_mha_refuses_a_numpy_int_device_without_cuda():
    # np.int64(0) is CUDA device 0: torch raised its own RuntimeError
    with pytest.raises(ValueError, match=r"device=np\.int64\(0\) asks for"):
        torch_ref.MultiHeadAttention(D_MODEL, N_HEAD, device=np.int64(0))


@pytest.mark.parametrize(
    "fn",
    [
        torch_ref.attention_backward,
        tiled.tiled_attention_backward_torch,
    ],
    ids=["torch_ref", "tiled_torch"],
)
def test_torch_backward_refuses_a_foreign_dout_naming_it(fn, qkv_dout):
    q, k, v, dout = qkv_dout
    with pytest.raises(TypeError, match=r"dout must be a torch.Tensor"):
        fn(t(q), t(k), t(v), dout)
    with pytest.raises(TypeError, match=r"dout has dtype torch.int64"):
        fn(t(q), t(k), t(v), t(dout).long())
    with pytest.raises(ValueError, match=r"dout of shape \(2, 3, 4, 4\)"):
        fn(t(q), t(k), t(v), t(dout)[..., :4])


@pytest.mark.parametrize(("n_kv_head", "rope"), [(2, False), (6, True)])
def test_library_version_refuses_what_it_cannot_express(n_kv_head, rope):
    module = random_gqa_module(n_kv_head, rope=rope)
    with pytest.raises(ValueError, match=r"nn\.MultiheadAttention has"):
        torch_ref.library_version(module)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present")
def test_causal_mask_on_missing_cuda_raises_naming_device():
    with pytest.raises(ValueError, match="device='cuda'"):
        torch_ref.causal_mask(3, device="cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present")
def test_causal_mask_refuses_a_numpy_int_device_without_cuda():
    # np.int64(0) is CUDA device 0; torch raised its own RuntimeError
    with pytest.raises(ValueError, match=r"device=np\.int64\(0\) asks for"):
        torch_ref.causal_mask(3, device=np.int64(0))


def test_attention_torch_refuses_a_numpy_bias(gen):
    q, k, v, mask, bias, _ = case(gen)
    with pytest.raises(TypeError, match=r"bias must be a torch\.Tensor"):
        torch_ref.attention(q, k, v, mask, bias=bias.numpy())


def test_softmax_with_sinks_torch_refuses_integer_scores():
    scores = torch.zeros(1, 1, 2, dtype=torch.long)
    with pytest.raises(TypeError, match="scores must be a floating tensor"):
        torch_ref.softmax_with_sinks(scores, torch.zeros(1))
