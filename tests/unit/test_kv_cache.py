"""mha_ref.kv_cache: where the causal mask starts with cached keys.

KVCache and cached_step are transactional: an append or a step that
raises leaves the cache as it was, and reset forgets every position.
"""

import numpy as np
import pytest
import torch

from mha_ref import kv_cache, torch_ref
from mha_ref.tolerances import atol

TOL = {"atol": atol(torch.float64), "rtol": 0}


# the default values (25, 30 against 10, 15) are a claim of the text:
# tests/test_claims.py checks them


@pytest.mark.parametrize(
    ("values", "aligned", "upper_left"),
    [
        ((1.0, 2.0, 3.0, 4.0, 5.0, 6.0), [3.0, 3.5], [1.0, 1.5]),
        ((-4.0, 8.0, 2.0), [2.0, 2.0], [-4.0, 2.0]),
    ],
)
def test_kv_cache_example_is_running_mean_for_any_values(
    values, aligned, upper_left
):
    # the new queries are the last two positions
    got_aligned, got_upper_left = kv_cache.cached_attention_example(values)
    np.testing.assert_allclose(got_aligned.numpy(), aligned, **TOL)
    np.testing.assert_allclose(got_upper_left.numpy(), upper_left, **TOL)


def test_kv_cache_aligned_rows_equal_full_causal_rows(make_tensor):
    # with the position mask, new queries reproduce the uncached rows
    t, n_new, d = 7, 3, 4
    q = make_tensor((2, 2, t, d), seed=1)
    k = make_tensor((2, 2, t, d), seed=2)
    v = make_tensor((2, 2, t, d), seed=3)
    full, _ = torch_ref.attention(q, k, v, torch_ref.causal_mask(t))
    positions = torch.arange(t)
    blocked = torch_ref.causal_mask_for_positions(
        positions[-n_new:], positions
    )
    cached, _ = torch_ref.attention(q[..., -n_new:, :], k, v, blocked)
    torch.testing.assert_close(cached, full[..., -n_new:, :], **TOL)
    # the upper-left square mask gives different, wrong rows
    upper_left = torch_ref.causal_mask(t)[:n_new]
    wrong, _ = torch_ref.attention(q[..., -n_new:, :], k, v, upper_left)
    assert (wrong - full[..., -n_new:, :]).abs().max() > 1e-2


@pytest.mark.parametrize(
    "values", [(10.0, 20.0, 30.0, 40.0, 50.0), (-1.0, 7.0, 2.0)]
)
def test_kv_cache_single_new_query_same_masked_and_unmasked(values):
    masked, unmasked, blocked = kv_cache.single_new_query(values)
    assert blocked.shape == (1, len(values))
    assert not blocked.any()
    torch.testing.assert_close(masked, unmasked, atol=0, rtol=0)
    np.testing.assert_allclose(masked.numpy(), [np.mean(values)], **TOL)


# KVCache and cached_step: checked appends, failed steps change nothing


def random_rope_module(n_kv_head=2, seed=11):
    """d_model 16, 4 query heads, RoPE; every parameter drawn at random."""
    module = torch_ref.MultiHeadAttention(
        16, 4, n_kv_head=n_kv_head, bias=True, rope=True, dtype=torch.float64
    )
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.25)
    return module


def cache_inputs(seed=22):
    """The module and an x of shape (B, T, d_model) = (2, 7, 16)."""
    x = np.random.default_rng(seed).standard_normal((2, 7, 16))
    return random_rope_module(), torch.from_numpy(x)


def full_forward(module, x):
    return module(x, mask=torch_ref.causal_mask(x.shape[1]))[0]


def assert_cache_is(cache, keys, values):
    assert cache.length == keys.shape[-2]
    assert torch.equal(cache.keys, keys)
    assert torch.equal(cache.values, values)


@pytest.mark.parametrize(
    ("bad_chunk", "error", "words"),
    [
        (lambda x: x[:, 3:5] * 1e200, ValueError, "overflowed"),
        (lambda x: x[:1, 3:5], ValueError, r"k \(1, 2, 2, 4\) does not fit"),
        (lambda x: x[:, 3:5].float(), TypeError, "x has dtype torch.float32"),
        (lambda x: x[:, 3:5, :8], ValueError, r"x must have shape"),
    ],
    ids=["overflow", "batch", "dtype", "width"],
)
def test_cached_step_that_raises_leaves_the_cache_unchanged(
    bad_chunk, error, words
):
    module, x = cache_inputs()
    cache = kv_cache.KVCache()
    with torch.no_grad(), np.errstate(over="ignore", invalid="ignore"):
        kv_cache.cached_step(module, cache, x[:, :3])
        keys, values = cache.keys.clone(), cache.values.clone()
        with pytest.raises(error, match=words):
            kv_cache.cached_step(module, cache, bad_chunk(x))
        assert_cache_is(cache, keys, values)  # still 3 positions
        # the next step attends to positions 0 .. 4, none of the failed
        rest = kv_cache.cached_step(module, cache, x[:, 3:5])
        full = full_forward(module, x[:, :5])
    assert cache.length == 5
    torch.testing.assert_close(rest, full[:, 3:5], **TOL)


def test_kv_cache_reset_forgets_every_position():
    module, x = cache_inputs()
    cache = kv_cache.KVCache()
    with torch.no_grad():
        kv_cache.cached_step(module, cache, x[:, :4])
        cache.reset()
        assert cache.length == 0
        assert cache.keys is None
        assert cache.values is None
        # the next chunk starts again at position 0
        again = kv_cache.cached_step(module, cache, x[:, :3])
        full = full_forward(module, x[:, :3])
    assert cache.length == 3
    torch.testing.assert_close(again, full, **TOL)
