"""The core: the five steps as small functions, dot_product_attention
composing them, the linear map, and ScoreMod (the score modifiers every
pass applies), in both mirrors, against PyTorch's SDPA and autograd."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_ref import numpy_ref, torch_ref

RNG = np.random.default_rng(0)
Q, K, V = (RNG.normal(size=(2, 3, 5, 4)) for _ in range(3))
CAUSAL = numpy_ref.causal_mask(5)


def sdpa(q, k, v, mask=None):
    """F.scaled_dot_product_attention in float64 (True = allowed there)."""
    t = [torch.from_numpy(np.asarray(a, np.float64)) for a in (q, k, v)]
    allowed = None if mask is None else torch.from_numpy(~mask)
    return F.scaled_dot_product_attention(*t, attn_mask=allowed).numpy()


@pytest.mark.parametrize("mask", [None, CAUSAL], ids=["none", "causal"])
@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["np", "torch"])
def test_dot_product_attention_is_sdpa_and_attention(ref, mask):
    if ref is torch_ref:
        q, k, v = (torch.from_numpy(a) for a in (Q, K, V))
        m = None if mask is None else torch.from_numpy(mask)
    else:
        q, k, v, m = Q, K, V, mask
    out, weights = ref.dot_product_attention(q, k, v, m)
    np.testing.assert_allclose(
        np.asarray(out), sdpa(Q, K, V, mask), rtol=1e-12, atol=1e-12
    )
    full_out, full_weights = ref.attention(q, k, v, m)
    # the same operations as the full attention: equal to the last bit
    assert np.array_equal(np.asarray(out), np.asarray(full_out))
    assert np.array_equal(np.asarray(weights), np.asarray(full_weights))
    np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["np", "torch"])
def test_the_steps_one_by_one(ref):
    as_in = torch.from_numpy if ref is torch_ref else np.asarray
    q, k, v, mask = as_in(Q), as_in(K), as_in(V), as_in(CAUSAL)
    scores = np.asarray(ref.attention_scores(q, k))
    np.testing.assert_allclose(
        scores, Q @ np.swapaxes(K, -2, -1) / 2.0, rtol=1e-13
    )
    masked = ref.apply_mask(ref.attention_scores(q, k), mask)
    assert np.isneginf(np.asarray(masked)[..., CAUSAL]).all()
    assert ref.apply_mask(scores, None) is scores
    weights = ref.softmax_rows(masked)
    w = np.asarray(weights)
    assert (w[..., CAUSAL] == 0).all()
    expected = np.exp(np.asarray(masked)) / np.exp(np.asarray(masked)).sum(
        -1, keepdims=True
    )
    np.testing.assert_allclose(w, expected, rtol=1e-12)
    out = np.asarray(ref.weighted_sum(weights, v))
    np.testing.assert_allclose(out, w @ V, rtol=1e-12)


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["np", "torch"])
def test_softmax_rows_gives_a_row_of_only_minus_inf_zeros(ref):
    as_in = torch.tensor if ref is torch_ref else np.array
    rows = as_in([[1000.0, 1000.0], [-math.inf, -math.inf], [0.0, -math.inf]])
    np.testing.assert_array_equal(
        np.asarray(ref.softmax_rows(rows)), [[0.5, 0.5], [0, 0], [1, 0]]
    )


def test_dot_product_attention_keeps_fp16_in_float32():
    q, k, v = (torch.from_numpy(a).half() for a in (Q, K, V))
    out, weights = torch_ref.dot_product_attention(q, k, v)
    assert out.dtype == weights.dtype == torch.float16
    full, _ = torch_ref.attention(q, k, v)
    assert torch.equal(out, full)


def test_linear_is_nn_linear():
    layer = torch.nn.Linear(4, 3, dtype=torch.float64)
    x = torch.from_numpy(RNG.normal(size=(2, 5, 4)))
    with torch.no_grad():
        expected = layer(x).numpy()
        got = torch_ref.linear(x, layer.weight, layer.bias).numpy()
    np.testing.assert_array_equal(got, expected)
    w, b = layer.weight.detach().numpy().T, layer.bias.detach().numpy()
    np.testing.assert_allclose(
        numpy_ref.linear(x.numpy(), w, b), expected, rtol=1e-12
    )
    np.testing.assert_allclose(
        numpy_ref.linear(x.numpy(), w), expected - b, rtol=1e-12
    )


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["np", "torch"])
def test_score_mod_and_its_derivative_against_autograd(ref):
    bias = RNG.normal(size=(3, 5, 5))
    q, k = (torch.from_numpy(a).requires_grad_() for a in (Q, K))
    s = q @ k.transpose(-2, -1) * 0.7
    expected = 2.0 * torch.tanh(s / 2.0) + torch.from_numpy(bias)
    upstream = torch.from_numpy(RNG.normal(size=(2, 3, 5, 5)))
    expected.backward(upstream)
    as_in = torch.from_numpy if ref is torch_ref else np.asarray
    mod = ref.ScoreMod(scale=0.7, softcap=2.0, bias=as_in(bias))
    got = mod.scores(as_in(Q), as_in(K))
    np.testing.assert_allclose(
        np.asarray(got), expected.detach().numpy(), rtol=1e-12
    )
    # dL/d(Q K^T), then dQ = dL/d(Q K^T) K
    d_raw = mod.scores_backward(as_in(upstream.numpy()), as_in(Q), as_in(K))
    np.testing.assert_allclose(
        np.asarray(d_raw) @ K, q.grad.numpy(), rtol=1e-10, atol=1e-12
    )
    # a tile of the bias: rows 1..3, keys 2..4
    got = mod.scores(
        as_in(Q[..., 1:3, :]), as_in(K[..., 2:4, :]), slice(1, 3), slice(2, 4)
    )
    np.testing.assert_allclose(
        np.asarray(got),
        expected.detach().numpy()[..., 1:3, 2:4],
        rtol=1e-12,
    )


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["np", "torch"])
def test_score_mod_with_nothing_set_is_the_plain_scores(ref):
    as_in = torch.from_numpy if ref is torch_ref else np.asarray
    mod = ref.ScoreMod()
    plain = ref.attention_scores(as_in(Q), as_in(K))
    assert np.array_equal(
        np.asarray(mod.scores(as_in(Q), as_in(K))), np.asarray(plain)
    )
    weights = mod.softmax(plain)
    assert np.array_equal(
        np.asarray(weights), np.asarray(ref.softmax_rows(plain))
    )


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["np", "torch"])
def test_layer_forward_is_the_steps_in_order(ref):
    """project, split, attend, merge, Wo: by hand from the public parts."""
    if ref is torch_ref:
        torch.manual_seed(0)
        layer = ref.MultiHeadAttention(8, 2, n_kv_head=1, dtype=torch.float64)
        x = torch.from_numpy(RNG.normal(size=(2, 5, 8)))
        mask = torch.from_numpy(CAUSAL)
        ws = [(m.weight, m.bias) for m in (layer.wq, layer.wk, layer.wv)]
        wo = (layer.wo.weight, layer.wo.bias)
    else:
        layer = ref.MultiHeadAttention(8, 2, n_kv_head=1, bias=True)
        x, mask = RNG.normal(size=(2, 5, 8)), CAUSAL
        ws = [(layer.Wq, layer.bq), (layer.Wk, layer.bk), (layer.Wv, layer.bv)]
        wo = (layer.Wo, layer.bo)
    q, k, v = (layer.split_heads(ref.linear(x, *w)) for w in ws)
    k, v = ref.repeat_kv_heads(k, 2), ref.repeat_kv_heads(v, 2)
    out, weights = ref.dot_product_attention(q, k, v, mask)
    y = ref.linear(layer.merge_heads(out), *wo)
    got_y, got_w = layer(x, mask)
    if ref is torch_ref:
        y, got_y = y.detach(), got_y.detach()
        weights, got_w = weights.detach(), got_w.detach()
    assert np.array_equal(np.asarray(got_y), np.asarray(y))
    assert np.array_equal(np.asarray(got_w), np.asarray(weights))


@pytest.mark.parametrize("ref", [numpy_ref, torch_ref], ids=["np", "torch"])
def test_rotate_leaves_a_layer_without_rope_alone(ref):
    layer = (
        ref.MultiHeadAttention(8, 2)
        if ref is numpy_ref
        else ref.MultiHeadAttention(8, 2, dtype=torch.float64)
    )
    q = k = torch.zeros(1, 2, 3, 4) if ref is torch_ref else np.zeros(3)
    q_out, k_out = layer.rotate(q, k, positions=[5, 6, 7])
    assert q_out is q
    assert k_out is k
