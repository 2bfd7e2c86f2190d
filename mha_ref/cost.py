"""What one multi-head attention layer costs: FLOPs, bytes, intensity.

Pure arithmetic on sizes: no tensor is made. FLOPs are counted as
torch.utils.flop_counter.FlopCounterMode counts them (torch 2.13): the
matmuls only (mm, addmm, bmm), 2 per multiply-add, a bias add free, and
the backward of a matmul C = A B as two matmuls of the same size, dA =
dC B^T and dB = A^T dC. The layer is torch_ref.MultiHeadAttention:
Wq, Wk, Wv, Wo, each key/value head copied to its query heads before
the scores (so the scores run over all H heads), and for a cached step
(kv_cache.cached_step) only the new rows projected.
"""

import math
from fractions import Fraction

from mha_ref.guards import cost as check
from mha_ref.guards.cost import NotAnIntegerError as NotAnIntegerError

LSE_BYTES = 4  # a log-sum-exp per row: float32, float64 kept as it is

# Published specifications, not measured: the dense bfloat16 tensor-core
# peak (the datasheets give it with 2:4 sparsity: halved here) and the
# HBM bandwidth, of the SXM boards. The H800 has the H100's bfloat16
# peak and bandwidth (it differs in NVLink bandwidth and FP64).
GPU_SPECS = {
    "H100 SXM": {
        "bf16_sparse_tflops": 1979,
        "hbm_tbps": 3.35,
        "source": "NVIDIA H100 Tensor Core GPU datasheet",
        "url": "https://www.nvidia.com/en-us/data-center/h100/",
    },
    "H800 SXM": {
        "bf16_sparse_tflops": 1979,
        "hbm_tbps": 3.35,
        "source": "NVIDIA H800 Tensor Core GPU datasheet",
        "url": "",
    },
    "H200 SXM": {
        "bf16_sparse_tflops": 1979,
        "hbm_tbps": 4.8,
        "source": "NVIDIA H200 Tensor Core GPU datasheet",
        "url": "https://www.nvidia.com/en-us/data-center/h200/",
    },
}


def _with_total(parts, factor=1):
    parts = {name: factor * flops for name, flops in parts.items()}
    return {**parts, "total": sum(parts.values())}


# --8<-- [start:attention-flops]
def attention_flops(
    batch,
    tq,
    tk,
    d_model,
    n_head,
    n_kv_head=None,
    d_head=None,
    backward=False,
    cached=False,
):
    """Matmul FLOPs of one layer by part, as FlopCounterMode counts.

    tq queries against tk keys: self-attention (tq == tk), or
    cross-attention (K and V projected from tk context rows); cached:
    only the tq new rows are projected, the other tk - tq keys and
    values come from the cache. backward: forward plus backward, with
    the input (and context) requiring grad.

    >>> flops = attention_flops(1, 1024, 1024, 768, 12)
    >>> flops["q"], flops["scores"], flops["total"]
    (1207959552, 1610612736, 8053063680)
    """
    sizes = check.attention_flops(
        batch, tq, tk, d_model, n_head, n_kv_head, d_head, backward, cached
    )  # ints; d_head and n_kv_head filled in
    return _attention_flops(*sizes, backward, cached)


def _attention_flops(
    batch, tq, tk, d_model, n_head, n_kv_head, d_head, backward, cached
):
    # unchecked: the other counts call it with their checked sizes
    # --8<-- [start:attention-flops-parts]
    rows_kv = tq if cached else tk  # the rows that K and V project
    d_q, d_kv = n_head * d_head, n_kv_head * d_head
    parts = {
        # Q = X Wq: (B Tq, d_model) @ (d_model, H dh), 2 per multiply-add
        "q": 2 * batch * tq * d_model * d_q,
        "k": 2 * batch * rows_kv * d_model * d_kv,  # K = X Wk
        "v": 2 * batch * rows_kv * d_model * d_kv,  # V = X Wv
        # S = Q K^T per query head: (Tq, dh) @ (dh, Tk)
        "scores": 2 * batch * n_head * tq * tk * d_head,
        # A V per query head: (Tq, Tk) @ (Tk, dh)
        "weighted_sum": 2 * batch * n_head * tq * tk * d_head,
        "out": 2 * batch * tq * d_q * d_model,  # Concat(heads) Wo
    }
    # each matmul's backward is two of its size: dA = dC B^T, dB = A^T dC
    return _with_total(parts, 3 if backward else 1)
    # --8<-- [end:attention-flops-parts]
    # --8<-- [end:attention-flops]


# --8<-- [start:useful-flops]
def useful_flops(batch, tq, tk, d_model, n_head, n_kv_head=None, d_head=None):
    """attention_flops' parts for only the pairs a causal mask allows.

    The tq queries are the last tq of the tk positions (a prefill when
    tq == tk, a cached step otherwise): query i sees tk - tq + i + 1
    keys. Projections as for a cached step: only the tq new rows.

    >>> useful_flops(1, 4, 4, 8, 2)["scores"]  # 10 of 16 pairs
    160
    """
    sizes = check.useful_flops(
        batch, tq, tk, d_model, n_head, n_kv_head, d_head
    )  # ints; d_head and n_kv_head filled in
    return _useful_flops(*sizes)


def _useful_flops(batch, tq, tk, d_model, n_head, n_kv_head, d_head):
    # unchecked: tiled_flops calls it with its checked sizes
    parts = _attention_flops(
        batch, tq, tk, d_model, n_head, n_kv_head, d_head, False, True
    )
    # --8<-- [start:useful-flops-pairs]
    # allowed pairs: every earlier key, then a triangle over the new ones
    pairs = tq * (tk - tq) + tq * (tq + 1) // 2
    attend = 2 * batch * n_head * pairs * d_head  # per pair: dh mult-adds
    parts.update(scores=attend, weighted_sum=attend)
    # --8<-- [end:useful-flops-pairs]
    del parts["total"]
    return _with_total(parts)
    # --8<-- [end:useful-flops]


# --8<-- [start:causal-tiles]
def causal_tiles(tq, tk, block_q=64, block_k=64):
    """(tiles, skipped, pairs computed) of the tiled causal loop.

    tiled.tiled_attention_* skips a tile whose first key lies after its
    last query (queries at the end of the keys) and computes the others
    whole, the blocked pairs on the diagonal included.

    >>> causal_tiles(10, 10, 5, 5)  # 4 tiles, the upper right skipped
    (4, 1, 75)
    """
    sizes = check.causal_tiles(tq, tk, block_q, block_k)  # ints
    return _causal_tiles(*sizes)


def _causal_tiles(tq, tk, block_q, block_k):
    # unchecked: tiled_flops calls it with its checked sizes
    # --8<-- [start:causal-tiles-loop]
    key_blocks = -(-tk // block_k)  # ceil(tk / block_k)
    skipped = pairs = 0
    for i in range(0, tq, block_q):
        rows = min(block_q, tq - i)
        last_query = tk - tq + i + rows - 1  # its position among the keys
        blocks = last_query // block_k + 1  # key blocks starting <= it
        skipped += key_blocks - blocks
        pairs += rows * min(tk, blocks * block_k)
    return -(-tq // block_q) * key_blocks, skipped, pairs
    # --8<-- [end:causal-tiles-loop]
    # --8<-- [end:causal-tiles]


# --8<-- [start:tiled-flops]
def tiled_flops(
    batch,
    tq,
    tk,
    d_model,
    n_head,
    n_kv_head=None,
    d_head=None,
    block_q=64,
    block_k=64,
    backward=False,
):
    """useful_flops' parts for the tiled causal pass, whole tiles paid.

    backward: forward plus tiled.tiled_attention_backward_*, which per
    tile recomputes S (scores), then dV and dP (weighted sum), dQ and
    dK (scores): 5 matmuls where the forward has 2.

    >>> tiled_flops(1, 10, 10, 2, 1, block_q=5, block_k=5)["scores"]
    300
    """
    batch, tq, tk, d_model, n_head, block_q, block_k, n_kv_head, d_head = (
        check.tiled_flops(
            batch,
            tq,
            tk,
            d_model,
            n_head,
            n_kv_head,
            d_head,
            block_q,
            block_k,
            backward,
        )
    )  # ints; d_head and n_kv_head filled in
    _, _, pairs = _causal_tiles(tq, tk, block_q, block_k)
    parts = _useful_flops(batch, tq, tk, d_model, n_head, n_kv_head, d_head)
    del parts["total"]
    # --8<-- [start:tiled-flops-parts]
    unit = 2 * batch * n_head * pairs * d_head  # one matmul over the tiles
    for name in ("q", "k", "v", "out"):
        parts[name] *= 3 if backward else 1
    parts["scores"] = (1 + 3 * backward) * unit  # S; then S, dQ, dK
    parts["weighted_sum"] = (1 + 2 * backward) * unit  # P V; dP, dV
    # --8<-- [end:tiled-flops-parts]
    return _with_total(parts)
    # --8<-- [end:tiled-flops]


# --8<-- [start:kv-cache-bytes]
def kv_cache_bytes(
    n_layer, n_kv_head, d_head, tokens, bytes_per_value, window=None
):
    """Bytes of the keys and values one sequence of ``tokens`` caches.

    window: the size of a sliding window (a query sees itself and the
    window - 1 keys before it, Hugging Face's sliding_window, also
    for its Mistral port). Its cache keeps only the last window - 1 tokens,
    which the next query can still see, as kv_cache.RollingKVCache and
    Hugging Face's DynamicSlidingWindowLayer keep between steps.

    >>> kv_cache_bytes(32, 8, 128, 1, 2)  # Llama 3 8B, bf16, per token
    131072
    >>> kv_cache_bytes(32, 8, 128, 32768, 2, window=4096)  # Mistral 7B
    536739840
    """
    n_layer, n_kv_head, d_head, tokens, window = check.kv_cache_bytes(
        n_layer, n_kv_head, d_head, tokens, bytes_per_value, window
    )  # ints; window None: no window
    # --8<-- [start:kv-cache-bytes-held]
    held = tokens if window is None else min(tokens, window - 1)
    # K and V: one d_head vector per key/value head, layer and token held
    return 2 * n_layer * n_kv_head * d_head * held * bytes_per_value
    # --8<-- [end:kv-cache-bytes-held]
    # --8<-- [end:kv-cache-bytes]


# --8<-- [start:saved-activation-bytes]
def saved_activation_bytes(
    batch, t, d_model, n_head, bytes_per_value, weights=True
):
    """Bytes a self-attention layer's backward keeps from its forward.

    X, Q, K, V and the concatenated heads (the input of Wo), B T d_model
    values each; with weights, the softmax output A (B H T T). Without
    them, as a tiled backward keeps it: one log-sum-exp per row and
    head instead (float32, or float64 for float64 values), from which
    each tile of A is recomputed. Every tensor is counted at
    bytes_per_value: torch_ref.attention computes bfloat16 and float16
    in float32, so it keeps its Q, K, V and A in float32 even then.

    >>> saved_activation_bytes(1, 1024, 768, 12, 2)  # bf16
    33030144
    >>> saved_activation_bytes(1, 1024, 768, 12, 2, weights=False)
    7913472
    """
    batch, t, d_model, n_head = check.saved_activation_bytes(
        batch, t, d_model, n_head, bytes_per_value, weights
    )  # ints; d_model splits into n_head heads
    # --8<-- [start:saved-activation-terms]
    kept = 5 * batch * t * d_model * bytes_per_value  # X, Q, K, V, heads
    if weights:
        return kept + batch * n_head * t * t * bytes_per_value  # A
    lse_bytes = max(bytes_per_value, LSE_BYTES)  # at least float32
    return kept + batch * n_head * t * lse_bytes  # L, one per row
    # --8<-- [end:saved-activation-terms]
    # --8<-- [end:saved-activation-bytes]


# --8<-- [start:bytes-moved]
def bytes_moved(
    batch,
    tq,
    tk,
    d_model,
    n_head,
    n_kv_head=None,
    bytes_per_value=2,
    cached=False,
):
    """The fewest bytes the layer reads and writes in memory.

    Its weights once, its input (and context, for cross-attention) and
    output, and the keys and values it reads, cached or projected.
    """
    sizes = check.bytes_moved(
        batch, tq, tk, d_model, n_head, n_kv_head, bytes_per_value, cached
    )  # ints; d_head and n_kv_head filled in
    return _bytes_moved(*sizes, bytes_per_value, cached)


def _bytes_moved(
    batch, tq, tk, d_model, n_head, n_kv_head, d_head, bytes_per_value, cached
):
    # unchecked: arithmetic_intensity calls it with its checked sizes
    # --8<-- [start:bytes-moved-terms]
    d_q, d_kv = n_head * d_head, n_kv_head * d_head
    weights = 2 * d_model * d_q + 2 * d_model * d_kv  # Wq, Wo; Wk, Wv
    context = 0 if cached or tq == tk else batch * tk * d_model
    x_and_y = 2 * batch * tq * d_model  # the input read, output written
    keys_values = 2 * batch * tk * d_kv  # K and V, read once
    return (weights + context + x_and_y + keys_values) * bytes_per_value
    # --8<-- [end:bytes-moved-terms]
    # --8<-- [end:bytes-moved]


# --8<-- [start:arithmetic-intensity]
def arithmetic_intensity(
    batch,
    tq,
    tk,
    d_model,
    n_head,
    n_kv_head=None,
    bytes_per_value=2,
    cached=False,
):
    """FLOPs per byte moved: the layer's position on a roofline.

    A prefill of T tokens is (batch, T, T); one decoding step against a
    cache is (batch, 1, T, cached=True).

    >>> round(arithmetic_intensity(1, 1, 4096, 4096, 32, cached=True), 2)
    1.0
    """
    sizes = check.arithmetic_intensity(
        batch, tq, tk, d_model, n_head, n_kv_head, bytes_per_value, cached
    )  # ints; d_head and n_kv_head filled in
    flops = _attention_flops(*sizes, False, cached)["total"]
    moved = _bytes_moved(*sizes, bytes_per_value, cached)
    return flops / moved
    # --8<-- [end:arithmetic-intensity]


# --8<-- [start:decode-floor]
def decode_floor(
    batch,
    tk,
    d_model,
    n_head,
    n_kv_head=None,
    bytes_per_value=2,
    *,
    bandwidth,
):
    """The least time of one decoding step, while memory is the limit.

    batch sequences, each one new token attending tk positions (its own
    included). The step reads the layer's weights once, for the whole
    batch, and every sequence's cached keys and values: their bytes over
    ``bandwidth`` (bytes per second) is its floor. The input and output,
    a few kB, are left out.

    >>> f = decode_floor(1, 4096, 4096, 32, 8, bandwidth=3.35e12)
    >>> f["weights"], f["cache"]  # Llama 3 8B's layer, bfloat16
    (83886080, 16777216)
    """
    batch, tk, d_model, n_head, n_kv_head, d_head, bandwidth = (
        check.decode_floor(
            batch, tk, d_model, n_head, n_kv_head, bytes_per_value, bandwidth
        )
    )
    # --8<-- [start:decode-floor-terms]
    d_q, d_kv = n_head * d_head, n_kv_head * d_head
    # Wq, Wo; Wk, Wv: read once, whatever the batch
    weights = (2 * d_model * d_q + 2 * d_model * d_kv) * bytes_per_value
    cache = 2 * batch * tk * d_kv * bytes_per_value  # each sequence's K, V
    seconds = (weights + cache) / bandwidth
    # --8<-- [end:decode-floor-terms]
    return {"weights": weights, "cache": cache, "seconds": seconds}
    # --8<-- [end:decode-floor]


# --8<-- [start:memory-bound-batch]
def memory_bound_batch(
    tk, d_model, n_head, n_kv_head=None, bytes_per_value=2, *, ridge
):
    """The smallest batch whose decoding step reaches the ridge point.

    A step of B sequences, each attending tk positions, does B f FLOPs
    and moves W + B m bytes: the weights W once, and per sequence m,
    its cache and its input and output (bytes_moved). Its intensity
    B f / (W + B m) grows with B towards f / m, the intensity of one
    sequence's own reads. None if that stays below ``ridge`` (FLOP per
    byte): then no batch makes the step bound by arithmetic.

    >>> memory_bound_batch(1, 4096, 32, 8, ridge=295)  # empty cache
    318
    >>> memory_bound_batch(4096, 4096, 32, 8, ridge=295) is None
    True
    """
    tk, d_model, n_head, n_kv_head, d_head, ridge = check.memory_bound_batch(
        tk, d_model, n_head, n_kv_head, bytes_per_value, ridge
    )
    bytes_per_value = float(bytes_per_value)  # NumPy's too: a Fraction
    # --8<-- [start:memory-bound-batch-terms]
    shape = (tk, d_model, n_head, n_kv_head, d_head)
    # per sequence: one new token against tk cached positions
    f = _attention_flops(1, 1, *shape, False, True)["total"]
    one, two = (
        _bytes_moved(b, 1, *shape, bytes_per_value, True) for b in (1, 2)
    )
    m = Fraction(two) - Fraction(one)  # what each sequence adds
    w = Fraction(one) - m  # the weights, shared by the batch
    r = Fraction(ridge)  # exact: the bound below is not rounded
    if f <= r * m:  # each sequence's reads alone stay below the ridge
        return None
    # B f / (W + B m) >= r  <=>  B >= r W / (f - r m)
    return max(1, math.ceil(r * w / (f - r * m)))  # exact: Fractions
    # --8<-- [end:memory-bound-batch-terms]
    # --8<-- [end:memory-bound-batch]


# --8<-- [start:memory-bound-from]
def memory_bound_from(
    d_model, n_head, n_kv_head=None, bytes_per_value=2, *, ridge
):
    """The shortest cache from which no batch reaches the ridge point.

    The smallest tk for which memory_bound_batch is None: a decoding
    step whose sequences each attend tk positions stays bound by memory
    at every batch size, and so does one with longer caches. None if
    there is no such tk: one sequence's own reads then reach ``ridge``
    however long its cache grows.

    >>> memory_bound_from(4096, 32, 8, ridge=989.5 / 3.35)  # H100
    67
    """
    d_model, n_head, n_kv_head, _, ridge = check.memory_bound_from(
        d_model, n_head, n_kv_head, bytes_per_value, ridge
    )
    layer = (d_model, n_head, n_kv_head, bytes_per_value)
    # --8<-- [start:memory-bound-from-scan]

    def never(tk):  # no batch of caches of tk reaches the ridge
        return memory_bound_batch(tk, *layer, ridge=ridge) is None

    if never(1):
        return 1
    # each cached position adds 4 H d_head FLOPs and 2 H_kv d_head
    # values: if they reach the ridge, no cache is long enough
    per_position = Fraction(2 * n_head, n_kv_head) / Fraction(
        float(bytes_per_value)
    )
    if per_position >= Fraction(ridge):
        return None
    lo, hi = 1, 2  # never(lo) is False; double hi until never(hi)
    while not never(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # the first tk in (lo, hi] at which it holds
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if never(mid) else (mid, hi)
    return hi
    # --8<-- [end:memory-bound-from-scan]
    # --8<-- [end:memory-bound-from]
