"""Score modifiers against FlexAttention's eager forward (torch 2.13).

torch.nn.attention.flex_attention runs its unfused eager path on the
CPU, in the inputs' float64; a score_mod(score, b, h, q_idx, kv_idx)
receives the already scaled score, so the soft-cap, ALiBi and a
relative bias written as score_mods (conventions.softcap_mod,
alibi_mod, relative_bias_mod: the scores page shows them) are our
softcap and bias arguments. torch 2.13 has no CPU backward for it:
gradients are held to autograd in test_score_modifiers.py.
"""

import math
import warnings

import numpy as np
import pytest
import torch
from torch.nn.attention.flex_attention import (
    AuxRequest,
    create_block_mask,
    flex_attention,
)

from mha_ref import conventions, torch_ref
from mha_ref.tolerances import atol

pytestmark = pytest.mark.slow  # the eager path takes about a second a call

B, H, T, D = 2, 4, 9, 8
TOL = {"atol": atol(np.float64), "rtol": 0}


@pytest.fixture(scope="module")
def qkv():
    gen = torch.Generator().manual_seed(17)
    q, k, v = (
        torch.randn(B, H, T, D, generator=gen, dtype=torch.float64)
        for _ in range(3)
    )
    return 3 * q, 3 * k, v  # scores of several units: the cap bends them


@pytest.fixture(scope="module")
def causal_block_mask():
    mask = torch_ref.causal_mask(T)
    return create_block_mask(
        conventions.to_mask_mod(mask), None, None, T, T, device="cpu"
    )


def flex(q, k, v, score_mod=None, block_mask=None, **kw):
    with warnings.catch_warnings():  # "called without torch.compile()"
        warnings.simplefilter("ignore", UserWarning)
        return flex_attention(
            q, k, v, score_mod=score_mod, block_mask=block_mask, **kw
        )


def test_flex_softcap_matches_ours(qkv, causal_block_mask):
    q, k, v = qkv
    cap = 2.0
    want = flex(q, k, v, conventions.softcap_mod(cap), causal_block_mask)
    got, _ = torch_ref.attention(
        q, k, v, torch_ref.causal_mask(T), softcap=cap
    )
    np.testing.assert_allclose(got.numpy(), want.numpy(), **TOL)


def test_flex_alibi_matches_ours(qkv, causal_block_mask):
    q, k, v = qkv
    slopes = torch_ref.alibi_slopes(H)
    want = flex(q, k, v, conventions.alibi_mod(slopes), causal_block_mask)
    bias = torch_ref.alibi_bias(slopes, range(T), range(T))
    got, _ = torch_ref.attention(q, k, v, torch_ref.causal_mask(T), bias=bias)
    np.testing.assert_allclose(got.numpy(), want.numpy(), **TOL)


def test_flex_relative_bias_and_softcap_match_ours(qkv):
    q, k, v = qkv
    gen = torch.Generator().manual_seed(5)
    table = torch.randn(H, 2 * T - 1, generator=gen, dtype=torch.float64)
    cap, scale = 4.0, 0.2
    capped_relative = conventions.capped_then(
        conventions.softcap_mod(cap), conventions.relative_bias_mod(table, T)
    )  # cap, then bias
    want = flex(q, k, v, capped_relative, scale=scale)  # no mask
    distance = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    bias = table[:, distance + T - 1]  # (H, T, T)
    got, _ = torch_ref.attention(q, k, v, scale=scale, softcap=cap, bias=bias)
    np.testing.assert_allclose(got.numpy(), want.numpy(), **TOL)


def test_flex_sliding_window_mask_mod_matches_ours(qkv):
    q, k, v = qkv
    pos = torch.arange(T)
    ours = torch_ref.sliding_window_mask(pos, pos, 3)
    block_mask = create_block_mask(
        conventions.to_mask_mod(ours), None, None, T, T, device="cpu"
    )
    want = flex(q, k, v, block_mask=block_mask)
    got, _ = torch_ref.attention(q, k, v, ours)
    np.testing.assert_allclose(got.numpy(), want.numpy(), **TOL)


def test_flex_lse_with_a_sink_gives_our_sink_output(qkv, causal_block_mask):
    # a sink s_h rescales a row by l / (l + e^s_h) = 1 / (1 + e^(s_h - L))
    q, k, v = qkv
    sinks = torch.tensor([0.5, -1.0, 2.0, -math.inf], dtype=torch.float64)
    out, aux = flex(
        q, k, v, block_mask=causal_block_mask, return_aux=AuxRequest(lse=True)
    )
    lse = aux.lse  # (B, H, T): the log-sum-exp of each row
    got, _ = torch_ref.attention(
        q, k, v, torch_ref.causal_mask(T), sinks=sinks
    )
    want = conventions.with_sinks(out, lse, sinks)
    np.testing.assert_allclose(got.numpy(), want.numpy(), **TOL)


def test_score_mod_factories_refuse_bad_arguments():
    with pytest.raises(ValueError, match="softcap must be positive"):
        conventions.softcap_mod(-1.0)
    with pytest.raises(TypeError, match="cap must be a positive number"):
        conventions.softcap_mod(None)
    with pytest.raises(TypeError, match=r"slopes must be a torch\.Tensor"):
        conventions.alibi_mod([0.5, 0.25])
    with pytest.raises(ValueError, match=r"got shape \(2, 2\)"):
        conventions.alibi_mod(torch.ones(2, 2))
    with pytest.raises(ValueError, match="table must have 2 dimension"):
        conventions.relative_bias_mod(torch.ones(3), 2)
    with pytest.raises(ValueError, match=r"lse \(2, 4\)"):
        conventions.with_sinks(
            torch.ones(2, 4, 3, 8), torch.ones(2, 4), torch.ones(4)
        )
