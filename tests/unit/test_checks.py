"""mha_ref.checks: each check passes good input and names what is wrong."""

import re

import numpy as np
import pytest
import torch

from mha_ref import checks, numpy_ref, torch_ref
from mha_ref.tolerances import ATOL, atol


@pytest.mark.parametrize(("d_model", "n_head"), [(8, 1), (8, 2), (12, 3)])
def test_head_split_accepts_even_splits(d_model, n_head):
    assert checks.head_split(d_model, n_head) is None
    assert checks.head_split(np.int64(d_model), n_head) is None


def test_head_split_rejects_uneven_split_naming_both():
    with pytest.raises(ValueError, match=r"d_model=10 .* n_head=3"):
        checks.head_split(10, 3)


@pytest.mark.parametrize(
    ("d_model", "n_head", "error", "message"),
    [
        (8.0, 2, TypeError, r"d_model must be an int, got 8\.0"),
        (8, True, TypeError, r"n_head must be an int, got True"),
        (8, "2", TypeError, r"n_head must be an int, got '2'"),
        (0, 2, ValueError, r"d_model must be positive, got 0"),
        (8, -2, ValueError, r"n_head must be positive, got -2"),
    ],
)
def test_head_split_rejects_non_positive_or_non_int(
    d_model, n_head, error, message
):
    with pytest.raises(error, match=message):
        checks.head_split(d_model, n_head)


@pytest.mark.parametrize("bad", [2.0, True, "2", None])
def test_integer_rejects_non_ints_naming_them(bad):
    with pytest.raises(
        TypeError,
        match=rf"block_q must be an int, got "
        rf"{re.escape(repr(bad))}",
    ):
        checks.integer(bad, "block_q")
    assert checks.integer(np.int32(2), "block_q") is None


def test_first_index_is_row_major_first_true():
    flags = np.zeros((2, 3, 4), dtype=bool)
    flags[1, 0, 3] = flags[1, 2, 0] = True
    assert checks.first_index(flags) == (1, 0, 3)
    assert all(type(i) is int for i in checks.first_index(flags))


def test_qkv_shapes_returns_broadcast_batch_dims():
    assert checks.qkv_shapes((2, 1, 3, 4), (1, 5, 6, 4), (5, 6, 7)) == (
        2,
        5,
    )


@pytest.mark.parametrize(
    ("q", "k", "v", "message"),
    [
        ((4,), (3, 4), (3, 4), r"q must have at least 2 dims .*\(4,\)"),
        ((2, 4), (3, 5), (3, 5), r"same last dim .*q \(2, 4\) vs k \(3, 5\)"),
        ((2, 4), (3, 4), (5, 4), r"number of keys Tk: k \(3, 4\) vs v \(5"),
        ((2, 2, 4), (3, 3, 4), (3, 3, 4), r"batch dims of q \(2, 2, 4\)"),
    ],
)
def test_qkv_shapes_rejects_mismatches_naming_shapes(q, k, v, message):
    with pytest.raises(ValueError, match=message):
        checks.qkv_shapes(q, k, v)


@pytest.mark.parametrize(
    "mask", [(4, 5), (1, 4, 5), (2, 1, 4, 5), (2, 3, 1, 5), (5,)]
)
def test_mask_shape_accepts_broadcastable(mask):
    assert checks.mask_shape(mask, (2, 3, 4, 5)) is None


@pytest.mark.parametrize("mask", [(5, 4), (2, 4, 5), (1, 2, 3, 4, 5)])
def test_mask_shape_rejects_non_broadcasting_naming_shapes(mask):
    expected = re.escape(f"mask of shape {mask} does not broadcast to")
    with pytest.raises(ValueError, match=expected):
        checks.mask_shape(mask, (2, 3, 4, 5))


@pytest.mark.parametrize("kind", ["f", "i", "u"])
def test_mask_dtype_rejects_non_bool(kind):
    with pytest.raises(TypeError, match="boolean with True = blocked"):
        checks.mask_dtype(kind)
    assert checks.mask_dtype("b") is None


def test_every_row_has_a_key_names_first_empty_row_and_count():
    rows = np.zeros((2, 3), dtype=bool)
    rows[1, 2] = rows[1, 0] = True
    pattern = r"query row at index \(1, 0\) \(of 2 such rows.*\(2, 3\)\)"
    with pytest.raises(ValueError, match=pattern):
        checks.every_row_has_a_key(rows)
    assert checks.every_row_has_a_key(np.zeros((2, 3), bool)) is None


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_finite_names_value_and_index(bad):
    array = np.zeros((2, 3))
    array[1, 2] = bad
    with pytest.raises(
        ValueError,
        match=rf"v of shape \(2, 3\) holds "
        rf"{bad} at index \(1, 2\)",
    ):
        checks.finite(array, "v")
    assert checks.finite(np.zeros(3), "v") is None


@pytest.mark.parametrize("shape", [(2, 8), (1, 2, 3, 8), (2, 3, 4)])
def test_model_input_rejects_wrong_rank_or_width(shape):
    message = re.escape(f"(B, T, d_model=8), got {shape}")
    with pytest.raises(ValueError, match=message):
        checks.model_input(shape, 8)
    assert checks.model_input((2, 3, 8), 8) is None


def test_context_input_rejects_batch_mismatch_naming_shapes():
    with pytest.raises(
        ValueError,
        match=r"context batch \(3, 4, 8\) does "
        r"not match x batch \(2, 5, 8\)",
    ):
        checks.context_input((2, 5, 8), (3, 4, 8), 8)
    with pytest.raises(ValueError, match=r"context must have shape"):
        checks.context_input((2, 5, 8), (2, 4, 6), 8)
    assert checks.context_input((2, 5, 8), (2, 9, 8), 8) is None


@pytest.mark.parametrize(
    ("logits", "ftype"),
    [
        (np.array([True, False]), np.float32),
        (np.array([1, 2], dtype=np.int16), np.float32),
        (np.array([1, 2], dtype=np.int32), np.float64),
        (np.array([2**53, -(2**60)], dtype=np.int64), np.float64),
        (np.array([1.0, 2.0], dtype=np.float16), np.float32),
        (np.array([1.0, -np.inf], dtype=np.float32), np.float32),
    ],
)
def test_real_logits_converts_exactly_to_float(logits, ftype):
    values = checks.real_logits(logits)
    assert values.dtype == ftype
    np.testing.assert_array_equal(values, logits.astype(np.float64))


@pytest.mark.parametrize(
    ("logits", "index"),
    [
        (np.array([0, 2**53 + 1], dtype=np.int64), r"\(1,\)"),
        (np.array([[-(2**53) - 1]], dtype=np.int64), r"\(0, 0\)"),
        (np.array([2**64 - 1], dtype=np.uint64), r"\(0,\)"),
    ],
)
def test_real_logits_rejects_inexact_integers_naming_index(logits, index):
    with pytest.raises(
        ValueError,
        match=rf"at index {index} is not exactly "
        r"representable in float64",
    ):
        checks.real_logits(logits)


@pytest.mark.parametrize(
    "logits",
    [np.array([1 + 0j]), np.array([1.0], dtype=object), np.array(["a"])],
)
def test_real_logits_rejects_non_real_dtypes(logits):
    with pytest.raises(TypeError, match=r"logits must be real .* got dtype"):
        checks.real_logits(logits)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_real_logits_rejects_nan_and_plus_inf_naming_index(bad):
    logits = np.array([[0.0, 1.0], [2.0, bad]])
    with pytest.raises(ValueError, match=rf"hold {bad} at index \(1, 1\)"):
        checks.real_logits(logits)


def test_tolerances_atol_reads_numpy_and_torch_dtypes():
    torch = pytest.importorskip("torch")
    assert atol(torch.float32) == atol(np.float32) == ATOL["float32"]
    assert atol(torch.float64) == atol("float64") == ATOL["float64"]
    assert ATOL["float64"] < ATOL["float32"] < 1e-4
    assert ATOL["float32"] < atol(torch.float16) < atol(torch.bfloat16)
    for unknown in (torch.float8_e4m3fn, np.int32):
        with pytest.raises(ValueError, match="no tolerance for dtype"):
            atol(unknown)


@pytest.mark.parametrize(
    "module", [numpy_ref, torch_ref], ids=["numpy", "torch"]
)
def test_causal_mask_for_positions_rejects_2d_positions(module):
    with pytest.raises(
        ValueError,
        match=r"query_positions must be 1-D.*"
        r"\(1, 2\)",
    ):
        module.causal_mask_for_positions([[3, 4]], range(5))
    with pytest.raises(
        ValueError,
        match=r"key_positions must be 1-D.*"
        r"\(5, 1\)",
    ):
        module.causal_mask_for_positions([3, 4], [[j] for j in range(5)])


def test_torch_attention_names_a_numpy_mask():
    q = torch.zeros(1, 2, 4)
    with pytest.raises(TypeError, match=r"torch\.Tensor.*got ndarray"):
        torch_ref.attention(q, q, q, mask=np.zeros((2, 2), dtype=bool))


# positions a mask compares, and padding lengths (issue 28)

MIRRORS = pytest.mark.parametrize(
    "module", [numpy_ref, torch_ref], ids=["numpy", "torch"]
)


def as_framework(module, values, dtype):
    """values as a NumPy array of dtype, or the torch tensor of it."""
    array = np.asarray(values, dtype=dtype)
    return array if module is numpy_ref else torch.from_numpy(array)


@MIRRORS
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("which", ["query_positions", "key_positions"])
def test_causal_mask_for_positions_rejects_non_finite_positions(
    module, bad, which
):
    # a NaN query position compared False with every key: it saw them all
    positions = {"query_positions": [3.0, 4.0], "key_positions": [0.0] * 5}
    positions[which] = [*positions[which][:-1], bad]
    with pytest.raises(
        ValueError, match=rf"{which} of shape .* holds {bad} at index"
    ):
        module.causal_mask_for_positions(
            *(
                as_framework(module, positions[n], np.float64)
                for n in ("query_positions", "key_positions")
            )
        )


@MIRRORS
@pytest.mark.parametrize(
    "dtype", [np.uint8, np.uint16, np.uint32, np.uint64, np.int32]
)
def test_causal_mask_for_positions_accepts_every_integer_dtype(module, dtype):
    got = module.causal_mask_for_positions(
        as_framework(module, [3, 4], dtype),
        as_framework(module, range(5), dtype),
    )
    oracle = np.arange(5)[None, :] > np.array([3, 4])[:, None]
    np.testing.assert_array_equal(np.asarray(got), oracle)


@MIRRORS
def test_causal_mask_for_positions_compares_fractional_positions(module):
    # as they are: position interpolation gives queries between keys
    got = module.causal_mask_for_positions(
        as_framework(module, [0.5, 2.0], np.float64), range(3)
    )
    np.testing.assert_array_equal(
        np.asarray(got), [[False, True, True], [False, False, False]]
    )


@MIRRORS
def test_causal_mask_for_positions_reads_iterators_once(module):
    got = module.causal_mask_for_positions(iter([3, 4]), (j for j in range(5)))
    np.testing.assert_array_equal(
        np.asarray(got), numpy_ref.causal_mask_for_positions([3, 4], range(5))
    )


@MIRRORS
@pytest.mark.parametrize(
    ("positions", "message"),
    [
        (
            [True, False],
            r"query_positions must hold integers.*dtype (torch\.)?bool",
        ),
        ([1 + 2j, 0j], r"query_positions must hold integers.*complex"),
    ],
)
def test_causal_mask_for_positions_rejects_non_real_positions(
    module, positions, message
):
    with pytest.raises(TypeError, match=message):
        module.causal_mask_for_positions(positions, range(2))


@MIRRORS
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_key_padding_mask_accepts_unsigned_lengths(module, dtype):
    got = module.key_padding_mask(as_framework(module, [3, 1], dtype))
    oracle = np.arange(3)[None, :] >= np.array([3, 1])[:, None]
    np.testing.assert_array_equal(np.asarray(got), oracle[:, None, None, :])


@MIRRORS
def test_key_padding_mask_reads_an_iterator(module):
    got = module.key_padding_mask(iter([3, 1]), tk=4)
    oracle = numpy_ref.key_padding_mask([3, 1], tk=4)
    np.testing.assert_array_equal(np.asarray(got), oracle)


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64]
)
def test_tensor_finite_fast_sum_never_hides_a_nan_or_an_infinity(dtype):
    """The one-reduction test agrees with the elementwise one, including
    finite values whose sum overflows and infinities that cancel."""
    big = torch.finfo(dtype).max
    cases = {
        "finite": (torch.tensor([1.0, -2.0, 3.0], dtype=dtype), True),
        "empty": (torch.zeros(0, 3, dtype=dtype), True),
        "overflowing sum": (torch.full((4,), big, dtype=dtype), True),
        "nan": (torch.tensor([1.0, float("nan")], dtype=dtype), False),
        "inf": (torch.tensor([float("inf"), 1.0], dtype=dtype), False),
        "cancelling": (
            torch.tensor([float("inf"), float("-inf")], dtype=dtype),
            False,
        ),
    }
    for name, (tensor, expected) in cases.items():
        assert checks.tensor_finite(tensor) is expected, name
        assert bool(tensor.isfinite().all()) is expected, name
    grad = torch.tensor([1.0, 2.0], dtype=dtype, requires_grad=True)
    assert checks.tensor_finite(grad) is True
