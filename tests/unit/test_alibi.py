"""ALiBi: the slopes of each head, the bias -m (i - j), its sign forms.

The slopes are held to the paper's own recursion (written out here),
to BLOOM's and MPT's code in transformers 5.24.0, and the bias to the
definition; the libraries' other sign forms give the same weights on a
causal row, the symmetric form does not.
"""

import math

import numpy as np
import pytest
import torch
from transformers.models.bloom.modeling_bloom import _get_alibi_slopes
from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

from mha_ref import conventions, numpy_ref, torch_ref
from mha_ref.tolerances import atol

MIRRORS = pytest.mark.parametrize("ref", [numpy_ref, torch_ref])


def paper_slopes(n):
    """The get_slopes of Press et al.'s code, in our words: geometric for
    a power of two, else the largest power of two's slopes and every
    other one of twice that many (the paper's text gives the geometric
    rule for every n: attention-gym's, conventions.py)."""
    if math.log2(n).is_integer():
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]
    closest = 2 ** math.floor(math.log2(n))
    return (
        paper_slopes(closest) + paper_slopes(2 * closest)[0::2][: n - closest]
    )


def values(x):
    return np.asarray(x, dtype=np.float64)


@MIRRORS
@pytest.mark.parametrize("n_head", [1, 2, 3, 5, 6, 8, 12, 16, 20, 32, 40])
def test_alibi_slopes_follow_the_papers_code(ref, n_head):
    np.testing.assert_allclose(
        values(ref.alibi_slopes(n_head)), paper_slopes(n_head), rtol=1e-13
    )


@pytest.mark.parametrize("n_head", [1, 3, 4, 6, 8, 12, 16, 24, 40])
def test_alibi_slopes_match_bloom_and_mpt(n_head):
    ours = values(torch_ref.alibi_slopes(n_head))
    bloom = _get_alibi_slopes(n_head, torch.device("cpu")).double()
    # MPT's bias at key 0 of a length-2 sequence is -slope
    mpt = -build_mpt_alibi_tensor(n_head, 2)[:, 0, 0].double()
    # both compute in float32: to about 8 of its eps (1.2e-7) each
    np.testing.assert_allclose(ours, bloom.numpy(), rtol=1e-6)
    np.testing.assert_allclose(ours, mpt.numpy(), rtol=1e-6)


def test_alibi_slopes_geometric_for_eight_heads():
    got = numpy_ref.alibi_slopes(8)
    np.testing.assert_array_equal(got, [2.0**-h for h in range(1, 9)])


def test_alibi_slopes_other_rule_differs_for_twelve_heads():
    ours = numpy_ref.alibi_slopes(12)
    gym = conventions.alibi_slopes_attention_gym(12)
    np.testing.assert_allclose(
        gym, [2 ** (-8 * (h + 1) / 12) for h in range(12)], rtol=1e-15
    )
    assert np.abs(ours - gym).max() > 0.05
    np.testing.assert_allclose(
        numpy_ref.alibi_slopes(16), conventions.alibi_slopes_attention_gym(16)
    )  # a power of two: the two rules agree


@MIRRORS
def test_alibi_bias_is_minus_slope_times_distance(ref):
    slopes = [0.5, 0.25]
    q_pos, k_pos = [3, 4], [0, 1, 2, 3, 4]
    got = values(ref.alibi_bias(slopes, q_pos, k_pos))
    want = [[[-m * (i - j) for j in k_pos] for i in q_pos] for m in slopes]
    np.testing.assert_array_equal(got, want)


@MIRRORS
def test_alibi_bias_unsigned_positions_do_not_wrap(ref):
    q_pos = np.array([0, 1], dtype=np.uint8)
    k_pos = np.array([0, 1, 2], dtype=np.uint8)
    if ref is torch_ref:
        q_pos, k_pos = torch.as_tensor(q_pos), torch.as_tensor(k_pos)
    got = values(ref.alibi_bias([1.0], q_pos, k_pos))
    np.testing.assert_array_equal(got[0], [[0, 1, 2], [-1, 0, 1]])


def test_alibi_bias_mirrors_agree_and_keep_float32():
    slopes = numpy_ref.alibi_slopes(6).astype(np.float32)
    got_np = numpy_ref.alibi_bias(slopes, range(4), range(6))
    got_t = torch_ref.alibi_bias(torch.from_numpy(slopes), range(4), range(6))
    assert got_np.dtype == np.float32
    assert got_t.dtype == torch.float32
    np.testing.assert_array_equal(got_np, got_t.numpy())


def causal_weights(bias):
    """softmax of zero scores plus a bias (H, T, T), causally masked."""
    t = bias.shape[-1]
    mask = numpy_ref.causal_mask(t)
    return numpy_ref.softmax(np.where(mask, -np.inf, bias), axis=-1)


def test_alibi_sign_forms_give_the_same_causal_weights():
    t, slopes = 6, numpy_ref.alibi_slopes(4)
    ours = causal_weights(numpy_ref.alibi_bias(slopes, range(t), range(t)))
    bloom = conventions.alibi_bias_key_only(slopes, t)  # slope * k
    mpt = conventions.alibi_bias_last_key(slopes, t)  # slope * (k - T + 1)
    sym = conventions.alibi_bias_symmetric(slopes, range(t), range(t))
    for other in (bloom, mpt):
        rows_differ = other - numpy_ref.alibi_bias(slopes, range(t), range(t))
        spread = rows_differ.max(axis=-1) - rows_differ.min(axis=-1)
        np.testing.assert_allclose(spread, 0, atol=1e-12)  # one per row
        np.testing.assert_allclose(
            causal_weights(np.broadcast_to(other, ours.shape)),
            ours,
            atol=atol(np.float64),
        )
    # causal: -|q - k| = -(q - k) on every allowed key, the same weights
    np.testing.assert_allclose(causal_weights(sym), ours, atol=1e-15)
    # bidirectional: the symmetric form penalises later keys, ours favours
    full = numpy_ref.softmax(numpy_ref.alibi_bias(slopes, range(t), range(t)))
    assert np.abs(numpy_ref.softmax(sym) - full).max() > 0.1


def test_alibi_bias_key_only_matches_bloom():
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    t, n_head = 5, 6
    bloom = build_alibi_tensor(torch.ones(1, t), n_head, torch.float32)
    ours = conventions.alibi_bias_key_only(numpy_ref.alibi_slopes(n_head), t)
    np.testing.assert_allclose(
        ours[:, 0], bloom.view(n_head, t).double().numpy(), rtol=1e-6
    )


def test_alibi_bias_last_key_matches_mpt():
    t, n_head = 5, 12
    mpt = build_mpt_alibi_tensor(n_head, t)  # (H, 1, T)
    ours = conventions.alibi_bias_last_key(numpy_ref.alibi_slopes(n_head), t)
    np.testing.assert_allclose(
        ours[:, 0], mpt[:, 0].double().numpy(), rtol=1e-6
    )


@MIRRORS
def test_alibi_slopes_take_a_numpy_int(ref):
    # np.int64 has no bit_length(): it raised AttributeError
    got = values(ref.alibi_slopes(np.int64(6)))
    np.testing.assert_allclose(got, paper_slopes(6), rtol=1e-15)


@MIRRORS
def test_alibi_bias_reads_iterator_positions_once(ref):
    # torch.as_tensor(iterator) raised RuntimeError; NumPy refused it
    got = ref.alibi_bias([0.5, 0.25], iter([2, 3]), (k for k in range(3)))
    want = -np.array([0.5, 0.25])[:, None, None] * (
        np.array([2.0, 3.0])[:, None] - np.arange(3.0)[None, :]
    )
    np.testing.assert_allclose(values(got), want, rtol=1e-7)


LOW = [
    (numpy_ref, np.float16),
    (numpy_ref, np.float32),
    (torch_ref, torch.float16),
    (torch_ref, torch.bfloat16),
    (torch_ref, torch.float32),
]


@pytest.mark.parametrize(("ref", "dtype"), LOW)
@pytest.mark.parametrize("query", [257, 2049, 2**24 + 1])
def test_alibi_bias_at_long_positions_keeps_the_distance(ref, dtype, query):
    # the positions were cast to the slopes' dtype before j - i: key
    # query - 1 got bias 0, as the query itself (float16 from 2049,
    # bfloat16 from 257, float32 from 2**24)
    slopes = [0.5, 1.0]
    keys = [query - 2, query - 1, query]
    if ref is numpy_ref:
        got = ref.alibi_bias(np.array(slopes, dtype), [query], keys)
    else:
        got = ref.alibi_bias(torch.tensor(slopes, dtype=dtype), [query], keys)
    want = -np.array(slopes)[:, None, None] * (query - np.array(keys))
    assert got.dtype == dtype
    got = got.double() if torch.is_tensor(got) else got  # bf16: no NumPy
    np.testing.assert_array_equal(values(got), want)  # exact in any dtype


@MIRRORS
def test_alibi_bias_of_a_list_of_slopes_is_float64_in_both_mirrors(ref):
    # a list reads as float64 in NumPy; torch.as_tensor made it float32
    got = ref.alibi_bias([0.1], [0], [3])
    assert str(got.dtype).endswith("float64")
    np.testing.assert_array_equal(values(got), [[[0.1 * 3]]])


def test_alibi_bias_symmetric_at_long_positions_keeps_the_distance():
    slopes = np.array([1.0], np.float16)
    got = conventions.alibi_bias_symmetric(slopes, [2049], [2048, 2049, 2050])
    assert got.dtype == np.float16
    np.testing.assert_array_equal(values(got), [[[-1.0, 0.0, -1.0]]])
