"""Grouped-query and multi-query attention: fewer key/value heads than q.

Query head h reads key/value head h // (H // H_kv), as SDPA's
enable_gqa=True. Every comparison is against an independent path:
SDPA itself, or repeat_interleave done by hand.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_ref import numpy_ref, pitfalls, torch_ref
from mha_ref.tolerances import atol

B, H, T, D_HEAD = 2, 6, 5, 4
TOL64 = {"atol": atol(torch.float64), "rtol": 0}


def randn(*shape, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def qkv(n_kv_head, tk=T):
    """q (B, H, T, dh); k, v (B, H_kv, Tk, dh), float64."""
    return (
        randn(B, H, T, D_HEAD, seed=1),
        randn(B, n_kv_head, tk, D_HEAD, seed=2),
        randn(B, n_kv_head, tk, D_HEAD, seed=3),
    )


def random_mask(shape, seed):
    """True = blocked, with the last key of every row left allowed."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=gen) < 0.5
    mask[..., -1] = False
    return mask


def random_gqa_module(n_kv_head, rope=False, dtype=torch.float64):
    module = torch_ref.MultiHeadAttention(
        12, 6, n_kv_head=n_kv_head, bias=True, rope=rope, dtype=dtype
    )
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for param in module.parameters():  # biases as large as weights
            param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
    return module


@pytest.mark.parametrize("n_kv_head", [1, 2, 3, 6])
@pytest.mark.parametrize("mask_shape", [None, (T, T), (B, H, T, T)])
def test_attention_grouped_heads_match_sdpa_enable_gqa(n_kv_head, mask_shape):
    q, k, v = qkv(n_kv_head)
    mask = None if mask_shape is None else random_mask(mask_shape, seed=4)
    expected = F.scaled_dot_product_attention(
        q,
        k,
        v,
        dropout_p=0.0,
        enable_gqa=True,
        attn_mask=None if mask is None else ~mask,  # SDPA: True = allowed
    )
    got_torch, weights = torch_ref.attention(q, k, v, mask)
    torch.testing.assert_close(got_torch, expected, **TOL64)
    assert weights.shape == (B, H, T, T)  # one row of weights per head
    got_numpy, _ = numpy_ref.attention(
        q.numpy(),
        k.numpy(),
        v.numpy(),
        None if mask is None else mask.numpy(),
    )
    np.testing.assert_allclose(got_numpy, expected.numpy(), **TOL64)


@pytest.mark.parametrize("n_kv_head", [1, 2, 3])
def test_attention_grouped_heads_match_repeat_interleave(n_kv_head):
    # each key/value head copied G times in a row, then plain attention
    q, k, v = qkv(n_kv_head, tk=7)
    group = H // n_kv_head
    k_full = k.repeat_interleave(group, dim=1)  # (B, H, Tk, dh)
    v_full = v.repeat_interleave(group, dim=1)
    expected, _ = torch_ref.attention(q, k_full, v_full)
    got, _ = torch_ref.attention(q, k, v)
    torch.testing.assert_close(got, expected, **TOL64)
    got_np, _ = numpy_ref.attention(q.numpy(), k.numpy(), v.numpy())
    np.testing.assert_allclose(got_np, expected.numpy(), **TOL64)
    # and query head h really reads key/value head h // G
    for h in range(H):
        one, _ = torch_ref.attention(
            q[:, h], k[:, h // group], v[:, h // group]
        )
        torch.testing.assert_close(got[:, h], one, **TOL64)


def test_repeat_kv_heads_is_repeat_interleave_not_tile():
    heads = np.arange(3).reshape(1, 3, 1, 1)  # (B, H_kv, T, d)
    got = numpy_ref.repeat_kv_heads(heads, 2).ravel()
    np.testing.assert_array_equal(got, [0, 0, 1, 1, 2, 2])
    got_torch = torch_ref.repeat_kv_heads(torch.from_numpy(heads), 2)
    np.testing.assert_array_equal(got_torch.flatten().numpy(), got)


def test_attention_tiled_heads_give_a_different_wrong_answer():
    # k.repeat tiles the heads [a, b, a, b]: query head 1 reads head b,
    # where SDPA's grouping makes it read head a
    q, k, v = qkv(n_kv_head=2)
    right = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    tiled, _ = torch_ref.attention(
        q,
        pitfalls.wrong_tile_kv_heads(k, 3),
        pitfalls.wrong_tile_kv_heads(v, 3),
    )
    assert (tiled - right).abs().max() > 1e-2
    # what tiling computes: query head h reads key/value head h % H_kv
    for h in range(H):
        one, _ = torch_ref.attention(q[:, h], k[:, h % 2], v[:, h % 2])
        torch.testing.assert_close(tiled[:, h], one, **TOL64)
    # heads 0 and H - 1 read the same head either way; head 1 does not
    torch.testing.assert_close(tiled[:, [0, -1]], right[:, [0, -1]], **TOL64)
    assert (tiled[:, 1] - right[:, 1]).abs().max() > 1e-2


@pytest.mark.parametrize(
    ("n_kv_head", "rope"), [(1, False), (2, False), (3, True), (6, True)]
)
def test_sdpa_forward_grouped_module_matches_from_scratch(n_kv_head, rope):
    module = random_gqa_module(n_kv_head, rope=rope)
    x = randn(B, T, 12, seed=5)
    mask = torch_ref.causal_mask(T)
    expected, _ = module(x, mask=mask)
    got = torch_ref.sdpa_forward(module, x, mask)
    torch.testing.assert_close(got, expected, **TOL64)


@pytest.mark.parametrize("n_kv_head", [1, 2, 3])
def test_mha_grouped_heads_project_to_n_kv_head_widths(n_kv_head):
    module = random_gqa_module(n_kv_head)
    assert module.wk.weight.shape == (n_kv_head * 2, 12)  # (out, in)
    assert module.wv.weight.shape == (n_kv_head * 2, 12)
    q, k, _v = module.project(randn(B, T, 12, seed=5))
    assert q.shape == (B, 6, T, 2)
    assert k.shape == (B, n_kv_head, T, 2)
    twin = numpy_ref.MultiHeadAttention(12, 6, n_kv_head=n_kv_head, bias=True)
    assert twin.Wk.shape == twin.Wv.shape == (12, n_kv_head * 2)
    assert twin.bk.shape == (n_kv_head * 2,)


def test_mha_n_kv_head_equal_to_n_head_keeps_the_same_weights():
    # same seed, same draws: the default is the old module exactly
    plain = numpy_ref.MultiHeadAttention(8, 2, bias=True, seed=3)
    full = numpy_ref.MultiHeadAttention(8, 2, n_kv_head=2, bias=True, seed=3)
    for name in ("Wq", "Wk", "Wv", "Wo", "bq", "bk", "bv", "bo"):
        np.testing.assert_array_equal(
            getattr(plain, name), getattr(full, name)
        )


def test_mha_multi_query_equals_one_shared_head_by_hand():
    # n_kv_head = 1: every query head reads the same K and V
    module = random_gqa_module(n_kv_head=1)
    x = randn(1, T, 12, seed=6)
    y, _ = module(x)
    k = module.wk(x).unsqueeze(1)  # (B, 1, T, dh)
    v = module.wv(x).unsqueeze(1)
    q = module.split_heads(module.wq(x))  # (B, H, T, dh)
    out, _ = torch_ref.attention(q, k.expand(1, 6, T, 2), v.expand(1, 6, T, 2))
    torch.testing.assert_close(y, module.wo(module.merge_heads(out)), **TOL64)


def test_kv_group_counts_the_query_heads_of_each_key_value_head():
    from mha_ref.numpy_ref import kv_group
    from mha_ref.torch_ref import kv_group as torch_kv_group

    for group in (kv_group, torch_kv_group):
        assert group((2, 6, 5, 4), (2, 2, 5, 4)) == 3  # GQA: 6 / 2
        assert group((2, 6, 5, 4), (2, 6, 5, 4)) == 1  # the same heads
        assert group((2, 6, 5, 4), (2, 1, 5, 4)) == 1  # one broadcasts
        assert group((5, 4), (5, 4)) == 1  # no heads axis
