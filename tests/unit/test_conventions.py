"""RoPE's two pairings, and the weight reorder that bridges them.

Meta's Llama code turns adjacent features (2i, 2i + 1) as complex
numbers; rotate-half (torch_ref.apply_rope) turns (i, i + d/2). After
the rows of W_Q and W_K are reordered within each head, both give the
same scores, weights and outputs; without it, neither error nor NaN.
"""

import math
import re

import numpy as np
import pytest
import torch

from mha_ref import conventions, torch_ref
from mha_ref.tolerances import atol

TOL64 = {"atol": atol(np.float64), "rtol": 0}


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(7)


def randn(gen, *shape):
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def rope_as_complex(x, positions, base=10000.0):
    """Meta's reference formulation: adjacent pairs as complex numbers,
    multiplied by e^(i m theta_j) (llama/model.py, apply_rotary_emb)."""
    d = x.shape[-1]
    freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.as_tensor(positions, dtype=torch.float64)[:, None] * freq
    turn = torch.polar(torch.ones_like(angle), angle)  # (T, d / 2)
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * turn).flatten(-2)


def rotate_adjacent_by_hand(x, positions, base=10000.0):
    """Explicit 2-D rotations of (x_2i, x_2i+1), one row at a time."""
    t, d = x.shape
    out = np.empty_like(x)
    for row, pos in zip(range(t), positions, strict=True):
        for i in range(d // 2):
            angle = pos * base ** (-2 * i / d)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[row, 2 * i], x[row, 2 * i + 1]
            out[row, 2 * i], out[row, 2 * i + 1] = c * a - s * b, s * a + c * b
    return out


def test_apply_rope_interleaved_matches_adjacent_pair_rotations(gen):
    x = randn(gen, 5, 8)
    positions = [0, 3, 7, 100, 2]
    got = conventions.apply_rope_interleaved(x, positions)
    np.testing.assert_allclose(
        got.numpy(), rotate_adjacent_by_hand(x.numpy(), positions), **TOL64
    )


def test_apply_rope_interleaved_matches_metas_complex_form(gen):
    x = randn(gen, 2, 3, 6, 16)  # (B, H, T, dh)
    positions = torch.arange(40, 46)
    got = conventions.apply_rope_interleaved(x, positions, base=500000.0)
    expected = rope_as_complex(x, positions, base=500000.0)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), **TOL64)


def test_apply_rope_interleaved_keeps_float32(gen):
    x = randn(gen, 4, 8).float()
    got = conventions.apply_rope_interleaved(x, [1, 2, 3, 4])
    assert got.dtype == torch.float32
    expected = conventions.apply_rope_interleaved(x.double(), [1, 2, 3, 4])
    np.testing.assert_allclose(
        got.numpy(), expected.numpy(), atol=atol(np.float32), rtol=0
    )


def test_interleaved_to_rotate_half_orders_evens_then_odds():
    rows = torch.arange(12.0)  # 2 heads of 6: a bias, one value per row
    got = conventions.interleaved_to_rotate_half(rows, n_head=2)
    expected = [0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11]
    assert got.tolist() == expected


def test_interleaved_to_rotate_half_moves_whole_rows(gen):
    weight = randn(gen, 2 * 4, 5)  # (H * dh, d_model), H = 2, dh = 4
    got = conventions.interleaved_to_rotate_half(weight, n_head=2)
    order = [0, 2, 1, 3, 4, 6, 5, 7]
    np.testing.assert_array_equal(got.numpy(), weight[order].numpy())


def test_rotate_half_of_reordered_features_is_reordered_interleaved(gen):
    x = randn(gen, 3, 7, 8)  # (H, T, dh)
    positions = torch.arange(7)
    order = [0, 2, 4, 6, 1, 3, 5, 7]  # evens, then odds
    got = torch_ref.apply_rope(x[..., order], positions)
    expected = conventions.apply_rope_interleaved(x, positions)[..., order]
    np.testing.assert_allclose(got.numpy(), expected.numpy(), **TOL64)


def heads(x, wq, wk, n_head, n_kv_head):
    """q (B, H, T, dh) and k (B, H_kv, T, dh), before RoPE."""
    b, t, _ = x.shape
    q = (x @ wq.T).view(b, t, n_head, -1).transpose(1, 2)
    k = (x @ wk.T).view(b, t, n_kv_head, -1).transpose(1, 2)
    return q, k


@pytest.mark.parametrize(("n_head", "n_kv_head"), [(4, 4), (4, 2)])
def test_reordered_weights_give_the_same_scores(gen, n_head, n_kv_head):
    d_model, t = 32, 9
    d_head = d_model // n_head
    x = randn(gen, 2, t, d_model)
    wq = randn(gen, d_model, d_model)  # a Meta checkpoint: interleaved
    wk = randn(gen, n_kv_head * d_head, d_model)
    positions = torch.arange(t)
    q, k = heads(x, wq, wk, n_head, n_kv_head)
    q = conventions.apply_rope_interleaved(q, positions)
    k = conventions.apply_rope_interleaved(k, positions)
    k = torch_ref.repeat_kv_heads(k, n_head // n_kv_head)
    meta = q @ k.transpose(-2, -1)  # (B, H, T, T)

    wq_hf = conventions.interleaved_to_rotate_half(wq, n_head)
    wk_hf = conventions.interleaved_to_rotate_half(wk, n_kv_head)
    q, k = heads(x, wq_hf, wk_hf, n_head, n_kv_head)
    q, k = (
        torch_ref.apply_rope(q, positions),
        torch_ref.apply_rope(k, positions),
    )
    k = torch_ref.repeat_kv_heads(k, n_head // n_kv_head)
    hf = q @ k.transpose(-2, -1)
    np.testing.assert_allclose(hf.numpy(), meta.numpy(), atol=1e-12, rtol=0)

    q, k = heads(x, wq, wk, n_head, n_kv_head)  # loaded without reorder
    q, k = (
        torch_ref.apply_rope(q, positions),
        torch_ref.apply_rope(k, positions),
    )
    k = torch_ref.repeat_kv_heads(k, n_head // n_kv_head)
    wrong = q @ k.transpose(-2, -1)
    assert (wrong - meta).abs().max() > 1.0  # silently different
    assert torch.isfinite(wrong).all()


def test_reordered_module_matches_interleaved_module_outputs(gen):
    d_model, n_head, t = 16, 2, 6
    torch.manual_seed(3)
    module = torch_ref.MultiHeadAttention(d_model, n_head, rope=True)
    module = module.double()
    x = randn(gen, 1, t, d_model)
    mask = torch_ref.causal_mask(t)
    meta_wq, meta_wk = module.wq.weight.clone(), module.wk.weight.clone()
    q, k = heads(x, meta_wq, meta_wk, n_head, n_head)
    v = module.split_heads(module.wv(x))
    positions = torch.arange(t)
    q = conventions.apply_rope_interleaved(q, positions)
    k = conventions.apply_rope_interleaved(k, positions)
    out, _ = torch_ref.attention(q, k, v, mask)
    expected = module.wo(module.merge_heads(out))
    with torch.no_grad():
        module.wq.weight.copy_(
            conventions.interleaved_to_rotate_half(meta_wq, n_head)
        )
        module.wk.weight.copy_(
            conventions.interleaved_to_rotate_half(meta_wk, n_head)
        )
    got, _ = module(x, mask)
    np.testing.assert_allclose(
        got.detach().numpy(), expected.detach().numpy(), atol=1e-12, rtol=0
    )


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
