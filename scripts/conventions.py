# %% [markdown]
# ## RoPE: which features turn together
#
# One random query and one random key of head size 8, the query at
# position 5 and the key at position 2. Rotate-half
# (`torch_ref.apply_rope`: GPT-NeoX, Hugging Face) turns features
# $(i, i + d/2)$ together; the interleaved form
# (`conventions.apply_rope_interleaved`: Meta's Llama code, RoFormer)
# turns $(2i, 2i + 1)$, at the same angles. The same two vectors get two
# different scores. Reordering the features of both (evens first, then
# odds) makes the two conventions agree. Change the seed or the
# positions and rerun.

# %%
import math
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

import glue
from mha_ref import conventions, torch_ref

fmt, fmt_list = glue.fmt, glue.fmt_list
glue.value("torch", torch.__version__)
gen = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(shape, generator=gen, dtype=torch.float64)


d_head, m, n = 8, 5, 2  # query at position m, key at position n
q, k = randn(1, d_head), randn(1, d_head)  # (T = 1, d_head) each
half = float(torch_ref.apply_rope(q, [m]) @ torch_ref.apply_rope(k, [n]).T)
pairs = float(
    conventions.apply_rope_interleaved(q, [m])
    @ conventions.apply_rope_interleaved(k, [n]).T
)
# the same reorder as the weight rows: evens first, then odds
q_half, k_half = (
    conventions.interleaved_to_rotate_half(vec[0], n_head=1)[None]
    for vec in (q, k)
)  # (1, d_head) each
reordered = float(
    torch_ref.apply_rope(q_half, [m]) @ torch_ref.apply_rope(k_half, [n]).T
)
print(f"rotate-half {half:.4f}, interleaved {pairs:.4f}")
print(f"rotate-half of the reordered features: {reordered:.4f}")
rope_pair = glue.value(
    "rope_pair",
    {
        "d_head": d_head,
        "m": m,
        "n": n,
        "rotate_half": half,
        "interleaved": pairs,
        "reordered": reordered,
        "reordered_difference": abs(reordered - pairs),
    },
)

# %% [markdown]
# ## A checkpoint loaded across conventions
#
# A small layer written as Meta's code writes it: random $W_Q$, $W_K$,
# $W_V$, $W_O$ (nn.Linear's (out, in) layout), interleaved RoPE, a causal
# mask. Its weights are loaded three ways into `torch_ref`'s rotate-half
# module: as they are (no error, no NaN), and with the rows of $W_Q$ and
# $W_K$ reordered within each head by
# `conventions.interleaved_to_rotate_half`, the permutation of Hugging
# Face's conversion script. Each way is compared with the interleaved
# original: scores, attention weights and outputs.

# %%
d_model, n_head, t = 32, 4, 8
torch.manual_seed(0)  # the module's own initialisation
module = torch_ref.MultiHeadAttention(d_model, n_head, rope=True).double()
meta = {name: getattr(module, name).weight.clone() for name in ("wq", "wk")}
x = randn(1, t, d_model)  # (B, T, d_model)
mask = torch_ref.causal_mask(t)  # (T, T), True = blocked
positions = torch.arange(t)


def interleaved_layer(x):
    """The layer as Meta's code runs it: interleaved RoPE, same weights."""
    q = module.split_heads(x @ meta["wq"].T)  # (B, H, T, dh)
    k = module.split_heads(x @ meta["wk"].T)
    v = module.split_heads(module.wv(x))
    q = conventions.apply_rope_interleaved(q, positions)
    k = conventions.apply_rope_interleaved(k, positions)
    scores = q @ k.transpose(-2, -1) / math.sqrt(module.d_head)
    out, weights = torch_ref.attention(q, k, v, mask)
    return scores, weights, module.wo(module.merge_heads(out))


def rotate_half_layer(x, wq, wk):
    """torch_ref's module, rotate-half RoPE, W_Q and W_K loaded as given."""
    with torch.no_grad():
        module.wq.weight.copy_(wq)
        module.wk.weight.copy_(wk)
        q, k, _ = module.project(x)  # rotated at 0 .. T - 1
        y, weights = module(x, mask)
    scores = q @ k.transpose(-2, -1) / math.sqrt(module.d_head)
    return scores, weights, y


with torch.no_grad():
    reference = interleaved_layer(x)
loads = {
    "as_is": rotate_half_layer(x, meta["wq"], meta["wk"]),
    "reordered": rotate_half_layer(
        x,
        conventions.interleaved_to_rotate_half(meta["wq"], n_head),
        conventions.interleaved_to_rotate_half(meta["wk"], n_head),
    ),
}
rope_layer = {"d_model": d_model, "n_head": n_head, "t": t}
for name, result in loads.items():
    diffs = [
        float((a - b).abs().max())
        for a, b in zip(result, reference, strict=True)
    ]
    rope_layer[name] = {
        "scores": diffs[0],
        "weights": diffs[1],
        "output": diffs[2],
        "finite": bool(all(torch.isfinite(r).all() for r in result)),
    }
    print(f"{name:<9}: scores, weights, output differ by {diffs}")
rope_layer["output_scale"] = float(reference[2].abs().max())
rope_layer = glue.value("rope_layer", rope_layer)
glue.table(
    "conventions-rope",
    [
        "W_Q, W_K loaded into rotate-half RoPE",
        "largest score difference",
        "largest weight difference",
        "largest output difference",
    ],
    [
        [
            label,
            *(
                fmt(rope_layer[key][part], 2 if key == "as_is" else 1)
                for part in ("scores", "weights", "output")
            ),
        ]
        for key, label in (
            ("as_is", "as the interleaved checkpoint stores them"),
            ("reordered", "rows reordered by `interleaved_to_rotate_half`"),
        )
    ],
    "lrrr",
)

# %% [markdown]
# ## The causal corner when there are fewer queries than keys
#
# Two new queries against five keys, as in a KV cache with three
# positions cached. SDPA's `is_causal=True` starts the diagonal at the
# top left (query 0 sees key 0); `causal_lower_right` (and flash-attn's
# `causal=True` since 2.1) ends it at the bottom right (the last query
# sees every key). `torch_ref.causal_mask(tq, tk, align=...)` builds
# either, and our attention matches SDPA for each. Then more queries
# than keys: bottom-right leaves the first queries with no key at all.

# %%
tq, tk = 2, 5
q, k, v = randn(1, 1, tq, 4), randn(1, 1, tk, 4), randn(1, 1, tk, 4)
top_left = torch_ref.causal_mask(tq, tk, align="top_left")  # (Tq, Tk)
bottom_right = torch_ref.causal_mask(tq, tk, align="bottom_right")
sdpa = {
    "top_left": F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "bottom_right": F.scaled_dot_product_attention(
        q, k, v, attn_mask=causal_lower_right(tq, tk)
    ),
}
ours = {
    "top_left": torch_ref.attention(q, k, v, top_left)[0],
    "bottom_right": torch_ref.attention(q, k, v, bottom_right)[0],
}
masks = {"top_left": top_left, "bottom_right": bottom_right}
causal = {"tq": tq, "tk": tk}
for name, blocked in masks.items():
    causal[name] = {
        "keys_seen": [
            [j for j in range(tk) if not blocked[i, j]] for i in range(tq)
        ],
        "vs_sdpa": float((ours[name] - sdpa[name]).abs().max()),
    }
    print(f"{name:<12}: query rows see keys {causal[name]['keys_seen']}")
causal["difference"] = float(
    (sdpa["top_left"] - sdpa["bottom_right"]).abs().max()
)
causal["lower_right_is_ours"] = bool(
    # SDPA's boolean masks mean True = allowed: ours inverted
    torch.equal(causal_lower_right(tq, tk)._materialize(), ~bottom_right)
)

# more queries than keys: rows before every key
tq_long, tk_short = 4, 2
q = randn(1, 1, tq_long, 4)
k, v = randn(1, 1, tk_short, 4), randn(1, 1, tk_short, 4)
blocked = torch_ref.causal_mask(tq_long, tk_short, align="bottom_right")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    late = F.scaled_dot_product_attention(
        q, k, v, attn_mask=causal_lower_right(tq_long, tk_short)
    )
zeroed, _ = torch_ref.attention(q, k, v, blocked, empty_rows="zero")
empty = blocked.all(dim=-1)  # (Tq,): rows with no allowed key
causal["more_queries"] = {
    "tq": tq_long,
    "tk": tk_short,
    "empty_rows": [i for i in range(tq_long) if empty[i]],
    "sdpa_empty_rows_zero": bool((late[..., empty, :] == 0).all()),
    "sdpa_warning": [str(w.message) for w in caught],
    "zero_vs_sdpa": float((zeroed - late).abs().max()),
}
print("more queries than keys:", causal["more_queries"])
causal = glue.value("causal", causal)
glue.table(
    "conventions-causal",
    ["corner", "who uses it", "query 0 sees keys", "query 1 sees keys"],
    [
        [
            "top-left",
            "SDPA `is_causal=True`",
            fmt_list(causal["top_left"]["keys_seen"][0]),
            fmt_list(causal["top_left"]["keys_seen"][1]),
        ],
        [
            "bottom-right",
            "flash-attn `causal=True` (>= 2.1), `causal_lower_right`",
            fmt_list(causal["bottom_right"]["keys_seen"][0]),
            fmt_list(causal["bottom_right"]["keys_seen"][1]),
        ],
    ],
    "llll",
)

# %% [markdown]
# ## Rows with no allowed key: a left-padded batch
#
# A batch of two prompts of lengths 4 and 2, padded on the left (the
# usual layout for batched generation: every prompt ends at the last
# column), with a causal mask. The first two queries of the short prompt
# are padding and may read no key. Ours refuses and names them; with
# `empty_rows="zero"` it gives them zeros, as SDPA does; a hand-written
# softmax with $-\infty$ gives NaN, and a second layer spreads it. The
# real rows are compared with the short prompt run alone, unpadded.

# %%
lengths, t = [4, 2], 4
padding = torch.tensor(
    [[i < t - n for i in range(t)] for n in lengths]
)  # (B, T), True = padding, on the left
mask = torch_ref.key_padding_mask(padding) | torch_ref.causal_mask(t)
empty = mask[:, 0].all(dim=-1)  # (B, T): query rows with no key
q, k, v = randn(2, 1, t, 4), randn(2, 1, t, 4), randn(2, 1, t, 4)
rows = {"lengths": lengths, "empty_rows": {}}
for b in range(len(lengths)):
    rows["empty_rows"][str(b)] = [i for i in range(t) if empty[b, i]]
try:
    torch_ref.attention(q, k, v, mask)
    rows["message"] = None
except ValueError as error:
    print("default: ValueError:", error)
    rows["message"] = str(error)
zero, _ = torch_ref.attention(q, k, v, mask, empty_rows="zero")
# SDPA's boolean mask means True = allowed
sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask)
s = q @ k.transpose(-2, -1) / math.sqrt(4)  # (B, 1, T, T)
by_hand = s.masked_fill(mask, -math.inf).softmax(dim=-1) @ v
real = slice(t - lengths[1], t)  # the short prompt's own positions
alone, _ = torch_ref.attention(
    q[1:, :, real], k[1:, :, real], v[1:, :, real], torch_ref.causal_mask(2)
)  # the short prompt, unpadded
rows["zero_vs_sdpa"] = float((zero - sdpa).abs().max())
rows["zero_rows_are_zero"] = bool((zero[empty[:, None]] == 0).all())
rows["sdpa_rows_are_zero"] = bool((sdpa[empty[:, None]] == 0).all())
rows["real_vs_alone"] = float((zero[1:, :, real] - alone).abs().max())
rows["by_hand_nan_rows"] = int(by_hand.isnan().any(dim=-1).sum())
# a second layer: the NaN rows are now keys and values, masked, but the
# weighted sum multiplies their NaN by a weight of 0, and 0 x NaN = NaN
s2 = by_hand @ by_hand.transpose(-2, -1) / math.sqrt(4)
second = s2.masked_fill(mask, -math.inf).softmax(dim=-1) @ by_hand
rows["second_layer_nan_rows"] = int(second.isnan().any(dim=-1).sum())
rows["second_layer_nan_rows_b"] = [
    int(second[b].isnan().any(dim=-1).sum()) for b in range(len(lengths))
]
rows["rows_per_sequence"] = t
print({k: v for k, v in rows.items() if k != "message"})

# %% [markdown]
# The same batch through `nn.MultiheadAttention` with its defaults
# (`need_weights=True`), in training and in evaluation: the module
# computes the softmax itself and returns NaN in the padding rows.

# %%
d_model, n_head = 8, 2
torch.manual_seed(0)
layer = torch_ref.MultiHeadAttention(d_model, n_head).double()
library = torch_ref.library_version(layer)
x = randn(2, t, d_model)
per_head = mask.expand(2, n_head, t, t).reshape(2 * n_head, t, t)
for mode in ("train", "eval"):
    getattr(library, mode)()
    with torch.no_grad():
        y, _ = library(x, x, x, attn_mask=per_head)  # need_weights=True
    rows[f"mha_{mode}_nan_rows"] = int(y.isnan().any(dim=-1).sum())
    print(f"nn.MultiheadAttention, {mode}: {y.isnan().sum()} NaN")
rows = glue.value("empty", rows)
n_empty = sum(len(r) for r in rows["empty_rows"].values())


def outcome(nan_rows):
    return (
        f"NaN ({nan_rows} of {n_empty} empty rows)" if nan_rows else "finite"
    )


glue.table(
    "conventions-empty-rows",
    ["implementation", "the rows with no allowed key", "the real rows"],
    [
        [
            '`torch_ref.attention` (default `empty_rows="raise"`)',
            "raises `ValueError`, naming them",
            "-",
        ],
        [
            '`torch_ref.attention(..., empty_rows="zero")`',
            "zeros" if rows["zero_rows_are_zero"] else "not zeros",
            "exactly as the prompt alone"
            if rows["real_vs_alone"] == 0
            else f"as the prompt alone, to {fmt(rows['real_vs_alone'], 2)}",
        ],
        [
            "SDPA, boolean mask (PyTorch >= 2.5)",
            "zeros" if rows["sdpa_rows_are_zero"] else "not zeros",
            f'as `empty_rows="zero"`, to {fmt(rows["zero_vs_sdpa"], 2)}',
        ],
        [
            "`masked_fill(mask, -inf)`, then softmax",
            outcome(rows["by_hand_nan_rows"]),
            "finite in this layer; "
            f"{rows['second_layer_nan_rows_b'][1]} of {t} rows NaN "
            "after a second one",
        ],
        [
            "`nn.MultiheadAttention`, defaults, train",
            outcome(rows["mha_train_nan_rows"]),
            "finite",
        ],
        [
            "`nn.MultiheadAttention`, defaults, eval",
            outcome(rows["mha_eval_nan_rows"]),
            "finite",
        ],
    ],
    "lll",
)
