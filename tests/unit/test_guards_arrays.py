"""Refusals of the helpers the attention doors share
(mha_ref/guards/arrays.py), each called with a bad value."""

import re

import numpy as np
import pytest

from mha_ref import checks


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
