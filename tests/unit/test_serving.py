"""mha_ref.serving: attention as a server runs it, against references.

Every result is compared with numpy_ref.attention / torch_ref.attention
run on the logical sequence, and with code nobody here wrote:

1. PyTorch 2.13.0, torch/nn/attention/experimental/_paged_attention.py:
   PagedAttention with FlexAttention's eager forward (CPU, float64),
   reading our pool through our block tables, and through its own.
2. PyTorch 2.13.0, torch/nn/attention/flex_attention.py: the LSE of
   ``return_aux=AuxRequest(lse=True)`` (-inf for a row with no key),
   merged by merge_partials; the CPU flash kernel
   (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu), which
   gives such a row output 0 and LSE 0.
3. Hugging Face transformers 5.24.0: continuous batching
   (generation/continuous_batching/continuous_api.py, generate_batch
   with a paged cache and chunked prefill) gives the tokens of
   ``generate``; its chunked-prefill mask (continuous_batching/utils.py,
   build_attention_mask) is varlen_attention's; assisted generation's
   greedy rule (generation/utils.py, _assisted_decoding) accepts what
   verify_greedy accepts.
"""

import copy
import math
import warnings

import numpy as np
import pytest
import torch
import transformers
from torch.nn.attention import flex_attention as flex
from torch.nn.attention.experimental._paged_attention import PagedAttention

from mha_ref import numpy_ref, serving, tiled, torch_ref

TORCH_VERSION, HF_VERSION = "2.13.0", "5.24.0"
F64 = torch.float64
TOL = {"atol": 1e-12, "rtol": 0}


def test_oracles_are_the_versions_named_here():
    assert torch.__version__.split("+")[0] == TORCH_VERSION
    assert transformers.__version__ == HF_VERSION


def randn(*shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=F64)


def reference(q, k, v, blocked=None, scale=None):
    """numpy_ref.attention in float64, as a tensor."""
    out, _ = numpy_ref.attention(
        q.numpy(),
        k.numpy(),
        v.numpy(),
        None if blocked is None else np.asarray(blocked),
        scale=scale,
    )
    return torch.from_numpy(out)


def state(cache):
    """Everything a PagedKVCache holds, copied, to compare after a call."""
    return (
        copy.deepcopy(cache.tables),
        dict(cache.lengths),
        list(cache.free_blocks),
        list(cache.users),
        cache.keys.clone(),
        cache.values.clone(),
    )


def assert_same_state(before, after):
    for a, b in zip(before, after, strict=True):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)
        else:
            assert a == b


# -- PagedKVCache ---------------------------------------------------------


H_KV, D, BS = 2, 4, 3


@pytest.fixture
def scrambled():
    """A cache whose tables are out of order: sequences appended one
    token at a time in turn, one freed and its blocks taken again.

    Returns the cache and, per sequence, the k, v that were appended.
    """
    cache = serving.PagedKVCache(10, BS, H_KV, D, dtype=F64)
    lengths = {"a": 7, "b": 5, "c": 8}
    kv = {
        s: (randn(H_KV, n, D, seed=i), randn(H_KV, n, D, seed=10 + i))
        for i, (s, n) in enumerate(lengths.items())
    }
    for t in range(max(lengths.values())):
        for s, n in lengths.items():
            if t < n:
                cache.append(s, kv[s][0][:, t : t + 1], kv[s][1][:, t : t + 1])
    cache.free("b")  # its blocks return to the free list, in the middle
    kv["d"] = (randn(H_KV, 9, D, seed=7), randn(H_KV, 9, D, seed=8))
    cache.append("d", kv["d"][0][:, :4], kv["d"][1][:, :4])
    cache.append("d", kv["d"][0][:, 4:], kv["d"][1][:, 4:])
    del kv["b"]
    return cache, kv


def test_paged_cache_scrambled_tables_read_the_logical_sequence(scrambled):
    cache, kv = scrambled
    tables = {s: cache.block_table(s) for s in kv}
    # the tables interleave: not one of them is a run of blocks
    for table in tables.values():
        assert table != list(range(table[0], table[0] + len(table)))
    assert tables["d"] != sorted(tables["d"])
    used = [b for t in tables.values() for b in t]
    assert len(used) == len(set(used)) == 9  # each block in one table
    for s, (k, v) in kv.items():
        assert cache.length(s) == k.shape[1]
        assert len(tables[s]) == math.ceil(k.shape[1] / BS)
        got_k, got_v = cache.gather(s)
        assert torch.equal(got_k, k)
        assert torch.equal(got_v, v)


def test_paged_cache_free_returns_blocks_to_the_pool(scrambled):
    cache, _ = scrambled
    assert len(cache.free_blocks) == 1
    table = cache.block_table("d")
    cache.free("d")
    assert sorted(cache.free_blocks[1:]) == sorted(table)
    with pytest.raises(ValueError, match="'d' is an unknown sequence"):
        cache.length("d")


def test_paged_cache_fork_shares_then_copies_on_write():
    cache = serving.PagedKVCache(6, 4, H_KV, D, dtype=F64)
    k, v = randn(H_KV, 6, D, seed=1), randn(H_KV, 6, D, seed=2)
    cache.append("parent", k, v)  # one full block, one holding 2 of 4
    cache.fork("parent", "child")
    shared = cache.block_table("parent")
    assert cache.block_table("child") == shared
    assert len(cache.free_blocks) == 4  # sharing took no block
    k1, v1 = randn(H_KV, 1, D, seed=3), randn(H_KV, 1, D, seed=4)
    cache.append("child", k1, v1)  # into the shared, partly filled block
    child = cache.block_table("child")
    assert child[0] == shared[0]
    assert child[1] != shared[1]
    assert cache.block_table("parent") == shared  # the parent keeps its
    assert torch.equal(cache.gather("parent")[0], k)
    assert torch.equal(cache.gather("child")[0], torch.cat([k, k1], 1))
    assert torch.equal(cache.gather("child")[1], torch.cat([v, v1], 1))
    # the parent's last block has one reader now: it writes in place
    k2 = randn(H_KV, 1, D, seed=5)
    cache.append("parent", k2, k2)
    assert cache.block_table("parent") == shared
    assert torch.equal(cache.gather("child")[0], torch.cat([k, k1], 1))
    # freeing the parent keeps the block the child still reads
    cache.free("parent")
    assert shared[0] not in cache.free_blocks
    assert shared[1] in cache.free_blocks
    assert torch.equal(cache.gather("child")[0], torch.cat([k, k1], 1))
    cache.free("child")
    assert sorted(cache.free_blocks) == list(range(6))


def test_paged_cache_parent_that_writes_first_gets_the_copy():
    cache = serving.PagedKVCache(4, 4, 1, 2, dtype=F64)
    k = randn(1, 5, 2)
    cache.append("p", k, k)
    cache.fork("p", "c")
    shared = cache.block_table("c")
    k1 = randn(1, 2, 2, seed=1)
    cache.append("p", k1, k1)  # the parent writes first: it copies
    assert cache.block_table("c") == shared
    assert cache.block_table("p")[0] == shared[0]
    assert cache.block_table("p")[1] not in shared
    assert torch.equal(cache.gather("c")[0], k)
    assert torch.equal(cache.gather("p")[0], torch.cat([k, k1], 1))


def test_paged_cache_fork_of_full_blocks_copies_nothing():
    cache = serving.PagedKVCache(4, 2, 1, 2, dtype=F64)
    k = randn(1, 4, 2)
    cache.append(0, k, k)  # two full blocks
    cache.fork(0, 1)
    cache.append(1, k[:, :1], k[:, :1])  # a new block, nothing copied
    assert cache.block_table(1)[:2] == cache.block_table(0)
    assert len(cache.block_table(1)) == 3
    assert torch.equal(cache.gather(0)[0], k)


def test_paged_cache_copy_on_write_refused_without_a_free_block():
    cache = serving.PagedKVCache(2, 4, 1, 2, dtype=F64)
    k = randn(1, 6, 2)
    cache.append(0, k, k)  # both blocks, the second half full
    cache.fork(0, 1)
    before = state(cache)
    with pytest.raises(RuntimeError, match=r"needs 1 blocks but 0 are free"):
        cache.append(1, k[:, :1], k[:, :1])  # the copy needs a block
    assert_same_state(before, state(cache))


@pytest.mark.parametrize("seed", range(4))
def test_paged_cache_random_operations_keep_every_sequence(seed):
    # appends (some refused), forks and frees in random order against a
    # plain dict of the sequences; the pool's accounting stays exact
    rng = np.random.default_rng(seed)
    cache = serving.PagedKVCache(8, 3, 1, 2, dtype=F64)
    held = {}  # seq -> its keys (1, T, 2); values are keys + 1
    for step in range(120):
        op = rng.choice(["append", "append", "fork", "free"])
        names = sorted(held)
        if op == "append":
            pick = [*names, *range(6)]  # a held sequence or a new one
            seq = int(pick[rng.integers(len(pick))])
            k = torch.from_numpy(
                rng.standard_normal((1, rng.integers(0, 7), 2))
            )
            before = state(cache)
            try:
                cache.append(seq, k, k + 1)
            except RuntimeError:
                assert_same_state(before, state(cache))
                continue
            old = held.get(seq, k[:, :0])
            held[seq] = torch.cat([old, k], 1)
        elif op == "fork" and names:
            parent, child = names[rng.integers(len(names))], 100 + step
            cache.fork(parent, child)
            held[child] = held[parent]
        elif op == "free" and names:
            seq = names[rng.integers(len(names))]
            cache.free(seq)
            del held[seq]
        for seq, k in held.items():
            got_k, got_v = cache.gather(seq)
            assert torch.equal(got_k, k)
            assert torch.equal(got_v, k + 1)
        readers = [0] * cache.num_blocks
        for seq in held:
            for block in cache.block_table(seq):
                readers[block] += 1
        assert readers == cache.users
        free = [b for b in range(cache.num_blocks) if readers[b] == 0]
        assert sorted(cache.free_blocks) == free


# -- paged_attention --------------------------------------------------------


def test_paged_attention_equals_attention_on_each_sequence(scrambled):
    cache, kv = scrambled
    seqs = ["c", "a", "d", "a"]  # a sequence may serve several queries
    q = randn(len(seqs), 4, D, seed=3)  # H = 4 over H_KV = 2: GQA
    got = serving.paged_attention(q, cache, seqs)
    for i, s in enumerate(seqs):
        k, v = kv[s]
        want = reference(q[i][:, None], k, v)  # (H, 1, D)
        torch.testing.assert_close(got[i], want[:, 0], **TOL)
    scaled = serving.paged_attention(q, cache, seqs, scale=0.3)
    want = reference(q[1][:, None], *kv["a"], scale=0.3)
    torch.testing.assert_close(scaled[1], want[:, 0], **TOL)


def paged_flex(q, paged, k_cache, v_cache, lengths):
    """PyTorch's PagedAttention with FlexAttention's eager forward: a
    logical block mask (keys before each length), converted to pages."""
    b, page = len(lengths), paged.page_size
    kv_len = torch.tensor(lengths)
    width = math.ceil(max(lengths) / page) * page

    def mask_mod(batch, head, q_idx, kv_idx):
        return kv_idx < kv_len[batch]

    logical = flex.create_block_mask(
        mask_mod, b, None, 1, width, device="cpu", BLOCK_SIZE=page
    )
    block_mask = paged.convert_logical_block_mask(logical, kv_len=kv_len)
    with warnings.catch_warnings():  # eager and unfused: the oracle
        warnings.simplefilter("ignore", UserWarning)
        out = flex.flex_attention(
            q[:, :, None, :],  # (B, H, 1, d)
            k_cache,
            v_cache,
            block_mask=block_mask,
            enable_gqa=True,
        )
    return out[:, :, 0, :]  # (B, H, d)


@pytest.mark.slow
def test_paged_attention_matches_torch_paged_attention(scrambled):
    # torch's PagedAttention reads OUR pool through OUR block tables
    cache, kv = scrambled
    seqs = ["a", "c", "d"]
    lengths = [cache.length(s) for s in seqs]
    paged = PagedAttention(cache.num_blocks, BS, len(seqs), device="cpu")
    for b, s in enumerate(seqs):
        table = torch.tensor(cache.block_table(s))
        paged.page_table[b, : len(table)] = table
        paged.physical_to_logical[b, table] = torch.arange(len(table))
    # our pool (blocks, H_kv, bs, d) is its cache (1, H_kv, slots, d)
    k_cache = cache.keys.transpose(0, 1).reshape(1, H_KV, -1, D)
    v_cache = cache.values.transpose(0, 1).reshape(1, H_KV, -1, D)
    q = randn(len(seqs), 4, D, seed=5)
    want = paged_flex(q, paged, k_cache, v_cache, lengths)
    got = serving.paged_attention(q, cache, seqs)
    torch.testing.assert_close(got, want, **TOL)
    # and with its own allocator (reserve, assign) holding the same data
    own = PagedAttention(cache.num_blocks, BS, len(seqs), device="cpu")
    k_own, v_own = torch.zeros_like(k_cache), torch.zeros_like(v_cache)
    for b, s in enumerate(seqs):
        k, v = kv[s]
        n = k.shape[1]
        own.reserve(torch.tensor(b), torch.tensor(n))
        own.assign(
            torch.tensor([b]),
            torch.arange(n)[None],
            k[None],
            v[None],
            k_own,
            v_own,
        )
    torch.testing.assert_close(
        paged_flex(q, own, k_own, v_own, lengths), got, **TOL
    )


# -- varlen_attention -------------------------------------------------------


def packed(lq, lk, h=4, h_kv=2, d=3, seed=0):
    cu_q = np.concatenate([[0], np.cumsum(lq)])
    cu_k = np.concatenate([[0], np.cumsum(lk)])
    q = randn(int(cu_q[-1]), h, d, seed=seed)
    k = randn(int(cu_k[-1]), h_kv, d, seed=seed + 1)
    v = randn(int(cu_k[-1]), h_kv, d + 1, seed=seed + 2)
    return q, k, v, cu_q, cu_k


# decode rows (1 query over a cache), a prefill chunk (3 of 7), a whole
# prompt (5 of 5), an empty sequence and one with keys but no query
LQ, LK = [1, 3, 5, 0, 1, 0], [4, 7, 5, 0, 1, 2]


@pytest.mark.parametrize("causal", [True, False])
def test_varlen_attention_equals_each_sequence_alone(causal):
    q, k, v, cu_q, cu_k = packed(LQ, LK)
    got = serving.varlen_attention(q, k, v, cu_q, cu_k, causal=causal)
    assert got.shape == (sum(LQ), 4, 4)
    for i, (lq, lk) in enumerate(zip(LQ, LK, strict=True)):
        if lq == 0:
            continue
        rows, keys = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        blocked = None
        if causal:  # bottom right: query j sees keys up to j + Lk - Lq
            blocked = numpy_ref.causal_mask(lq, lk, align="bottom_right")
        want = reference(
            q[rows].transpose(0, 1),
            k[keys].transpose(0, 1),
            v[keys].transpose(0, 1),
            blocked,
        )
        torch.testing.assert_close(got[rows], want.transpose(0, 1), **TOL)


def test_varlen_attention_prefill_chunk_continues_the_full_prompt():
    # a prompt of 7 in chunks of 4 and 3: the second chunk, over the
    # 4 cached keys and its own, gives the full pass's last 3 rows
    q, k, v = randn(7, 2, 3, seed=1), randn(7, 2, 3, seed=2), randn(7, 2, 3)
    full = serving.varlen_attention(q, k, v, [0, 7], [0, 7])
    chunk = serving.varlen_attention(q[4:], k, v, [0, 3], [0, 7])
    torch.testing.assert_close(chunk, full[4:], **TOL)
    # a top-left mask (SDPA's is_causal) would hide cached keys
    top_left = reference(
        q[4:].transpose(0, 1),
        k.transpose(0, 1),
        v.transpose(0, 1),
        numpy_ref.causal_mask(3, 7, align="top_left"),
    ).transpose(0, 1)
    assert (top_left - full[4:]).abs().max() > 1e-2


def test_varlen_attention_matches_hugging_face_chunked_prefill_mask():
    # transformers 5.24.0, generation/continuous_batching/utils.py:
    # build_attention_mask fills one additive mask for a packed batch
    from transformers.generation.continuous_batching.utils import (
        build_attention_mask,
    )

    lq, lk = [1, 3, 5, 0, 1], [4, 7, 5, 0, 1]  # Lq <= Lk everywhere
    q, k, v, cu_q, cu_k = packed(lq, lk, seed=4)
    low = torch.finfo(F64).min  # HF's "blocked", before it fills blocks
    bias = torch.full((1, 1, sum(lq), sum(lk)), low, dtype=F64)
    build_attention_mask(bias, cu_q.tolist(), cu_k.tolist())
    blocked = (bias < 0)[0, 0]  # finfo.min: blocked
    want = reference(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), blocked
    ).transpose(0, 1)
    got = serving.varlen_attention(q, k, v, cu_q, cu_k)
    torch.testing.assert_close(got, want, **TOL)


# -- merge_partials and split_kv_decode -----------------------------------

# the numbers: scores [2, 4] over values [10, 20], in three parts
# (key 0, key 1, none); each one-key part has output = value, LSE = score
OUTPUTS = torch.tensor([[10.0], [20.0], [0.0]], dtype=F64)  # (P, d)
WANT = (10 * math.exp(2) + 20 * math.exp(4)) / (math.exp(2) + math.exp(4))


@pytest.mark.parametrize("empty", [-math.inf, math.inf])
def test_merge_partials_ignores_an_empty_part_in_both_conventions(empty):
    lses = torch.tensor([2.0, 4.0, empty], dtype=F64)
    out, lse = serving.merge_partials(OUTPUTS, lses)
    assert out.item() == pytest.approx(18.807971, abs=5e-7)
    assert out.item() == pytest.approx(WANT, rel=1e-15)
    assert lse.item() == pytest.approx(math.log(math.exp(2) + math.exp(4)))


def naive_merge(outputs, lses):
    # the merge formula taken literally, empty parts included
    top = lses.max()
    weights = torch.exp(lses - top)
    return (weights[:, None] * outputs).sum(0) / weights.sum()


def test_merge_partials_the_traps_of_a_literal_merge():
    # +inf (the tiled pass, flash-attn 2's softmax_lse): NaN
    lses = torch.tensor([2.0, 4.0, math.inf], dtype=F64)
    assert naive_merge(OUTPUTS, lses).isnan().all()
    # 0 with output 0 (PyTorch's CPU flash kernel): a silent weight
    lses = torch.tensor([2.0, 4.0, 0.0], dtype=F64)
    wrong = naive_merge(OUTPUTS, lses).item()
    assert wrong == pytest.approx(18.509371, abs=5e-7)
    # -inf (FlexAttention): right even literally
    lses = torch.tensor([2.0, 4.0, -math.inf], dtype=F64)
    assert naive_merge(OUTPUTS, lses).item() == pytest.approx(WANT)


def test_merge_partials_of_nothing_is_zero_with_lse_minus_inf():
    outputs = randn(2, 3, 4)
    lses = torch.tensor([[math.inf, -math.inf, 1.0]] * 2, dtype=F64)
    lses[1, 2] = -math.inf
    out, lse = serving.merge_partials(outputs, lses)
    assert torch.equal(out[:2], torch.zeros(2, 4, dtype=F64))
    assert lse[:2].isneginf().all()
    torch.testing.assert_close(out[2], outputs[0, 2], **TOL)
    assert lse[2].item() == 1.0
    # a list of tensors, one per partial, is stacked
    out, lse = serving.merge_partials(
        list(OUTPUTS), [torch.tensor(x, dtype=F64) for x in (2, 4, math.inf)]
    )
    assert out.item() == pytest.approx(WANT)
    # NumPy and lists give NumPy back
    out, lse = serving.merge_partials(OUTPUTS.numpy(), [2.0, 4.0, math.inf])
    assert isinstance(out, np.ndarray)
    assert out[0] == pytest.approx(WANT)


def test_merge_partials_cpu_flash_kernel_empty_row_is_lse_zero():
    # torch 2.13's CPU flash kernel: a row with no key gets 0 and LSE 0,
    # which looks like a partial of weight e^0 = 1
    q, k = randn(1, 1, 2, 4), randn(1, 1, 3, 4)
    bias = torch.zeros(1, 1, 2, 3, dtype=F64)
    bias[..., 0, :] = -math.inf  # row 0 sees no key
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, k, 0.0, False, attn_mask=bias
    )[:2]
    assert out[0, 0, 0].abs().max() == 0
    assert lse[0, 0, 0] == 0
    # the tiled pass gives such a row 0 and +inf
    t_out, t_lse = tiled.tiled_attention_torch(
        q, k, k, bias.isinf(), return_lse=True, empty_rows="zero"
    )
    assert t_out[0, 0, 0].abs().max() == 0
    assert t_lse[0, 0, 0] == math.inf


@pytest.mark.slow
def test_merge_partials_of_flex_attention_lse_is_attention_over_all():
    # each batch entry b of one FlexAttention call attends to a disjoint
    # set of keys, part b of [0, 5), [5, 12), [12, 16); under the causal
    # mask the queries at positions 10 and 11 see no key of the last
    # part, which Flex marks with LSE -inf
    h, tq, tk, d = 2, 6, 16, 4
    parts = torch.tensor([0, 5, 12, 16])
    offset = tk - tq  # queries at positions 10 .. 15

    def mask_mod(b, head, q_idx, kv_idx):
        inside = (kv_idx >= parts[b]) & (kv_idx < parts[b + 1])
        return inside & (kv_idx <= q_idx + offset)

    q1, k1 = randn(1, h, tq, d, seed=1), randn(1, h, tk, d, seed=2)
    v1 = randn(1, h, tk, d, seed=3)
    q, k, v = (x.expand(3, -1, -1, -1) for x in (q1, k1, v1))
    block_mask = flex.create_block_mask(
        mask_mod, 3, None, tq, tk, device="cpu", BLOCK_SIZE=4
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out, aux = flex.flex_attention(
            q,
            k,
            v,
            block_mask=block_mask,
            return_aux=flex.AuxRequest(lse=True),
        )
    # Flex: an empty row has output 0 and LSE -inf
    assert aux.lse[2, :, :2].isneginf().all()
    assert not aux.lse[:, :, 2:].isinf().any()
    assert out[2, :, :2].abs().max() == 0
    merged, lse = serving.merge_partials(out, aux.lse)
    blocked = numpy_ref.causal_mask(tq, tk, align="bottom_right")
    want = reference(q1[0], k1[0], v1[0], blocked)
    torch.testing.assert_close(merged, want, **TOL)
    scores = q1[0] @ k1[0].transpose(-2, -1) / math.sqrt(d)
    scores = scores.masked_fill(torch.from_numpy(blocked), -math.inf)
    torch.testing.assert_close(lse, scores.logsumexp(-1), **TOL)


@pytest.mark.parametrize("tq", [1, 3])
def test_split_kv_decode_equals_attention_for_every_split(tq):
    q = randn(2, 4, tq, 3, seed=1)  # (B, H, Tq, d)
    k, v = randn(2, 2, 5, 3, seed=2), randn(2, 2, 5, 2, seed=3)  # GQA
    want = reference(q, k, v)
    scores = q @ k.repeat_interleave(2, 1).transpose(-2, -1) / math.sqrt(3)
    for num_splits in range(1, 8):  # 6 and 7 leave parts empty
        out, lse = serving.split_kv_decode(q, k, v, num_splits)
        torch.testing.assert_close(out, want, **TOL)
        torch.testing.assert_close(lse, scores.logsumexp(-1), **TOL)
    out, _ = serving.split_kv_decode(q, k, v, 3, scale=0.5)
    torch.testing.assert_close(out, reference(q, k, v, scale=0.5), **TOL)


# -- tree_mask and verify_greedy ------------------------------------------


def test_tree_mask_sees_prefix_ancestors_and_self():
    #   prefix (2 tokens) -> 0 -> 1 -> 3
    #                        0 -> 2 ;  4 a second root
    parents = [-1, 0, 0, 1, -1]
    got = serving.tree_mask(parents, 2)
    seen = {0: [0], 1: [0, 1], 2: [0, 2], 3: [0, 1, 3], 4: [4]}
    want = torch.ones(5, 7, dtype=torch.bool)
    want[:, :2] = False
    for i, nodes in seen.items():
        want[i, [2 + n for n in nodes]] = False
    assert got.dtype == torch.bool
    assert torch.equal(got, want)


def test_tree_mask_of_a_chain_is_the_causal_mask():
    got = serving.tree_mask([-1, 0, 1, 2], 3)
    want = numpy_ref.causal_mask(4, 7, align="bottom_right")
    assert np.array_equal(got.numpy(), want)


def test_tree_mask_attention_equals_each_branch_alone():
    # tree attention gives each node the attention over its own path
    parents, prefix = [-1, 0, 0, 2, -1], 3
    k, v = randn(1, prefix + 5, 4, seed=1), randn(1, prefix + 5, 2, seed=2)
    q = randn(1, 5, 4, seed=3)
    got, _ = torch_ref.attention(q, k, v, serving.tree_mask(parents, prefix))
    for i in range(5):
        path, node = [], i
        while node >= 0:
            path.insert(0, prefix + node)
            node = parents[node]
        keys = list(range(prefix)) + path
        want = reference(q[:, i : i + 1], k[:, keys], v[:, keys])
        torch.testing.assert_close(got[:, i : i + 1], want, **TOL)


def one_hot_logits(tokens, vocab=6):
    logits = torch.zeros(len(tokens), vocab)
    logits[torch.arange(len(tokens)), torch.tensor(tokens)] = 3.0
    return logits


@pytest.mark.parametrize(
    ("draft", "target", "want"),
    [
        ([1, 2, 3], [1, 2, 3, 5], (3, 5)),  # all accepted, bonus token 5
        ([1, 2, 3], [1, 4, 3, 5], (1, 4)),  # stops at the first mismatch
        ([1, 2, 3], [0, 2, 3, 5], (0, 0)),  # none: the target's token
        ([], [4], (0, 4)),  # no draft: one ordinary step
    ],
)
def test_verify_greedy_accepts_the_agreeing_prefix(draft, target, want):
    assert serving.verify_greedy(draft, one_hot_logits(target)) == want
    assert (
        serving.verify_greedy(
            torch.tensor(draft, dtype=torch.long),
            one_hot_logits(target).numpy(),
        )
        == want
    )


# -- Hugging Face transformers: a tiny random Llama -----------------------


def tiny_llama(seed, attn="sdpa"):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=48,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    config._attn_implementation = attn
    return transformers.LlamaForCausalLM(config).eval()


PROMPTS = [[1, 5, 9, 3, 7], [2, 4], [8, 8, 1, 2, 3, 4, 5, 6, 7, 9, 11]]


@pytest.mark.slow
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_hugging_face_continuous_batching_gives_generate_tokens(attn):
    # what a scheduler must preserve: a paged cache of 4-token pages and
    # batches of 8 tokens (the 11-token prompt is prefilled in chunks,
    # beside the other requests' decode steps) give greedy generate's
    # tokens. With no flash-attn installed (as here), continuous_api.py's
    # switch_to_cb_friendly_attn keeps "sdpa" and runs "eager" as
    # "paged|eager"; with it, both would switch to flash_attention_3/2
    from transformers.generation.configuration_utils import (
        ContinuousBatchingConfig,
    )

    model = tiny_llama(0, attn)
    config = transformers.GenerationConfig(
        max_new_tokens=6, do_sample=False, eos_token_id=-1, pad_token_id=0
    )
    want = [
        model.generate(torch.tensor([p]), generation_config=config)[
            0, len(p) :
        ].tolist()
        for p in PROMPTS
    ]
    batching = ContinuousBatchingConfig(
        page_size=4,
        num_blocks=16,
        max_batch_tokens=8,
        max_requests_per_batch=3,
    )
    result = model.generate_batch(
        PROMPTS,
        generation_config=config,
        continuous_batching_config=batching,
        warmup=False,
    )
    got = [result[f"req_{i}"].generated_tokens for i in range(len(PROMPTS))]
    assert got == want


@pytest.mark.slow
def test_verify_greedy_accepts_what_assisted_generation_accepts(monkeypatch):
    # transformers 5.24.0, generation/utils.py, _assisted_decoding, greedy
    # case: n_matches tokens of the draft are kept, then the target's
    # own token. We record each draft and the target logits it was
    # checked with (candidate_generator.py's AssistedCandidateGenerator).
    from transformers.generation import candidate_generator as cg

    target = tiny_llama(0)
    draft_model = copy.deepcopy(target)
    torch.manual_seed(1)
    with torch.no_grad():  # a draft that agrees sometimes, not always
        for p in draft_model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    steps = []
    get_candidates = cg.AssistedCandidateGenerator.get_candidates
    update = cg.AssistedCandidateGenerator.update_candidate_strategy

    def recording_get(self, input_ids, **kwargs):
        candidates, logits = get_candidates(self, input_ids, **kwargs)
        steps.append({"draft": candidates[0, input_ids.shape[1] :]})
        return candidates, logits

    def recording_update(self, input_ids, scores, num_matches):
        steps[-1] |= {"logits": scores[0], "n_matches": int(num_matches)}
        return update(self, input_ids, scores, num_matches)

    monkeypatch.setattr(
        cg.AssistedCandidateGenerator, "get_candidates", recording_get
    )
    monkeypatch.setattr(
        cg.AssistedCandidateGenerator,
        "update_candidate_strategy",
        recording_update,
    )
    prompt = torch.tensor([[1, 5, 9, 3, 7]])
    out = target.generate(
        prompt,
        assistant_model=draft_model,
        max_new_tokens=40,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=None,
    )
    plain = target.generate(
        prompt,
        max_new_tokens=40,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=None,
    )
    assert torch.equal(out, plain)
    counts = set()
    for step in steps[:-1]:  # the last step may be cut at max_length
        accepted, _ = serving.verify_greedy(step["draft"], step["logits"])
        assert accepted == step["n_matches"]
        counts.add(accepted)
    assert len(counts) > 1  # steps that accepted some drafts, not all
