"""The hand-written backward passes equal torch autograd.

numpy_ref.attention_backward, torch_ref.attention_backward,
numpy_ref.MultiHeadAttention.backward and the tiled (FlashAttention-2)
backward in NumPy and PyTorch, each against autograd through a plain
float64 forward at 1e-10, over masks (none, causal, per-head, key
padding), cross-attention, biases, grouped heads, RoPE and block sizes
that leave a ragged last block. gradcheck checks the torch versions
against finite differences; the tiled backward's memory grows with T,
not T squared (tracemalloc and torch's profiler, as for the forward).
The backwards also compute float16 and bfloat16 in float32, return the
forward's dtype, take what their forwards take (lists, a dout of
another float dtype) and match SDPA for empty_rows="zero".
"""

import math
import warnings
from functools import partial

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_ref import numpy_ref, tiled, torch_ref
from mha_ref.memory import peak_bytes_numpy, peak_bytes_torch_cpu
from mha_ref.tolerances import atol

ATOL = atol("float64")  # the page quotes it; ~1e-15 in practice
B, H = 2, 3  # batch and heads of the attention tests
D, DV = 4, 5  # head sizes of q/k and of v
MASKS = ["none", "causal", "per-head", "padding"]
LENGTHS = [(7, 7), (5, 9)]  # self-attention, cross-attention Tq != Tk
BLOCKS = [(1, 1), (3, 4), (4, 4), (5, 7), (16, 16)]


def draw(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def qkv(tq, tk, seed=0, lead=(B, H)):
    return (
        draw((*lead, tq, D), seed),
        draw((*lead, tk, D), seed + 1),
        draw((*lead, tk, DV), seed + 2),
    )


def aligned_causal(tq, tk):
    """Causal mask with the Tq queries at the last Tq key positions."""
    return numpy_ref.causal_mask_for_positions(
        np.arange(tk - tq, tk), np.arange(tk)
    )  # (Tq, Tk)


def make_mask(case, tq, tk, seed=0):
    """A bool mask (True = blocked) leaving each row >= 1 allowed key."""
    rng = np.random.default_rng(seed)
    if case == "none":
        return None
    if case == "causal":
        return aligned_causal(tq, tk)  # (Tq, Tk)
    shape = (B, H, tq, tk) if case == "per-head" else (B, 1, 1, tk)
    mask = rng.random(shape) < 0.4
    keep = rng.integers(0, tk, size=shape[:-1])  # one key per row
    np.put_along_axis(mask, keep[..., None], False, axis=-1)
    return mask


def t(array):
    return None if array is None else torch.from_numpy(np.asarray(array))


def autograd_attention(q, k, v, dout, mask=None):
    """dq, dk, dv by torch autograd through a plain softmax forward."""
    q, k, v = (t(a).clone().requires_grad_() for a in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(t(mask), -math.inf)
    out = scores.softmax(dim=-1) @ v
    out.backward(t(dout))
    return [x.grad.numpy() for x in (q, k, v)]


def as_numpy(x):
    return x.detach().double().numpy() if isinstance(x, torch.Tensor) else x


def assert_grads_close(got, expected, tol=ATOL):
    for name, g, e in zip(("dq", "dk", "dv"), got, expected, strict=True):
        g = as_numpy(g)
        assert g.shape == e.shape, (name, g.shape, e.shape)
        np.testing.assert_allclose(g, e, rtol=0, atol=tol, err_msg=name)


# numpy_ref.attention_backward and its torch mirror


@pytest.mark.parametrize(("tq", "tk"), LENGTHS)
@pytest.mark.parametrize("case", MASKS)
def test_attention_backward_numpy_matches_autograd(case, tq, tk):
    q, k, v = qkv(tq, tk)
    mask = make_mask(case, tq, tk)
    dout = draw((B, H, tq, DV), 9)
    got = numpy_ref.attention_backward(q, k, v, dout, mask)
    assert_grads_close(got, autograd_attention(q, k, v, dout, mask))


@pytest.mark.parametrize(("tq", "tk"), LENGTHS)
@pytest.mark.parametrize("case", MASKS)
def test_attention_backward_torch_matches_autograd(case, tq, tk):
    q, k, v = qkv(tq, tk)
    mask = make_mask(case, tq, tk)
    dout = draw((B, H, tq, DV), 9)
    got = torch_ref.attention_backward(t(q), t(k), t(v), t(dout), t(mask))
    assert_grads_close(got, autograd_attention(q, k, v, dout, mask))


def test_attention_backward_sums_over_broadcast_dims():
    # one k and v for every head, (B, 1, Tk, d): their gradient adds up
    # the heads that shared them
    q = draw((B, H, 6, D), 0)
    k, v = draw((B, 1, 8, D), 1), draw((B, 1, 8, DV), 2)
    dout = draw((B, H, 6, DV), 3)
    expected = autograd_attention(q, k, v, dout)
    assert_grads_close(numpy_ref.attention_backward(q, k, v, dout), expected)
    assert_grads_close(
        torch_ref.attention_backward(t(q), t(k), t(v), t(dout)), expected
    )


@pytest.mark.parametrize("n_kv_head", [1, 2])
def test_attention_backward_grouped_heads_sum_each_group(n_kv_head):
    # H = 4 query heads read H_kv heads: head h uses kv head h // G
    q = draw((B, 4, 6, D), 0)
    k, v = draw((B, n_kv_head, 8, D), 1), draw((B, n_kv_head, 8, DV), 2)
    dout = draw((B, 4, 6, DV), 3)
    group = 4 // n_kv_head
    tk, tv = (t(a).clone().requires_grad_() for a in (k, v))
    scores = t(q) @ tk.repeat_interleave(group, dim=1).transpose(-2, -1)
    out = (scores / math.sqrt(D)).softmax(-1) @ tv.repeat_interleave(
        group, dim=1
    )
    out.backward(t(dout))
    expected = [
        autograd_attention(
            q, k.repeat(group, axis=1), v.repeat(group, axis=1), dout
        )[0],
        tk.grad.numpy(),
        tv.grad.numpy(),
    ]
    assert_grads_close(numpy_ref.attention_backward(q, k, v, dout), expected)
    assert_grads_close(
        torch_ref.attention_backward(t(q), t(k), t(v), t(dout)), expected
    )


def test_attention_backward_sections_match_the_equations():
    # each named step by hand on one head: dV = A^T dO, dA = dO V^T,
    # dS = A * (dA - rowsum(dA * A)), dQ = dS K / sqrt(d), dK = dS^T Q /..
    q, k, v = (a[0, 0] for a in qkv(3, 4, seed=4))
    dout = draw((3, DV), 5)
    _, a = numpy_ref.attention(q, k, v)
    da = dout @ v.T
    ds = a * (da - (da * a).sum(-1, keepdims=True))
    dq, dk, dv = numpy_ref.attention_backward(q, k, v, dout)
    np.testing.assert_allclose(dv, a.T @ dout, rtol=1e-13)
    np.testing.assert_allclose(dq, ds @ k / 2, rtol=1e-13)  # sqrt(4)
    np.testing.assert_allclose(dk, ds.T @ q / 2, rtol=1e-13)


class ByHand(torch.autograd.Function):
    """A forward whose backward is one of ours, for gradcheck."""

    @staticmethod
    def forward(ctx, q, k, v, backward, mask):
        ctx.save_for_backward(q, k, v)
        ctx.backward, ctx.mask = backward, mask
        return torch_ref.attention(q, k, v, mask)[0]

    @staticmethod
    def backward(ctx, dout):
        q, k, v = ctx.saved_tensors
        return (*ctx.backward(q, k, v, dout, ctx.mask), None, None)


def tiled_torch(block_q, block_k):
    def backward(q, k, v, dout, mask):
        return tiled.tiled_attention_backward_torch(
            q, k, v, dout, mask, block_q=block_q, block_k=block_k
        )

    return backward


@pytest.mark.slow
@pytest.mark.parametrize(
    "backward",
    [
        torch_ref.attention_backward,
        tiled_torch(2, 3),
        tiled_torch(1, 1),
    ],
    ids=["torch_ref", "tiled-2x3", "tiled-1x1"],
)
@pytest.mark.parametrize("case", ["none", "per-head"])
def test_torch_backward_passes_gradcheck(backward, case):
    # small: gradcheck perturbs each of the 96 inputs in turn
    q, k, v = (t(a[:1, :2]).requires_grad_() for a in qkv(3, 4, seed=6))
    mask = make_mask(case, 3, 4, seed=6)
    mask = None if mask is None else t(mask[:1, :2])  # (1, 2, Tq, Tk)
    assert torch.autograd.gradcheck(
        lambda q, k, v: ByHand.apply(q, k, v, backward, mask),
        (q, k, v),
        eps=1e-6,
        atol=1e-8,
        rtol=1e-6,  # the default rtol=1e-3 is lax
    )


# rowsum(dA * A) = rowsum(dO * O): why the tiled backward needs only O


@settings(max_examples=60, deadline=None)
@given(
    tq=st.integers(1, 8),
    tk=st.integers(1, 8),
    d=st.integers(1, 6),
    dv=st.integers(1, 6),
    p_blocked=st.floats(0, 0.9),
    seed=st.integers(0, 2**16),
)
def test_attention_rowsum_identity(tq, tk, d, dv, p_blocked, seed):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, tq, d)), rng.standard_normal((2, tk, d))
    v, dout = (
        rng.standard_normal((2, tk, dv)),
        rng.standard_normal((2, tq, dv)),
    )
    mask = rng.random((2, tq, tk)) < p_blocked
    mask[..., rng.integers(tk)] = False  # every row keeps a key
    out, a = numpy_ref.attention(q, k, v, mask)
    da = dout @ np.swapaxes(v, -2, -1)  # (2, Tq, Tk)
    # sum_j A_ij (dO_i . V_j) = dO_i . (sum_j A_ij V_j) = dO_i . O_i
    np.testing.assert_allclose(
        (da * a).sum(-1), (dout * out).sum(-1), rtol=1e-9, atol=1e-12
    )


# MultiHeadAttention.backward


def autograd_mha(layer, x, dy, mask=None, context=None, positions=None):
    """Every gradient of the layer's forward, by autograd, as a dict."""
    params = {
        name: getattr(layer, name)
        for name in ("Wq", "Wk", "Wv", "Wo", "bq", "bk", "bv", "bo")
        if getattr(layer, name) is not None
    }
    leaves = {
        name: t(value).clone().requires_grad_()
        for name, value in params.items()
    }
    leaves["x"] = t(x).clone().requires_grad_()
    if context is not None:
        leaves["context"] = t(context).clone().requires_grad_()
    source = leaves.get("context", leaves["x"])

    def project(inp, name):
        y = inp @ leaves[f"W{name}"]
        if f"b{name}" in leaves:
            y = y + leaves[f"b{name}"]
        b, length, _ = y.shape
        return y.view(b, length, -1, layer.d_head).transpose(1, 2)

    q, k, v = (
        project(leaves["x"], "q"),
        project(source, "k"),
        project(source, "v"),
    )  # (B, H or H_kv, T, dh)
    if layer.rope:
        pos = np.arange(x.shape[1]) if positions is None else positions
        q = torch_ref.apply_rope(q, pos, layer.rope_base)
        k = torch_ref.apply_rope(k, pos, layer.rope_base)
    out, _ = torch_ref.attention(q, k, v, t(mask))  # (B, H, Tq, dh)
    b, _, tq, _ = out.shape
    merged = out.transpose(1, 2).reshape(b, tq, -1)  # (B, Tq, d_model)
    y = merged @ leaves["Wo"]
    if "bo" in leaves:
        y = y + leaves["bo"]
    y.backward(t(dy))
    return {name: leaf.grad.numpy() for name, leaf in leaves.items()}


def assert_dicts_close(got, expected):
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert got[name].shape == expected[name].shape, name
        np.testing.assert_allclose(
            got[name], expected[name], rtol=0, atol=ATOL, err_msg=name
        )


MHA_CASES = [
    "none",
    "causal",
    "per-head",
    "padding",
    "none-cross",
    "padding-cross",
]


@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
@pytest.mark.parametrize("case", MHA_CASES)
def test_mha_backward_matches_autograd(case, bias):
    d_model, tq = 12, 5
    cross = case.endswith("-cross")
    tk = 8 if cross else tq
    layer = numpy_ref.MultiHeadAttention(d_model, H, bias=bias, seed=1)
    x = draw((B, tq, d_model), 2)
    context = draw((B, tk, d_model), 3) if cross else None
    mask = make_mask(case.removesuffix("-cross"), tq, tk, seed=4)
    dy = draw((B, tq, d_model), 5)
    got = layer.backward(x, dy, mask, context)
    expected = autograd_mha(layer, x, dy, mask, context)
    assert_dicts_close(got, expected)
    names = (
        {"x", "Wq", "Wk", "Wv", "Wo"}
        | ({"bq", "bk", "bv", "bo"} if bias else set())
        | ({"context"} if cross else set())
    )
    assert set(got) == names


@pytest.mark.parametrize(
    ("n_kv_head", "rope"),
    [
        (1, False),
        (2, False),
        (4, True),
        (2, True),
    ],
    ids=["multi-query", "grouped", "rope", "grouped-rope"],
)
def test_mha_backward_grouped_heads_and_rope(n_kv_head, rope):
    d_model, tq = 16, 6
    layer = numpy_ref.MultiHeadAttention(
        d_model, 4, n_kv_head=n_kv_head, bias=True, rope=rope, seed=1
    )
    x, dy = draw((B, tq, d_model), 2), draw((B, tq, d_model), 3)
    mask = numpy_ref.causal_mask(tq)
    positions = np.arange(3, 3 + tq) if rope else None
    got = layer.backward(x, dy, mask, positions=positions)
    expected = autograd_mha(layer, x, dy, mask, positions=positions)
    assert_dicts_close(got, expected)
    assert got["Wk"].shape == (d_model, n_kv_head * d_model // 4)


def test_mha_backward_sums_to_a_directional_derivative():
    # L = sum(y * dy): a step along each weight's gradient moves L by
    # the squared norm of that gradient (first order, central difference)
    layer = numpy_ref.MultiHeadAttention(8, 2, bias=True, seed=7)
    x, dy = draw((1, 4, 8), 8), draw((1, 4, 8), 9)
    grads = layer.backward(x, dy)
    eps = 1e-6
    for name in ("Wq", "Wk", "Wv", "Wo", "bq", "bo"):
        weight = getattr(layer, name)
        losses = []
        for sign in (1, -1):
            setattr(layer, name, weight + sign * eps * grads[name])
            losses.append(np.sum(layer(x)[0] * dy))
        setattr(layer, name, weight)
        slope = (losses[0] - losses[1]) / (2 * eps)
        np.testing.assert_allclose(
            slope, np.sum(grads[name] ** 2), rtol=1e-6, err_msg=name
        )


# The tiled (FlashAttention-2) backward


def tiled_inputs(case, tq, tk, seed=0):
    """q, k, v, dout, the user mask, causal, and the full mask."""
    q, k, v = qkv(tq, tk, seed=seed)
    dout = draw((B, H, tq, DV), seed + 9)
    causal = case == "causal"
    mask = None if causal else make_mask(case, tq, tk, seed=seed)
    full = aligned_causal(tq, tk) if causal else mask
    return q, k, v, dout, mask, causal, full


@pytest.mark.parametrize(("block_q", "block_k"), BLOCKS)
@pytest.mark.parametrize(("tq", "tk"), LENGTHS)
@pytest.mark.parametrize("case", MASKS)
def test_tiled_backward_numpy_matches_autograd(case, tq, tk, block_q, block_k):
    q, k, v, dout, mask, causal, full = tiled_inputs(case, tq, tk)
    got = tiled.tiled_attention_backward_numpy(
        q, k, v, dout, mask, causal, block_q=block_q, block_k=block_k
    )
    assert_grads_close(got, autograd_attention(q, k, v, dout, full))


@pytest.mark.parametrize(("block_q", "block_k"), BLOCKS)
@pytest.mark.parametrize(("tq", "tk"), LENGTHS)
@pytest.mark.parametrize("case", MASKS)
def test_tiled_backward_torch_matches_autograd(case, tq, tk, block_q, block_k):
    q, k, v, dout, mask, causal, full = tiled_inputs(case, tq, tk)
    got = tiled.tiled_attention_backward_torch(
        t(q),
        t(k),
        t(v),
        t(dout),
        t(mask),
        causal,
        block_q=block_q,
        block_k=block_k,
    )
    assert_grads_close(got, autograd_attention(q, k, v, dout, full))


def test_tiled_backward_causal_with_a_mask_and_unsorted_positions():
    # tiles wholly in the future are skipped: unsorted positions must
    # not skip a tile that holds an allowed key
    tq, tk = 5, 9
    q, k, v = qkv(tq, tk, seed=5)
    dout = draw((B, H, tq, DV), 6)
    q_pos = np.array([8, 3, 6, 4, 7])
    k_pos = np.array([7, 8, 0, 5, 1, 6, 2, 3, 4])
    padding = make_mask("padding", tq, tk, seed=7)
    padding[..., 2] = False  # position 0: visible to every query
    full = padding | numpy_ref.causal_mask_for_positions(q_pos, k_pos)
    expected = autograd_attention(q, k, v, dout, full)
    kw = {"causal": True, "block_q": 2, "block_k": 2}
    assert_grads_close(
        tiled.tiled_attention_backward_numpy(
            q,
            k,
            v,
            dout,
            padding,
            query_positions=q_pos,
            key_positions=k_pos,
            **kw,
        ),
        expected,
    )
    assert_grads_close(
        tiled.tiled_attention_backward_torch(
            t(q),
            t(k),
            t(v),
            t(dout),
            t(padding),
            query_positions=t(q_pos),
            key_positions=t(k_pos),
            **kw,
        ),
        expected,
    )


def test_tiled_backward_sums_over_broadcast_dims():
    q = draw((B, H, 6, D), 0)
    k, v = draw((1, 1, 8, D), 1), draw((B, 1, 8, DV), 2)
    dout = draw((B, H, 6, DV), 3)
    expected = autograd_attention(q, k, v, dout)
    kw = {"block_q": 4, "block_k": 3}
    assert_grads_close(
        tiled.tiled_attention_backward_numpy(q, k, v, dout, **kw), expected
    )
    assert_grads_close(
        tiled.tiled_attention_backward_torch(t(q), t(k), t(v), t(dout), **kw),
        expected,
    )


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_tiled_forward_returns_the_log_sum_exp(framework):
    q, k, v = qkv(6, 9, seed=2)
    mask = make_mask("per-head", 6, 9, seed=2)
    scores = q @ np.swapaxes(k, -2, -1) / math.sqrt(D)
    scores = np.where(mask, -np.inf, scores)
    expected = np.log(np.exp(scores).sum(-1))  # (B, H, Tq)
    kw = {"block_q": 4, "block_k": 4, "return_lse": True}
    if framework == "numpy":
        out, lse = tiled.tiled_attention_numpy(q, k, v, mask, **kw)
    else:
        out, lse = tiled.tiled_attention_torch(t(q), t(k), t(v), t(mask), **kw)
        out, lse = out.numpy(), lse.numpy()
    np.testing.assert_allclose(lse, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        out, numpy_ref.attention(q, k, v, mask)[0], rtol=0, atol=1e-12
    )


@pytest.mark.parametrize(
    ("dtype", "tol"),
    [
        (torch.float32, 1e-5),
        (torch.bfloat16, 1e-2),
        (torch.float16, 2e-3),
    ],
    ids=str,
)
def test_tiled_backward_torch_low_precision(dtype, tol):
    # float32 accumulators: against the exact gradients of the rounded
    # inputs, the error is about the rounding of the outputs (|g| < 3:
    # half a bfloat16 step is 8e-3, of float16 1e-3)
    q, k, v, dout, mask, _, full = tiled_inputs("padding", 24, 24, 3)
    low = [t(a).to(dtype) for a in (q, k, v, dout)]
    expected = autograd_attention(*(x.double().numpy() for x in low), full)
    got = tiled.tiled_attention_backward_torch(
        *low, t(mask), block_q=8, block_k=8
    )
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == dtype
        np.testing.assert_allclose(g.double().numpy(), e, rtol=0, atol=tol)


# Bad input: clear errors naming the shape, row or value


def backward_functions():
    def numpy_tiled(q, k, v, dout, mask=None):
        return tiled.tiled_attention_backward_numpy(
            q, k, v, dout, mask, block_q=2, block_k=3
        )

    def as_torch(fn):
        def run(q, k, v, dout, mask=None):
            return fn(t(q), t(k), t(v), t(dout), t(mask))

        return run

    def torch_tiled(q, k, v, dout, mask=None):
        return tiled.tiled_attention_backward_torch(
            q, k, v, dout, mask, block_q=2, block_k=3
        )

    return {
        "numpy": numpy_ref.attention_backward,
        "torch": as_torch(torch_ref.attention_backward),
        "tiled-numpy": numpy_tiled,
        "tiled-torch": as_torch(torch_tiled),
    }


@pytest.fixture(params=list(backward_functions()))
def backward(request):
    return backward_functions()[request.param]


def test_linear_backward_matches_autograd():
    x, weight, dy = draw((2, 3, 4), 0), draw((4, 5), 1), draw((2, 3, 5), 2)
    tx, tw = t(x).requires_grad_(), t(weight).requires_grad_()
    tb = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    (tx @ tw + tb).backward(t(dy))
    dw, db, dx = numpy_ref.linear_backward(x, weight, dy)
    for got, expected in ((dw, tw), (db, tb), (dx, tx)):
        np.testing.assert_allclose(got, expected.grad.numpy(), atol=ATOL)


def test_mha_backward_of_an_empty_batch_is_empty():
    layer = numpy_ref.MultiHeadAttention(8, 2, bias=True)
    grads = layer.backward(np.zeros((0, 4, 8)), np.zeros((0, 4, 8)))
    assert grads["x"].shape == (0, 4, 8)
    for name in ("Wq", "Wk", "Wv", "Wo", "bq", "bk", "bv", "bo"):
        # no sequence, no gradient: zeros of the parameter's shape
        np.testing.assert_array_equal(
            grads[name], np.zeros_like(getattr(layer, name))
        )


# Low precision computes in float32; the output has the forward's dtype

TILES = {"block_q": 2, "block_k": 3}  # ragged last blocks
LOW_PRECISION_BACKWARDS = {
    "numpy_ref": numpy_ref.attention_backward,
    "tiled_numpy": partial(tiled.tiled_attention_backward_numpy, **TILES),
    "torch_ref": torch_ref.attention_backward,
    "tiled_torch": partial(tiled.tiled_attention_backward_torch, **TILES),
}


def constant_40():
    """q = k = 0, v = dO = 40 over 64 features: dO V^T = 102,400."""
    zeros = np.zeros((1, 1, 3, 64))
    forty = np.full((1, 1, 3, 64), 40.0)
    return zeros, zeros, forty, forty


def random_60():
    """Random inputs at scale 60, d = 64: |dO V^T| beyond 65,504."""
    return tuple(draw((1, 2, 6, 64), seed) * 60.0 for seed in range(4))


def _dtype_name(dtype):
    return (
        str(dtype).removeprefix("torch.")
        if isinstance(dtype, torch.dtype)
        else np.dtype(dtype).name
    )


LOW_PRECISION = [
    ("numpy_ref", np.float16),
    ("tiled_numpy", np.float16),
    ("torch_ref", torch.float16),
    ("torch_ref", torch.bfloat16),
    ("tiled_torch", torch.float16),
    ("tiled_torch", torch.bfloat16),
]


@pytest.mark.parametrize("inputs", [constant_40, random_60])
@pytest.mark.parametrize(
    ("name", "dtype"),
    LOW_PRECISION,
    ids=lambda case: case if isinstance(case, str) else _dtype_name(case),
)
def test_backward_low_precision_computes_in_float32(
    name, dtype, inputs, sdpa_reference
):
    arrays = inputs()
    fn = LOW_PRECISION_BACKWARDS[name]
    if isinstance(dtype, torch.dtype):  # bfloat16: no NumPy twin
        low = [torch.from_numpy(a).to(dtype) for a in arrays]
        grads = fn(*low)
        rounded = [x.double().numpy() for x in low]
        expected_dtype = dtype  # the forward's output dtype
    else:
        rounded = [a.astype(dtype) for a in arrays]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no overflow warning either
            grads = fn(*rounded)
        expected_dtype = np.float32  # numpy_ref computes fp16 in float32
    _, expected = sdpa_reference(*rounded)
    scale = max(np.abs(e).max() for e in expected)  # |dv| ~ 40 or ~ 240
    for g in grads:
        assert g.dtype == expected_dtype
        assert np.isfinite(as_numpy(g)).all()
    # rounding the outputs (bf16: 2**-8 relative) and float32 sums
    tol = (1e-2 if dtype == torch.bfloat16 else 2e-3) * scale
    assert_grads_close(grads, expected, tol=tol)


@pytest.mark.parametrize(
    ("q_dtype", "grad_dtype"),
    [
        (np.int8, np.float32),
        (np.int64, np.float64),
        (np.bool_, np.float32),
        (np.float16, np.float32),
    ],
    ids=["int8", "int64", "bool", "float16"],
)
def test_tiled_backward_numpy_returns_the_forward_dtype(
    q_dtype, grad_dtype, sdpa_reference
):
    # integer inputs compute in float: the true dk is far from zero
    q = np.array([[[1, 2], [0, 1]]])  # (1, Tq=2, d=2)
    k = np.array([[[0, 1], [1, 0], [2, 2]]])  # (1, Tk=3, d=2)
    v = np.array([[[1, 0], [0, 3], [2, 1]]])
    dout = np.array([[[1, -1], [2, 0]]])
    q, k, v, dout = (a.astype(q_dtype) for a in (q, k, v, dout))
    out = tiled.tiled_attention_numpy(q, k, v)
    got = tiled.tiled_attention_backward_numpy(q, k, v, dout, block_k=2)
    plain = numpy_ref.attention_backward(q, k, v, dout)
    _, expected = sdpa_reference(q, k, v, dout)
    assert out.dtype == grad_dtype
    for g, p in zip(got, plain, strict=True):
        assert g.dtype == p.dtype == grad_dtype
    assert np.abs(expected[1]).max() > 0.1  # not a case where 0 is right
    assert_grads_close(got, expected, tol=atol("float32"))
    assert_grads_close(plain, expected, tol=atol("float32"))


# The backward functions take what their forwards take


@pytest.mark.parametrize(
    "fn",
    [
        numpy_ref.attention_backward,
        partial(tiled.tiled_attention_backward_numpy, block_q=2, block_k=2),
    ],
    ids=["numpy_ref", "tiled_numpy"],
)
def test_numpy_backward_takes_lists_as_the_forward_does(
    fn, qkv_dout, sdpa_reference
):
    q, k, v, dout = qkv_dout
    mask = numpy_ref.causal_mask(4, 5, align="bottom_right")
    expected = fn(q, k, v, dout, mask)
    got = fn(q.tolist(), k.tolist(), v.tolist(), dout.tolist(), mask.tolist())
    assert_grads_close(got, expected, tol=0)
    _, reference = sdpa_reference(q, k, v, dout, mask)
    assert_grads_close(got, reference)


@pytest.mark.parametrize(
    "fn",
    [
        torch_ref.attention_backward,
        partial(tiled.tiled_attention_backward_torch, block_q=2, block_k=2),
    ],
    ids=["torch_ref", "tiled_torch"],
)
@pytest.mark.parametrize(
    ("q_dtype", "dout_dtype"),
    [
        (torch.float32, torch.float64),
        (torch.float64, torch.float32),
        (torch.float16, torch.float32),
    ],
    ids=str,
)
def test_torch_backward_takes_dout_of_another_float_dtype(
    fn, q_dtype, dout_dtype, qkv_dout, sdpa_reference
):
    q, k, v, dout = (t(a) for a in qkv_dout)
    low = [x.to(q_dtype) for x in (q, k, v)]
    got = fn(*low, dout.to(dout_dtype))
    same = fn(*low, dout.to(q_dtype))
    _, expected = sdpa_reference(
        *(x.double().numpy() for x in low),
        dout.to(dout_dtype).double().numpy(),
    )
    for g, s in zip(got, same, strict=True):
        assert g.dtype == s.dtype == q_dtype  # the forward's output dtype
    tol = atol(q_dtype) * 4  # |grad| up to ~2
    assert_grads_close(got, expected, tol=tol)


# empty_rows="zero": a row with no allowed key gets no gradient, as SDPA


def test_attention_backward_empty_rows_zero_matches_sdpa(
    backward_pass, empty_rows_case, sdpa_reference
):
    q, k, v, dout, mask = empty_rows_case
    _, expected = sdpa_reference(q, k, v, dout, mask)
    got = backward_pass(q, k, v, dout, mask, empty_rows="zero")
    assert_grads_close(got, expected)
    rows = np.broadcast_to(mask.all(axis=-1), q.shape[:-1])
    assert (as_numpy(got[0])[rows] == 0).all()  # no gradient for them


# Memory: the tiled backward's peak grows with T, the plain one's with T^2

MEM_LEAD, MEM_D, MEM_BLOCK = (1, 2), 16, 64


def mem_inputs(length, to_torch):
    arrays = [draw((*MEM_LEAD, length, MEM_D), s) for s in range(4)]
    return [t(a) for a in arrays] if to_torch else arrays


def peaks(measure, plain, tiled_fn, to_torch):
    """{T: (plain peak, tiled peak)} in bytes, at T = 256 and 512."""
    kw = {"block_q": MEM_BLOCK, "block_k": MEM_BLOCK}
    result = {}
    for length in (256, 512):
        args = mem_inputs(length, to_torch)
        result[length] = (
            measure(plain, *args),
            measure(tiled_fn, *args, **kw),
        )
    return result


@pytest.mark.slow
@pytest.mark.parametrize(
    ("measure", "plain", "tiled_fn", "to_torch"),
    [
        (
            peak_bytes_numpy,
            numpy_ref.attention_backward,
            tiled.tiled_attention_backward_numpy,
            False,
        ),
        (
            peak_bytes_torch_cpu,
            torch_ref.attention_backward,
            tiled.tiled_attention_backward_torch,
            True,
        ),
    ],
    ids=["numpy", "torch"],
)
def test_tiled_backward_peak_memory_grows_linearly(
    measure, plain, tiled_fn, to_torch
):
    found = peaks(measure, plain, tiled_fn, to_torch)
    plain_ratio = found[512][0] / found[256][0]
    tiled_ratio = found[512][1] / found[256][1]
    assert plain_ratio > 3.5, found  # ~4: (T, T) weights and gradients
    assert tiled_ratio < 2.5, found  # ~2: (T, d) arrays, fixed tiles
    assert found[512][1] < found[512][0] / 10, found
