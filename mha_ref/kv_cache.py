"""Where the causal mask starts when a KV cache holds earlier positions.

Positions 0, 1, 2 are cached; 3 and 4 arrive together. The two new
queries must see five keys, and the mask must come from positions.
``cached_forward`` runs a torch_ref.MultiHeadAttention chunk by chunk
with a real cache, keys stored already rotated at absolute positions;
a step that raises leaves the cache exactly as it was.
"""

import torch
import torch.nn.functional as F

from mha_ref import torch_ref
from mha_ref.guards import kv_cache as check


# --8<-- [start:kv-cache-example]
def cached_attention_example(values=(10.0, 20.0, 30.0, 40.0, 50.0)):
    """Zero scores make attention a plain mean of the allowed values.

    >>> aligned, upper_left = cached_attention_example()
    >>> aligned.tolist(), upper_left.tolist()
    ([25.0, 30.0], [10.0, 15.0])
    """
    check.cached_attention_example(values)  # a key at least per query
    n_key = len(values)
    query_positions = torch.arange(n_key - 2, n_key)  # [3, 4]: the new ones
    key_positions = torch.arange(n_key)  # [0, 1, 2, 3, 4]: cache + new
    q = torch.zeros(1, 1, 2, 2, dtype=torch.float64)  # (B, H, Tq, d)
    k = torch.zeros(1, 1, n_key, 2, dtype=torch.float64)  # (B, H, Tk, d)
    v = torch.tensor(values, dtype=torch.float64).view(1, 1, n_key, 1)
    blocked = torch_ref.causal_mask_for_positions(
        query_positions, key_positions
    )  # (Tq, Tk), True = a later position
    aligned = F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=~blocked,
        dropout_p=0.0,  # SDPA: True = allowed
    )
    # is_causal=True aligns the mask to the upper left: query row 0 is
    # treated as position 0 and sees only the first key
    upper_left = F.scaled_dot_product_attention(
        q, k, v, is_causal=True, dropout_p=0.0
    )
    return aligned.flatten(), upper_left.flatten()
    # --8<-- [end:kv-cache-example]


def single_new_query(values=(10.0, 20.0, 30.0, 40.0, 50.0)):
    """One new query at the last position: no key lies in its future.

    Returns the output with the position mask and without any mask.
    """
    check.single_new_query(values)  # the new query needs a key at least
    n_key = len(values)
    blocked = torch_ref.causal_mask_for_positions([n_key - 1], range(n_key))
    q = torch.zeros(1, 1, 1, 2, dtype=torch.float64)
    k = torch.zeros(1, 1, n_key, 2, dtype=torch.float64)
    v = torch.tensor(values, dtype=torch.float64).view(1, 1, n_key, 1)
    masked, _ = torch_ref.attention(q, k, v, blocked)
    unmasked, _ = torch_ref.attention(q, k, v)
    return masked.flatten(), unmasked.flatten(), blocked


# --8<-- [start:kv-cache-one-query]
def single_query_is_causal(values=(10.0, 20.0, 30.0, 40.0, 50.0)):
    """One new query at the last position, through SDPA two ways.

    Without a mask it sees every key, which is right: all of them are
    in its past. is_causal=True cuts the square triangle to 1 x Tk
    from the upper left, so the query is treated as position 0.

    >>> no_mask, is_causal = single_query_is_causal()
    >>> no_mask.tolist(), is_causal.tolist()
    ([30.0], [10.0])
    """
    check.single_query_is_causal(values)  # the query needs a key at least
    n_key = len(values)
    q = torch.zeros(1, 1, 1, 2, dtype=torch.float64)  # (B, H, 1, d)
    k = torch.zeros(1, 1, n_key, 2, dtype=torch.float64)  # (B, H, Tk, d)
    v = torch.tensor(values, dtype=torch.float64).view(1, 1, n_key, 1)
    no_mask = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0)
    # the mask of row 0 of a square triangle: key 0 only
    is_causal = F.scaled_dot_product_attention(
        q, k, v, is_causal=True, dropout_p=0.0
    )
    return no_mask.flatten(), is_causal.flatten()
    # --8<-- [end:kv-cache-one-query]


# --8<-- [start:kv-cache-class]
class KVCache:
    """Keys and values of every position seen so far, in order.

    Shapes (B, H_kv, T, dh): a grouped-query module stores its H_kv
    key/value heads, not H. Keys are stored already rotated by RoPE at
    their absolute positions, so they never change once appended.
    """

    def __init__(self):
        self.reset()

    def reset(self):
        """Forget every position: the next chunk starts at position 0."""
        self.keys = None  # (B, H_kv, T, dh)
        self.values = None  # (B, H_kv, T, dh)

    @property
    def length(self):
        """Positions held, which is also the next row's position."""
        return 0 if self.keys is None else self.keys.shape[-2]

    def extended(self, k, v):
        """The cached keys and values with a chunk's k, v after them.

        k, v (B, H_kv, Tc, dh) -> (B, H_kv, T + Tc, dh) each; the cache
        itself is unchanged until the caller stores the result.
        """
        check.extended(self.keys, self.values, k, v)  # B, H_kv, Tc agree
        return self._extended(k, v)

    def _extended(self, k, v):
        # unchecked: the steps extend the cache with their own k, v
        if self.keys is None:
            return k, v  # the first chunk
        keys = torch.cat([self.keys, k], dim=-2)  # (B, H_kv, T + Tc, dh)
        values = torch.cat([self.values, v], dim=-2)  # (B, H_kv, T + Tc, ..)
        return keys, values

    def append(self, k, v):
        """Add a chunk's k and v (B, H_kv, Tc, dh) after the cached ones."""
        self.keys, self.values = self.extended(k, v)

    # --8<-- [end:kv-cache-class]


# --8<-- [start:rolling-cache-class]
class RollingKVCache(KVCache):
    """A KV cache for sliding_window_mask: it forgets what no later query
    can see, and keeps at most sink_tokens + window - 1 entries.

    A later query q sees the keys after q - window and the first
    sink_tokens ones. The next query, at position ``length``, sees the
    most keys: the rule at that position says which entries to keep
    (the window - 1 latest, as Hugging Face's DynamicSlidingWindowLayer,
    and the sinks).
    """

    def __init__(self, window, sink_tokens=0):
        check.rolling_kv_cache(window, sink_tokens)  # ints >= 1 and >= 0
        self.window, self.sink_tokens = window, sink_tokens
        super().__init__()

    def reset(self):
        """Forget every position: the next chunk starts at position 0."""
        super().reset()
        self.positions = None  # (T_held,): absolute position of each entry
        self.seen = 0

    @property
    def length(self):
        """Positions seen so far, which is also the next row's position."""
        return self.seen

    def extended_positions(self, positions):
        """The held entries' positions, then a chunk's (T_held + Tc,)."""
        if self.positions is None:
            return positions
        return torch.cat([self.positions, positions])

    # --8<-- [start:rolling-cache-keep]
    def keep(self, keys, values, key_positions):
        """Store keys, values (B, H_kv, T, dh) that a later query can see."""
        following = key_positions[-1:] + 1  # (1,): the next query
        blocked = torch_ref.sliding_window_mask(
            following, key_positions, self.window, self.sink_tokens
        )[0]  # (T,): blocked now, blocked for every later query too
        kept = ~blocked  # (T,)
        self.keys, self.values = keys[..., kept, :], values[..., kept, :]
        self.positions = key_positions[kept]  # (T_held,)
        self.seen = int(following)
        # --8<-- [end:rolling-cache-keep]

    # --8<-- [end:rolling-cache-class]


# --8<-- [start:kv-cache-step]
def cached_step(module, cache, x):
    """One chunk x (B, Tc, d_model) at the positions after the cache.

    The cache takes the chunk's keys and values only once the step has
    succeeded: a step that raises leaves it exactly as it was.
    """
    check.cached_step(cache)  # a KVCache, not rolling
    return _cached_step(module, cache, x, cache.extended)


def _cached_step(module, cache, x, extend):
    # the step itself; extend: cache.extended, which checks the chunk's
    # k and v, or, in cached_forward's loop, the unchecked _extended
    start = cache.length  # absolute position of the chunk's first row
    positions = torch.arange(start, start + x.shape[1], device=x.device)
    # RoPE at absolute positions, so cached keys stay valid
    q, k, v = module.project(x, positions=positions)  # (B, H, Tc, dh)
    keys, values = extend(k, v)  # positions 0 .. start + Tc - 1
    key_positions = torch.arange(keys.shape[-2], device=x.device)
    blocked = torch_ref.causal_mask_for_positions(
        positions, key_positions
    )  # (Tc, T): True where a key comes after the query
    out, _ = torch_ref.attention(q, keys, values, blocked)
    y = module.wo(module.merge_heads(out))  # (B, Tc, d_model)
    cache.keys, cache.values = keys, values  # the step succeeded: keep
    return y
    # --8<-- [end:kv-cache-step]


# --8<-- [start:rolling-cache-step]
def rolling_step(module, cache, x):
    """cached_step under sliding_window_mask, with a RollingKVCache.

    A step that raises leaves the cache exactly as it was.
    """
    check.rolling_step(cache)  # a RollingKVCache
    return _rolling_step(module, cache, x, cache.extended)


def _rolling_step(module, cache, x, extend):
    # the step itself; extend as in _cached_step
    start = cache.length  # absolute position of the chunk's first row
    positions = torch.arange(start, start + x.shape[1], device=x.device)
    q, k, v = module.project(x, positions=positions)  # (B, H, Tc, dh)
    keys, values = extend(k, v)  # the held entries, then the chunk
    key_positions = cache.extended_positions(positions)  # (T_held + Tc,)
    blocked = torch_ref.sliding_window_mask(
        positions, key_positions, cache.window, cache.sink_tokens
    )  # (Tc, T_held + Tc): outside the window, and not a sink
    out, _ = torch_ref.attention(q, keys, values, blocked)
    y = module.wo(module.merge_heads(out))  # (B, Tc, d_model)
    cache.keep(keys, values, key_positions)  # the step succeeded: forget
    return y
    # --8<-- [end:rolling-cache-step]


# --8<-- [start:kv-cache-loop]
def cached_forward(module, x, chunks, window=None, sink_tokens=0):
    """x (B, T, d_model) through ``module`` in chunks of these lengths.

    A prefill then single steps is chunks = [T0, 1, 1, ...], or any
    iterable of positive ints summing to T. Equals
    module(x, mask=torch_ref.causal_mask(T))[0]; with a window, a
    RollingKVCache and the mask sliding_window_mask(p, p, window,
    sink_tokens) for p = 0 .. T - 1. A MultiHeadLatentAttention decodes
    with its latent cache (latent_torch.cached_latent_forward).
    """
    chunks = check.cached_forward(module, x, chunks, window, sink_tokens)
    if hasattr(module, "cached_forward"):  # latent attention: own cache
        return module.cached_forward(x, chunks)
    if window is None:
        cache, step = KVCache(), _cached_step
    else:  # keep only what the window lets a later query see
        cache, step = RollingKVCache(window, sink_tokens), _rolling_step
    outputs = []
    for n in chunks:
        chunk = x[:, cache.length : cache.length + n]  # (B, n, d_model)
        outputs.append(step(module, cache, chunk, cache._extended))
    return torch.cat(outputs, dim=1)  # (B, T, d_model)
    # --8<-- [end:kv-cache-loop]


# --8<-- [start:cross-attention-cache]
# --8<-- [start:cross-keys-values]
def cross_keys_values(module, context):
    """K and V (B, H_kv, S, dh) of an encoder output, computed once.

    context (B, S, d_model) does not change while the decoder writes,
    so every decoding step reuses these (RoPE is for self-attention).
    """
    weight = module.wk.weight  # the module's dtype and device
    check.cross_keys_values(module.rope, context, module.d_model, weight)
    k = module.split_heads(module.wk(context))  # (B, H_kv, S, dh)
    v = module.split_heads(module.wv(context))  # (B, H_kv, S, dh)
    return k, v
    # --8<-- [end:cross-keys-values]


# --8<-- [start:cross-step]
def cross_step(module, x, keys_values, padding=None):
    """Decoder rows x (B, Tc, d_model) attending to the cached K, V.

    No causal mask: the whole source is there from the first step;
    padding (B, 1, 1, S), True = a padded source position.
    """
    check.cross_step(x, module.d_model, module.wq.weight)
    q = module.split_heads(module.wq(x))  # (B, H, Tc, dh)
    out, _ = torch_ref.attention(q, *keys_values, padding)  # (B, H, Tc, dh)
    return module.wo(module.merge_heads(out))  # (B, Tc, d_model)
    # --8<-- [end:cross-step]
    # --8<-- [end:cross-attention-cache]
