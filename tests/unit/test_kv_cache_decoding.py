"""kv_cache.cached_forward: decoding chunk by chunk equals the full pass.

The full pass is module(x, mask=causal_mask(T)); the cached pass feeds
the same x as a prefill and single steps, or any split, with a KVCache
whose keys are rotated at their absolute positions. The chunk lengths
may come as any iterable of ints; bad ones are named.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_ref import kv_cache, pitfalls, torch_ref
from mha_ref.tolerances import atol

B, T, D_MODEL, N_HEAD = 2, 9, 16, 4

CHUNKINGS = {
    "prefill-then-steps": [5, 1, 1, 1, 1],
    "all-single-steps": [1] * T,
    "one-chunk": [T],
    "uneven": [2, 4, 1, 2],
}
MODULES = {  # (n_kv_head, rope)
    "mha": (N_HEAD, False),
    "mha-rope": (N_HEAD, True),
    "gqa": (2, False),
    "gqa-rope": (2, True),
    "mqa-rope": (1, True),
}


def random_module(n_kv_head, rope, dtype=torch.float64):
    module = torch_ref.MultiHeadAttention(
        D_MODEL,
        N_HEAD,
        n_kv_head=n_kv_head,
        bias=True,
        rope=rope,
        dtype=dtype,
    )
    gen = torch.Generator().manual_seed(21)
    with torch.no_grad():
        for param in module.parameters():  # biases as large as weights
            param.copy_(torch.randn(param.shape, generator=gen) * 0.25)
    return module


def random_x(dtype=torch.float64, t=T):
    gen = torch.Generator().manual_seed(22)
    return torch.randn(B, t, D_MODEL, generator=gen, dtype=torch.float64).to(
        dtype
    )


def full_forward(module, x):
    return module(x, mask=torch_ref.causal_mask(x.shape[1]))[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("chunks", CHUNKINGS.values(), ids=CHUNKINGS)
@pytest.mark.parametrize("config", MODULES.values(), ids=MODULES)
def test_cached_forward_equals_full_causal_forward(config, chunks, dtype):
    module = random_module(*config, dtype=dtype)
    x = random_x(dtype)
    with torch.no_grad():
        cached = kv_cache.cached_forward(module, x, chunks)
        full = full_forward(module, x)
    torch.testing.assert_close(cached, full, atol=atol(dtype), rtol=0)


@pytest.mark.parametrize("config", MODULES.values(), ids=MODULES)
def test_kv_cache_holds_keys_rotated_at_absolute_positions(config):
    module = random_module(*config)
    x = random_x()
    cache = kv_cache.KVCache()
    assert cache.length == 0
    for start, n in ((0, 4), (4, 1), (5, 4)):
        kv_cache.cached_step(module, cache, x[:, start : start + n])
        assert cache.length == start + n
    _, k, v = module.project(x)  # the full pass: positions 0 .. T - 1
    n_kv_head = config[0]
    assert cache.keys.shape == (B, n_kv_head, T, D_MODEL // N_HEAD)
    torch.testing.assert_close(cache.keys, k, atol=atol(k.dtype), rtol=0)
    torch.testing.assert_close(cache.values, v, atol=atol(v.dtype), rtol=0)


def cache_relative_forward(module, x, chunks):
    """The bug: RoPE restarts at position 0 in every chunk."""
    cache, outputs = kv_cache.KVCache(), []
    for n in chunks:
        chunk = x[:, cache.length : cache.length + n]  # (B, n, d_model)
        outputs.append(pitfalls.wrong_cached_step(module, cache, chunk))
    return torch.cat(outputs, dim=1)  # (B, T, d_model)


@pytest.mark.parametrize(
    "config", [(N_HEAD, True), (2, True)], ids=["mha-rope", "gqa-rope"]
)
def test_cache_relative_rope_positions_break_the_equality(config):
    module = random_module(*config)
    x = random_x()
    with torch.no_grad():
        full = full_forward(module, x)
        wrong = cache_relative_forward(module, x, CHUNKINGS["uneven"])
        # with one chunk, relative and absolute positions coincide
        one = cache_relative_forward(module, x, [T])
    torch.testing.assert_close(one, full, atol=atol(full.dtype), rtol=0)
    # the first chunk starts at 0 either way; later ones go wrong
    first = CHUNKINGS["uneven"][0]
    torch.testing.assert_close(
        wrong[:, :first], full[:, :first], atol=atol(full.dtype), rtol=0
    )
    assert (wrong[:, first:] - full[:, first:]).abs().max() > 1e-2


def test_cached_forward_last_step_sees_every_key_unlike_is_causal():
    # one new query at the last position: its mask row is all False
    module = random_module(2, True)  # grouped heads and RoPE
    x = random_x()
    with torch.no_grad():
        full = full_forward(module, x)
        cached = kv_cache.cached_forward(module, x, [T - 1, 1])
    torch.testing.assert_close(cached, full, atol=atol(full.dtype), rtol=0)
    blocked = torch_ref.causal_mask_for_positions([T - 1], range(T))
    assert blocked.shape == (1, T)
    assert not blocked.any()
    # is_causal=True aligns to the upper left: the one query would see
    # only key 0, a different answer
    q, k, v = module.project(x)  # (B, H, T, dh), (B, H_kv, T, dh)
    last = q[:, :, -1:]  # (B, H, 1, dh)
    right, _ = torch_ref.attention(last, k, v)
    upper_left = F.scaled_dot_product_attention(
        last, k, v, is_causal=True, enable_gqa=True
    )
    assert (upper_left - right).abs().max() > 1e-2


@pytest.mark.parametrize(
    "values", [(10.0, 20.0, 30.0, 40.0, 50.0), (1.0, -3.0, 8.0)]
)
def test_single_query_is_causal_sees_key_zero_only(values):
    no_mask, is_causal = kv_cache.single_query_is_causal(values)
    torch.testing.assert_close(
        no_mask, torch.tensor([sum(values) / len(values)], dtype=torch.float64)
    )
    # upper-left alignment: the one query row is treated as position 0
    torch.testing.assert_close(
        is_causal, torch.tensor([values[0]], dtype=torch.float64)
    )


@pytest.mark.parametrize("config", ["mha", "gqa-rope"])
def test_cached_forward_empty_batch_is_empty(config):
    # B = 0: an empty output, as nn.MultiheadAttention gives
    module = random_module(*MODULES[config])
    x = torch.zeros(0, T, D_MODEL, dtype=torch.float64)
    y = kv_cache.cached_forward(module, x, [2, 1, T - 3])
    assert y.shape == (0, T, D_MODEL)
    assert y.shape == full_forward(module, x).shape


@pytest.mark.parametrize(
    "chunks",
    [
        lambda: iter([3, 2, 2]),
        lambda: (n for n in (1, 4, 2)),
        lambda: (4, 3),
        lambda: np.array([2, 2, 3]),
        lambda: torch.tensor([5, 1, 1]),
        lambda: [1] * 7,
    ],
    ids=["iterator", "generator", "tuple", "numpy", "tensor", "list"],
)
def test_cached_forward_takes_any_iterable_of_chunks(chunks):
    module, x = random_module(2, True), random_x(t=7)
    with torch.no_grad():
        cached = kv_cache.cached_forward(module, x, chunks())
        full = full_forward(module, x)
    torch.testing.assert_close(cached, full, atol=atol(full.dtype), rtol=0)
