"""Refusals of the doors of conventions.py (mha_ref/guards/conventions.py)."""

import math
import re

import numpy as np
import pytest
import torch

from mha_ref import conventions


@pytest.mark.parametrize(
    ("shape", "n_head", "words"),
    [
        ((12, 4), 5, "split into n_head heads"),
        ((12, 4), 4, "even head size"),  # d_head = 3
        ((2, 3, 4), 1, "got shape (2, 3, 4)"),
    ],
)
def test_interleaved_to_rotate_half_names_a_bad_shape(shape, n_head, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        conventions.interleaved_to_rotate_half(torch.zeros(shape), n_head)


def test_apply_rope_interleaved_refuses_numpy_and_nan_positions():
    with pytest.raises(TypeError, match=r"x must be a torch\.Tensor, got nd"):
        conventions.apply_rope_interleaved(np.zeros((2, 4)), [0, 1])
    with pytest.raises(ValueError, match=r"positions .* holds nan at"):
        conventions.apply_rope_interleaved(torch.zeros(2, 4), [0, np.nan])


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (
            lambda: conventions.window_from_hugging_face(0, "jax"),
            ValueError,
            "window must be positive",
        ),
        (
            lambda: conventions.window_from_hugging_face(3, "keras"),
            ValueError,
            "library must be one of",
        ),
        (
            lambda: conventions.window_to_hugging_face((2, 1), "flash_attn"),
            ValueError,
            "right = 0",
        ),
        (
            lambda: conventions.window_to_hugging_face(2, "flash_attn"),
            TypeError,
            "a pair (left, right)",
        ),
        (
            lambda: conventions.window_to_hugging_face(-1, "attention_gym"),
            ValueError,
            "at least 0",
        ),
    ],
)
def test_window_conversions_name_a_bad_value(call, error, words):
    with pytest.raises(error, match=re.escape(words)):
        call()


def test_causal_query_positions_refuse_an_unnamed_corner():
    # align=None was read as "top_left" for Tq != Tk, where causal_mask
    # (whose positions these are) refuses to guess the corner
    with pytest.raises(ValueError, match="say which corner"):
        conventions.causal_query_positions(2, 3, None)
    assert conventions.causal_query_positions(3, None, None).tolist() == [
        0,
        1,
        2,
    ]


@pytest.mark.parametrize("shape", [(4,), (1, 2, 4)])
def test_to_mask_mod_refuses_a_mask_that_is_not_tq_by_tk(shape):
    # such a mask was taken, and mask[q_idx, kv_idx] failed (IndexError)
    # or read the wrong axes inside FlexAttention
    with pytest.raises(ValueError, match=re.escape("(Tq, Tk)")):
        conventions.to_mask_mod(torch.zeros(shape, dtype=torch.bool))


@pytest.mark.parametrize(
    "form", [conventions.alibi_bias_key_only, conventions.alibi_bias_last_key]
)
@pytest.mark.parametrize(
    ("slopes", "t", "error", "words"),
    [
        ([math.nan], 3, ValueError, "slopes of shape (1,) holds nan"),
        ([True], 3, TypeError, "slopes must hold real numbers"),
        ([0.5], 2.5, TypeError, "t must be an int"),  # was arange(2.5)
        ([0.5], -1, ValueError, "t must be positive"),  # was empty
    ],
)
def test_alibi_row_forms_name_a_bad_input(form, slopes, t, error, words):
    with pytest.raises(error, match=re.escape(words)):
        form(slopes, t)


def test_kv_head_of_refuses_a_head_count_that_is_not_positive():
    # n_head 0 gave an empty map, 2.0 a float one
    for n_head, error in ((0, ValueError), (-2, ValueError), (2.0, TypeError)):
        with pytest.raises(error, match="n_head must be"):
            conventions.kv_head_of(n_head, 1, "consecutive")


def test_learned_sink_as_key_refuses_sinks_of_another_head_count():
    # three sinks for two heads gave a (3, 1, Tk + 1) bias, silently
    k = torch.zeros(1, 2, 3, 4, dtype=torch.float64)
    v = torch.zeros(1, 2, 3, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="one logit per query head"):
        conventions.learned_sink_as_key(k, v, torch.zeros(3).double())
    with pytest.raises(ValueError, match="same number of keys"):
        conventions.learned_sink_as_key(k, v[..., :2, :], k.new_zeros(2))


@pytest.mark.parametrize(
    ("scores", "mask", "error", "words"),
    [
        ([[math.nan, 0.0]], [[False, True]], ValueError, "holds nan"),
        ([[0.0, 0.0]], [[0, 1]], TypeError, "mask must be boolean"),
        ([[0.0, 0.0]], [[False, True, True]], ValueError, "broadcast"),
    ],
)
def test_mask_then_softcap_names_a_bad_input(scores, mask, error, words):
    # NaN scores gave NaN weights; an int or misfit mask torch's error
    scores, mask = torch.tensor(scores), torch.tensor(mask)
    with pytest.raises(error, match=words):
        conventions.mask_then_softcap(scores, mask, 2.0)


def test_additive_mask_refuses_a_numpy_mask_naming_it():
    # it raised torch's own masked_fill error
    with pytest.raises(TypeError, match=r"mask must be a torch\.Tensor"):
        conventions.additive_mask(np.array([[True, False]]), torch.float32)
