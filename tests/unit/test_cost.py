"""mha_ref.cost against PyTorch's own counter and measured bytes.

FLOPs: torch_ref.MultiHeadAttention (and kv_cache.cached_step, and the
tiled passes) run under torch.utils.flop_counter.FlopCounterMode, and
every counted matmul is charged to the part of the layer that issued
it, so the counts are compared exactly, part by part and in total.
FlopCounterMode's own per-module table cannot do this: the scores and
the weighted sum are two matmuls of one function, and in torch 2.13
its ModuleTracker charges a backward matmul to the wrong Linear.

Bytes: the cache's own tensors, and the tensors autograd keeps for the
backward (saved_tensors_hooks, each storage once, while it is alive).
"""

import random
import weakref
from collections import defaultdict

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from mha_ref import cost, kv_cache, tiled, torch_ref

PARTS = ("q", "k", "v", "scores", "weighted_sum", "out")
MATMULS = (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm)


def _next_sequence_nr():
    """The sequence number autograd gives the next node it creates."""
    probe = torch.zeros((), requires_grad=True)
    return (probe * 1).grad_fn._sequence_nr() + 1


class _Charge(TorchFunctionMode):
    """Names the part each call issues: a Linear by its weight, and the
    matmuls outside them alternately scores, weighted sum (the order of
    torch_ref.attention and of each tile of the tiled forward). Keeps
    the sequence numbers of the autograd nodes each call creates, so a
    backward matmul is charged to the call whose node runs it."""

    def __init__(self, weights):
        super().__init__()
        self.weights, self.spans = weights, []
        self.part, self.attention_matmuls = None, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            part = self.weights[id(args[1])]
        elif func in (torch.matmul, torch.Tensor.matmul):  # and a @ b
            part = ("scores", "weighted_sum")[self.attention_matmuls % 2]
            self.attention_matmuls += 1
        else:
            return func(*args, **kwargs)
        first, self.part = _next_sequence_nr(), part
        try:
            return func(*args, **kwargs)
        finally:
            self.part = None
            self.spans.append((first, _next_sequence_nr(), part))

    def backward_part(self, node):
        seq = node._sequence_nr()
        for first, last, part in self.spans:
            if first <= seq < last:
                return part
        return "unlabelled"


def counted(run, module=None):
    """(FlopCounterMode's total, its FLOPs by part) of run()."""
    weights = {}
    if module is not None:
        for name in ("q", "k", "v", "o"):
            linear = getattr(module, f"w{name}")
            weights[id(linear.weight)] = "out" if name == "o" else name
    charge, parts = _Charge(weights), defaultdict(int)

    def charged(op):
        def count(*args, out_val=None, **kwargs):
            flops = flop_registry[op](*args, out_val=out_val, **kwargs)
            node = torch._C._current_autograd_node()
            part = charge.part if node is None else charge.backward_part(node)
            parts[part or "unlabelled"] += flops
            return flops

        count._get_raw = True  # FlopCounterMode passes the tensors
        return count

    mapping = {op: charged(op) for op in MATMULS}
    counter = FlopCounterMode(display=False, custom_mapping=mapping)
    with counter, charge:
        run()
    return counter.get_total_flops(), dict(parts)


def assert_counts_equal(expected, total, parts):
    assert expected["total"] == total
    got = {part: parts.get(part, 0) for part in PARTS}
    assert got == {part: expected[part] for part in PARTS}
    assert set(parts) <= set(PARTS)  # nothing counted outside the parts


def test_counted_catches_a_part_that_drifts():
    # a layer that computes its attention twice: the scores and the
    # weighted sum both double, and the formula's counts fail
    module = _module(8, 2, 1, bias=False)
    x = torch.randn(1, 5, 8)

    def drifted():
        q, k, v = module.project(x)
        torch_ref.attention(q, k, v)  # thrown away
        out, _ = torch_ref.attention(q, k, v)  # (B, H, T, dh)
        return module.wo(module.merge_heads(out))

    total, parts = counted(drifted, module)
    expected = cost.attention_flops(1, 5, 5, 8, 2, 1)
    for part in ("scores", "weighted_sum"):
        assert parts[part] == 2 * expected[part]
    with pytest.raises(AssertionError):
        assert_counts_equal(expected, total, parts)


def _shapes(seed, n=6):
    """Random (batch, tq, tk, d_head, n_head, n_kv_head, bias)."""
    draw = random.Random(seed)
    for _ in range(n):
        n_kv = draw.choice([1, 2, 3])
        yield (
            draw.randint(1, 3),
            draw.randint(1, 9),
            draw.randint(1, 9),
            draw.choice([2, 4, 6]),
            n_kv * draw.choice([1, 2, 3]),
            n_kv,
            draw.random() < 0.5,
        )


def _module(d_model, n_head, n_kv_head, bias, dtype=torch.float32):
    torch.manual_seed(0)
    return torch_ref.MultiHeadAttention(
        d_model, n_head, n_kv_head=n_kv_head, bias=bias, dtype=dtype
    )


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("shape", list(_shapes(1)))
def test_attention_flops_equal_counter_for_self_attention(shape, backward):
    b, t, _, d_head, n_head, n_kv, bias = shape
    d_model = n_head * d_head
    module = _module(d_model, n_head, n_kv, bias)
    x = torch.randn(b, t, d_model, requires_grad=backward)

    def run():
        y, _ = module(x)
        if backward:
            y.sum().backward()

    expected = cost.attention_flops(
        b, t, t, d_model, n_head, n_kv, backward=backward
    )
    assert_counts_equal(expected, *counted(run, module))


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("shape", list(_shapes(2)))
def test_attention_flops_equal_counter_for_cross_attention(shape, backward):
    b, tq, tk, d_head, n_head, n_kv, bias = shape
    d_model = n_head * d_head
    module = _module(d_model, n_head, n_kv, bias)
    x = torch.randn(b, tq, d_model, requires_grad=backward)
    context = torch.randn(b, tk, d_model, requires_grad=backward)

    def run():
        y, _ = module(x, context=context)
        if backward:
            y.sum().backward()

    expected = cost.attention_flops(
        b, tq, tk, d_model, n_head, n_kv, backward=backward
    )
    assert_counts_equal(expected, *counted(run, module))


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("shape", list(_shapes(3)))
def test_attention_flops_equal_counter_for_a_cached_step(shape, backward):
    # tk - tq positions already cached (a prefill without grad), then a
    # step of tq new rows: one decoding step when tq is 1
    b, tq, cached, d_head, n_head, n_kv, bias = shape
    d_model = n_head * d_head
    module = _module(d_model, n_head, n_kv, bias)
    module.rope = d_head % 2 == 0  # rotated keys cost no matmul
    cache = kv_cache.KVCache()
    with torch.no_grad():
        kv_cache.cached_step(module, cache, torch.randn(b, cached, d_model))
    x = torch.randn(b, tq, d_model, requires_grad=backward)

    def run():
        y = kv_cache.cached_step(module, cache, x)
        if backward:
            y.sum().backward()

    expected = cost.attention_flops(
        b,
        tq,
        cached + tq,
        d_model,
        n_head,
        n_kv,
        backward=backward,
        cached=True,
    )
    assert_counts_equal(expected, *counted(run, module))


def test_attention_flops_sum_over_the_chunks_of_cached_forward():
    b, d_model, n_head, n_kv, chunks = 2, 12, 6, 3, [5, 1, 3, 1]
    module = _module(d_model, n_head, n_kv, bias=True)
    x = torch.randn(b, sum(chunks), d_model)
    total, parts = counted(
        lambda: kv_cache.cached_forward(module, x, chunks), module
    )
    expected = dict.fromkeys((*PARTS, "total"), 0)
    seen = 0
    for n in chunks:
        seen += n  # the chunk's n rows against every key so far
        step = cost.attention_flops(
            b, n, seen, d_model, n_head, n_kv, cached=True
        )
        expected = {key: expected[key] + step[key] for key in expected}
    assert_counts_equal(expected, total, parts)


def test_attention_flops_without_d_head_split_use_the_given_d_head():
    # n_head * d_head need not be d_model: each part follows d_head
    got = cost.attention_flops(1, 3, 5, 10, 4, 2, d_head=3)
    assert got["q"] == 2 * 3 * 10 * 12
    assert got["k"] == got["v"] == 2 * 5 * 10 * 6
    assert got["scores"] == got["weighted_sum"] == 2 * 4 * 3 * 5 * 3
    assert got["out"] == 2 * 3 * 12 * 10


@pytest.mark.parametrize(
    ("b", "tq", "tk", "n_head", "n_kv"),
    [(1, 6, 6, 2, 2), (2, 3, 8, 4, 1), (3, 1, 5, 6, 3), (1, 9, 9, 1, 1)],
)
def test_useful_flops_count_the_pairs_a_causal_mask_allows(
    b, tq, tk, n_head, n_kv
):
    d_head = 4
    d_model = n_head * d_head
    blocked = torch_ref.causal_mask_for_positions(
        torch.arange(tk - tq, tk), torch.arange(tk)
    )  # the tq queries are the last tq positions
    allowed = int((~blocked).sum())
    got = cost.useful_flops(b, tq, tk, d_model, n_head, n_kv)
    dense = cost.attention_flops(b, tq, tk, d_model, n_head, n_kv, cached=True)
    assert got["scores"] == got["weighted_sum"]
    assert got["scores"] == 2 * b * n_head * allowed * d_head
    for part in ("q", "k", "v", "out"):
        assert got[part] == dense[part]
    assert got["total"] == sum(got[part] for part in PARTS)


@pytest.mark.parametrize(
    ("tq", "tk", "block_q", "block_k"),
    [
        (10, 10, 5, 5),
        (10, 10, 4, 3),
        (7, 13, 2, 4),
        (9, 9, 16, 16),
        (3, 3, 1, 1),
    ],
)
def test_causal_tiles_match_the_tiled_loop(tq, tk, block_q, block_k):
    # the loop's rule: skip a tile whose first key follows its last query
    q_pos, k_pos = range(tk - tq, tk), range(tk)
    tiles = skipped = pairs = 0
    for i in range(0, tq, block_q):
        rows = q_pos[i : i + block_q]
        for j in range(0, tk, block_k):
            cols = k_pos[j : j + block_k]
            tiles += 1
            if min(cols) > max(rows):
                skipped += 1
            else:
                pairs += len(rows) * len(cols)
    assert cost.causal_tiles(tq, tk, block_q, block_k) == (
        tiles,
        skipped,
        pairs,
    )


@pytest.mark.parametrize(
    ("b", "tq", "tk", "n_head", "n_kv", "block_q", "block_k"),
    [(1, 10, 10, 2, 1, 4, 3), (2, 5, 12, 2, 2, 2, 5), (1, 7, 7, 3, 3, 16, 16)],
)
def test_tiled_flops_equal_counter_on_the_tiled_passes(
    b, tq, tk, n_head, n_kv, block_q, block_k
):
    d_head = 4
    d_model = n_head * d_head
    q = torch.randn(b, n_head, tq, d_head, dtype=torch.float64)
    k, v = torch.randn(2, b, n_kv, tk, d_head, dtype=torch.float64)
    blocks = {"causal": True, "block_q": block_q, "block_k": block_k}
    forward = cost.tiled_flops(
        b, tq, tk, d_model, n_head, n_kv, block_q=block_q, block_k=block_k
    )
    total, parts = counted(
        lambda: tiled.tiled_attention_torch(q, k, v, **blocks)
    )
    attention = {p: forward[p] for p in ("scores", "weighted_sum")}
    assert parts == attention
    assert total == sum(attention.values())
    # forward plus the backward that recomputes each tile: 7 matmuls
    both = cost.tiled_flops(
        b, tq, tk, d_model, n_head, n_kv, None, block_q, block_k, True
    )
    dout = torch.randn_like(q)
    total, _ = counted(
        lambda: tiled.tiled_attention_backward_torch(q, k, v, dout, **blocks)
    )
    assert total == both["scores"] + both["weighted_sum"]
    assert 2 * both["scores"] == 8 * forward["scores"]


@pytest.mark.parametrize(
    ("b", "n_kv", "d_head", "chunks"),
    [(1, 2, 4, [4, 1, 1]), (3, 1, 6, [2, 3])],
)
def test_kv_cache_bytes_equal_the_cache_tensors(b, n_kv, d_head, chunks):
    n_head = 2 * n_kv
    module = _module(n_head * d_head, n_head, n_kv, bias=False)
    cache = kv_cache.KVCache()
    with torch.no_grad():
        for n in chunks:
            kv_cache.cached_step(
                module, cache, torch.randn(b, n, module.d_model)
            )
    held = cache.keys.nbytes + cache.values.nbytes
    per_sequence = cost.kv_cache_bytes(1, n_kv, d_head, sum(chunks), 4)
    assert held == b * per_sequence


@pytest.mark.parametrize(
    ("window", "chunks"), [(3, [5, 1, 1]), (6, [2, 1, 1]), (1, [4, 1])]
)
def test_kv_cache_bytes_with_a_window_equal_the_rolling_cache(window, chunks):
    # the rolling cache keeps the last window - 1 positions (or fewer)
    b, n_head, n_kv, d_head = 2, 4, 2, 3
    module = _module(n_head * d_head, n_head, n_kv, bias=False)
    cache = kv_cache.RollingKVCache(window)
    with torch.no_grad():
        for n in chunks:
            x = torch.randn(b, n, module.d_model)
            kv_cache.rolling_step(module, cache, x)
    held = cache.keys.nbytes + cache.values.nbytes
    per_sequence = cost.kv_cache_bytes(
        1, n_kv, d_head, sum(chunks), 4, window=window
    )
    assert held == b * per_sequence


@pytest.mark.slow
def test_kv_cache_bytes_with_a_window_equal_hugging_face_sliding_layer():
    # transformers 5.24.0: a sliding_window config caches in a
    # DynamicSlidingWindowLayer, which keeps sliding_window - 1 tokens
    cache_utils = pytest.importorskip("transformers.cache_utils")
    window, b, n_kv, d_head = 5, 2, 3, 4
    layer = cache_utils.DynamicSlidingWindowLayer(sliding_window=window)
    seen = 0
    for n in (3, 1, 4, 1, 1):
        k = torch.randn(b, n_kv, n, d_head)
        layer.update(k, torch.randn_like(k))
        seen += n
        held = layer.keys.nbytes + layer.values.nbytes
        assert held == b * cost.kv_cache_bytes(
            1, n_kv, d_head, seen, 4, window=window
        )


def _saved_bytes(run, keep_out):
    """Bytes autograd keeps for the backward: each storage once, counted
    only while a node still holds it (a node freed during the forward
    keeps nothing); the module's parameters excluded."""
    held = []

    class Packed:
        def __init__(self, tensor):
            self.tensor = tensor

    def pack(tensor):
        packed = Packed(tensor)
        held.append((weakref.ref(packed), tensor.untyped_storage()))
        return packed

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda p: p.tensor):
        out = run()
    storages = {
        storage.data_ptr(): storage.nbytes()
        for alive, storage in held
        if alive() is not None and storage.data_ptr() not in keep_out
    }
    del out
    return sum(storages.values())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    ("b", "t", "n_head", "d_head"), [(1, 7, 4, 4), (2, 5, 3, 8), (3, 9, 1, 2)]
)
def test_saved_activation_bytes_equal_what_autograd_keeps(
    b, t, n_head, d_head, dtype
):
    d_model = n_head * d_head
    module = _module(d_model, n_head, None, bias=True, dtype=dtype)
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    x = torch.randn(b, t, d_model, dtype=dtype, requires_grad=True)
    itemsize = x.element_size()
    # the reference keeps the T x T weights A for its backward
    kept = _saved_bytes(lambda: module(x)[0], params)
    assert kept == cost.saved_activation_bytes(b, t, d_model, n_head, itemsize)
    # SDPA's CPU flash kernel keeps one log-sum-exp per row instead
    kept = _saved_bytes(lambda: torch_ref.sdpa_forward(module, x), params)
    assert kept == cost.saved_activation_bytes(
        b, t, d_model, n_head, itemsize, weights=False
    )


def test_saved_activation_bytes_without_weights_keep_float32_statistics():
    # bf16 values, float32 log-sum-exp (the reference itself computes
    # bf16 in float32, so only SDPA's kernel shows a bf16 backward)
    b, t, n_head, d_model = 2, 6, 2, 8
    module = _module(d_model, n_head, None, False, dtype=torch.bfloat16)
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    x = torch.randn(b, t, d_model, dtype=torch.bfloat16, requires_grad=True)
    kept = _saved_bytes(lambda: torch_ref.sdpa_forward(module, x), params)
    assert kept == 5 * b * t * d_model * 2 + b * n_head * t * 4
    assert kept == cost.saved_activation_bytes(
        b, t, d_model, n_head, 2, weights=False
    )


def test_saved_activation_bytes_in_bfloat16_are_not_what_the_reference_keeps():
    # the reference computes bf16 in float32: its Q, K, V and A stay
    # float32, only X and the heads are bf16; the formula at 2 bytes a
    # value is a kernel that keeps everything in bf16
    b, t, n_head, d_model = 2, 6, 2, 8
    module = _module(d_model, n_head, None, False, dtype=torch.bfloat16)
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    x = torch.randn(b, t, d_model, dtype=torch.bfloat16, requires_grad=True)
    kept = _saved_bytes(lambda: module(x)[0], params)
    in_float32 = cost.saved_activation_bytes(b, t, d_model, n_head, 4)
    assert kept == in_float32 - 2 * b * t * d_model * 2  # X, heads: bf16
    assert kept > cost.saved_activation_bytes(b, t, d_model, n_head, 2)


@pytest.mark.parametrize(
    ("b", "tq", "tk", "cached", "cross"),
    [(1, 6, 6, False, False), (2, 3, 7, False, True), (2, 1, 9, True, False)],
)
def test_bytes_moved_equal_the_tensors_the_layer_touches(
    b, tq, tk, cached, cross
):
    d_model, n_head, n_kv = 12, 6, 2
    module = _module(d_model, n_head, n_kv, bias=False)
    x = torch.randn(b, tq, d_model)
    with torch.no_grad():
        if cached:  # the keys a step reads: the cache with its new row
            cache = kv_cache.KVCache()
            kv_cache.cached_step(
                module, cache, torch.randn(b, tk - tq, d_model)
            )
            y = kv_cache.cached_step(module, cache, x)
            keys, values, inputs = cache.keys, cache.values, [x]
        else:
            context = torch.randn(b, tk, d_model) if cross else None
            _, keys, values = module.project(x, context)
            y, _ = module(x, context=context)
            inputs = [x] if context is None else [x, context]
    touched = (
        sum(p.nbytes for p in module.parameters())
        + sum(t.nbytes for t in inputs)
        + y.nbytes
        + keys.nbytes
        + values.nbytes
    )
    assert touched == cost.bytes_moved(
        b, tq, tk, d_model, n_head, n_kv, 4, cached
    )
    flops = cost.attention_flops(
        b, tq, tk, d_model, n_head, n_kv, cached=cached
    )
    assert cost.arithmetic_intensity(
        b, tq, tk, d_model, n_head, n_kv, 4, cached
    ) == pytest.approx(flops["total"] / touched, rel=1e-15)


def test_arithmetic_intensity_of_decoding_stays_flat_while_prefill_grows():
    # Llama 2 7B's layer in bf16: a step reads every weight and cached
    # key for about one multiply-add each; a prefill reuses them T times
    shape = {"d_model": 4096, "n_head": 32}
    steps = [
        cost.arithmetic_intensity(1, 1, t, **shape, cached=True)
        for t in (512, 4096, 32768)
    ]
    prefills = [
        cost.arithmetic_intensity(1, t, t, **shape) for t in (512, 4096)
    ]
    assert all(0.9 < s < 1.01 for s in steps)
    assert prefills[0] > 100 * steps[0]
    assert prefills[1] > prefills[0]


def test_arithmetic_intensity_of_a_grouped_step_tends_to_the_group():
    # each cached value serves G query heads: a long cache's step does
    # G FLOPs per byte in bf16 (Llama 3 8B: G = 4), against 1 for MHA
    shape = {"d_model": 4096, "n_head": 32, "n_kv_head": 8}
    steps = [
        cost.arithmetic_intensity(1, 1, t, **shape, cached=True)
        for t in (1, 4096, 2**22)
    ]
    assert steps[0] == pytest.approx(1, rel=1e-3)
    assert steps[0] < steps[1] < steps[2] < 4
    assert steps[2] == pytest.approx(4, rel=0.01)


def test_cost_counts_numpy_ints_as_python_ints_without_wrapping():
    # np.int64 sizes multiplied in int64: 3 * 2**20 sequences of 4 * 2**20
    # tokens gave a total of 0 FLOPs, without a word; the guard returns
    # Python ints, whose products are exact
    import numpy as np

    big = (3 * 2**20, 4 * 2**20, 4 * 2**20, 8, 2)
    exact = cost.attention_flops(*big)
    assert exact["scores"] == 2 * big[0] * 2 * big[1] * big[2] * 4
    assert exact["total"] > 2**63  # past int64: NumPy would wrap here
    assert cost.attention_flops(np.int64(big[0]), *big[1:]) == exact
    assert cost.kv_cache_bytes(
        np.int64(2**20), 8, 128, np.int64(2**40), 2
    ) == cost.kv_cache_bytes(2**20, 8, 128, 2**40, 2)


@pytest.mark.parametrize(
    ("b", "tk", "n_kv"), [(1, 1, 2), (3, 7, 2), (2, 5, 6)]
)
def test_decode_floor_reads_the_weights_and_the_filled_cache(b, tk, n_kv):
    # float32: the weights are the module's, the cache what a step left
    d_model, n_head = 12, 6
    module = _module(d_model, n_head, n_kv, bias=False)
    cache = kv_cache.KVCache()
    with torch.no_grad():
        if tk > 1:
            kv_cache.cached_step(module, cache, torch.randn(b, tk - 1, 12))
        kv_cache.cached_step(module, cache, torch.randn(b, 1, d_model))
    floor = cost.decode_floor(b, tk, d_model, n_head, n_kv, 4, bandwidth=8.0)
    assert floor["weights"] == sum(p.nbytes for p in module.parameters())
    assert floor["cache"] == cache.keys.nbytes + cache.values.nbytes
    assert floor["seconds"] == (floor["weights"] + floor["cache"]) / 8.0


def test_decode_floor_of_llama_3_8b_is_mostly_its_weights():
    # Llama 3 8B's attention layer in bf16 (Llama 3 paper, Table 3)
    floor = cost.decode_floor(1, 4096, 4096, 32, 8, bandwidth=3.35e12)
    assert floor["weights"] == 2 * (2 * 4096 * 4096 + 2 * 4096 * 1024)
    assert floor["weights"] == 5 * floor["cache"]  # 80 MiB against 16
    assert floor["seconds"] == pytest.approx(96 * 2**20 / 3.35e12)


@pytest.mark.parametrize(
    ("tk", "n_kv", "ridge"),
    [(1, 8, 295.0), (32, 8, 206.0), (1, 32, 295.0), (16, 2, 100), (3, 4, 1)],
)
def test_memory_bound_batch_is_the_first_batch_at_the_ridge(tk, n_kv, ridge):
    shape = (4096, 32, n_kv)
    batch = cost.memory_bound_batch(tk, *shape, ridge=ridge)

    def intensity(b):
        return cost.arithmetic_intensity(b, 1, tk, *shape, cached=True)

    assert intensity(batch) >= ridge
    assert batch == 1 or intensity(batch - 1) < ridge


def test_memory_bound_batch_is_about_the_ridge_while_the_weights_dominate():
    # an empty cache: a step of B sequences does about B FLOPs per byte
    for ridge in (206.0, 295.0):
        batch = cost.memory_bound_batch(1, 4096, 32, 8, ridge=ridge)
        assert ridge <= batch <= 1.1 * ridge


def test_memory_bound_batch_is_none_while_each_cache_dominates():
    # Llama 3 8B at 4,096 tokens: a sequence's own reads do about G = 4
    # FLOPs per byte, so no batch reaches a ridge of 206 or 295
    for ridge in (206.0, 295.0):
        assert cost.memory_bound_batch(4096, 4096, 32, 8, ridge=ridge) is None
    huge = cost.arithmetic_intensity(2**40, 1, 4096, 4096, 32, 8, cached=True)
    assert huge < 206


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_roofline_functions_refuse_a_rate_that_is_not_positive(bad):
    with pytest.raises(ValueError, match="bandwidth"):
        cost.decode_floor(1, 8, 8, 2, bandwidth=bad)
    with pytest.raises(ValueError, match="ridge"):
        cost.memory_bound_batch(8, 8, 2, ridge=bad)


@pytest.mark.parametrize("bad", ["fast", True, None])
def test_roofline_functions_refuse_a_rate_that_is_not_a_number(bad):
    with pytest.raises(TypeError, match="bandwidth"):
        cost.decode_floor(1, 8, 8, 2, bandwidth=bad)
    with pytest.raises(TypeError, match="ridge"):
        cost.memory_bound_batch(8, 8, 2, ridge=bad)


def test_roofline_functions_refuse_bad_sizes_and_heads():
    with pytest.raises(ValueError, match="tk"):
        cost.decode_floor(1, 0, 8, 2, bandwidth=1.0)
    with pytest.raises(ValueError, match="n_kv_head=3"):
        cost.memory_bound_batch(8, 8, 2, 3, ridge=1.0)
    with pytest.raises(ValueError, match="bytes_per_value"):
        cost.memory_bound_batch(8, 8, 2, None, 0, ridge=1.0)


@pytest.mark.parametrize(
    ("n_kv", "ridge"),
    [(8, 989.5 / 3.35), (8, 989.5 / 4.8), (32, 295.0), (2, 40.0), (4, 10.0)],
)
def test_memory_bound_from_is_the_first_cache_no_batch_gets_past(n_kv, ridge):
    # the scan over memory_bound_batch, tk by tk, finds the same length
    shape = (4096, 32, n_kv)
    onset = cost.memory_bound_from(*shape, ridge=ridge)
    assert cost.memory_bound_batch(onset, *shape, ridge=ridge) is None
    assert all(
        cost.memory_bound_batch(t, *shape, ridge=ridge) is not None
        for t in range(1, onset)
    )
    for longer in (onset + 1, 2 * onset, 64 * onset):  # and stays so
        assert cost.memory_bound_batch(longer, *shape, ridge=ridge) is None


def test_memory_bound_from_of_llama_on_an_h100_and_an_h200():
    # Llama 3 8B (8 key/value heads) and Llama 2 7B (32), bfloat16
    h100, h200 = 989.5 / 3.35, 989.5 / 4.8  # cost.GPU_SPECS, dense
    assert cost.memory_bound_from(4096, 32, 8, ridge=h100) == 67
    assert cost.memory_bound_from(4096, 32, 8, ridge=h200) == 98
    assert cost.memory_bound_from(4096, 32, 32, ridge=h100) == 27
    assert cost.memory_bound_from(4096, 32, 32, ridge=h200) == 39


def test_memory_bound_from_is_none_when_each_position_reaches_the_ridge():
    # 32 query heads per key/value head in bf16: 32 FLOPs per cached
    # byte, above a ridge of 20, so a long enough batch always gets there
    assert cost.memory_bound_from(4096, 32, 1, ridge=20.0) is None
    assert cost.memory_bound_batch(2**20, 4096, 32, 1, ridge=20.0) > 0
    # an empty cache already below the ridge at any batch: from 1
    assert cost.memory_bound_from(8, 2, 2, 4, ridge=1e6) == 1


def test_memory_bound_batch_takes_numpy_bytes_per_value():
    import numpy as np

    assert cost.memory_bound_batch(
        3, 8, 2, None, np.float32(2), ridge=3.0
    ) == cost.memory_bound_batch(3, 8, 2, None, 2, ridge=3.0)
    assert cost.memory_bound_from(
        4096, 32, 8, np.float32(2), ridge=295.0
    ) == cost.memory_bound_from(4096, 32, 8, 2, ridge=295.0)


def test_memory_bound_from_refuses_bad_arguments():
    with pytest.raises(ValueError, match="ridge"):
        cost.memory_bound_from(8, 2, ridge=0)
    with pytest.raises(TypeError, match="ridge"):
        cost.memory_bound_from(8, 2, ridge="fast")
    with pytest.raises(ValueError, match="n_kv_head=3"):
        cost.memory_bound_from(8, 2, 3, ridge=1.0)
    with pytest.raises(ValueError, match="d_model"):
        cost.memory_bound_from(0, 2, ridge=1.0)
