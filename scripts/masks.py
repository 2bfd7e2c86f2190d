# %% [markdown]
# ## Every family on 16 positions
#
# Each mask rule of `numpy_ref` turns query and key positions into a
# boolean mask, True = blocked. The cell draws each family the same way
# (query positions down, key positions across, allowed pairs coloured)
# and counts what each query may read. Change `T` or a parameter and
# rerun.

# %%
import functools
import importlib.util
import itertools
import pathlib
import re

import numpy as np
import torch
from matplotlib.colors import ListedColormap

import glue
from mha_ref import kv_cache, numpy_ref, tiled, torch_ref

fmt = glue.fmt
T = 16
pos = np.arange(T)  # (T,): 0 .. T - 1
WINDOW, SINKS, CHUNK, PREFIX = 4, 2, 4, 6
LENGTHS = [5, 3, 8]  # three packed documents, T tokens in all
PADDED = 12  # a batch of two: T real tokens, and 12 padded to T
# (B, 1, 1, T): True on the padding keys; the figures draw sequence 1
batch_padding = numpy_ref.key_padding_mask([T, PADDED], T)
families = {
    "causal": numpy_ref.causal_mask_for_positions(pos, pos),
    "sliding-window": numpy_ref.sliding_window_mask(pos, pos, WINDOW),
    "sinks": numpy_ref.sliding_window_mask(pos, pos, WINDOW, SINKS),
    "chunked": numpy_ref.chunked_mask(pos, pos, CHUNK),
    "document": numpy_ref.packed_causal_mask(LENGTHS),
    "prefix-lm": numpy_ref.prefix_lm_mask(pos, pos, PREFIX),
    # sequence 1 of the batch: (1, T) padding keys, the same for every row
    "encoder": np.broadcast_to(batch_padding[1, 0], (T, T)),
    # the decoder's mask is one |: (T, T) | (B, 1, 1, T) -> (B, 1, T, T)
    "decoder": (numpy_ref.causal_mask(T) | batch_padding)[1, 0],
    "combined": numpy_ref.sliding_window_mask(pos, pos, WINDOW)
    | numpy_ref.document_mask(*[numpy_ref.document_ids(LENGTHS)] * 2),
}
keys_seen = {
    name.replace("-", "_"): (~mask).sum(axis=-1)  # (T,): per query row
    for name, mask in families.items()
}
for name, seen in keys_seen.items():
    print(f"{name:>15}: keys per query {seen.tolist()}")
glue.value(
    "params",
    {
        "t": T,
        "window": WINDOW,
        "sinks": SINKS,
        "chunk": CHUNK,
        "prefix": PREFIX,
        "lengths": LENGTHS,
        "padded": PADDED,
    },
)
glue.value("keys_seen", keys_seen)
glue.value(
    "allowed_share",
    {
        name.replace("-", "_"): float((~mask).mean())
        for name, mask in families.items()
    },
)


def cell_borders(ax, rows, cols, theme, linewidth=0.4):
    """A light line around every cell of an imshow grid."""
    style = {"color": theme.muted, "linewidth": linewidth, "alpha": 0.6}
    ax.vlines(np.arange(-0.5, cols), -0.5, rows - 0.5, **style)
    ax.hlines(np.arange(-0.5, rows), -0.5, cols - 0.5, **style)


def draw_mask(mask, title, xlabel="key position", ylabel="query position"):
    """The one layout of every mask figure on the page."""

    def draw(fig, theme):
        ax = fig.subplots()
        colours = ListedColormap([theme.series[0], theme.masked])
        ax.imshow(mask, cmap=colours, vmin=0, vmax=1, aspect="equal")
        tq, tk = mask.shape
        ax.set_xticks(range(0, tk, 4))
        ax.set_yticks(range(0, tq, 4))
        cell_borders(ax, tq, tk, theme)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)

    return draw


def alt_text(name, mask, what):
    seen = (~mask).sum(axis=-1)
    return (
        f"A {mask.shape[0]} by {mask.shape[1]} grid of query positions "
        f"(rows) against key positions (columns) for {what}; coloured "
        f"cells are allowed pairs, grey cells blocked. The rows allow "
        f"{', '.join(str(int(n)) for n in seen)} keys."
    )


TITLES = {
    "causal": ("causal", "the causal mask"),
    "sliding-window": (
        f"sliding window, W = {WINDOW}",
        f"a sliding window of {WINDOW}",
    ),
    "sinks": (
        f"W = {WINDOW} and {SINKS} sinks",
        f"a sliding window of {WINDOW} with {SINKS} attention sinks",
    ),
    "chunked": (f"chunks of {CHUNK}", f"chunked attention, chunk {CHUNK}"),
    "document": (
        f"packed documents {LENGTHS}",
        f"three packed documents of lengths {LENGTHS}, causal in each",
    ),
    "prefix-lm": (f"prefix LM, prefix {PREFIX}", f"a prefix of {PREFIX}"),
    "encoder": (
        f"encoder, {PADDED} tokens + padding",
        f"an encoder, sequence 1 of a batch of lengths {[T, PADDED]}: "
        f"bidirectional, {T - PADDED} padding keys",
    ),
    "decoder": (
        f"decoder, {PADDED} tokens + padding",
        f"a decoder, sequence 1 of a batch of lengths {[T, PADDED]}: "
        f"causal, {T - PADDED} padding keys",
    ),
    "combined": (
        f"window {WINDOW} | documents",
        f"a sliding window of {WINDOW} combined with the document mask",
    ),
}
for name, mask in families.items():
    title, what = TITLES[name]
    glue.figure(
        f"mask-{name}",
        draw_mask(mask, title),
        figsize=(3.6, 3.6),
        alt=alt_text(name, mask, what),
    )

# %% [markdown]
# ## The sliding window, counted four ways
#
# The same number, 4, passed to four libraries' definitions of a
# window (written here from their source, the page cites where): how
# many keys the last of 16 queries may read. Hugging Face's
# `kv_idx > q_idx - sliding_window` and the cache of `window` slots in
# Mistral's reference count the query itself; attention-gym's
# `q_idx - kv_idx <= window_size`, Mistral's prefill mask
# `triu(tril(ones), diagonal=-sliding_window)` and flash-attn's
# `window_size=(left, 0)` count the keys before it. Mistral's decoding
# is simulated: one token a step, written into slot `position % w` of
# a buffer of `w` slots, then the filled slots are read.

# %%
q_last, k_all, w = T - 1, pos, WINDOW


def mistral_decode_reads(t, w):
    """Positions the query at t reads in Mistral's rolling buffer."""
    slots = [None] * w  # cache_k: sliding_window slots
    for p in range(t + 1):  # one token per decoding step
        slots[p % w] = p  # scatter at positions % sliding_window
        read = slots[: p + 1]  # cache_k[:, :cur_pos], cur_pos = p + 1
    return sorted(p for p in read if p is not None)


mistral_read = mistral_decode_reads(q_last, w)
print("Mistral's buffer, last query reads positions", mistral_read)
conventions = {
    "hugging_face": int(np.sum((k_all > q_last - w) & (k_all <= q_last))),
    "mistral_decode": len(mistral_read),
    "mistral_decode_positions": mistral_read,
    "mistral_prefill": int(
        np.triu(np.tril(np.ones((T, T))), -w)[q_last].sum()
    ),
    "attention_gym": int(np.sum((q_last - k_all <= w) & (k_all <= q_last))),
    # flash-attn: keys in [i - left, i + right], causal right = 0
    "flash_attn_left_w": int(
        np.sum((k_all >= q_last - w) & (k_all <= q_last))
    ),
    "flash_attn_left_w_minus_1": int(
        np.sum((k_all >= q_last - (w - 1)) & (k_all <= q_last))
    ),
    "ours": int(keys_seen["sliding_window"][q_last]),
}
print(conventions)
glue.value("conventions", conventions)

# %% [markdown]
# ## What a window forgets, what a prefix ignores
#
# Outputs of one head on random inputs. Changing the value at position
# 0 moves the last query's output under a causal mask, and not at all
# under a window of 4 (position 0 is too far back) unless position 0 is
# a sink. Changing a token after the prefix leaves every prefix row of
# a prefix LM as it was.

# %%
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((T, 8)) for _ in range(3))  # (T, d)
v_moved = v.copy()
v_moved[0] += 10.0  # the value of position 0 changes


def moved(mask, row):
    """How far the output of ``row`` moves when value 0 changes."""
    before, _ = numpy_ref.attention(q, k, v, mask)
    after, _ = numpy_ref.attention(q, k, v_moved, mask)
    return float(np.abs(after - before)[row].max())


changed_key = PREFIX + 2  # a key after the prefix changes
k_moved = k.copy()
k_moved[changed_key] += 10.0
prefix_mask = families["prefix-lm"]
before, _ = numpy_ref.attention(q, k, v, prefix_mask)
after, _ = numpy_ref.attention(q, k_moved, v, prefix_mask)
row_moves = np.abs(after - before).max(axis=-1)  # (T,): per query row
changed_rows = np.flatnonzero(row_moves > 0)
effects = glue.value(
    "effects",
    {
        "causal_last_row": moved(families["causal"], T - 1),
        "window_last_row": moved(families["sliding-window"], T - 1),
        "sinks_last_row": moved(families["sinks"], T - 1),
        "changed_key": changed_key,
        "changed_rows": [int(changed_rows[0]), int(changed_rows[-1])],
        "prefix_rows": float(row_moves[:PREFIX].max()),
        "rows_before_key": float(row_moves[PREFIX:changed_key].max()),
        "later_rows": float(row_moves[changed_key:].max()),
    },
)

# %% [markdown]
# ## A window in a stack of layers
#
# One layer under a window of 4 cannot see position 0 from position
# 15. A stack can: each layer carries information W - 1 positions
# further (Mistral 7B, Jiang et al. 2023, section 2). Residual layers
# x + attention(x), all under the window; change the input at
# position 0 and watch the last position after each layer.

# %%
torch.manual_seed(5)
stack = [
    torch_ref.MultiHeadAttention(16, 4, dtype=torch.float64) for _ in range(6)
]
window_mask = torch_ref.sliding_window_mask(
    torch.arange(T), torch.arange(T), WINDOW
)  # (T, T)
h = torch.randn(1, T, 16, dtype=torch.float64)
h_moved = h.clone()
h_moved[0, 0] += 10.0  # the input at position 0 changes
per_layer = []
with torch.no_grad():
    for block in stack:
        h = h + block(h, mask=window_mask)[0]  # (1, T, 16)
        h_moved = h_moved + block(h_moved, mask=window_mask)[0]
        per_layer.append(float((h_moved - h)[0, -1].abs().max()))
reached = next(i + 1 for i, e in enumerate(per_layer) if e > 0)
receptive = glue.value(
    "receptive",
    {
        "per_layer": per_layer,  # the last position's change, layers 1..
        "first_layer": reached,
        "silent_layers": reached - 1,  # the last position does not move
        "reach_per_layer": WINDOW - 1,
        "distance": T - 1,  # from position 0 to the last position
        "predicted": -(-(T - 1) // (WINDOW - 1)),  # ceil((T-1) / (W-1))
    },
)

# %% [markdown]
# ## A prefix LM through a cache: the prefix in one chunk
#
# A cache computes each query once, when its chunk arrives: it reads
# the keys up to the end of its chunk, never a later one. Under a
# prefix LM, a prefix query should read the whole prefix; it does only
# when the whole prefix arrives in one chunk.

# %%


def through_chunks(chunks):
    """The prefix-LM output of queries computed chunk by chunk."""
    chunk_end = np.repeat(np.cumsum(chunks), chunks)  # (T,): per query
    not_yet = pos[None, :] >= chunk_end[:, None]  # (T, T): a later chunk
    out, _ = numpy_ref.attention(q, k, v, prefix_mask | not_yet)
    return float(np.abs(out - before).max())  # against the full pass


whole_prefix = [PREFIX] + [1] * (T - PREFIX)
split_prefix = [PREFIX // 2, PREFIX - PREFIX // 2] + [1] * (T - PREFIX)
prefix_cache = glue.value(
    "prefix_cache",
    {
        "whole": whole_prefix[:3],
        "whole_diff": through_chunks(whole_prefix),
        "split": split_prefix[:3],
        "split_diff": through_chunks(split_prefix),
    },
)

# %% [markdown]
# ## Encoder against decoder, on a padded batch
#
# The batch the figures draw: two sequences of 16 and 12 tokens,
# right-padded to 16. The encoder masks only the padding keys,
# $(B, 1, 1, T)$; the decoder adds the causal mask with `|`. Rewriting
# what sits in the padding changes no output of a real token in either.

# %%
torch.manual_seed(0)
d_model, n_head = 16, 4
layer = torch_ref.MultiHeadAttention(d_model, n_head, dtype=torch.float64)
x = torch.randn(2, T, d_model, dtype=torch.float64)
lengths = [T, PADDED]
padding = torch_ref.key_padding_mask(lengths)  # (B, 1, 1, T)
masks = {
    "encoder": padding,
    "decoder": torch_ref.causal_mask(T) | padding,  # (B, 1, T, T)
}
x_junk = x.clone()
x_junk[1, PADDED:] = 100.0  # the padding of sequence 1, rewritten
real = ~padding[:, 0, 0]  # (B, T): the real tokens
enc_dec = {}
with torch.no_grad():
    for name, mask in masks.items():
        y = layer(x, mask=mask)[0]
        y_junk = layer(x_junk, mask=mask)[0]
        allowed = ~mask.expand(2, 1, T, T)  # (B, 1, T, T)
        enc_dec[name] = {
            "first_row_keys": int(allowed[1, 0, 0].sum()),
            "padding_effect": float((y - y_junk)[real].abs().max()),
        }
print(enc_dec)
glue.value("enc_dec", {**enc_dec, "lengths": lengths})

# %% [markdown]
# ## Cross-attention: keys and values of the source, computed once
#
# A decoder of 5 positions reads an encoder output of 9 positions
# (another length), padded for the second sequence (6 real positions).
# `cross_keys_values` projects the source once; every decoding step
# (`cross_step`, one query each) reuses it, with the padding mask and no
# causal mask. The steps give the full cross-attention pass
# `layer(x, mask=padding, context=source)`.

# %%
torch.manual_seed(1)
cross_layer = torch_ref.MultiHeadAttention(
    d_model, n_head, n_kv_head=2, dtype=torch.float64
)
n_target, n_source, source_lengths = 5, 9, [9, 6]
target = torch.randn(2, n_target, d_model, dtype=torch.float64)
source = torch.randn(2, n_source, d_model, dtype=torch.float64)
source_padding = torch_ref.key_padding_mask(source_lengths)  # (B, 1, 1, S)
calls = {"wq": 0, "wk": 0, "wv": 0}  # projections run while decoding


def counter(name):
    def count(module, inputs, output):
        calls[name] += 1

    return count


with torch.no_grad():
    full = cross_layer(target, mask=source_padding, context=source)[0]
    hooks = [
        getattr(cross_layer, name).register_forward_hook(counter(name))
        for name in calls
    ]
    keys_values = kv_cache.cross_keys_values(cross_layer, source)
    steps = [
        kv_cache.cross_step(
            cross_layer, target[:, t : t + 1], keys_values, source_padding
        )
        for t in range(n_target)
    ]
    for hook in hooks:
        hook.remove()
    stepped = torch.cat(steps, dim=1)  # (B, n_target, d_model)
    source_junk = source.clone()
    source_junk[1, 6:] = -50.0  # the padding of source 1, rewritten
    junk = kv_cache.cross_step(
        cross_layer,
        target,
        kv_cache.cross_keys_values(cross_layer, source_junk),
        source_padding,
    )
cross = glue.value(
    "cross",
    {
        "n_target": n_target,
        "n_source": n_source,
        "source_lengths": source_lengths,
        "kv_shape": list(keys_values[0].shape),  # (B, H_kv, S, d_head)
        "calls": calls,
        "steps": len(steps),
        "max_diff": float((stepped - full).abs().max()),
        "padding_effect": float((junk - full).abs().max()),
    },
)

# %% [markdown]
# ## Three documents packed into one sequence
#
# Documents of 5, 3 and 8 tokens in one row of 16, as a training stack
# packs them (flash-attn's `cu_seqlens` = [0, 5, 8, 16]). With
# `packed_causal_mask` every row equals the same document run alone; with
# the causal mask only, the later documents read the earlier ones.

# %%
torch.manual_seed(2)
packer = torch_ref.MultiHeadAttention(
    d_model, n_head, rope=True, dtype=torch.float64
)
packed_x = torch.randn(1, T, d_model, dtype=torch.float64)
bounds = np.cumsum([0, *LENGTHS])  # cu_seqlens
rows = []
with torch.no_grad():
    packed = packer(packed_x, mask=torch_ref.packed_causal_mask(LENGTHS))[0]
    leaky = packer(packed_x, mask=torch_ref.causal_mask(T))[0]
    for d, (start, end) in enumerate(itertools.pairwise(bounds)):
        n = int(end - start)
        alone = packer(packed_x[:, start:end], mask=torch_ref.causal_mask(n))[
            0
        ]
        rows.append(
            {
                "document": d,
                "tokens": n,
                "start": int(start),
                "packed": float((packed[:, start:end] - alone).abs().max()),
                "causal_only": float(
                    (leaky[:, start:end] - alone).abs().max()
                ),
            }
        )
glue.value("cu_seqlens", bounds)
glue.value("packed", rows)
glue.value("packed_max", max(r["packed"] for r in rows))
glue.table(
    "masks-packed",
    ["document", "tokens", "rows", "packed, max diff", "causal only"],
    [
        [
            str(r["document"]),
            str(r["tokens"]),
            f"{r['start']} .. {r['start'] + r['tokens'] - 1}",
            f"{r['packed']:.1e}",
            f"{r['causal_only']:.1e}",
        ]
        for r in rows
    ],
    "rrrrr",
)

# %% [markdown]
# ## The rolling cache
#
# `cached_forward(..., window=W, sink_tokens=S)` keeps a
# `RollingKVCache`: the sinks and the last $W - 1$ keys. On 96 positions
# in random chunks it gives the full windowed pass, and the entries it
# holds between steps never pass $S + W - 1$.

# %%
torch.manual_seed(3)
roller = torch_ref.MultiHeadAttention(
    d_model, n_head, n_kv_head=2, rope=True, dtype=torch.float64
)
n_roll, w_roll, s_roll = 96, 16, 4
roll_x = torch.randn(1, n_roll, d_model, dtype=torch.float64)
chunk_rng = np.random.default_rng(4)
chunks = []
while sum(chunks) < n_roll:
    chunks.append(
        int(chunk_rng.integers(1, min(12, n_roll - sum(chunks)) + 1))
    )
roll_pos = torch.arange(n_roll)
with torch.no_grad():
    windowed = roller(
        roll_x,
        mask=torch_ref.sliding_window_mask(roll_pos, roll_pos, w_roll, s_roll),
    )[0]
    rolled = kv_cache.cached_forward(roller, roll_x, chunks, w_roll, s_roll)
    cache, held, start = kv_cache.RollingKVCache(w_roll, s_roll), [], 0
    for n in chunks:
        kv_cache.rolling_step(roller, cache, roll_x[:, start : start + n])
        start += n
        held.append(cache.keys.shape[-2])
rolling = glue.value(
    "rolling",
    {
        "t": n_roll,
        "window": w_roll,
        "sinks": s_roll,
        "chunks": len(chunks),
        "max_diff": float((rolled - windowed).abs().max()),
        "max_held": max(held),
        "bound": s_roll + w_roll - 1,
    },
)

# %% [markdown]
# ## Llama 4's chunk, read from transformers' source
#
# The default `attention_chunk_size` of `Llama4TextConfig`, read from
# its source file rather than imported (importing it takes seconds).

# %%
llama4_config = (
    pathlib.Path(importlib.util.find_spec("transformers").origin).parent
    / "models"
    / "llama4"
    / "configuration_llama4.py"
)
chunk_default = re.search(
    r"attention_chunk_size: int \| None = (\d+)", llama4_config.read_text()
)
if chunk_default is None:
    raise RuntimeError(f"no attention_chunk_size default in {llama4_config}")
glue.value("llama4_chunk", int(chunk_default.group(1)))

# %% [markdown]
# ## Rolling against full cache at long lengths
#
# Entries are counted per layer, for one sequence (batch 1). Bytes use
# the shape of Mistral 7B v0.1 as Hugging Face's `MistralConfig`
# describes it by default (32 layers, 8 key/value heads of 128, a
# window of 4096), keys and values in 16-bit floats, no sinks (none of
# these models has any; each sink adds one entry per window layer).
# The mixed stacks use their own model's window: Gemma 2 alternates
# window layers of 4096 with full ones, Gemma 3 has 5 window layers of
# 1024 per full one. Their columns are a share of a cache of full
# layers only, whatever the layer's shape.

# %%
n_layers, n_kv, d_kv, window_7b = 32, 8, 128, 4096
bytes_per_entry = 2 * n_layers * n_kv * d_kv * 2  # K and V, fp16
mixed = {  # (window layers per full layer, window)
    "gemma2": (1, 4096),
    "gemma3": (5, 1024),
}
long_lengths = [4096, 16384, 32768, 131072]
# the lengths they were trained at: Mistral 7B v0.1, context_len 8192
# (Jiang et al., 2023, Table 1); Gemma 2, 8192 (Gemma Team, 2024,
# Table 1); Gemma 3 4B-27B, 131072 after a 32768 pre-training (Gemma
# Team, 2025, section 2)
trained = {"mistral": 8192, "gemma2": 8192, "gemma3": 131072}


def rolling_entries(t, window):
    """Entries a rolling cache holds between steps, after t positions."""
    return min(t, window - 1)


memory_rows = []
for t in long_lengths:
    row = {
        "t": t,
        "full_gib": t * bytes_per_entry / 2**30,
        "rolling_gib": rolling_entries(t, window_7b) * bytes_per_entry / 2**30,
    }
    for name, (n_window, w_mixed) in mixed.items():
        # share of an all-full-layer cache: n_window rolling, 1 full
        kept = rolling_entries(t, w_mixed) / t  # a window layer's share
        row[name] = (1 + n_window * kept) / (1 + n_window)
    memory_rows.append(row)
glue.value(
    "memory",
    {
        "n_layers": n_layers,
        "n_kv_head": n_kv,
        "d_head": d_kv,
        "window": window_7b,
        "batch": 1,
        "bytes_per_value": 2,
        "kib_per_token": bytes_per_entry / 1024,
        "gemma2_window": mixed["gemma2"][1],
        "gemma3_window": mixed["gemma3"][1],
        "gemma3_ratio": mixed["gemma3"][0],
        # W - 1 entries at every T >= W - 1, every length of the table
        "rolling_gib": (window_7b - 1) * bytes_per_entry / 2**30,
        "rows": memory_rows,
        "trained": trained,
        "longest": long_lengths[-1],
        "beyond_trained": long_lengths[-1] / trained["mistral"],
    },
)
glue.table(
    "masks-memory",
    [
        "T",
        "Mistral-shaped full, GiB",
        "rolling, GiB",
        *(
            f"{model} pattern ({mixed[key][0]}:1), share of full"
            for key, model in (("gemma2", "Gemma 2"), ("gemma3", "Gemma 3"))
        ),
    ],
    [  # four decimals in every cell: 0.9999 is not rounded to 1
        [
            f"{r['t']:,}",
            *(f"{r[c]:.4f}" for c in ("full_gib", "rolling_gib")),
            *(f"{r[c]:.4f}" for c in ("gemma2", "gemma3")),
        ]
        for r in memory_rows
    ],
    "rrrrr",
)

# %% [markdown]
# ## Block sparsity: the share of tiles the tiled pass computes
#
# The tiled loop's own test (a tile is skipped when the rule blocks
# every pair in it), kept tile by tile for T = 4096 and tiles of
# 128 x 128, FlexAttention's default block; a shorter T is the grid's
# top-left corner, and `tiled.tiles_computed` counts the same tiles.
# Causal, a window of 512, chunks of 1024 (Llama 4 uses 8192) and
# packed documents of random lengths around 512, causal in each. The
# last check: the tiled pass with each rule gives `numpy_ref.attention`
# with its dense mask.

# %%
BLOCK, SPARSE_WINDOW, SPARSE_CHUNK = 128, 512, 1024
doc_rng = np.random.default_rng(5)
longest = 4096
doc_lengths = []
while sum(doc_lengths) < longest:
    doc_lengths.append(int(doc_rng.integers(128, 897)))
doc_lengths[-1] -= sum(doc_lengths) - longest  # exactly 4096 tokens
doc_ids = numpy_ref.document_ids(doc_lengths)


def packed_rule(q_pos, k_pos):
    """Causal within each packed document: two rules, combined with |."""
    other = numpy_ref.document_mask(doc_ids[q_pos], doc_ids[k_pos])
    return other | numpy_ref.causal_mask_for_positions(q_pos, k_pos)


rules = {
    "causal": numpy_ref.causal_mask_for_positions,
    "sliding_window": functools.partial(
        numpy_ref.sliding_window_mask, window=SPARSE_WINDOW
    ),
    "chunked": functools.partial(numpy_ref.chunked_mask, chunk=SPARSE_CHUNK),
    "document": packed_rule,
}
tile_lengths = [512, 1024, 2048, 4096]
n_tiles = longest // BLOCK
tile_positions = np.arange(longest).reshape(n_tiles, BLOCK)  # tile rows
tile_grids = {  # the loop's test on every tile: True = computed
    name: np.array(
        [
            [not rule(q_t, k_t).all() for k_t in tile_positions]
            for q_t in tile_positions
        ]
    )  # (n_tiles, n_tiles) for T = 4096
    for name, rule in rules.items()
}
shares = {  # a shorter T is the grid's top-left corner
    name: [grid[: t // BLOCK, : t // BLOCK].mean() for t in tile_lengths]
    for name, grid in tile_grids.items()
}
for name, rule in rules.items():  # tiles_computed counts the same tiles
    computed, total = tiled.tiles_computed(
        rule, np.arange(2048), np.arange(2048), BLOCK, BLOCK
    )
    if computed / total != shares[name][tile_lengths.index(2048)]:
        raise RuntimeError(f"{name}: the grid and tiles_computed differ")
window_falls = [
    shares["sliding_window"][i + 1] / shares["sliding_window"][i]
    for i in range(len(tile_lengths) - 1)
]  # the factor from one length to the next, double the length
glue.value(
    "sparsity",
    {
        "block": BLOCK,
        "lengths": tile_lengths,
        "window": SPARSE_WINDOW,
        "chunk": SPARSE_CHUNK,
        "documents": len(doc_lengths),
        "mean_length": float(np.mean(doc_lengths)),
        "window_falls": window_falls,
        **shares,
    },
)
glue.table(
    "masks-sparsity",
    ["T", "causal", f"W {SPARSE_WINDOW}", f"C {SPARSE_CHUNK}", "docs"],
    [
        [f"{t:,}", *(fmt(shares[name][i], 3) for name in rules)]
        for i, t in enumerate(tile_lengths)
    ],
    "rrrrr",
)

small = 300  # the tiled pass against the dense mask, float64
gen = np.random.default_rng(6)
q_s, k_s, v_s = (gen.standard_normal((1, 2, small, 16)) for _ in range(3))
small_pos = np.arange(small)
small_rules = {
    "sliding_window": functools.partial(
        numpy_ref.sliding_window_mask, window=40
    ),
    "chunked": functools.partial(numpy_ref.chunked_mask, chunk=64),
    "prefix_lm": functools.partial(numpy_ref.prefix_lm_mask, prefix=50),
}
tiled_diff = 0.0
for rule in small_rules.values():
    dense_out, _ = numpy_ref.attention(
        q_s, k_s, v_s, rule(small_pos, small_pos)
    )
    tiled_out = tiled.tiled_attention_numpy(
        q_s, k_s, v_s, mask_rule=rule, block_q=32, block_k=32
    )
    tiled_diff = max(tiled_diff, float(np.abs(tiled_out - dense_out).max()))
glue.value("tiled_diff", tiled_diff)
glue.value("tiled_t", small)


def draw_sparsity(fig, theme):
    ax = fig.subplots()
    labels = {
        "causal": "causal",
        "sliding_window": f"window {SPARSE_WINDOW}",
        "chunked": f"chunks of {SPARSE_CHUNK}",
        "document": "packed documents",
    }
    for i, (name, label) in enumerate(labels.items()):
        shift = 1.04 ** (i - 1.5)  # side by side where the shares agree
        ax.plot(
            [t * shift for t in tile_lengths],
            shares[name],
            "os^D"[i] + "-",
            color=theme.series[i],
            markerfacecolor="none" if i % 2 else theme.series[i],
            label=label,
        )
    # a share that halves when T doubles: slope -1 on these axes
    anchor = tile_lengths.index(2048)
    guide = [shares["sliding_window"][anchor] * 2048 / t for t in (1024, 4096)]
    ax.plot((1024, 4096), guide, "--", color=theme.muted, label="1 / T")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(tile_lengths, [str(t) for t in tile_lengths])
    ticks = [0.1, 0.2, 0.3, 0.5, 0.6]  # the shares reach 0.625
    ax.set_yticks(ticks, [str(t) for t in ticks])
    ax.yaxis.set_minor_formatter("")
    ax.set_ylim(0.09, 0.8)
    ax.set_xlabel("sequence length T (log scale)")
    ax.set_ylabel("share of tiles computed (log scale)")
    ax.set_title(f"Tiles of {BLOCK} x {BLOCK} the loop computes")
    ax.grid(True, alpha=0.4)
    ax.legend(loc="lower left", fontsize=9)


glue.figure(
    "masks-sparsity",
    draw_sparsity,
    figsize=(6.4, 3.6),
    alt=(
        f"Share of {BLOCK} by {BLOCK} tiles the tiled pass computes "
        f"against sequence length from {tile_lengths[0]} to "
        f"{tile_lengths[-1]}, log-log, with a dashed line of slope -1; "
        f"the points are offset sideways for legibility. "
        f"Causal stays near one half "
        f"({fmt(shares['causal'][-1], 3)} at {tile_lengths[-1]}); the "
        f"window of {SPARSE_WINDOW} falls to "
        f"{fmt(shares['sliding_window'][-1], 3)}, chunks of {SPARSE_CHUNK} "
        f"to {fmt(shares['chunked'][-1], 3)} and packed documents to "
        f"{fmt(shares['document'][-1], 3)}, each close to the dashed line."
    ),
)

# %% [markdown]
# ## Which tiles: the loop's test, tile by tile
#
# The grid of the cell above, drawn for T = 4096: computed tiles
# coloured, skipped ones grey.

# %%
grid_rules = ["causal", "sliding_window", "document"]
glue.value(
    "tile_grid",
    {
        "t": longest,
        "tiles": n_tiles,
        "computed": {n: int(tile_grids[n].sum()) for n in grid_rules},
    },
)


TILE_TITLES = {
    "causal": ("causal", "causal: the lower triangle with its diagonal"),
    "sliding_window": (
        f"window {SPARSE_WINDOW}",
        f"a window of {SPARSE_WINDOW}: a strip along the diagonal",
    ),
    "document": (
        "packed documents",
        "packed documents: a triangle per document",
    ),
}


def draw_tile_grid(name):
    """One rule's grid: computed tiles coloured, skipped ones grey."""

    def draw(fig, theme):
        ax = fig.subplots()
        colours = ListedColormap([theme.masked, theme.series[0]])
        n = n_tiles
        ax.imshow(tile_grids[name], cmap=colours, vmin=0, vmax=1)
        cell_borders(ax, n, n, theme, linewidth=0.3)  # tile borders
        ax.set_xticks([0, n - 1], ["0", str(n - 1)])
        ax.set_yticks([0, n - 1], ["0", str(n - 1)])
        ax.set_xlabel("key tile")
        ax.set_ylabel("query tile")
        title = TILE_TITLES[name][0]
        ax.set_title(f"{title}: {int(tile_grids[name].sum())}")

    return draw


for name in grid_rules:  # one figure each: a phone stacks them
    glue.figure(
        f"masks-tile-grid-{name.replace('_', '-')}",
        draw_tile_grid(name),
        figsize=(3.2, 3.3),
        alt=(
            f"A {n_tiles} by {n_tiles} grid of {BLOCK} by {BLOCK} tiles "
            f"for T = {longest}, query tiles down and key tiles across, "
            f"for {TILE_TITLES[name][1]}; computed tiles coloured "
            f"({int(tile_grids[name].sum())}), skipped ones grey."
        ),
    )
