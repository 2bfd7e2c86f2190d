# %% [markdown]
# ## Self-check: the path
#
# The Review page's self-checks on the path, computed: new cases, not
# the numbers the pages print. One small block per question, in the
# page's order; the inputs are glued as they are typed here, so the
# questions show them too. Change an input, rerun, and work the answer
# out again.

# %%
import numpy as np
import torch

import glue
from mha_ref import cost, kv_cache, numpy_ref, torch_ref

# 1. a weighted sum, its weights from two scores
sum_values = np.array([[1.0, 3.0], [5.0, -1.0]])  # (Tk, dv)
sum_weights = numpy_ref.softmax(np.array([0.0, np.log(3.0)]))
glue.value(
    "weighted_sum",
    {
        "values": sum_values,
        "weights": sum_weights,
        "output": sum_weights @ sum_values,  # sum_j a_j v_j
    },
)

# 2. a causal mask and a padded last position, True = blocked
t = 4
lengths = [t - 1]  # one sequence, its last position padding
padding = numpy_ref.key_padding_mask(lengths, t)[0, 0]  # (1, T)
combined = numpy_ref.causal_mask(t) | padding  # (T, T)
glue.value(
    "mask",
    {
        "t": t,
        "mask": combined,
        "allowed_per_row": (~combined).sum(axis=-1),
    },
)

# 3. a softmax that would overflow without the shift
big = np.array([1000.0, 999.0, 998.0])
glue.value(
    "big_softmax",
    {
        "scores": big,
        "shifted": big - big.max(),
        "weights": numpy_ref.softmax(big),
    },
)

# 4. a wide head, with and without 1 / sqrt(d_k)
d_k = 256
head_scores = np.array([32.0, 0.0, -16.0])
glue.value(
    "scaling",
    {
        "d_k": d_k,
        "scores": head_scores,
        "scaled_scores": head_scores / np.sqrt(d_k),
        "scaled": numpy_ref.softmax(head_scores / np.sqrt(d_k)),
        "unscaled": numpy_ref.softmax(head_scores),
    },
)

# 5. the score gradient of three equal weights, L = the first weight
equal = numpy_ref.softmax(np.zeros(3))
first = np.array([1.0, 0.0, 0.0])  # dL/dp
glue.value(
    "softmax_grad",
    {
        "weights": equal,
        "upstream": first,
        "score_grad": numpy_ref.softmax_backward(equal, first),
    },
)

# 6. the parameters of a layer, and of one head's slice of W_Q
d_model, n_head = 1024, 8
layer = torch_ref.MultiHeadAttention(d_model, n_head, device="meta")
glue.value(
    "params",
    {
        "d_model": d_model,
        "n_head": n_head,
        "per_head_wq": d_model * layer.d_head,  # a (d_model, dh) slice
        "total": sum(p.numel() for p in layer.parameters()),
    },
)

# 7. the mask before and after the softmax, three keys
mask_scores = np.zeros(3)
blocked = np.array([False, False, True])
before = numpy_ref.softmax(np.where(blocked, -np.inf, mask_scores))
after = np.where(blocked, 0.0, numpy_ref.softmax(mask_scores))
glue.value(
    "mask_order",
    {
        "before": before,
        "after": after,
        "after_sum": after.sum(),
    },
)

# 8. dV = A^T dO for two queries and two keys
weights = np.array([[1.0, 0.0], [0.5, 0.5]])  # A, (Tq, Tk), causal
d_out = np.array([[1.0, 0.0], [0.0, 2.0]])  # dO, (Tq, dv)
glue.value(
    "dv",
    {
        "weights": weights,
        "d_out": d_out,
        "dv": weights.T @ d_out,  # dV = A^T dO, (Tk, dv)
    },
)

# the same dV from autograd, through O = A V
v_leaf = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
(torch.from_numpy(weights) @ v_leaf).backward(torch.from_numpy(d_out))
print("dV by autograd:\n", v_leaf.grad.numpy())

# %% [markdown]
# ## Self-check: going further
#
# The Going-further self-checks' inputs and answers, computed with the
# functions those pages show: a KV cache's mask, grouped heads, the
# bytes a KV cache takes per token.

# %%
# 1. five keys, the first three cached, two new queries, zero scores
cache_values = [10.0, 20.0, 30.0, 40.0, 50.0]
aligned, upper_left = kv_cache.cached_attention_example(cache_values)
glue.value(
    "cache",
    {
        "values": cache_values,
        "cached": list(range(len(cache_values) - 2)),  # positions 0 .. 2
        "queries": [len(cache_values) - 2, len(cache_values) - 1],
        "aligned": aligned,  # the mask built from positions
        "upper_left": upper_left,  # SDPA's is_causal=True
    },
)

# 2. eight query heads, two key/value heads: which one each reads
gqa_heads, gqa_kv_heads = 8, 2
group = gqa_heads // gqa_kv_heads  # G, query heads per key/value head
labels = torch.arange(gqa_kv_heads).view(1, gqa_kv_heads, 1, 1)
glue.value(
    "gqa",
    {
        "n_head": gqa_heads,
        "n_kv_head": gqa_kv_heads,
        "group": group,
        "kv_head": torch_ref.repeat_kv_heads(labels, group).flatten(),
    },
)

# 3. the KV cache per token of 32 layers, 8 key/value heads of 128
n_layer, n_kv_head, d_head, n_bytes = 32, 8, 128, 2  # 16-bit floats
per_token = cost.kv_cache_bytes(n_layer, n_kv_head, d_head, 1, n_bytes)
all_heads = 32  # one key/value head per query head
glue.value(
    "kv_bytes",
    {
        "n_layer": n_layer,
        "n_kv_head": n_kv_head,
        "d_head": d_head,
        "bytes_per_value": n_bytes,
        "bits": 8 * n_bytes,
        "per_token": per_token,
        "all_heads": all_heads,
        "all_heads_ratio": cost.kv_cache_bytes(
            n_layer, all_heads, d_head, 1, n_bytes
        )
        // per_token,
    },
)
