"""Refusals of the doors of serving.py (mha_ref/guards/serving.py): a
refused call leaves a PagedKVCache as it was."""

import math

import pytest
import test_serving as unit
import torch
from test_serving import (
    F64,
    H_KV,
    D,
    assert_same_state,
    randn,
    state,
)

from mha_ref import serving

scrambled = unit.scrambled  # its fixtures


def test_paged_cache_refused_append_changes_nothing(scrambled):
    cache, kv = scrambled
    before = state(cache)
    # "a" holds 7 positions in 3 blocks (2 free slots); 6 more need 2
    # blocks and 1 is free
    big = randn(H_KV, 6, D)
    with pytest.raises(RuntimeError, match=r"needs 2 blocks but 1 are free"):
        cache.append("a", big, big)
    assert_same_state(before, state(cache))
    # a refused first append leaves the sequence unknown
    with pytest.raises(RuntimeError, match=r"needs 3 blocks but 1 are free"):
        cache.append("new", randn(H_KV, 7, D), randn(H_KV, 7, D))
    assert "new" not in cache.tables
    with pytest.raises(ValueError, match="unknown sequence"):
        cache.gather("new")
    assert_same_state(before, state(cache))
    # what fits still goes in: the 2 free slots, then the free block
    cache.append("a", big[:, :5], big[:, :5])
    assert torch.equal(
        cache.gather("a")[0], torch.cat([kv["a"][0], big[:, :5]], 1)
    )
    assert cache.free_blocks == []


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda c: c.gather(9), ValueError, "seq_id=9 is an unknown"),
        (lambda c: c.length("x"), ValueError, "'x' is an unknown"),
        (lambda c: c.block_table(9), ValueError, "unknown sequence"),
        (lambda c: c.free(9), ValueError, "unknown sequence"),
        (lambda c: c.fork(9, 3), ValueError, "parent_id=9 is an unknown"),
        (lambda c: c.fork(0, 0), ValueError, "child_id=0 is already"),
        (lambda c: c.gather(1.5), TypeError, "seq_id must be an int or a"),
        (
            lambda c: c.append(0, randn(3, 1, 4), randn(3, 1, 4)),
            ValueError,
            r"k must be \(n_kv_heads, T_new, d_head\) = \(2, T_new, 4\)",
        ),
        (
            lambda c: c.append(0, randn(2, 1, 4), randn(2, 2, 4)),
            ValueError,
            "k .* and v .* must have one shape",
        ),
        (
            lambda c: c.append(0, torch.ones(2, 1, 4, dtype=int), None),
            TypeError,
            "k has dtype torch.int64",
        ),
        (
            lambda c: c.append(0, randn(2, 1, 4) * math.nan, randn(2, 1, 4)),
            ValueError,
            "holds nan",
        ),
    ],
)
def test_paged_cache_bad_input_is_refused_and_changes_nothing(
    call, error, match
):
    cache = serving.PagedKVCache(4, 2, 2, 4, dtype=F64)
    cache.append(0, randn(2, 3, 4), randn(2, 3, 4))
    before = state(cache)
    with pytest.raises(error, match=match):
        call(cache)
    assert_same_state(before, state(cache))


@pytest.mark.parametrize(
    "sizes", [(0, 2, 1, 1), (2, 0, 1, 1), (2, 2, 1.0, 1), (2, 2, 1, -1)]
)
def test_paged_cache_sizes_are_checked(sizes):
    with pytest.raises((ValueError, TypeError)):
        serving.PagedKVCache(*sizes)
    with pytest.raises(TypeError, match="dtype must be a floating"):
        serving.PagedKVCache(2, 2, 1, 1, dtype=torch.int32)


def test_paged_attention_bad_input_is_refused(scrambled):
    cache, _ = scrambled
    q = randn(2, 4, D)
    before = state(cache)
    with pytest.raises(ValueError, match="seq_ids\\[1\\]='b' is an unknown"):
        serving.paged_attention(q, cache, ["a", "b"])
    with pytest.raises(ValueError, match="holds 1 ids but q"):
        serving.paged_attention(q, cache, ["a"])
    with pytest.raises(ValueError, match="H=3 heads"):
        serving.paged_attention(randn(2, 3, D), cache, ["a", "c"])
    with pytest.raises(ValueError, match=r"q must be \(N, H, d_head\)"):
        serving.paged_attention(randn(2, 4, D + 1), cache, ["a", "c"])
    with pytest.raises(TypeError, match="cache must be a serving"):
        serving.paged_attention(q, {}, ["a", "c"])
    cache.append("empty", randn(H_KV, 0, D), randn(H_KV, 0, D))
    assert cache.gather("empty")[0].shape == (H_KV, 0, D)
    with pytest.raises(ValueError, match="'empty' holds no keys"):
        serving.paged_attention(q, cache, ["a", "empty"])
    cache.free("empty")
    assert_same_state(before, state(cache))


@pytest.mark.parametrize(
    ("cu_q", "cu_k", "match"),
    [
        ([0, 2, 1, 3], [0, 2, 4, 6], "cu_seqlens_q decreases at index 2"),
        ([0, 1, 2, 3], [0, 4, 3, 6], "cu_seqlens_k decreases"),
        ([0, 1, 2, 2], [0, 2, 4, 6], "cu_seqlens_q ends at 2 .* 3 rows"),
        ([0, 1, 2, 3], [0, 2, 4, 5], "cu_seqlens_k ends at 5 .* 6 rows"),
        ([1, 1, 2, 3], [0, 2, 4, 6], "cu_seqlens_q must start at 0"),
        ([0, 1, 3], [0, 2, 4, 6], "one pair of offsets per sequence"),
        ([0, 3, 3, 3], [0, 2, 4, 6], "cu_seqlens_q: sequence 0 has Lq=3"),
        ([0], [0, 6], r"cu_seqlens_q must be 1-D \(B \+ 1,\)"),
    ],
)
def test_varlen_attention_bad_offsets_are_refused(cu_q, cu_k, match):
    q, k, v = randn(3, 2, 2), randn(6, 1, 2), randn(6, 1, 2)
    with pytest.raises(ValueError, match=match):
        serving.varlen_attention(q, k, v, cu_q, cu_k)


def test_varlen_attention_bad_types_and_shapes_are_refused():
    q, k, v = randn(3, 2, 2), randn(6, 1, 2), randn(6, 1, 2)
    with pytest.raises(TypeError, match="cu_seqlens_q must be a sequence"):
        serving.varlen_attention(q, k, v, [0.0, 3.0], [0, 6])
    with pytest.raises(TypeError, match="cu_seqlens_k must hold integers"):
        serving.varlen_attention(q, k, v, [0, 3], torch.tensor([0.0, 6.0]))
    with pytest.raises(ValueError, match="k must be 3-D"):
        serving.varlen_attention(q, k[None], v, [0, 3], [0, 6])
    with pytest.raises(ValueError, match="H % H_kv"):
        serving.varlen_attention(
            randn(3, 4, 2), randn(6, 3, 2), randn(6, 3, 2), [0, 3], [0, 6]
        )
    with pytest.raises(ValueError, match="cu_seqlens_k: sequence 1 has 2"):
        serving.varlen_attention(q, k, v, [0, 1, 3], [0, 6, 6], causal=False)


@pytest.mark.parametrize(
    ("num_splits", "error"), [(0, ValueError), (1.5, TypeError)]
)
def test_split_kv_decode_bad_splits_are_refused(num_splits, error):
    q = randn(1, 1, 1, 2)
    with pytest.raises(error, match="num_splits"):
        serving.split_kv_decode(q, q, q, num_splits)


@pytest.mark.parametrize(
    ("outputs", "lses", "error", "match"),
    [
        (randn(3, 2), randn(2), ValueError, r"lses \(2,\) must be"),
        (randn(3, 2), torch.tensor([1.0, math.nan, 0]), ValueError, "NaN"),
        (randn(0, 2), randn(0), ValueError, "P >= 1"),
        (torch.ones(3, 2, dtype=int), randn(3), TypeError, "floating"),
        (
            torch.tensor([[math.nan], [1.0]]),
            torch.tensor([0.0, 1.0]),
            ValueError,
            r"outputs\[0\] holds NaN",
        ),
    ],
)
def test_merge_partials_bad_input_is_refused(outputs, lses, error, match):
    with pytest.raises(error, match=match):
        serving.merge_partials(outputs, lses)


@pytest.mark.parametrize(
    ("parents", "prefix", "error", "match"),
    [
        ([-1, 1], 2, ValueError, r"parents\[1\] = 1: a parent index comes"),
        ([-1, 0, 3, 1], 2, ValueError, r"parents\[2\] = 3"),
        ([-2], 2, ValueError, r"parents\[0\] = -2"),
        ([-1, 0], -1, ValueError, "prefix_length must be at least 0"),
        ([-1.0], 1, TypeError, "parents must be integers"),
        ([[-1]], 1, ValueError, "parents must be 1-D"),
    ],
)
def test_tree_mask_bad_input_is_refused(parents, prefix, error, match):
    with pytest.raises(error, match=match):
        serving.tree_mask(parents, prefix)


@pytest.mark.parametrize(
    ("draft", "logits", "error", "match"),
    [
        ([1, 2], torch.zeros(2, 6), ValueError, r"\(3, vocab\)"),
        ([1, 9], torch.zeros(3, 6), ValueError, "must lie in 0 .. 5"),
        ([1.0], torch.zeros(2, 6), TypeError, "draft_tokens must be int"),
        ([1], torch.full((2, 6), math.nan), ValueError, "NaN"),
        ([1], torch.zeros(2, 6, dtype=int), TypeError, "floating"),
    ],
)
def test_verify_greedy_bad_input_is_refused(draft, logits, error, match):
    with pytest.raises(error, match=match):
        serving.verify_greedy(draft, logits)
