# %% [markdown]
# ## Setup
#
# A small attention-only transformer, trained here on the CPU to copy
# repeated text, then looked at from inside: where each head attends,
# what removing heads costs, and what patching one head's output from a
# clean run into a corrupted one restores. The model is
# `mha_ref/induction.py`, built from `mha_ref`'s own
# `MultiHeadAttention`. Everything is seeded and runs on one thread, so
# the same versions of Python, NumPy and PyTorch give the same weights
# and the same numbers. Training the five models takes a minute or two
# on a laptop's CPU.

# %%
import base64

import numpy as np
import torch

import glue
from mha_ref import induction

torch.set_num_threads(1)  # one thread: the same sums in the same order
torch.use_deterministic_algorithms(True)

LETTERS = "abcdefgh"  # the vocabulary: 8 tokens, shown as letters
VOCAB, T = len(LETTERS), 24  # tokens, sequence length
D_MODEL, N_HEAD, N_LAYER = 64, 4, 2
STEPS, BATCH, LR = 400, 64, 6e-3  # the training budget of every model
HEAD_COUNTS = [1, 2, 4, 8, 16]  # the sweep, at the same d_model
N_EVAL = 500  # held-out sequences for every accuracy
ROLE = 0.5  # a head "does" a job with at least half its weight on it
# The same versions give the same numbers; another PyTorch or CPU sums
# in another order, and training may take a slightly different path.
TOLERANCE = {"accuracy": 0.02, "score": 0.05}

glue.value(
    "setup",
    {
        "vocab": VOCAB,
        "letters": LETTERS,
        "t": T,
        "d_model": D_MODEL,
        "n_head": N_HEAD,
        "n_layer": N_LAYER,
        "d_head": D_MODEL // N_HEAD,
        "steps": STEPS,
        "batch": BATCH,
        "lr": LR,
        "head_counts": HEAD_COUNTS,
        "n_eval": N_EVAL,
        "role": ROLE,
        "tolerance": TOLERANCE,
        "torch": torch.__version__.split("+")[0],
    },
)


def letters(tokens):
    return "".join(LETTERS[i] for i in tokens.tolist())


def two(x):
    """x to two decimals for a table, without a "-0.00"."""
    return f"{x:.2f}".replace("-0.00", "0.00")


# %% [markdown]
# ## The task: copy a repeated segment
#
# Each sequence is 24 random letters from 8, in which a segment of
# random length, at a random place, repeats right after itself. Inside
# the repeat the next letter is the one that followed the same letters
# in the first copy; everywhere else it is random. With 8 letters, one
# letter occurs about three times in 24, so matching the current letter
# alone is ambiguous: the rules below, which use no weights, show how
# much matching one, two or three letters gets right.

# %%
held_out = induction.repeated_segments(
    N_EVAL, T, VOCAB, torch.Generator().manual_seed(2)
)
rules = {
    context: induction.rule_accuracy(held_out, context, VOCAB)
    for context in (1, 2, 3)
}
glue.value("chance", 1 / VOCAB)
glue.value("rules", {f"match_{c}": rules[c] for c in rules})
glue.table(
    "trained-heads-rules",
    ["rule", "accuracy (%)"],
    [["guess a letter", f"{100 / VOCAB:.1f}"]]
    + [
        [
            f"match the last {c} letter{'s' if c > 1 else ''}",
            f"{100 * rules[c]:.1f}",
        ]
        for c in rules
    ],
    "lr",
)

# one example to look at: the first draw whose segment has 5 to 8
# letters and starts after position 2, so random letters surround it
draws = induction.repeated_segments(
    64, T, VOCAB, torch.Generator().manual_seed(3)
)
fits = (draws.length >= 5) & (draws.length <= 8) & (draws.start >= 3)
row = int(torch.nonzero(fits)[0, 0])
example = induction.Segments(*(x[row : row + 1] for x in draws))
glue.value(
    "example",
    {
        "letters": letters(example.tokens[0]),
        "start": int(example.start[0]),
        "length": int(example.length[0]),
        "repeat": letters(
            example.tokens[
                0, example.start[0] : example.start[0] + example.length[0]
            ]
        ),
    },
)

# %% [markdown]
# ## Training
#
# Two layers of four heads, $d_\text{model} = 64$, learned positions,
# AdamW. `train` draws a fresh batch every step, so the accuracy on the
# training batch is already an accuracy on unseen data; the loss counts
# only the tokens that can be copied. The sweep further down trains four
# more models with the same budget.


# %%
def trained(n_head):
    torch.manual_seed(0)  # the same initial weights on every run
    model = induction.AttentionOnly(VOCAB, T, D_MODEL, n_head, N_LAYER)
    data = torch.Generator().manual_seed(1)  # the same batches, too
    curve = induction.train(model, STEPS, data, batch_size=BATCH, lr=LR)
    return model.eval(), curve


model, (losses, batch_accuracy) = trained(N_HEAD)
accuracy = induction.accuracy(model, held_out)
glue.value("accuracy", accuracy)
glue.value("final_loss", float(np.mean(losses[-25:])))


def smooth(values, width=25):
    """The mean of each run of `width` steps, one point per run."""
    values = np.asarray(values)
    runs = len(values) // width
    return values[: runs * width].reshape(runs, width).mean(axis=1)


def draw_curve(fig, theme):
    ax_loss, ax_acc = fig.subplots(1, 2)
    steps = (np.arange(len(smooth(losses))) + 1) * 25
    ax_loss.plot(steps, smooth(losses), color=theme.series[0])
    ax_loss.set(xlabel="step", ylabel="loss (copyable tokens)")
    ax_loss.set_title("Training loss")
    ax_acc.plot(
        steps,
        100 * smooth(batch_accuracy),
        color=theme.series[0],
        label="model",
    )
    for (c, value), color in zip(
        rules.items(), theme.series[1:], strict=False
    ):
        ax_acc.axhline(
            100 * value,
            color=color,
            linestyle="--",
            linewidth=1,
            label=f"match {c} letter" + ("s" if c > 1 else ""),
        )
    ax_acc.axhline(
        100 / VOCAB,
        color=theme.muted,
        linestyle=":",
        linewidth=1,
        label="chance",
    )
    ax_acc.set(xlabel="step", ylabel="accuracy (%)", ylim=(0, 100))
    ax_acc.set_title("Accuracy on copyable tokens")
    ax_acc.legend(loc="lower right", fontsize=8)
    for ax in (ax_loss, ax_acc):
        ax.grid(True, linewidth=0.5)


glue.figure(
    "trained-heads-curve",
    draw_curve,
    "Training loss falling and accuracy rising over the steps, with "
    "the accuracy of the one-, two- and three-letter matching rules",
)

# %% [markdown]
# ## Where each head attends
#
# Every head's weights on the example sequence: row $i$ is query $i$,
# column $j$ key $j$, the causal mask blocks the upper triangle. Then
# two scores per head over the held-out sequences: the mean weight on
# the previous token (and on the one before it), and the mean weight,
# at a query inside the repeat, on the token right after the earlier
# copy of the query's own token: the token to predict.

# %%
names = [f"L{n}H{h}" for n in range(N_LAYER) for h in range(N_HEAD)]
with torch.no_grad():
    _, example_weights, _ = model(example.tokens)  # (L, 1, H, T, T)
    _, weights, _ = model(held_out.tokens)  # (L, N, H, T, T)
previous, copy = induction.head_scores(weights, held_out, offset=1)
two_back, _ = induction.head_scores(weights, held_out, offset=2)
scores = {
    "previous": previous.flatten().tolist(),
    "two_back": two_back.flatten().tolist(),
    "copying": copy.flatten().tolist(),
}


def jobs(head):
    """The jobs head number `head` (0 .. 7) spends half its weight on."""
    return [job for job in scores if scores[job][head] >= ROLE]


roles = {
    job: [n for i, n in enumerate(names) if job in jobs(i)] for job in scores
}
glue.value("names", names)
glue.value("scores", scores)
glue.value("roles", roles)
glue.value(
    "idle",
    [n for i, n in enumerate(names) if not jobs(i)],
)
glue.table(
    "trained-heads-scores",
    ["head", "previous token", "two back", "after the earlier copy"],
    [
        [
            n,
            two(scores["previous"][i]),
            two(scores["two_back"][i]),
            two(scores["copying"][i]),
        ]
        for i, n in enumerate(names)
    ],
    "lrrr",
)


def draw_heads(fig, theme):
    import matplotlib

    tokens = letters(example.tokens[0])
    cmap = matplotlib.colormaps[theme.cmap].copy()
    cmap.set_bad(theme.masked)
    axes = fig.subplots(N_LAYER, N_HEAD, sharex=True, sharey=True)
    blocked = np.triu(np.ones((T, T), bool), 1)
    for n in range(N_LAYER):
        for h in range(N_HEAD):
            ax = axes[n, h]
            w = example_weights[n, 0, h].numpy()
            ax.imshow(
                np.ma.masked_array(w, blocked),
                cmap=cmap,
                vmin=0,
                vmax=1,
                interpolation="nearest",
            )
            i = n * N_HEAD + h
            label = ", ".join(jobs(i)).replace("_", " ") or "—"
            ax.set_title(f"L{n}H{h}: {label}", fontsize=8)
            ax.set_xticks(range(T), tokens, fontsize=5)
            ax.set_yticks(range(T), tokens, fontsize=5)
            ax.tick_params(length=0, pad=1)
            for side in ax.spines.values():
                side.set_visible(False)


glue.figure(
    "trained-heads-patterns",
    draw_heads,
    "The attention weights of the eight heads on the example sequence: "
    "in layer 0 diagonals one and two places below the main diagonal "
    "(the previous tokens), in layer 1 a diagonal inside the repeat "
    "that points at the token after the earlier copy",
    figsize=(7.0, 4.4),
)

# %% [markdown]
# ## Removing heads (ablation)
#
# Remove a head (its output set to zero) and measure the accuracy
# again; then every pair. A head whose removal costs little is
# prunable; two heads that each cost little alone but much together do
# the same job.

# %%
n_heads = N_LAYER * N_HEAD


def without(*heads):
    keep = torch.ones(N_LAYER, N_HEAD, dtype=torch.bool)
    for head in heads:
        keep[head // N_HEAD, head % N_HEAD] = False
    return induction.accuracy(model, held_out, keep=keep)


pairs = np.zeros((n_heads, n_heads))
for a in range(n_heads):
    for b in range(a, n_heads):
        pairs[a, b] = pairs[b, a] = without(a, b) if a != b else without(a)
single = np.diag(pairs).copy()
drop = accuracy - single  # what removing one head costs
pair_drop = accuracy - pairs
# together minus apart: large for two heads that back each other up
overlap = pair_drop - drop[:, None] - drop[None, :]
np.fill_diagonal(overlap, -np.inf)
first, second = np.unravel_index(np.argmax(overlap), overlap.shape)
cheapest = min(
    ((i, j) for i in range(n_heads) for j in range(i + 1, n_heads)),
    key=lambda ij: pair_drop[ij],
)
glue.value("single", single.tolist())
glue.value(
    "ablation",
    {
        "worst_single": names[int(np.argmax(drop))],
        "worst_single_drop": float(drop.max()),
        "prunable": [n for i, n in enumerate(names) if drop[i] < 0.01],
        "duplicates": [names[first], names[second]],
        "duplicate_drops": [float(drop[first]), float(drop[second])],
        "duplicate_pair_drop": float(pair_drop[first, second]),
        "cheapest_pair": [names[i] for i in cheapest],
        "cheapest_pair_drop": float(pair_drop[cheapest]),
        "all_removed": without(*range(n_heads)),
        "layer_removed": [
            without(*range(n * N_HEAD, (n + 1) * N_HEAD))
            for n in range(N_LAYER)
        ],
    },
)
glue.table(
    "trained-heads-ablation",
    ["removed", *names],
    [
        [f"**{names[i]}**"]
        + [f"{100 * pairs[i, j]:.1f}" for j in range(n_heads)]
        for i in range(n_heads)
    ],
    "l" + "r" * n_heads,
)

# %% [markdown]
# ## Patching one head at a time
#
# The corrupted sequences are the held-out ones with every letter of the
# first copy changed: the repeat is still there, but its earlier
# occurrence is gone, and the model's answer with it. Run both, then
# run the corrupted one again with one head's output taken from the
# clean run, and measure how much of the right answer's
# log-probability comes back.

# %%
corrupted = induction.corrupt(
    held_out, VOCAB, torch.Generator().manual_seed(4)
)
restored = induction.patching(model, held_out, corrupted).flatten()
glue.value("corrupted_accuracy", induction.accuracy(model, corrupted))
glue.value("restored", restored.tolist())
order = np.argsort(-restored.numpy(), kind="stable")
glue.value("most_restored", [names[i] for i in order[:2]])
# the heads that look at the copy: how alike the pictures and the tests
copiers = [names.index(n) for n in roles["copying"]]
glue.value(
    "copy_heads",
    {
        "weight": [
            min(scores["copying"][i] for i in copiers),
            max(scores["copying"][i] for i in copiers),
        ],
        "restored": [
            min(restored[i].item() for i in copiers),
            max(restored[i].item() for i in copiers),
        ],
        "max_drop": max(drop[i] for i in copiers),
    },
)
glue.table(
    "trained-heads-patching",
    [
        "head",
        "weight on the copy (picture)",
        "restored by patching",
        "accuracy lost when removed",
    ],
    [
        [
            n,
            two(scores["copying"][i]),
            two(restored[i]),
            f"{100 * drop[i]:.1f} points",
        ]
        for i, n in enumerate(names)
    ],
    "lrrr",
)

# %% [markdown]
# ## How many heads? The same budget, 1 to 16 heads
#
# The same width, $d_\text{model} = 64$, split into 1 to 16 heads of
# $64 / h$ dimensions, each model trained with the same steps, batch,
# learning rate and seeds as the one above (whose run is reused for
# four heads).

# %%
sweep = {N_HEAD: (model, batch_accuracy)}
for n_head in HEAD_COUNTS:
    if n_head not in sweep:
        other, (_, curve) = trained(n_head)
        sweep[n_head] = (other, curve)
sweep_accuracy, first_layer = [], []
for h in HEAD_COUNTS:
    other = sweep[h][0]
    sweep_accuracy.append(induction.accuracy(other, held_out))
    with torch.no_grad():
        _, w, _ = other(held_out.tokens)
    back_1, _ = induction.head_scores(w, held_out, offset=1)
    back_2, _ = induction.head_scores(w, held_out, offset=2)
    # the first layer's best previous-token and two-back scores
    first_layer.append((back_1[0].max().item(), back_2[0].max().item()))
glue.value(
    "sweep",
    {
        "n_head": HEAD_COUNTS,
        "d_head": [D_MODEL // h for h in HEAD_COUNTS],
        "accuracy": sweep_accuracy,
        "best": HEAD_COUNTS[int(np.argmax(sweep_accuracy))],
        "beat_match_2": [
            h
            for h, a in zip(HEAD_COUNTS, sweep_accuracy, strict=True)
            if a > rules[2]
        ],
        "previous": [p for p, _ in first_layer],
        "two_back": [b for _, b in first_layer],
    },
)
glue.table(
    "trained-heads-sweep",
    [
        "heads",
        "d_head",
        "accuracy (%)",
        "layer 0: previous token",
        "layer 0: two back",
    ],
    [
        [str(h), str(D_MODEL // h), f"{100 * acc:.1f}", f"{p:.2f}", f"{b:.2f}"]
        for h, acc, (p, b) in zip(
            HEAD_COUNTS, sweep_accuracy, first_layer, strict=True
        )
    ],
    "rrrrr",
)


def draw_sweep(fig, theme):
    ax = fig.subplots()
    colors = [*theme.series, theme.text]
    for h, color in zip(HEAD_COUNTS, colors, strict=False):
        curve = smooth(sweep[h][1])
        steps = (np.arange(len(curve)) + 1) * 25
        ax.plot(
            steps,
            100 * curve,
            color=color,
            label=f"{h} head{'s' if h > 1 else ''} of {D_MODEL // h}",
        )
    ax.axhline(
        100 * rules[2],
        color=theme.muted,
        linestyle="--",
        linewidth=1,
        label="match 2 letters",
    )
    ax.set(xlabel="step", ylabel="accuracy (%)", ylim=(0, 100))
    ax.set_title("Same width, same budget, 1 to 16 heads")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, linewidth=0.5)


glue.figure(
    "trained-heads-sweep",
    draw_sweep,
    "Accuracy over training for models with 1, 2, 4, 8 and 16 heads "
    "at the same width and budget",
)

# %% [markdown]
# ## The weights, for the page
#
# The page's control runs this model in the reader's browser. It reads
# these weights, float32, little-endian, base64, each matrix used as
# $x W$.

# %%
arrays = induction.to_arrays(model)
size = glue.export(
    "trained-heads",
    {
        "letters": LETTERS,
        "t_max": T,
        "d_model": D_MODEL,
        "n_head": N_HEAD,
        "n_layer": N_LAYER,
        "names": names,
        "example": letters(example.tokens[0]),
        "weights": {
            key: {
                "shape": list(value.shape),
                "float32": base64.b64encode(
                    value.astype("<f4").tobytes()
                ).decode("ascii"),
            }
            for key, value in arrays.items()
        },
    },
)
glue.value("export_kb", size / 1024)
