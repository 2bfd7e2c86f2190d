# %% [markdown]
# ## A paged cache: three requests, one shared system prompt
#
# Blocks of 4 positions. Request A's system prompt (6 positions) is
# shared with request B by `fork`; each then appends its own tokens, so
# the shared, half-full second block is copied for the one that writes
# first. Request C arrives between them, so the tables interleave. Every
# read must still give back exactly what was appended.

# %%
import math

import numpy as np
import torch
from matplotlib.colors import to_rgba
from matplotlib.patches import Circle, FancyArrowPatch, Rectangle

import glue
from mha_ref import serving, torch_ref

torch.manual_seed(0)
BLOCK, H_KV, D = 4, 1, 2
glue.value("picture_block", BLOCK)
cache = serving.PagedKVCache(10, BLOCK, H_KV, D, dtype=torch.float64)
appended = {}


def append(seq, n):
    k, v = (
        torch.randn(H_KV, n, D, dtype=torch.float64),
        torch.randn(H_KV, n, D, dtype=torch.float64),
    )
    cache.append(seq, k, v)
    old = appended.get(seq, (k[:, :0], v[:, :0]))
    appended[seq] = (torch.cat([old[0], k], 1), torch.cat([old[1], v], 1))


system = glue.value("system_prompt", 6)
append("A", system)
cache.fork("A", "B")  # B shares A's blocks: nothing is copied
appended["B"] = appended["A"]
glue.value("shared_table", cache.block_table("B"))
append("C", 5)
append("B", 3)  # B writes into the shared half-full block: a copy
append("A", 4)
append("C", 4)
tables = glue.value("tables", {s: cache.block_table(s) for s in "ABC"})
glue.value("lengths", {s: cache.length(s) for s in "ABC"})
glue.value("blocks_used", cache.num_blocks - len(cache.free_blocks))
glue.value(
    "blocks_unshared", sum(math.ceil(cache.length(s) / BLOCK) for s in "ABC")
)
exact = all(
    torch.equal(cache.gather(s)[0], appended[s][0])
    and torch.equal(cache.gather(s)[1], appended[s][1])
    for s in "ABC"
)
glue.value("gather_exact", exact)
print(tables, "every read equals what was appended:", exact)


copied_to = glue.value("copied_block", tables["B"][1])
copied_from = glue.value("copied_from", tables["A"][1])


def draw_tables(fig, theme):
    ax = fig.subplots()
    users = {}  # physical block -> the sequences reading it
    for s, table in tables.items():
        for b in table:
            users.setdefault(b, []).append(s)
    colour = {s: theme.series[i] for i, s in enumerate(tables)}
    shared_colour = theme.series[3]

    def fill(block):
        readers = users.get(block, [])
        if len(readers) > 1:
            return shared_colour
        return colour[readers[0]] if readers else "none"

    def box(x, y, w, text, face):
        ax.add_patch(
            Rectangle(
                (x, y), w, 0.7, facecolor=face, edgecolor=theme.text,
                hatch=None if face != "none" else "///", zorder=2,
            )
        )  # fmt: skip
        on = theme.text if face == "none" else theme.text_on(to_rgba(face))
        ax.text(x + w / 2, y + 0.35, text, ha="center", va="center",
                fontsize=7, color=on, zorder=3)  # fmt: skip

    pool_y = 4.6
    for j in range(cache.num_blocks):  # the pool: each block drawn once
        readers = "+".join(users.get(j, [])) or "free"
        box(j * 1.1, pool_y, 1.0, readers, fill(j))
        ax.text(j * 1.1 + 0.5, pool_y + 0.8, str(j), ha="center",
                fontsize=7)  # fmt: skip
    # the copy made on B's first write into the shared, half-full block
    ax.add_patch(
        FancyArrowPatch(
            (copied_from * 1.1 + 0.5, pool_y + 1.15),
            (copied_to * 1.1 + 0.5, pool_y + 1.15),
            connectionstyle="arc3,rad=-0.35", arrowstyle="-|>",
            mutation_scale=7, linestyle="--", color=theme.text,
        )
    )  # fmt: skip
    ax.text((copied_from + copied_to) / 2 * 1.1 + 0.5, pool_y + 1.75,
            "copy", ha="center", fontsize=7)  # fmt: skip
    ax.text(-0.2, pool_y + 0.35, "pool", ha="right", va="center",
            fontsize=7)  # fmt: skip
    for row, (s, table) in enumerate(tables.items()):
        y = 3.0 - 1.2 * row
        ax.text(-0.2, y + 0.35, f"{s}: {cache.length(s)} pos.",
                ha="right", va="center", fontsize=7)  # fmt: skip
        for i, b in enumerate(table):
            x = 0.6 + i * 3.4
            box(x, y, 1.8, f"{i} → {b}", fill(b))
            ax.add_patch(
                FancyArrowPatch(
                    (x + 0.9, y + 0.7), (b * 1.1 + 0.5, pool_y),
                    arrowstyle="-|>", mutation_scale=7, zorder=1,
                    color=fill(b) if len(users[b]) > 1 else theme.muted,
                    linewidth=1.4 if len(users[b]) > 1 else 0.7,
                )
            )  # fmt: skip
    ax.set_xlim(-2.6, cache.num_blocks * 1.1)
    ax.set_ylim(0.5, 6.6)
    ax.axis("off")
    ax.set_title(
        "table entry: logical → physical block", fontsize=8, loc="left"
    )


glue.figure(
    "block-tables",
    draw_tables,
    figsize=(3.6, 3.0),
    alt=(
        f"A pool of {cache.num_blocks} physical blocks in a row, and the "
        f"block tables of requests A, B and C below it, each logical block "
        f"an arrow to its physical block: A {tables['A']}, B "
        f"{tables['B']}, C {tables['C']}. Block {tables['A'][0]} holds "
        f"the first {BLOCK} positions of the system prompt; A and B both "
        f"read it, and it is drawn once. Block {copied_to} is B's copy of "
        f"block {copied_from}, the half-full block that ends the prompt, "
        f"made when B first wrote into it; A kept the original."
    ),
)

# %% [markdown]
# ## Memory: a contiguous reservation against blocks
#
# A server that reserves each request's maximum length up front wastes
# every slot the request never fills; a paged cache wastes at most the
# end of each request's last block. Request lengths from a geometric
# distribution of mean 300 (seed 0), capped at the maximum length:

# %%
max_len = glue.value("max_len", 2048)
block = glue.value("block", 16)
# geometric lengths (many short requests, a few long), seed 0, capped
mean_length = glue.value("length_mean", 300)
rng = np.random.default_rng(glue.value("length_seed", 0))
lengths = np.minimum(rng.geometric(1 / mean_length, size=64), max_len)
glue.value("n_requests", len(lengths))
glue.value("median_length", int(np.median(lengths)))
held = int(lengths.sum())
reserved = len(lengths) * max_len  # one max-length slab per request
paged = int(sum(math.ceil(n / block) * block for n in lengths))
glue.value("contiguous_waste_percent", 100 * (1 - held / reserved))
glue.value("paged_waste_percent", 100 * (1 - held / paged))
glue.value("slots_ratio", reserved / paged)
print(f"held {held}, contiguous {reserved}, paged {paged}")

# sharing a system prompt: R requests, a prompt of S positions
prompt, requests, own = 500, 8, 100
glue.value("shared_prompt", prompt)
glue.value("shared_requests", requests)
glue.value("own_tokens", own)
pool = serving.PagedKVCache(512, block, 1, 1)
pool.append("system", torch.zeros(1, prompt, 1), torch.zeros(1, prompt, 1))
for r in range(requests):
    pool.fork("system", r)
    pool.append(r, torch.ones(1, own, 1), torch.ones(1, own, 1))
pool.free("system")  # the template itself serves no request
shared_blocks = pool.num_blocks - len(pool.free_blocks)
alone = requests * math.ceil((prompt + own) / block)
glue.value("shared_blocks", shared_blocks)
glue.value("alone_blocks", alone)
glue.value("blocks_saved", alone - shared_blocks)

# %% [markdown]
# ## One decoding step over the scrambled tables
#
# Two query heads per key/value head. `paged_attention` reads each
# sequence through its table; the reference reads the logical sequence.

# %%
q = torch.randn(3, 2, D, dtype=torch.float64)  # (N, H, d)
out = serving.paged_attention(q, cache, ["A", "B", "C"])
diffs = []
for i, s in enumerate("ABC"):
    k, v = appended[s]
    want, _ = torch_ref.attention(q[i][:, None], k, v)
    diffs.append(float((out[i] - want[:, 0]).abs().max()))
glue.value("paged_max_diff", max(diffs))

# %% [markdown]
# ## A packed batch: two decode rows and a prefill chunk
#
# Three requests in one call: two decode one token over 5 and 3 cached
# positions; the third prefills positions 4 to 6 of its prompt, after a
# first chunk of 4 already cached. With `causal`, each sequence's
# queries are its last Lq positions (bottom-right alignment).

# %%
lq, lk = [1, 1, 3], [6, 4, 7]
cu_q = glue.value("cu_seqlens_q", [0, *np.cumsum(lq).tolist()])
cu_k = glue.value("cu_seqlens_k", [0, *np.cumsum(lk).tolist()])
qp = torch.randn(sum(lq), 2, D, dtype=torch.float64)
kp = torch.randn(sum(lk), 1, D, dtype=torch.float64)
vp = torch.randn(sum(lk), 1, D, dtype=torch.float64)
packed = serving.varlen_attention(qp, kp, vp, cu_q, cu_k)
alone_diffs = []
for i in range(3):
    rows, keys = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
    blocked = torch_ref.causal_mask(lq[i], lk[i], align="bottom_right")
    want, _ = torch_ref.attention(
        qp[rows].transpose(0, 1),
        kp[keys].transpose(0, 1),
        vp[keys].transpose(0, 1),
        blocked,
    )
    alone_diffs.append(
        float((packed[rows] - want.transpose(0, 1)).abs().max())
    )
glue.value("packed_max_diff", max(alone_diffs))
seq_q = np.repeat(np.arange(3), lq)
seq_k = np.repeat(np.arange(3), lk)
pos_q = np.concatenate(
    [np.arange(b - a, b) for a, b in zip(lq, lk, strict=True)]
)
pos_k = np.concatenate([np.arange(b) for b in lk])
packed_mask = (seq_q[:, None] != seq_k[None, :]) | (
    pos_k[None, :] > pos_q[:, None]
)  # True = blocked


def draw_packed(fig, theme):
    ax = fig.subplots()
    for i, row in enumerate(packed_mask):
        for j, blocked in enumerate(row):
            ax.add_patch(
                Rectangle(
                    (j, i),
                    1,
                    1,
                    facecolor=theme.masked
                    if blocked
                    else theme.series[seq_q[i]],
                    hatch="///" if blocked else None,
                    edgecolor=theme.text,
                    linewidth=0.5,
                )
            )
    ax.set_xlim(0, len(seq_k))
    ax.set_ylim(len(seq_q), 0)
    ax.set_xticks(
        [j + 0.5 for j in range(len(seq_k))],
        [f"{'abc'[s]}{p}" for s, p in zip(seq_k, pos_k, strict=True)],
        fontsize=6,
        rotation=90,
    )
    ax.set_yticks(
        [i + 0.5 for i in range(len(seq_q))],
        [f"{'abc'[s]}{p}" for s, p in zip(seq_q, pos_q, strict=True)],
        fontsize=6,
    )
    ax.set_xlabel("packed keys (sequence, position)", fontsize=7)
    ax.set_ylabel("queries", fontsize=7)
    ax.tick_params(length=0)
    ax.set_aspect("equal")


glue.figure(
    "packed-mask",
    draw_packed,
    figsize=(3.6, 1.9),
    alt=(
        f"The mask of a packed batch: {sum(lq)} query rows by {sum(lk)} "
        f"key columns, coloured where a query sees a key (one colour per "
        f"sequence), hatched where it is blocked. Each sequence's queries "
        f"see only its own keys; the two decode rows see all {lk[0]} and "
        f"{lk[1]} of theirs, and the prefill chunk's three rows, positions "
        f"{lk[2] - lq[2]} to {lk[2] - 1}, see keys up to their own "
        f"position."
    ),
)

# %% [markdown]
# ## Merging partial results, and the three conventions for "no keys"
#
# Scores [2, 4] over values [10, 20], in three parts: key 0, key 1 and
# no key. A part over one key has output = its value and LSE = its
# score. The empty part's LSE depends on who computed it.

# %%
values = glue.value("merge_values", [10.0, 20.0])
scores = glue.value("merge_scores", [2.0, 4.0])
outputs = torch.tensor([*values, 0.0], dtype=torch.float64)[:, None]
exact = sum(
    v * math.exp(s) for v, s in zip(values, scores, strict=True)
) / sum(math.exp(s) for s in scores)
glue.value("merge_exact", exact)


def literal_merge(lses):
    # the merge formula taken as is: max, exp, weighted mean
    lses = torch.tensor(lses, dtype=torch.float64)
    w = torch.exp(lses - lses.max())
    return float((w[:, None] * outputs).sum(0) / w.sum())


conventions = {"flex": -math.inf, "tiled": math.inf, "cpu_flash": 0.0}
for name, empty in conventions.items():
    lses = [*scores, empty]
    merged, _ = serving.merge_partials(outputs, torch.tensor(lses))
    glue.value(f"merged_{name}", float(merged))
    glue.value(f"literal_{name}", literal_merge(lses))

# the CPU flash kernel's own empty row, run here
qe, ke = torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 2, 2)
bias = torch.full((1, 1, 1, 2), -math.inf)
out_e, lse_e = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
    qe, ke, ke, 0.0, False, attn_mask=bias
)[:2]
glue.value("cpu_flash_empty", [float(out_e.abs().max()), float(lse_e)])

# split-KV decoding: every number of splits, up to more than the keys
qd = torch.randn(1, 4, 1, 8, dtype=torch.float64)
kd = torch.randn(1, 2, 5, 8, dtype=torch.float64)
vd = torch.randn(1, 2, 5, 8, dtype=torch.float64)
whole, _ = torch_ref.attention(qd, kd, vd)
split_diffs = [
    float((serving.split_kv_decode(qd, kd, vd, n)[0] - whole).abs().max())
    for n in range(1, 8)
]
glue.value("split_counts", list(range(1, 8)))
glue.value("split_keys", kd.shape[-2])
glue.value("split_max_diff", max(split_diffs))

# %% [markdown]
# ## A draft tree and one verification step
#
# Four draft nodes after a prefix of 3 tokens: node 0 follows the
# prefix, nodes 1 and 2 are two guesses after node 0, node 3 follows
# node 1. Then a chain of three draft tokens checked against the target
# model's argmax.

# %%
parents = glue.value("parents", [-1, 0, 0, 1])
prefix = glue.value("prefix", 3)
mask = serving.tree_mask(parents, prefix)
# a node's position: the prefix length plus its depth, i.e. the number
# of nodes it sees (its ancestors and itself) minus one
positions = glue.value(
    "tree_positions", (prefix - 1 + (~mask[:, prefix:]).sum(1)).tolist()
)
# every node sees the whole prefix: the table shows the node columns
glue.value("tree_sees_prefix", not mask[:, :prefix].any())
header = ["node (pos.)", *[f"n{j}" for j in range(len(parents))]]
rows = [
    [f"n{i} ({positions[i]})", *("✗" if b else "✓" for b in row)]
    for i, row in enumerate(mask[:, prefix:].tolist())
]
glue.table("tree-mask", header, rows)


def draw_tree(fig, theme):
    ax = fig.subplots()
    depth = [p - prefix for p in positions]
    spots = {}  # node -> (x, y); siblings side by side
    for i, d in enumerate(depth):
        spots[i] = (1.0 + d, sum(depth[j] == d for j in range(i)))
    ax.add_patch(
        Rectangle((-0.35, -0.3), 0.7, 0.6, facecolor=theme.masked,
                  edgecolor=theme.text, linewidth=0.6)
    )  # fmt: skip
    ax.text(0, 0, "prefix", ha="center", va="center", fontsize=7)
    for i, parent in enumerate(parents):
        x, y = spots[i]
        px, py = spots[parent] if parent >= 0 else (0.0, 0.0)
        start = px + (0.35 if parent < 0 else 0.22)
        ax.plot([start, x - 0.22], [py, y], color=theme.muted, lw=0.8)
        ax.add_patch(
            Circle((x, y), 0.22, facecolor=theme.series[0],
                   edgecolor=theme.text, linewidth=0.6)
        )  # fmt: skip
        ax.text(x, y, f"n{i}", ha="center", va="center", fontsize=7,
                color=theme.text_on(to_rgba(theme.series[0])))  # fmt: skip
        ax.text(x, y + 0.32, f"pos {positions[i]}", ha="center",
                va="top", fontsize=6)  # fmt: skip
    ax.set_xlim(-0.5, 1.5 + max(depth))
    ax.set_ylim(max(y for _, y in spots.values()) + 0.6, -0.5)
    ax.set_aspect("equal")
    ax.axis("off")


glue.figure(
    "draft-tree",
    draw_tree,
    figsize=(2.6, 1.5),
    alt=(
        f"The draft tree: the prefix of {prefix} tokens, then node n0 "
        f"after it; nodes n1 and n2 are two guesses after n0, and n3 "
        f"follows n1. Positions: "
        + ", ".join(f"n{i} {p}" for i, p in enumerate(positions))
        + "."
    ),
)

draft = glue.value("draft", [5, 7, 2])
target = glue.value("target_argmax", [5, 7, 9, 4])
logits = torch.full((4, 10), -1.0)
logits[torch.arange(4), torch.tensor(target)] = 1.0  # the argmax
glue.value("verify_queries", logits.shape[0])  # one per draft, plus one
accepted, next_token = serving.verify_greedy(draft, logits)
glue.value("accepted", accepted)
glue.value("next_token", next_token)
