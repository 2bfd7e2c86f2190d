# %% [markdown]
# ## Tokens and token ids
#
# A made-up vocabulary of six words, and a sentence split on spaces
# (real models use a learned subword tokenizer instead). Each token
# becomes its index in the vocabulary: its token id. Change the
# sentence and rerun.

# %%
import numpy as np

import glue
from mha_ref import numpy_ref
from mha_ref.embedding import embed
from mha_ref.positions import query_temperature, sinusoidal_encoding

vocab = ["the", "cat", "sat", "on", "mat", "dog"]
sentence = "the cat sat on the mat"
tokens = sentence.split(" ")  # a list of T words
token_ids = np.array([vocab.index(w) for w in tokens])  # (T,)
glue.value("vocab_size", len(vocab))
glue.value("n_tokens", len(tokens))
glue.value("token_ids", token_ids)
glue.table(
    "input-vocab",
    ["token id", "token"],
    [[i, w] for i, w in enumerate(vocab)],
)

# %% [markdown]
# ## The embedding table
#
# One row of $d_\text{model}$ numbers per token of the vocabulary. A
# trained model learns them; here they are small integers, so a lookup
# can be checked by eye. Looking up the rows of the sentence's ids gives
# $X$, one row per token.

# %%
d_model = 4
rng = np.random.default_rng(0)
table = rng.integers(-2, 3, (len(vocab), d_model)).astype(float)
x = embed(token_ids, table)  # (T, d_model)
glue.value("d_model", d_model)
glue.value("table_shape", str(table.shape))
glue.value("x_shape", str(x.shape))
glue.table(
    "input-table",
    ["token id", "token", "its row of the table"],
    [
        [i, w, glue.fmt_list(row)]
        for i, (w, row) in enumerate(zip(vocab, table, strict=True))
    ],
)
glue.table(
    "input-x",
    ["row of X", "token", "token id", "the row"],
    [
        [r, w, i, glue.fmt_list(row)]
        for r, (w, i, row) in enumerate(zip(tokens, token_ids, x, strict=True))
    ],
)

# %% [markdown]
# ## A batch
#
# Two sentences of the same length, stacked: ids (B, T), and the lookup
# gives X of shape (B, T, d_model).

# %%
batch = ["the cat sat on the mat", "the dog sat on the cat"]
batch_ids = np.array([[vocab.index(w) for w in s.split(" ")] for s in batch])
x_batch = embed(batch_ids, table)  # (B, T, d_model)
glue.value("batch_ids", batch_ids)
glue.value("batch_ids_shape", str(batch_ids.shape))
glue.value("x_batch_shape", str(x_batch.shape))

# %% [markdown]
# ## Attention alone ignores word order
#
# A layer of two heads (no mask) on the sentence, and on the sentence
# with its tokens reordered by a permutation P. Without positions, the
# output of the reordered input is the output reordered the same way:
# the largest difference is rounding. A causal mask breaks the symmetry.

# %%
layer = numpy_ref.MultiHeadAttention(d_model, n_head=2, seed=0)
perm = np.array([5, 2, 0, 4, 1, 3])  # P: new row r is old row perm[r]
glue.value("perm", perm)
xb = x[None]  # (1, T, d_model): a batch of one
y, _ = layer(xb)  # (1, T, d_model)
y_perm, _ = layer(xb[:, perm])  # attention(P X)
glue.value("perm_diff", np.abs(y_perm - y[:, perm]).max())
# the two copies of "the" (rows 0 and 4) get the same output row
glue.value("same_token_diff", np.abs(y[0, 0] - y[0, 4]).max())

causal = numpy_ref.causal_mask(len(tokens))  # (T, T), True = blocked
y_c, _ = layer(xb, causal)
y_c_perm, _ = layer(xb[:, perm], causal)
glue.value("causal_diff", np.abs(y_c_perm - y_c[:, perm]).max())

# %% [markdown]
# ## The sinusoidal encoding
#
# The 2017 paper adds to X a fixed table PE of shape (T, d_model):
# sines and cosines of the position at d_model / 2 frequencies. The
# figure draws it for 64 positions and 32 features.

# %%
n_positions, d_figure = 64, 32
glue.value("figure_positions", n_positions)
glue.value("figure_d", d_figure)
pe_figure = sinusoidal_encoding(n_positions, d_figure)  # (64, 32)


def draw_encoding(fig, theme):
    ax = fig.subplots()
    image = ax.imshow(
        pe_figure, aspect="auto", cmap=theme.cmap, vmin=-1, vmax=1
    )
    ax.set_xlabel("feature")
    ax.set_ylabel("position p")
    fig.colorbar(image, ax=ax, shrink=0.9, label="PE[p, feature]")


glue.figure(
    "input-sinusoid",
    draw_encoding,
    alt=(
        f"Heat map of the sinusoidal encoding, {n_positions} positions "
        f"(rows) by {d_figure} features (columns), values from -1 to 1: "
        "the first columns alternate quickly down the rows, the later "
        "columns change slowly, so each row is a different pattern"
    ),
    figsize=(3.6, 3.2),  # narrow: whole on a phone
)

# the digits of a counter: positions 0 to 7 in binary, the last digit
# flipping at every step, the one before every 2, the first every 4
n_bits = 3
glue.value("binary", {"periods": [2**b for b in range(n_bits)]})
glue.table(
    "input-binary",
    ["position", "in binary"],
    [[p, " ".join(format(p, f"0{n_bits}b"))] for p in range(2**n_bits)],
)

pe = sinusoidal_encoding(len(tokens), d_model)  # (T, d_model)
x_pos = x + pe  # (T, d_model): X + PE
y_p, _ = layer(x_pos[None])
y_p_perm, _ = layer(x[perm][None] + pe)  # reorder tokens, positions stay
glue.value("pos_diff", np.abs(y_p_perm - y_p[:, perm]).max())
# how large the outputs are, to read the differences against: the
# largest over both sides (the shuffled run's outputs can be larger)
glue.value(
    "output_size",
    {
        "plain": max(np.abs(y).max(), np.abs(y_perm).max()),
        "causal": max(np.abs(y_c).max(), np.abs(y_c_perm).max()),
        "positions": max(np.abs(y_p).max(), np.abs(y_p_perm).max()),
    },
)

# Llama 4's factor on the queries of its layers without RoPE (Where
# positions come from): the last position where it is still exactly 1
llama_p = np.arange(20_000)  # (P,) positions 0 to 19,999
llama_flat = llama_p[query_temperature(llama_p) == 1.0]  # (n,)
glue.value("llama4_flat_until", int(llama_flat.max()))
# it then grows in steps: the positions where it changes, and its value
# from each of the first two on
llama_factor = query_temperature(llama_p)  # (P,)
llama_starts = llama_p[1:][np.diff(llama_factor) != 0]  # (n_steps,)
glue.value(
    "llama4_steps",
    {
        "every": int(llama_starts[1] - llama_starts[0]),
        "starts": [int(p) for p in llama_starts[:2]],
        "factors": [float(llama_factor[p]) for p in llama_starts[:2]],
    },
)

# %% [markdown]
# ## Exercises
#
# The page's exercises, computed. 1: the shape of X for a batch of 3
# sentences of 5 tokens. 2: the lookup of "dog on mat", by hand. 3: the
# row of PE at position 1 with d_model = 4, by hand. 4: with the
# encoding added, do the two copies of "the" still get the same output?
#
# The cell below prints every answer, one `glue:` line each: work
# them out first, then run it.

# %%
ex_b, ex_t = 3, 5  # exercise 1
ex_ids = rng.integers(0, len(vocab), (ex_b, ex_t))  # (3, 5)
glue.value(
    "ex_batch",
    {"b": ex_b, "t": ex_t, "shape": str(embed(ex_ids, table).shape)},
)

ex_sentence = "dog on mat"  # exercise 2
ex_lookup_ids = np.array([vocab.index(w) for w in ex_sentence.split(" ")])
ex_x = embed(ex_lookup_ids, table)  # (3, d_model)
glue.value(
    "ex_lookup",
    {
        "sentence": ex_sentence,
        "ids": ex_lookup_ids,
        "x": ex_x,
        "shape": str(ex_x.shape),
    },
)

ex_p = 1  # exercise 3: position 1
ex_pe = sinusoidal_encoding(ex_p + 1, d_model)[ex_p]  # (d_model,)
omega = 10000.0 ** (-2 * np.arange(d_model // 2) / d_model)  # (2,)
glue.value(
    "ex_pe",
    {"p": ex_p, "frequencies": omega, "angles": ex_p * omega, "row": ex_pe},
)

# exercise 4: the two "the" rows with X + PE
glue.value("ex_same_token", np.abs(y_p[0, 0] - y_p[0, 4]).max())
