"""kv_cache.cached_forward with a window: the rolling cache.

Its output must equal the full pass under sliding_window_mask for any
chunking (random ones here, with and without RoPE and grouped heads),
while it holds at most sink_tokens + window - 1 entries between steps,
and a step that fails leaves it as it was.
"""

import numpy as np
import pytest
import torch

from mha_ref import kv_cache, torch_ref

TOL = {"rtol": 0, "atol": 1e-12}


def module(n_kv_head=None, rope=False, seed=0):
    torch.manual_seed(seed)
    return torch_ref.MultiHeadAttention(
        16, 4, n_kv_head=n_kv_head, bias=True, rope=rope, dtype=torch.float64
    )


def random_chunks(gen, t, longest=7):
    chunks = []
    while sum(chunks) < t:
        chunks.append(int(gen.integers(1, min(longest, t - sum(chunks)) + 1)))
    return chunks


def full_pass(m, x, window, sink_tokens=0):
    pos = torch.arange(x.shape[1])
    mask = torch_ref.sliding_window_mask(pos, pos, window, sink_tokens)
    return m(x, mask=mask)[0]


# (n_kv_head, rope, window, sink_tokens): plain, RoPE, grouped heads
# (GQA and MQA), sinks, a window of 1 and one longer than the sequence
CASES = [
    (None, False, 4, 0),
    (None, True, 1, 0),
    (None, True, 5, 2),
    (2, True, 3, 0),
    (2, True, 6, 9),
    (1, False, 40, 1),
]


@pytest.mark.parametrize(("n_kv_head", "rope", "window", "sink_tokens"), CASES)
def test_rolling_cache_equals_full_windowed_pass_for_random_chunkings(
    n_kv_head, rope, window, sink_tokens
):
    m = module(n_kv_head, rope)
    x = torch.randn(2, 16, 16, dtype=torch.float64)
    want = full_pass(m, x, window, sink_tokens)
    gen = np.random.default_rng(window * 10 + sink_tokens)
    for chunks in ([16], [1] * 16, random_chunks(gen, 16)):
        got = kv_cache.cached_forward(m, x, chunks, window, sink_tokens)
        torch.testing.assert_close(got, want, **TOL)


def test_rolling_cache_differs_from_the_causal_cache():
    # the window changes the answer once a query has more than W keys
    m, x = module(), torch.randn(1, 12, 16, dtype=torch.float64)
    causal = kv_cache.cached_forward(m, x, [4, 1, 7])
    rolling = kv_cache.cached_forward(m, x, [4, 1, 7], window=3)
    torch.testing.assert_close(rolling[:, :3], causal[:, :3], **TOL)
    assert (rolling[:, 3:] - causal[:, 3:]).abs().max() > 1e-3


@pytest.mark.parametrize(("window", "sink_tokens"), [(1, 0), (5, 0), (5, 3)])
def test_rolling_cache_holds_at_most_sinks_plus_window_minus_one(
    window, sink_tokens
):
    m = module(rope=True)
    x = torch.randn(1, 20, 16, dtype=torch.float64)
    cache = kv_cache.RollingKVCache(window, sink_tokens)
    gen = np.random.default_rng(0)
    held, start = [], 0
    for n in random_chunks(gen, 20, longest=4):
        kv_cache.rolling_step(m, cache, x[:, start : start + n])
        start += n
        held.append(cache.keys.shape[-2])
        # exactly the sinks and the last window - 1 positions seen
        want = sorted(
            set(range(min(sink_tokens, start)))
            | set(range(max(0, start - window + 1), start))
        )
        assert cache.positions.tolist() == want
        assert cache.values.shape[-2] == len(want)
        assert cache.length == start
    assert max(held) <= sink_tokens + window - 1
    assert held[-1] == sink_tokens + window - 1


def test_rolling_cache_memory_is_constant_while_a_full_cache_grows():
    m = module(n_kv_head=2)
    x = torch.randn(1, 24, 16, dtype=torch.float64)
    rolling, full = kv_cache.RollingKVCache(5, 2), kv_cache.KVCache()
    for i in range(24):
        kv_cache.rolling_step(m, rolling, x[:, i : i + 1])
        kv_cache.cached_step(m, full, x[:, i : i + 1])
    assert rolling.keys.shape == (1, 2, 6, 4)  # (B, H_kv, S + W - 1, dh)
    assert full.keys.shape == (1, 2, 24, 4)


def test_rolling_cache_failed_step_leaves_the_cache_unchanged():
    m = module(rope=True)
    x = torch.randn(1, 10, 16, dtype=torch.float64)
    cache = kv_cache.RollingKVCache(3, 1)
    kv_cache.rolling_step(m, cache, x[:, :6])
    before = (
        cache.keys.clone(),
        cache.values.clone(),
        cache.positions.clone(),
        cache.length,
    )
    bad = x[:, 6:8].clone()
    bad[0, 1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"x .* nan"):
        kv_cache.rolling_step(m, cache, bad)
    with pytest.raises(ValueError, match="d_model=16"):
        kv_cache.rolling_step(m, cache, torch.randn(1, 2, 8).double())
    torch.testing.assert_close(cache.keys, before[0], **TOL)
    torch.testing.assert_close(cache.values, before[1], **TOL)
    assert cache.positions.tolist() == before[2].tolist()
    assert cache.length == before[3]
    # and it goes on as if nothing had happened
    kv_cache.rolling_step(m, cache, x[:, 6:])
    want = full_pass(m, x, 3, 1)[:, 6:]
    cache2 = kv_cache.RollingKVCache(3, 1)
    kv_cache.rolling_step(m, cache2, x[:, :6])
    torch.testing.assert_close(
        kv_cache.rolling_step(m, cache2, x[:, 6:]), want, **TOL
    )


def test_rolling_cache_reset_starts_again_at_position_zero():
    m = module(rope=True)
    x = torch.randn(1, 7, 16, dtype=torch.float64)
    cache = kv_cache.RollingKVCache(3)
    first = kv_cache.rolling_step(m, cache, x)
    cache.reset()
    assert cache.length == 0
    torch.testing.assert_close(kv_cache.rolling_step(m, cache, x), first)
