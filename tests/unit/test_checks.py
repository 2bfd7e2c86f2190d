"""mha_ref.checks: each check passes good input and names what is wrong."""

import numpy as np
import pytest
import torch

from mha_ref import checks, numpy_ref, torch_ref
from mha_ref.tolerances import ATOL, atol


@pytest.mark.parametrize(("d_model", "n_head"), [(8, 1), (8, 2), (12, 3)])
def test_head_split_accepts_even_splits(d_model, n_head):
    assert checks.head_split(d_model, n_head) is None
    assert checks.head_split(np.int64(d_model), n_head) is None


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
    "mask", [(4, 5), (1, 4, 5), (2, 1, 4, 5), (2, 3, 1, 5), (5,)]
)
def test_mask_shape_accepts_broadcastable(mask):
    assert checks.mask_shape(mask, (2, 3, 4, 5)) is None


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


def test_tolerances_atol_reads_numpy_and_torch_dtypes():
    torch = pytest.importorskip("torch")
    assert atol(torch.float32) == atol(np.float32) == ATOL["float32"]
    assert atol(torch.float64) == atol("float64") == ATOL["float64"]
    assert ATOL["float64"] < ATOL["float32"] < 1e-4
    assert ATOL["float32"] < atol(torch.float16) < atol(torch.bfloat16)
    for unknown in (torch.float8_e4m3fn, np.int32):
        with pytest.raises(ValueError, match="no tolerance for dtype"):
            atol(unknown)


# positions a mask compares, and padding lengths (issue 28)

MIRRORS = pytest.mark.parametrize(
    "module", [numpy_ref, torch_ref], ids=["numpy", "torch"]
)


def as_framework(module, values, dtype):
    """values as a NumPy array of dtype, or the torch tensor of it."""
    array = np.asarray(values, dtype=dtype)
    return array if module is numpy_ref else torch.from_numpy(array)


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
