"""attention's score modifiers: scale, soft-cap, bias, sinks.

Both mirrors against a plain float64 formula written here in Gemma 2's
order (scale, soft-cap, bias, mask, softmax with the sink logit), the
backward passes against autograd, the tiled passes against the dense
ones, and the refusals the scores page promises.
"""

import math

import numpy as np
import pytest
import torch

from mha_ref import numpy_ref, tiled, torch_ref
from mha_ref.tolerances import atol

TOL = {"atol": atol(np.float64), "rtol": 0}


def randn(gen, *shape):
    return torch.randn(shape, generator=gen, dtype=torch.float64)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(31)


def oracle(
    q, k, v, mask=None, scale=None, softcap=None, bias=None, sinks=None
):
    """The modifiers written out in float64, in Gemma 2's order."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.einsum("...qd,...kd->...qk", q, k) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + bias
    if mask is not None:
        s = s.masked_fill(mask, -math.inf)
    if sinks is not None:
        sink = sinks.view(-1, 1, 1).expand(*s.shape[:-1], 1)
        s = torch.cat([s, sink], dim=-1)
    e = torch.exp(s - s.amax(dim=-1, keepdim=True))
    p = e / e.sum(dim=-1, keepdim=True)
    if sinks is not None:
        p = p[..., :-1]
    return p @ v, p


def as_numpy(x):
    return None if x is None else x.numpy()


def run(ref, q, k, v, mask=None, **modifiers):
    """ref.attention on torch inputs, as NumPy arrays."""
    if ref is numpy_ref:
        q, k, v, mask = (as_numpy(t) for t in (q, k, v, mask))
        modifiers = {
            n: as_numpy(t) if torch.is_tensor(t) else t
            for n, t in modifiers.items()
        }
    out, weights = ref.attention(q, k, v, mask, **modifiers)
    return np.asarray(out), np.asarray(weights)


def case(gen, b=2, h=4, tq=5, tk=7, d=8):
    q, k, v = (
        randn(gen, b, h, tq, d),
        randn(gen, b, h, tk, d),
        randn(gen, b, h, tk, d),
    )
    mask = torch.rand(b, 1, tq, tk, generator=gen) < 0.3
    mask[..., 0] = False  # every row keeps a key
    bias = randn(gen, h, tq, tk)
    sinks = randn(gen, h)
    return q * 3, k * 3, v, mask, bias, sinks  # scores of a few units


MIRRORS = pytest.mark.parametrize("ref", [numpy_ref, torch_ref])


@MIRRORS
def test_attention_modifiers_match_the_formula(gen, ref):
    q, k, v, mask, bias, sinks = case(gen)
    mods = {"scale": 0.3, "softcap": 2.5, "bias": bias, "sinks": sinks}
    out, weights = run(ref, q, k, v, mask, **mods)
    want_out, want_weights = oracle(q, k, v, mask, **mods)
    np.testing.assert_allclose(out, want_out.numpy(), **TOL)
    np.testing.assert_allclose(weights, want_weights.numpy(), **TOL)


@MIRRORS
@pytest.mark.parametrize(
    "mods",
    [{"scale": 1.0}, {"softcap": 1.5}, {"bias": "bias"}, {"sinks": "sinks"}],
    ids=["scale", "softcap", "bias", "sinks"],
)
def test_attention_each_modifier_alone_matches_the_formula(gen, ref, mods):
    q, k, v, mask, bias, sinks = case(gen)
    named = {"bias": bias, "sinks": sinks}
    mods = {
        n: named.get(m, m) if isinstance(m, str) else m
        for n, m in mods.items()
    }
    out, _ = run(ref, q, k, v, mask, **mods)
    np.testing.assert_allclose(
        out, oracle(q, k, v, mask, **mods)[0].numpy(), **TOL
    )


@MIRRORS
def test_attention_defaults_are_unchanged(gen, ref):
    q, k, v, mask, _, _ = case(gen)
    plain = run(ref, q, k, v, mask)
    explicit = run(ref, q, k, v, mask, scale=1 / math.sqrt(8))
    np.testing.assert_allclose(plain[0], explicit[0], **TOL)
    no_sink = run(ref, q, k, v, mask, sinks=torch.full((4,), -math.inf))
    np.testing.assert_allclose(no_sink[0], plain[0], **TOL)  # -inf: none


@MIRRORS
def test_attention_sink_takes_a_fully_masked_row(gen, ref):
    q, k, v, mask, _, sinks = case(gen)
    mask[0, 0, 2] = True  # query row 2 of batch 0: every key masked
    out, weights = run(ref, q, k, v, mask, sinks=sinks)
    assert (out[0, :, 2] == 0).all()
    assert (weights[0, :, 2] == 0).all()
    share = 1 - weights.sum(axis=-1)  # the sink's weight, per row
    want = oracle(q, k, v, mask, sinks=sinks)[1]
    np.testing.assert_allclose(share, 1 - want.sum(-1).numpy(), **TOL)
    assert (share > 0).all()  # a sink always takes some weight


@MIRRORS
def test_attention_bias_of_minus_inf_blocks_like_the_mask(gen, ref):
    q, k, v, mask, bias, _ = case(gen)
    additive = bias.masked_fill(mask, -math.inf)  # (B, H, Tq, Tk)
    got = run(ref, q, k, v, bias=additive)
    want = run(ref, q, k, v, mask, bias=bias)
    np.testing.assert_allclose(got[0], want[0], **TOL)


def test_attention_grouped_heads_take_modifiers(gen):
    q, k, v, mask, bias, sinks = case(gen)
    k2, v2 = k[:, :2], v[:, :2]  # H_kv = 2 for H = 4
    mods = {"softcap": 3.0, "bias": bias, "sinks": sinks}
    got = run(torch_ref, q, k2, v2, mask, **mods)
    full = oracle(
        q, k2.repeat_interleave(2, 1), v2.repeat_interleave(2, 1), mask, **mods
    )
    np.testing.assert_allclose(got[0], full[0].numpy(), **TOL)
    np.testing.assert_allclose(
        run(numpy_ref, q, k2, v2, mask, **mods)[0], got[0], **TOL
    )


def autograd_grads(q, k, v, dout, mask, mods):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    sinks = mods.get("sinks")
    if sinks is not None:
        sinks = sinks.clone().requires_grad_()
        leaves.append(sinks)
    out, _ = torch_ref.attention(*leaves[:3], mask, **{**mods, "sinks": sinks})
    out.backward(dout)
    return [t.grad for t in leaves]


@pytest.mark.parametrize(
    "which",
    ["softcap", "sinks", "all"],
)
@MIRRORS
def test_attention_backward_matches_autograd(gen, ref, which):
    q, k, v, mask, bias, sinks = case(gen)
    k2, v2 = k[:, :2], v[:, :2]  # grouped heads too
    dout = randn(gen, *q.shape)
    mods = {
        "softcap": {"softcap": 2.0},
        "sinks": {"sinks": sinks},
        "all": {"scale": 0.4, "softcap": 2.0, "bias": bias, "sinks": sinks},
    }[which]
    want = autograd_grads(q, k2, v2, dout, mask, mods)
    if ref is numpy_ref:
        got = ref.attention_backward(
            q.numpy(),
            k2.numpy(),
            v2.numpy(),
            dout.numpy(),
            mask.numpy(),
            **{
                n: as_numpy(t) if torch.is_tensor(t) else t
                for n, t in mods.items()
            },
        )
    else:
        got = ref.attention_backward(q, k2, v2, dout, mask, **mods)
    assert len(got) == len(want)  # dsinks as a fourth value with sinks
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(
            np.asarray(g), w.numpy(), atol=1e-10, rtol=0
        )


def test_attention_torch_mirror_passes_gradcheck(gen):
    q, k, v, mask, bias, sinks = case(gen, b=1, h=2, tq=2, tk=3, d=2)
    inputs = [t.clone().requires_grad_() for t in (q, k, v, bias, sinks)]

    def f(q, k, v, bias, sinks):
        return torch_ref.attention(
            q, k, v, mask, scale=0.5, softcap=2.0, bias=bias, sinks=sinks
        )[0]

    assert torch.autograd.gradcheck(f, inputs, fast_mode=True)


class HandWritten(torch.autograd.Function):
    """ref.attention forward, ref.attention_backward as its backward.

    gradcheck then compares the hand-written gradients (not autograd's)
    with finite differences of the forward. ``drift`` drops the cap's
    factor from the backward, a mistake the check must catch.
    """

    @staticmethod
    def forward(ctx, q, k, v, sinks, ref, mask, bias, mods, drift):
        ctx.save_for_backward(q, k, v, sinks)
        ctx.ref, ctx.mask, ctx.bias = ref, mask, bias
        ctx.mods, ctx.drift = mods, drift
        out, _ = run(ref, q, k, v, mask, bias=bias, sinks=sinks, **mods)
        return torch.from_numpy(out)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, sinks = ctx.saved_tensors
        mods = {**ctx.mods, "bias": ctx.bias, "sinks": sinks}
        if ctx.drift:
            mods["softcap"] = None
        args = (q, k, v, dout, ctx.mask)
        if ctx.ref is numpy_ref:
            args = tuple(t.numpy() for t in args)
            mods = {
                n: as_numpy(t) if torch.is_tensor(t) else t
                for n, t in mods.items()
            }
        grads = ctx.ref.attention_backward(*args, **mods)  # dq, dk, dv, ds
        grads = [torch.as_tensor(np.asarray(g)) for g in grads]
        return (*grads, None, None, None, None, None)


@MIRRORS
def test_attention_backward_passes_gradcheck(gen, ref):
    # every modifier on, grouped heads, and a row only the sink serves
    q, k, v, mask, bias, sinks = case(gen, b=1, h=2, tq=3, tk=4, d=3)
    k, v = k[:, :1], v[:, :1]  # H_kv = 1 for H = 2
    mask[0, 0, 1] = True  # query 1 sees no key
    inputs = [t.clone().requires_grad_() for t in (q, k, v, sinks)]
    mods = {"scale": 0.7, "softcap": 1.5}

    def hand_written(*tensors, drift=False):
        return HandWritten.apply(*tensors, ref, mask, bias, mods, drift)

    assert torch.autograd.gradcheck(hand_written, inputs)
    drifted = torch.autograd.gradcheck(
        lambda *t: hand_written(*t, drift=True), inputs, raise_exception=False
    )
    assert not drifted  # a backward without 1 - tanh^2 fails the check


@pytest.mark.parametrize("block", [1, 2, 3])
@pytest.mark.parametrize(
    ("name", "ref"),
    [("numpy", numpy_ref), ("torch", torch_ref)],
)
def test_tiled_passes_take_the_modifiers(gen, name, ref, block):
    q, k, v, mask, bias, sinks = case(gen)
    mask[0, 0, 2] = True  # a row the sink alone serves
    mods = {"scale": 0.4, "softcap": 2.0, "bias": bias, "sinks": sinks}
    dout = randn(gen, *q.shape)
    forward = getattr(tiled, f"tiled_attention_{name}")
    backward = getattr(tiled, f"tiled_attention_backward_{name}")
    args = (q, k, v, mask, dout)
    if name == "numpy":
        args = tuple(t.numpy() for t in args)
        mods = {
            n: as_numpy(t) if torch.is_tensor(t) else t
            for n, t in mods.items()
        }
    q_, k_, v_, mask_, dout_ = args
    blocks = {"block_q": block, "block_k": block}
    out = forward(q_, k_, v_, mask_, **blocks, **mods)
    want = ref.attention(q_, k_, v_, mask_, **mods)[0]
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), **TOL)
    grads = backward(q_, k_, v_, dout_, mask_, **blocks, **mods)
    want = ref.attention_backward(q_, k_, v_, dout_, mask_, **mods)
    assert len(grads) == 4
    for g, w in zip(grads, want, strict=True):
        np.testing.assert_allclose(
            np.asarray(g), np.asarray(w), atol=1e-10, rtol=0
        )


def test_tiled_pass_counts_the_sink_once_per_row(gen):
    # with one key per tile, a sink added per tile would count Tk times
    q, k, v = (
        randn(gen, 1, 1, 1, 4),
        randn(gen, 1, 1, 6, 4),
        randn(gen, 1, 1, 6, 4),
    )
    sinks = torch.tensor([1.5], dtype=torch.float64)
    out = tiled.tiled_attention_torch(q, k, v, block_k=1, sinks=sinks)
    want = oracle(q, k, v, sinks=sinks)[0]
    np.testing.assert_allclose(out.numpy(), want.numpy(), **TOL)


def sink_weights64(scores, sinks):
    """softmax over [scores, sink] in float64, the sink's column dropped."""
    sink = np.broadcast_to(sinks[:, None, None], (*scores.shape[:-1], 1))
    both = np.concatenate([scores, sink], axis=-1)
    weights = np.exp(both - both.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True))[..., :-1]


@MIRRORS
def test_softmax_with_sinks_matches_the_formula(gen, ref):
    scores, sinks = randn(gen, 2, 3, 4), randn(gen, 2)
    scores[..., -1] = -math.inf  # a masked key
    want = sink_weights64(scores.numpy(), sinks.numpy())
    if ref is numpy_ref:
        scores, sinks = scores.numpy(), sinks.numpy()
    got = ref.softmax_with_sinks(scores, sinks)
    np.testing.assert_allclose(np.asarray(got), want, **TOL)


@pytest.mark.parametrize(
    "name",
    [
        "attention",
        "attention_backward",
        "tiled_attention_torch",
        "tiled_attention_backward_torch",
    ],
)
def test_bfloat16_sinks_with_a_mask_match_the_formula(gen, name):
    # torch's mirror raised "Got unsupported ScalarType BFloat16" reading
    # the sinks for the rows check: gpt-oss keeps them in the model dtype
    q, k, v, mask, _, sinks = case(gen)
    q, k, v, sinks = (t.bfloat16() for t in (q, k, v, sinks))
    dout = torch.ones((*q.shape[:-1], v.shape[-1]), dtype=torch.bfloat16)
    wide = [t.double() for t in (q, k, v)]
    if "backward" in name:
        leaves = [t.requires_grad_() for t in (*wide, sinks.double())]
        out, _ = oracle(*leaves[:3], mask, sinks=leaves[3])
        out.backward(dout.double())
        want = [t.grad for t in leaves]
    else:
        want = [oracle(*wide, mask, sinks=sinks.double())[0]]
    function = getattr(torch_ref if "tiled" not in name else tiled, name)
    args = (q, k, v, dout) if "backward" in name else (q, k, v)
    got = function(*args, mask, sinks=sinks)
    if "backward" in name:  # dq, dk, dv, dsinks
        got = list(got)
    else:  # attention: (out, weights); the tiled pass: out
        got = [got[0] if name == "attention" else got]
    assert got[-1].dtype == torch.bfloat16
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(
            g.double().numpy(), w.double().numpy(), atol=0.1, rtol=0.05
        )
