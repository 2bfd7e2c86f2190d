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
import contextlib
import itertools
import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn
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

# %% [markdown]
# ## `nn.MultiheadAttention` in evaluation: when the fast path runs
#
# In eval mode under `torch.no_grad()`, `nn.MultiheadAttention` calls its
# fused kernel (`torch._native_multi_head_attention`) only when every
# condition of its fast path holds, among them `batch_first=True`, the
# projection biases (`bias=True`), an even head count and self-attention
# with one tensor for query, key and value. Otherwise it computes the
# attention itself: with `need_weights=False` through SDPA. Each way
# below runs one fully masked row; `counting_fast_path` counts the calls
# to the fused kernel.


# %%
@contextlib.contextmanager
def counting_fast_path():
    """Count nn.MultiheadAttention's fused (fast path) calls inside."""
    calls, original = [], torch._native_multi_head_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    torch._native_multi_head_attention = counted
    try:
        yield calls
    finally:
        torch._native_multi_head_attention = original


full_row = torch.zeros(4, 4, dtype=torch.bool)
full_row[1] = True  # query 1 may read no key
fast_path = []
for batch_first, bias, need_weights in itertools.product(
    (True, False), (True, False), (False, True)
):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, bias=bias, batch_first=batch_first)
    mha = mha.double().eval()
    x = randn(1, 4, 8) if batch_first else randn(4, 1, 8)
    with torch.no_grad(), counting_fast_path() as calls:
        y, _ = mha(x, x, x, attn_mask=full_row, need_weights=need_weights)
    row = y[0, 1] if batch_first else y[1, 0]
    out_bias = (
        mha.out_proj.bias if bias else torch.zeros(8, dtype=torch.float64)
    )
    fast_path.append(
        {
            "batch_first": batch_first,
            "bias": bias,
            "need_weights": need_weights,
            "fast_path": bool(calls),
            "row": "NaN"
            if bool(row.isnan().any())
            else ("zeros" if bool((row == out_bias).all()) else "other"),
        }
    )
print(*fast_path, sep="\n")
fast_path = glue.value("mha_fast_path", fast_path)
glue.value(
    "mha_fast_summary",
    {
        "fast_rows": sum(r["fast_path"] for r in fast_path),
        "fast_is_nan": all(
            r["row"] == "NaN" for r in fast_path if r["fast_path"]
        ),
        "slow_no_weights_zero": all(
            r["row"] == "zeros"
            for r in fast_path
            if not r["fast_path"] and not r["need_weights"]
        ),
        "weights_nan": all(
            r["row"] == "NaN" for r in fast_path if r["need_weights"]
        ),
    },
)
glue.table(
    "conventions-mha-eval",
    [
        "`batch_first`",
        "`bias`",
        "`need_weights`",
        "fused fast path",
        "fully masked row",
    ],
    [
        [
            f"`{r['batch_first']}`",
            f"`{r['bias']}`",
            f"`{r['need_weights']}`",
            "yes" if r["fast_path"] else "no",
            "zeros (y = the output bias)" if r["row"] == "zeros" else r["row"],
        ]
        for r in fast_path
    ],
    "lllll",
)

# %% [markdown]
# ## Mask polarity
#
# Ours and `nn.MultiheadAttention`: True = blocked. SDPA's boolean
# `attn_mask`: True = attend. FlexAttention's `mask_mod`: True = keep.
# The same causal mask through each, converted where needed, and once
# given to SDPA without the flip.

# %%
T_pol, d_pol = 6, 8
q, k, v = (randn(1, 2, T_pol, d_pol) for _ in range(3))
ours_mask = torch_ref.causal_mask(T_pol)
ours_out, _ = torch_ref.attention(q, k, v, ours_mask)
sdpa_out = F.scaled_dot_product_attention(
    q, k, v, attn_mask=conventions.to_sdpa_mask(ours_mask)
)
unflipped = F.scaled_dot_product_attention(q, k, v, attn_mask=ours_mask)
# SDPA's zeros come from a row of -inf scores, whatever the mask type
empty_mask = ours_mask.clone()
empty_mask[2] = True  # query 2 reads no key
additive = torch.zeros(T_pol, T_pol, dtype=torch.float64).masked_fill(
    empty_mask, -math.inf
)
by_bool = F.scaled_dot_product_attention(q, k, v, attn_mask=~empty_mask)
by_float = F.scaled_dot_product_attention(q, k, v, attn_mask=additive)
polarity = glue.value(
    "polarity",
    {
        "sdpa_bool_empty_zero": bool((by_bool[..., 2, :] == 0).all()),
        "sdpa_float_empty_zero": bool((by_float[..., 2, :] == 0).all()),
        "sdpa": float((sdpa_out - ours_out).abs().max()),
        "unflipped": float((unflipped - ours_out).abs().max()),
        "unflipped_finite": bool(torch.isfinite(unflipped).all()),
    },
)

# %% [markdown]
# ## The sliding window's four definitions
#
# Hugging Face's `sliding_window` $W$ (a query sees itself and $W - 1$
# keys before it, `kv > q - W`) in the terms of flash-attn
# (`window_size=(left, right)`), JAX (`local_window_size=(left, right)`)
# and attention-gym (`q - kv <= W` with causal). Each library's own rule,
# at the converted value, gives `torch_ref.sliding_window_mask`; HF's
# $W$ passed unconverted to the others lets each query see one key more.

# %%
W, T_win = 3, 8
pos = torch.arange(T_win)
ours_window = torch_ref.sliding_window_mask(pos, pos, W)  # True = blocked
qi, kj = pos[:, None], pos[None, :]


def allowed_by(library, value):
    """Each library's documented rule: True = the key is read."""
    if library == "hugging_face":
        return (kj > qi - value) & (kj <= qi)
    if library in ("flash_attn", "jax"):
        left, right = value
        return (kj >= qi - left) & (kj <= qi + right)
    return (qi - kj <= value) & (qi >= kj)  # attention-gym, with causal


windows = {}
for library in conventions.WINDOWS:
    value = conventions.window_from_hugging_face(W, library)
    same = bool(torch.equal(~allowed_by(library, value), ours_window))
    unconverted = (W, 0) if library in ("flash_attn", "jax") else W
    extra = int((allowed_by(library, unconverted) & ours_window).sum())
    windows[library] = {
        "value": list(value) if isinstance(value, tuple) else value,
        "same_mask": same,
        "back": conventions.window_to_hugging_face(value, library),
        "unconverted_extra_keys": extra if library != "hugging_face" else 0,
    }
windows = glue.value(
    "windows",
    {
        "W": W,
        "T": T_win,
        "keys_seen": int((~ours_window[-1]).sum()),
        "by": windows,
    },
)

# %% [markdown]
# ## The two meanings of "sink"
#
# StreamingLLM's sink tokens: the first positions stay visible to every
# later query of a sliding window (`sliding_window_mask(..., sink_tokens
# =4)`). gpt-oss's sink: a learned logit per head (`attention(...,
# sinks=...)`). How many keys the last of 16 queries reads with each.

# %%
pos16 = torch.arange(16)
streaming = torch_ref.sliding_window_mask(pos16, pos16, 4, sink_tokens=4)
sink_meaning = glue.value(
    "sink_meaning",
    {
        "window": 4,
        "sink_tokens": 4,
        "keys_seen_last": int((~streaming[-1]).sum()),
        "keys_seen_without": int(
            (~torch_ref.sliding_window_mask(pos16, pos16, 4)[-1]).sum()
        ),
    },
)

# %% [markdown]
# ## Tensor layouts
#
# flash-attn's `(B, T, H, d)` read as our `(B, H, T, d)` runs without an
# error when it happens to have the right number of dimensions; so does
# a batch-first `(B, T, E)` fed to `nn.MultiheadAttention`'s default,
# which reads `(T, B, E)`.

# %%
q_bthd, k_bthd, v_bthd = (randn(2, 5, 4, 8) for _ in range(3))  # (B,T,H,d)
right, _ = torch_ref.attention(
    *(conventions.from_bthd(t) for t in (q_bthd, k_bthd, v_bthd))
)
misread, _ = torch_ref.attention(q_bthd, k_bthd, v_bthd)  # T, H swapped
torch.manual_seed(0)
seq_first = nn.MultiheadAttention(8, 2).double().eval()  # batch_first=False
x_bte = randn(3, 5, 8)  # (B, T, E): batch first
with torch.no_grad():
    y_right, _ = seq_first(*(x_bte.transpose(0, 1),) * 3)  # (T, B, E)
    y_wrong, _ = seq_first(x_bte, x_bte, x_bte)  # read as (T=3, B=5, E)
layouts = glue.value(
    "layouts",
    {
        "bthd_misread": float(
            (misread - conventions.from_bthd(right)).abs().max()
        ),
        "sequence_first_misread": float(
            (y_wrong - y_right.transpose(0, 1)).abs().max()
        ),
    },
)

# %% [markdown]
# ## The grouped-query head map
#
# 8 query heads, 2 key/value heads: consecutive groups (SDPA's
# `enable_gqa`, Hugging Face's `repeat_kv`, ours) against strided ones.

# %%
consecutive = conventions.kv_head_of(8, 2, "consecutive")
strided = conventions.kv_head_of(8, 2, "strided")
q8, k2, v2 = randn(1, 8, 5, 4), randn(1, 2, 5, 4), randn(1, 2, 5, 4)
sdpa_gqa = F.scaled_dot_product_attention(q8, k2, v2, enable_gqa=True)
by_map = {
    name: torch_ref.attention(q8, k2[:, heads], v2[:, heads])[0]
    for name, heads in (("consecutive", consecutive), ("strided", strided))
}
head_map = glue.value(
    "head_map",
    {
        "consecutive": consecutive,
        "strided": strided,
        "consecutive_vs_sdpa": float(
            (by_map["consecutive"] - sdpa_gqa).abs().max()
        ),
        "strided_vs_sdpa": float((by_map["strided"] - sdpa_gqa).abs().max()),
    },
)

# %% [markdown]
# ## Fill values
#
# A fully masked row of three scores, as an additive mask with each fill
# value, softmaxed in float32.

# %%
scores3 = torch.tensor([[0.5, 1.0, -0.3]])
all_blocked = torch.ones(1, 3, dtype=torch.bool)
fills = {}
for fill in ("-inf", "min", -1e9):
    added = scores3 + conventions.additive_mask(
        all_blocked, torch.float32, fill
    )
    weights = added.softmax(dim=-1)[0]
    fills[str(fill)] = "NaN" if bool(weights.isnan().any()) else weights
fills = glue.value("fills", fills)
