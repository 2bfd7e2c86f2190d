# %% [markdown]
# ## Setup
#
# A small attention-only transformer, trained here on the CPU to copy
# repeated text, then looked at from inside: where each head attends,
# what it writes to the logits, what removing heads costs, and what
# patching head outputs between a clean and a corrupted run restores.
# The model is `mha_ref/induction.py`, built from `mha_ref`'s own
# `MultiHeadAttention`. Everything is seeded and runs on one thread, so
# the same versions of Python, NumPy and PyTorch give the same weights
# and the same numbers. Training the nine models takes about a minute
# on a laptop's CPU.

# %%
import base64

import numpy as np
import torch

import glue
from mha_ref import induction, torch_ref

torch.set_num_threads(1)  # one thread: the same sums in the same order
torch.use_deterministic_algorithms(True)

LETTERS = "abcdefgh"  # the vocabulary: 8 tokens, shown as letters
VOCAB, T = len(LETTERS), 24  # tokens, sequence length
D_MODEL, N_HEAD, N_LAYER = 64, 4, 2
STEPS, BATCH = 400, 64  # the training budget of every model
LR = induction.LR  # train's default learning rate, the one shown
# The sweep: the same d_model cut into 1, 2 and 4 heads, three seeds
# each (seed s: initial weights s, batches from seed 1 + 10 s), every
# run with the budget above; the four-head seed 0 is the page's model.
# Eight and sixteen heads cost more per step than the build can spend.
HEAD_COUNTS, SEEDS = [1, 2, 4], [0, 1, 2]
N_EVAL = 500  # held-out sequences for every accuracy
ROLE = 0.5  # a head "does" a job with at least half its weight on it
PRUNABLE, COSTLY = 0.01, 0.05  # accuracy lost: under 1 point, over 5
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
        "seeds": len(SEEDS),
        "n_eval": N_EVAL,
        "role": ROLE,
        "prunable": PRUNABLE,
        "costly": COSTLY,
        "tolerance": TOLERANCE,
        "torch": torch.__version__.split("+")[0],
    },
)


def letters(tokens):
    return "".join(LETTERS[i] for i in tokens.tolist())


def two(x):
    """x to two decimals for a table, without a "-0.00"."""
    return f"{x:.2f}".replace("-0.00", "0.00")


def points(x):
    """An accuracy difference in points, one decimal, no "-0.0"."""
    return f"{100 * x:.1f}".replace("-0.0", "0.0")


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
        "copyable": int((example.copy_from[0] >= 0).sum()),
    },
)

# %% [markdown]
# ## Training
#
# Two layers of four heads, $d_\text{model} = 64$, learned positions,
# AdamW. `train` draws a fresh batch every step, so the accuracy on the
# training batch is already an accuracy on unseen data; the loss counts
# only the tokens that can be copied.


# %%
def trained(n_head, seed=0):
    torch.manual_seed(seed)  # the initial weights of this seed
    model = induction.AttentionOnly(VOCAB, T, D_MODEL, n_head, N_LAYER)
    data = torch.Generator().manual_seed(1 + 10 * seed)  # its batches
    curve = induction.train(model, STEPS, data, batch_size=BATCH)  # lr=LR
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
    ax_loss, ax_acc = fig.subplots(2, 1, sharex=True)  # phone-wide
    steps = (np.arange(len(smooth(losses))) + 1) * 25
    ax_loss.plot(steps, smooth(losses), color=theme.series[0])
    ax_loss.set(ylabel="cross-entropy (nats)")
    ax_loss.set_title("Training loss (copyable tokens)", fontsize=9)
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
    ax_acc.set_title("Accuracy on copyable tokens", fontsize=9)
    ax_acc.legend(loc="lower right", fontsize=7)
    for ax in (ax_loss, ax_acc):
        ax.grid(True, linewidth=0.5)


glue.figure(
    "trained-heads-curve",
    draw_curve,
    "Training loss falling and accuracy rising over the steps, with "
    "the accuracy of the one-, two- and three-letter matching rules",
    figsize=(3.7, 4.8),  # 355 px: whole in a phone's column
)

# %% [markdown]
# ## Where each head attends, and what it writes
#
# Every head's weights on the example sequence: row $i$ is query $i$,
# column $j$ key $j$, the causal mask blocks the upper triangle. Then
# four scores per head over the held-out sequences: the mean weight on
# the previous token and on the one before it; the mean weight, at a
# query inside the repeat, on the token right after the earlier copy of
# the query's own token (prefix matching); and the head's direct effect
# on the logit of that token (copying), in logits.

# %%
names = [f"L{n}H{h}" for n in range(N_LAYER) for h in range(N_HEAD)]
n_heads = N_LAYER * N_HEAD
with torch.no_grad():
    _, example_weights, _ = model(example.tokens)  # (L, 1, H, T, T)
    _, weights, clean_heads = model(held_out.tokens)  # (L, N, H, T, ..)
previous, prefix = induction.head_scores(weights, held_out, offset=1)
two_back, _ = induction.head_scores(weights, held_out, offset=2)
copy_logit = induction.copying(model, held_out)  # (L, H), in logits
scores = {
    "previous": previous.flatten().tolist(),
    "two_back": two_back.flatten().tolist(),
    "prefix": prefix.flatten().tolist(),
}
copying = copy_logit.flatten().tolist()


def jobs(head):
    """The jobs head number `head` (0 .. 7) spends half its weight on."""
    return [job for job in scores if scores[job][head] >= ROLE]


roles = {
    job: [n for i, n in enumerate(names) if job in jobs(i)] for job in scores
}
# Olsson et al.'s induction head: prefix matching and copying
induction_heads = [
    n for i, n in enumerate(names) if "prefix" in jobs(i) and copying[i] > 0
]
glue.value("names", names)
glue.value("scores", scores)
glue.value("copying", copying)
glue.value("roles", roles)
glue.value("induction_heads", induction_heads)
glue.value("idle", [n for i, n in enumerate(names) if not jobs(i)])
layer_1 = [names.index(n) for n in names if n.startswith("L1")]
glue.value(
    "copy_range",
    [min(copying[i] for i in layer_1), max(copying[i] for i in layer_1)],
)
glue.table(
    "trained-heads-scores",
    ["head", "copying (logit)", "prefix matching", "previous", "two back"],
    [  # the induction criteria first: they fit a phone's width
        [
            n,
            two(copying[i]),
            two(scores["prefix"][i]),
            two(scores["previous"][i]),
            two(scores["two_back"][i]),
        ]
        for i, n in enumerate(names)
    ],
    "lrrrr",
)


def draw_heads(fig, theme):
    import matplotlib

    tokens = letters(example.tokens[0])
    cmap = matplotlib.colormaps[theme.cmap].copy()
    cmap.set_bad(theme.masked)
    axes = fig.subplots(N_HEAD, N_LAYER, sharex=True, sharey=True)
    blocked = np.triu(np.ones((T, T), bool), 1)
    start, length = int(example.start[0]), int(example.length[0])
    # where the first copy starts, the second starts, the second ends
    edges = [start - 0.5, start + length - 0.5, start + 2 * length - 0.5]
    ticks = list(range(0, T, 4))
    for n in range(N_LAYER):
        for h in range(N_HEAD):
            ax = axes[h, n]  # a column per layer
            w = example_weights[n, 0, h].numpy()
            image = ax.imshow(
                np.ma.masked_array(w, blocked),
                cmap=cmap,
                vmin=0,
                vmax=1,
                interpolation="nearest",
            )
            i = n * N_HEAD + h
            label = ", ".join(jobs(i)).replace("_", " ") or "—"
            ax.set_title(f"L{n}H{h}: {label}", fontsize=8)
            ax.set_xticks(ticks, [f"{j}\n{tokens[j]}" for j in ticks])
            ax.set_yticks(ticks, [f"{j} {tokens[j]}" for j in ticks])
            ax.tick_params(length=2, pad=1, labelsize=8)
            for edge in [e for e in edges if e < T - 1]:
                ax.axvline(edge, color=theme.text, linewidth=1.4)
                ax.axhline(edge, color=theme.text, linewidth=1.4)
            for side in ax.spines.values():
                side.set_visible(False)
            if h == N_HEAD - 1:
                ax.set_xlabel("key", fontsize=8)
            if n == 0:
                ax.set_ylabel("query", fontsize=8)
    bar = fig.colorbar(image, ax=axes, shrink=0.5, location="bottom", pad=0.06)
    bar.set_label("attention weight", fontsize=8)


glue.figure(
    "trained-heads-patterns",
    draw_heads,
    "The attention weights of the eight heads on the example sequence: "
    "in layer 0 diagonals one and two places below the main diagonal "
    "(the previous tokens), in layer 1 a diagonal inside the repeat "
    "that points at the token after the earlier copy; lines mark "
    "where the first copy starts and where the repeat starts and ends; "
    "one column per layer, one row per head",
    figsize=(3.7, 8.4),  # 355 px: whole in a phone's column
)


def draw_circuit(fig, theme):
    """The circuit on positions: layer 0 writes k - 1's letter into k,
    layer 1 at query i finds that letter at key k and copies k's."""
    ax = fig.subplots()
    seq = ["c", "A", "B", "d", "e", "A"]
    marks = ["", "k\u22121", "k", "", "", "i"]
    for x, (c, mark) in enumerate(zip(seq, marks, strict=True)):
        ax.text(
            x,
            0,
            c,
            ha="center",
            va="center",
            fontsize=11,
            color=theme.text,
            bbox={
                "boxstyle": "round,pad=0.3",
                "fc": "none",
                "ec": theme.muted,
            },
        )
        ax.text(
            x, -0.45, mark, ha="center", va="top", fontsize=8, color=theme.text
        )
    ax.text(
        5.55, 0, "\u2192 B", va="center", fontsize=11, color=theme.series[1]
    )
    previous, copier = theme.series[0], theme.series[1]
    ax.annotate(
        "",
        xy=(2, 0.35),
        xytext=(1, 0.35),
        arrowprops={
            "arrowstyle": "->",
            "color": previous,
            "lw": 1.8,
            "connectionstyle": "arc3,rad=-0.6",
        },
    )
    ax.text(
        1.5,
        0.95,
        "layer 0, previous-token head:\nwrites A into k",
        ha="center",
        va="bottom",
        fontsize=8,
        color=previous,
    )
    ax.annotate(
        "",
        xy=(2, -0.9),
        xytext=(5, -0.9),
        arrowprops={
            "arrowstyle": "->",
            "color": copier,
            "lw": 1.8,
            "connectionstyle": "arc3,rad=-0.35",
        },
    )
    ax.text(
        3.5,
        -1.75,
        "layer 1, induction head: query A at i\n"
        "matches key k (it holds A), copies B",
        ha="center",
        va="top",
        fontsize=8,
        color=copier,
    )
    ax.set(xlim=(-0.5, 6.3), ylim=(-2.7, 1.8))
    ax.axis("off")


glue.figure(
    "trained-heads-circuit",
    draw_circuit,
    "The circuit on a sequence c A B d e A: an arrow from position k-1 "
    "(A) to k (B) for the layer-0 previous-token head, which writes A "
    "into position k; an arrow from the last position i (A) back to k "
    "for the layer-1 induction head, which finds the key whose previous "
    "letter is A and copies B, the predicted next letter",
    figsize=(3.7, 2.2),  # 355 px: whole in a phone's column
)

# %% [markdown]
# ## Removing heads (ablation)
#
# Zero ablation sets a head's output to zero; mean ablation replaces it
# with its mean over the held-out sequences at the same position, so
# the next layer still sees an output of the usual size. Each head
# alone, then every pair (zero ablation).


# %%
def flags(*heads):
    """(n_layer, n_head) bool, True at the given head numbers."""
    out = torch.zeros(N_LAYER, N_HEAD, dtype=torch.bool)
    for head in heads:
        out[head // N_HEAD, head % N_HEAD] = True
    return out


def without(*heads):
    """Accuracy with these heads' outputs set to zero."""
    return induction.accuracy(model, held_out, keep=~flags(*heads))


# each head's mean output, position by position, over the held-out set
mean_heads = clean_heads.mean(dim=1, keepdim=True).expand_as(clean_heads)


def mean_without(*heads):
    """Accuracy with these heads' outputs replaced by their mean."""
    return induction.accuracy(
        model, held_out, patch=flags(*heads), source=mean_heads
    )


pairs = np.zeros((n_heads, n_heads))
for a in range(n_heads):
    for b in range(a, n_heads):
        pairs[a, b] = pairs[b, a] = without(a, b) if a != b else without(a)
single = np.diag(pairs).copy()
drop = accuracy - single  # what removing one head costs
mean_drop = accuracy - np.array([mean_without(i) for i in range(n_heads)])
pair_drop = accuracy - pairs
# together minus apart: large for two heads that back each other up
overlap = pair_drop - drop[:, None] - drop[None, :]
np.fill_diagonal(overlap, -np.inf)
first, second = np.unravel_index(np.argmax(overlap), overlap.shape)
first, second = int(first), int(second)
cheapest = min(
    ((i, j) for i in range(n_heads) for j in range(i + 1, n_heads)),
    key=lambda ij: pair_drop[ij],
)
layers = [list(range(n * N_HEAD, (n + 1) * N_HEAD)) for n in range(N_LAYER)]
glue.value("single", single.tolist())
glue.value("layer_1_drops", [drop[layers[1]].min(), drop[layers[1]].max()])
glue.value(
    "ablation",
    {
        "worst_single": names[int(np.argmax(drop))],
        "worst_single_drop": float(drop.max()),
        "costly": [n for i, n in enumerate(names) if drop[i] > COSTLY],
        "costly_drops": [float(d) for d in drop if d > COSTLY],
        "prunable": [n for i, n in enumerate(names) if drop[i] < PRUNABLE],
        "duplicates": [names[first], names[second]],
        "duplicate_drops": [float(drop[first]), float(drop[second])],
        "duplicate_pair_drop": float(pair_drop[first, second]),
        "cheapest_pair": [names[i] for i in cheapest],
        "cheapest_pair_drop": float(pair_drop[cheapest]),
        "all_removed": without(*range(n_heads)),
        "layer_removed": [without(*heads) for heads in layers],
    },
)
glue.value(
    "mean_ablation",
    {
        "drop": mean_drop.tolist(),
        "worst_single": names[int(np.argmax(mean_drop))],
        "costly": [n for i, n in enumerate(names) if mean_drop[i] > COSTLY],
        "prunable": [
            n for i, n in enumerate(names) if mean_drop[i] < PRUNABLE
        ],
        "duplicate_pair_drop": accuracy - mean_without(first, second),
        "layer_removed": [mean_without(*heads) for heads in layers],
        # the largest gap between the two kinds of removal, one head,
        # between the points the table shows (rounded as it rounds them)
        "max_gap": max(
            abs(float(points(m)) - float(points(z))) / 100
            for m, z in zip(mean_drop, drop, strict=True)
        ),
    },
)


# without the previous-token head: where layer 1 still looks, against a
# head that spreads its weight evenly over the keys it may see
previous_head = int(np.argmax(scores["previous"][:N_HEAD]))  # in layer 0
with torch.no_grad():
    _, weights_without, _ = model(held_out.tokens, keep=~flags(previous_head))
_, prefix_without = induction.head_scores(weights_without, held_out, offset=1)
queries = torch.nonzero(held_out.copy_from >= 0, as_tuple=True)[1]
glue.value(
    "without_previous",
    {
        "prefix": [
            prefix_without[1].min().item(),
            prefix_without[1].max().item(),
        ],
        "uniform": (1.0 / (queries + 1).double()).mean().item(),
        "accuracy": float(single[previous_head]),
    },
)


def draw_ablation(fig, theme):
    import matplotlib

    ax = fig.subplots()
    cmap = matplotlib.colormaps[theme.cmap]
    image = ax.imshow(100 * pairs, cmap=cmap, vmin=0, vmax=100)
    for i in range(n_heads):
        for j in range(n_heads):
            ax.text(
                j,
                i,
                f"{100 * pairs[i, j]:.0f}",
                ha="center",
                va="center",
                fontsize=7,
                color=theme.text_on(cmap(pairs[i, j])),
            )
    ax.set_xticks(range(n_heads), names, fontsize=7, rotation=90)
    ax.set_yticks(range(n_heads), names, fontsize=7)
    ax.set(xlabel="also removed", ylabel="removed")
    ax.set_title(
        "Accuracy (%), two heads removed\n(diagonal: one)", fontsize=9
    )
    for side in ax.spines.values():
        side.set_visible(False)
    fig.colorbar(image, ax=ax, shrink=0.8)


glue.figure(
    "trained-heads-ablation",
    draw_ablation,
    "Accuracy with every pair of heads set to zero, as an 8 by 8 grid: "
    "the rows and columns of the previous-token head are dark, those of "
    "the two-back head a little lighter, the rest close to the accuracy "
    "with every head on",
    figsize=(3.7, 3.6),  # 355 px: whole in a phone's column
)

# Two heads of the last layer: removing one leaves the other's output
# exactly as it was, and their direct effects on the logits add up.
keep = ~flags(first)
with torch.no_grad():
    _, _, heads_without = model(held_out.tokens, keep=keep)
unchanged = (
    (heads_without[1, :, second % N_HEAD] - clean_heads[1, :, second % N_HEAD])
    .abs()
    .max()
    .item()
)
b_idx, q_idx = torch.nonzero(held_out.copy_from >= 0, as_tuple=True)
right = held_out.tokens[b_idx, q_idx + 1]  # the letter to predict


def right_logit(keep=None):
    """The right letter's logit at every copyable query, centred."""
    with torch.no_grad():
        logits, _, _ = model(held_out.tokens, keep=keep)
    lg = logits[b_idx, q_idx]  # (N, vocab)
    lg = lg - lg.mean(-1, keepdim=True)
    return lg[torch.arange(len(right)), right]


every = right_logit()
loss_a = every - right_logit(~flags(first))
loss_b = every - right_logit(~flags(second))
loss_ab = every - right_logit(~flags(first, second))
glue.value(
    "last_layer",
    {
        "unchanged": unchanged,
        "logit_loss": [
            loss_a.mean().item(),
            loss_b.mean().item(),
            loss_ab.mean().item(),
        ],
        "interaction": (loss_ab - loss_a - loss_b).abs().max().item(),
        # the same, to one digit, as (mantissa, exponent) for the prose
        "interaction_digits": [
            int(part)
            for part in f"{(loss_ab - loss_a - loss_b).abs().max():.0e}".split(
                "e"
            )
        ],
    },
)

# %% [markdown]
# ## Patching
#
# The corrupted sequences are the held-out ones with every letter of the
# first copy changed: the second copy is still there, but nothing
# before it matches it any more, and the model's answer is gone.
# Denoising runs the corrupted sequences with some heads' outputs taken
# from the clean run and measures how much of the gap in the right
# letter's mean log-probability comes back; noising runs the clean
# sequences with some heads taken from the corrupted run and measures
# how much is lost.

# %%
corrupted = induction.corrupt(
    held_out, VOCAB, torch.Generator().manual_seed(4)
)
restored = induction.patching(model, held_out, corrupted).flatten()
glue.value("corrupted_accuracy", induction.accuracy(model, corrupted))
glue.value("restored", restored.tolist())
with torch.no_grad():
    _, _, corrupted_heads = model(corrupted.tokens)
key = held_out.copy_from[b_idx, q_idx]  # the key after the earlier copy
offered = corrupted.tokens[b_idx, key]  # what the corrupted copy offers


def run(tokens, patch=None, source=None):
    """Mean log p of the right letter; shares of the copyable queries
    that predict it and the corrupted first copy's letter; layer 1's
    mean weight on the key after the earlier copy."""
    with torch.no_grad():
        logits, w, _ = model(tokens, patch=patch, source=source)
    log_p = logits[b_idx, q_idx].log_softmax(-1)  # (N, vocab)
    guess = log_p.argmax(-1)
    return {
        "log_p": log_p[torch.arange(len(right)), right].mean().item(),
        "right": (guess == right).float().mean().item(),
        "offered": (guess == offered).float().mean().item(),
        "weight": w[1, b_idx, :, q_idx, key].mean().item(),
    }


clean_run, corrupted_run = run(held_out.tokens), run(corrupted.tokens)
gap = clean_run["log_p"] - corrupted_run["log_p"]


def denoise(*heads, tokens=corrupted.tokens):
    """Share of the gap these clean heads restore to the run on tokens."""
    got = run(tokens, flags(*heads), clean_heads)
    return (got["log_p"] - corrupted_run["log_p"]) / gap, got


def noise(*heads, tokens=held_out.tokens):
    """Share of the gap lost when these heads come from corrupted."""
    got = run(tokens, flags(*heads), corrupted_heads)
    return (clean_run["log_p"] - got["log_p"]) / gap, got


noised = [noise(i)[0] for i in range(n_heads)]
others = [h for h in layers[0] if h != previous_head]
alone, alone_run = denoise(previous_head)
# the clean tokens with every layer-0 head from the corrupted run: only
# the first copy's embeddings are clean
embeddings, embeddings_run = noise(*layers[0])
# the clean tokens, the other layer-0 heads from the corrupted run: the
# first copy's embeddings and the previous-token head are clean
both, both_run = noise(*others)
# and the two-back head clean too: only the remaining layer-0 heads
# come from the corrupted run
two_back_head = int(np.argmax(scores["two_back"][:N_HEAD]))  # in layer 0
rest = [h for h in others if h != two_back_head]
three, three_run = noise(*rest)
glue.value(
    "patching",
    {
        "noised": noised,
        "layer_1_together": denoise(*layers[1])[0],
        "layer_1_sum": float(sum(restored[i].item() for i in layers[1])),
        "previous_head": names[previous_head],
        "weight": {
            "clean": clean_run["weight"],
            "corrupted": corrupted_run["weight"],
            "patched": alone_run["weight"],
        },
        "offered": {
            "clean": clean_run["offered"],
            "corrupted": corrupted_run["offered"],
            "patched": alone_run["offered"],
        },
        "right_patched": alone_run["right"],
        "alone": alone,
        "embeddings": 1 - embeddings,
        "both": 1 - both,
        "both_right": both_run["right"],
        "two_back_head": names[two_back_head],
        "three": 1 - three,
        "three_right": three_run["right"],
        "noised_previous": noised[previous_head],
    },
)


def ranked(values):
    """Layer 1's heads, largest value first."""
    values = np.asarray(values, dtype=float)[layers[1]]
    return [names[layers[1][i]] for i in np.argsort(-values, kind="stable")]


# does where a head looks rank the layer-1 heads as what they do does?
measures = [copying, restored.numpy(), noised, drop]
layer_1_prefix = [scores["prefix"][i] for i in layers[1]]
layer_1_restored = [restored[i].item() for i in layers[1]]
glue.value(
    "ranking",
    {
        "by_prefix": ranked(scores["prefix"]),
        "same": all(ranked(m) == ranked(scores["prefix"]) for m in measures),
        "prefix": [min(layer_1_prefix), max(layer_1_prefix)],
        "prefix_ratio": max(layer_1_prefix) / min(layer_1_prefix),
        "restored_ratio": max(layer_1_restored) / min(layer_1_restored),
    },
)
order = np.argsort(-restored.numpy(), kind="stable")
glue.value("most_restored", [names[i] for i in order[:2]])
by_copying = np.argsort(-np.array(copying), kind="stable")
glue.value("most_copying", [names[i] for i in by_copying[:2]])
glue.value(
    "layer_1_restored",
    [
        min(restored[i].item() for i in layers[1]),
        max(restored[i].item() for i in layers[1]),
    ],
)
glue.table(
    "trained-heads-causal",
    [
        "head",
        "zero ablation (points)",
        "mean ablation (points)",
        "denoising: restored",
        "noising: lost",
    ],
    [
        [
            n,
            points(drop[i]),
            points(mean_drop[i]),
            two(restored[i]),
            two(noised[i]),
        ]
        for i, n in enumerate(names)
    ],
    "lrrrr",
)
glue.table(
    "trained-heads-and",
    ["run on the corrupted sequences, with clean", "restored", "right (%)"],
    [
        ["nothing", "0.00", f"{100 * corrupted_run['right']:.1f}"],
        [
            f"{names[previous_head]} only",
            two(alone),
            f"{100 * alone_run['right']:.1f}",
        ],
        [
            "the first copy's embeddings only",
            two(1 - embeddings),
            f"{100 * embeddings_run['right']:.1f}",
        ],
        [
            f"both: {names[previous_head]} and the embeddings",
            two(1 - both),
            f"{100 * both_run['right']:.1f}",
        ],
        [
            f"{names[previous_head]}, {names[two_back_head]} and the "
            "embeddings",
            two(1 - three),
            f"{100 * three_run['right']:.1f}",
        ],
        ["everything (the clean run)", "1.00", f"{100 * accuracy:.1f}"],
    ],
    "lrr",
)

# %% [markdown]
# ## K-composition, measured
#
# Layer 1 reads layer 0's output three ways: through its queries, its
# keys and its values. To see which path the previous-token head's
# output takes to make layer 1 look at the copy, the build recomputes
# layer 1's weights with that head's output removed from the residual
# stream its *keys* read only (K-composition), from the stream its
# *queries* read only (Q-composition), or from both. Then the weights
# alone: Elhage et al.'s composition score of the previous-token head's
# OV map with each layer-1 head's QK map, against the same score for
# random matrices of the same shapes.

# %%
with torch.no_grad():
    x0 = model.embed(held_out.tokens) + model.pos_embed.weight[:T]
    layer_0 = model.layers[0]
    full_z0 = clean_heads[0]  # (N, H, T, dh)
    x1 = x0 + layer_0.wo(layer_0.merge_heads(full_z0))  # (N, T, d)
    kept = full_z0 * (~flags(previous_head)[0])[:, None, None]
    x1_without = x0 + layer_0.wo(layer_0.merge_heads(kept))
    mask = torch_ref.causal_mask(T)
    layer_1 = model.layers[1]

    def copy_weight(x_query, x_key):
        """Layer 1's mean weight on the key after the earlier copy, each
        head, with queries from x_query and keys from x_key."""
        q, _, _ = layer_1.project(x_query)  # (N, H, T, dh)
        _, k, _ = layer_1.project(x_key)
        _, w = torch_ref.attention(q, k, k, mask)  # (N, H, T, T)
        return w[b_idx, :, q_idx, key].mean(0)  # (H,)

    paths = {
        "clean": copy_weight(x1, x1),
        "keys": copy_weight(x1, x1_without),  # K-composition cut
        "queries": copy_weight(x1_without, x1),  # Q-composition cut
        "both": copy_weight(x1_without, x1_without),
    }
    # composition scores from the weights (rows act on x: x @ W)
    dh = layer_0.d_head
    k_scores, q_scores = induction.composition_scores(
        model, previous_head
    ).tolist()  # ||QK OV^T||, ||OV QK|| over ||QK|| ||OV||, each head

    def k_score(a, b):
        """||a b^T|| / (||a|| ||b||): the score of two random maps."""
        return (
            torch.linalg.matrix_norm(a @ b.T)
            / torch.linalg.matrix_norm(a)
            / torch.linalg.matrix_norm(b)
        ).item()

    rand = torch.Generator().manual_seed(5)

    def random_rank(rows, cols, rank):
        return torch.randn(rows, rank, generator=rand) @ torch.randn(
            rank, cols, generator=rand
        )

    baseline = float(
        np.mean(
            [
                k_score(
                    random_rank(D_MODEL, D_MODEL, dh),
                    random_rank(D_MODEL, D_MODEL, dh),
                )
                for _ in range(200)
            ]
        )
    )
layer_1_names = [names[i] for i in layers[1]]
induction_l1 = [
    layer_1_names.index(n) for n in induction_heads if n in layer_1_names
] or list(range(N_HEAD))  # no induction head: all of layer 1
glue.value(
    "composition",
    {
        "paths": {k: v.tolist() for k, v in paths.items()},
        # the induction heads' weight on the copy, per path cut
        **{
            f"{path}_range": [
                min(paths[path][h].item() for h in induction_l1),
                max(paths[path][h].item() for h in induction_l1),
            ]
            for path in paths
        },
        "k_scores": k_scores,
        "q_scores": q_scores,
        # the induction heads' composition scores, lowest and highest
        **{
            f"{name}_range": [
                min(values[h] for h in induction_l1),
                max(values[h] for h in induction_l1),
            ]
            for name, values in (("k", k_scores), ("q", q_scores))
        },
        "baseline": baseline,
    },
)
glue.table(
    "trained-heads-composition",
    [
        "layer-1 head",
        "K score",
        "Q score",
        "weight on the copy",
        f"{names[previous_head]} cut from keys",
        "from queries",
        "from both",
    ],
    [  # the composition scores first: they fit a phone's width
        [
            n,
            two(k_scores[h]),
            two(q_scores[h]),
            two(paths["clean"][h]),
            two(paths["keys"][h]),
            two(paths["queries"][h]),
            two(paths["both"][h]),
        ]
        for h, n in enumerate(layer_1_names)
    ],
    "lrrrrrr",
)

# %% [markdown]
# ## The standard test: repeated random tokens
#
# Olsson et al.'s test: a random sequence of 12 letters followed by the
# same 12 again, nothing else. In the second half every next letter is
# the one after the earlier occurrence; an induction head puts its
# weight there (its *induction score*), and a model that copies predicts
# it.

# %%
half = T // 2
first_half = torch.randint(
    0, VOCAB, (N_EVAL, half), generator=torch.Generator().manual_seed(6)
)
i_pos = torch.arange(T)[None, :]
repeated = induction.Segments(
    tokens=torch.cat([first_half, first_half], 1),  # (N, T)
    copy_from=torch.where(
        (i_pos >= half) & (i_pos < T - 1), i_pos - half + 1, -1
    ).expand(N_EVAL, T),
    start=torch.zeros(N_EVAL, dtype=torch.long),
    length=torch.full((N_EVAL,), half),
)
with torch.no_grad():
    _, rr_weights, _ = model(repeated.tokens)
_, rr_induction = induction.head_scores(rr_weights, repeated, offset=1)
glue.value(
    "repeated_random",
    {
        "half": half,
        "accuracy": induction.accuracy(model, repeated),
        "induction_score": rr_induction.flatten().tolist(),
        "induction_range": [
            min(rr_induction.flatten()[i].item() for i in layers[1]),
            max(rr_induction.flatten()[i].item() for i in layers[1]),
        ],
        "layer_0_max": rr_induction[0].max().item(),
    },
)

# %% [markdown]
# ## How many heads? The same width and budget, three seeds
#
# The same width, $d_\text{model} = 64$, split into 1, 2 or 4 heads of
# $64 / h$ dimensions, each trained with the same steps, batch and
# learning rate from three seeds (the four-head seed 0 is the model
# above).

# %%
sweep = {}
for h in HEAD_COUNTS:
    for seed in SEEDS:
        if (h, seed) == (N_HEAD, 0):
            sweep[h, seed] = (model, batch_accuracy)
        else:
            other, (_, curve) = trained(h, seed)
            sweep[h, seed] = (other, curve)
results = {}
for (h, seed), (other, _) in sweep.items():
    with torch.no_grad():
        logits, w, _ = other(held_out.tokens)
    back_1, _ = induction.head_scores(w, held_out, offset=1)
    back_2, _ = induction.head_scores(w, held_out, offset=2)
    # accuracy as induction.accuracy computes it, from the same forward
    guess = logits[:, :-1].argmax(-1)  # (N, T - 1)
    hits = (guess == held_out.tokens[:, 1:])[held_out.copy_from[:, :-1] >= 0]
    # layer 0's best previous-token and two-back scores
    results[h, seed] = (
        hits.float().mean().item(),
        back_1[0].max().item(),
        back_2[0].max().item(),
    )


def per_seed(h, k):
    return [results[h, s][k] for s in SEEDS]


glue.value(
    "sweep",
    {
        "n_head": HEAD_COUNTS,
        "d_head": [D_MODEL // h for h in HEAD_COUNTS],
        "accuracy": [per_seed(h, 0) for h in HEAD_COUNTS],
        "lowest": [min(per_seed(h, 0)) for h in HEAD_COUNTS],
        "highest": [max(per_seed(h, 0)) for h in HEAD_COUNTS],
        "beat_match_2": [
            sum(a > rules[2] for a in per_seed(h, 0)) for h in HEAD_COUNTS
        ],
        # the most a seed moves one head count's accuracy, and whether
        # some head count has seeds on both sides of the two-letter rule
        "seed_spread": max(
            max(per_seed(h, 0)) - min(per_seed(h, 0)) for h in HEAD_COUNTS
        ),
        "crosses_rule": any(
            min(per_seed(h, 0)) <= rules[2] < max(per_seed(h, 0))
            for h in HEAD_COUNTS
        ),
        "previous": [per_seed(h, 1) for h in HEAD_COUNTS],
        "two_back": [per_seed(h, 2) for h in HEAD_COUNTS],
        "two_back_when_beat": [
            [results[h, s][2] for s in SEEDS if results[h, s][0] > rules[2]]
            for h in HEAD_COUNTS
        ],
        "two_back_when_not": [
            [results[h, s][2] for s in SEEDS if results[h, s][0] <= rules[2]]
            for h in HEAD_COUNTS
        ],
    },
)


def spread(values, fmt):
    """ "lowest to highest", or the one value if they print alike."""
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low} to {high}"


glue.table(
    "trained-heads-sweep",
    [
        "heads",
        "d_head",
        "accuracy (%), seeds 0, 1, 2",
        "past 2 letters",
        "layer 0: previous",
        "layer 0: two back",
    ],
    [
        [
            str(h),
            str(D_MODEL // h),
            ", ".join(f"{100 * a:.1f}" for a in per_seed(h, 0)),
            f"{sum(a > rules[2] for a in per_seed(h, 0))} of {len(SEEDS)}",
            spread(per_seed(h, 1), two),
            spread(per_seed(h, 2), two),
        ]
        for h in HEAD_COUNTS
    ],
    "rrrrrr",
)


def draw_sweep(fig, theme):
    ax = fig.subplots()
    for h, color in zip(HEAD_COUNTS, theme.series, strict=False):
        for seed in SEEDS:
            curve = smooth(sweep[h, seed][1])
            steps = (np.arange(len(curve)) + 1) * 25
            ax.plot(
                steps,
                100 * curve,
                color=color,
                linewidth=1.2,
                linestyle=["-", "--", ":"][seed % 3],
                label=(
                    f"{h} head{'s' if h > 1 else ''} of {D_MODEL // h}"
                    if seed == SEEDS[0]
                    else None
                ),
            )
    ax.axhline(
        100 * rules[2],
        color=theme.muted,
        linestyle="-.",
        linewidth=1,
        label="match 2 letters",
    )
    ax.set(xlabel="step", ylabel="accuracy (%)", ylim=(0, 100))
    for seed in SEEDS:  # legend entries for the line styles
        ax.plot(
            [],
            [],
            color=theme.muted,
            linewidth=1.2,
            linestyle=["-", "--", ":"][seed % 3],
            label=f"seed {seed}",
        )
    ax.set_title("Training batches: 1, 2, 4 heads, 3 seeds", fontsize=9)
    ax.legend(loc="lower right", fontsize=6.5, ncol=2)
    ax.grid(True, linewidth=0.5)


glue.figure(
    "trained-heads-sweep",
    draw_sweep,
    "Training accuracy over the steps for models with 1, 2 and 4 heads "
    "at the same width and budget, three seeds each (solid, dashed, "
    "dotted), with the two-letter rule as a line",
    figsize=(3.7, 3.4),  # 355 px: whole in a phone's column
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
