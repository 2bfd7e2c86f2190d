# %% [markdown]
# ## Attention alone does not see order
#
# Without positions, attention is permutation-equivariant: shuffle the
# rows of x and its outputs come out shuffled the same way. The cell
# measures it on one random float64 sequence, with no mask, then with a
# causal mask, which already breaks the symmetry: row i reads rows 0..i.

# %%
import math

import numpy as np

import glue
from mha_ref import numpy_ref, positions

rng = np.random.default_rng(48)
x = rng.standard_normal((1, 1, 6, 8))  # (B, H, T, d): q = k = v = x
order = rng.permutation(6)
out, _ = numpy_ref.attention(x, x, x)
shuffled, _ = numpy_ref.attention(
    x[..., order, :], x[..., order, :], x[..., order, :]
)
causal = numpy_ref.causal_mask(6)  # (T, T), True = blocked
out_c, _ = numpy_ref.attention(x, x, x, causal)
shuffled_c, _ = numpy_ref.attention(
    x[..., order, :], x[..., order, :], x[..., order, :], causal
)
glue.value(
    "order",
    {
        "permutation": order,
        "difference": np.abs(shuffled - out[..., order, :]).max(),
        "causal_difference": np.abs(shuffled_c - out_c[..., order, :]).max(),
    },
)

# %% [markdown]
# ## The sinusoid, three ways
#
# One table per form: the paper's interleaved sin/cos (DistilBERT),
# sines then cosines (Marian), and fairseq's frequencies with the
# halves layout (M2M100). The first four features of position 1 show
# that they are different tables.

# %%
N_POS, D_SIN = 64, 32
forms = {
    "interleaved, paper (DistilBERT)": {},
    "halves, paper (Marian)": {"layout": "halves"},
    "halves, fairseq (M2M100)": {"layout": "halves", "frequencies": "fairseq"},
}
tables = {
    name: positions.sinusoidal_encoding(N_POS, D_SIN, **kw)
    for name, kw in forms.items()
}
glue.value("sinusoid", {"n": N_POS, "d": D_SIN})
glue.table(
    "positions-sinusoids",
    ["form", "PE[1, 0:4]", "lowest frequency"],
    [
        [
            name,
            "[" + ", ".join(f"{v:.3f}" for v in table[1, :4]) + "]",
            f"{lowest:.6f}",
        ]
        for name, table in tables.items()
        for lowest in [
            10000.0 ** (-2 * (D_SIN // 2 - 1) / D_SIN)
            if "paper" in name
            else 10000.0**-1
        ]
    ],
)


def draw_sinusoids(fig, theme):
    axes = fig.subplots(3, 1, sharex=True)
    for ax, (name, table) in zip(axes, tables.items(), strict=True):
        image = ax.imshow(
            table, aspect="auto", cmap=theme.cmap, vmin=-1, vmax=1
        )
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("position p")
    axes[-1].set_xlabel("feature")
    fig.colorbar(image, ax=axes, shrink=0.6, label="PE[p, feature]")


glue.figure(
    "positions-sinusoids",
    draw_sinusoids,
    alt=(
        "Three heat maps of sinusoidal position tables, one above the "
        "other, 64 positions by 32 features: interleaved sin and cos "
        "stripes, then two tables with sines on the left half and cosines "
        "on the right"
    ),
    figsize=(3.6, 6.6),  # stacked, narrow: whole on a phone
)

# %% [markdown]
# ## T5's buckets
#
# Bucket against relative position (key - query) for T5's defaults,
# 32 buckets and max_distance 128, both directions (the encoder) and
# one (the decoder).

# %%
rel = np.arange(-160, 161)
both = positions.t5_relative_bucket(rel)
one = positions.t5_relative_bucket(rel, bidirectional=False)
far = np.arange(0, 400)  # distances to earlier keys, rel = -far
far_bucket = positions.t5_relative_bucket(-far)  # the encoder's rule
sizes = np.bincount(far_bucket)  # how many distances share each bucket
used = np.flatnonzero(sizes)
last_from = int(far[far_bucket == used[-1]].min())
glue.value(
    "t5",
    {
        "exact": int((sizes[used] == 1).sum()),
        "last_bucket": int(used[-1]),
        "last_from": last_from,
        "per_direction": len(used),
        "widest_below_last": int(sizes[used[:-1]].max()),
    },
)
table = rng.standard_normal((32, 2))  # (num_buckets, H), learned in T5
bias = positions.t5_bias(4, 6, table)
glue.value("t5_bias_shape", list(bias.shape))
print(bias[0])


def draw_buckets(fig, theme):
    ax = fig.subplots()
    ax.step(rel, both, where="mid", color=theme.series[0], label="both ways")
    ax.step(rel, one, where="mid", color=theme.series[1], label="one way")
    ax.set_xlabel("relative position (key - query)")
    ax.set_ylabel("bucket")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


glue.figure(
    "positions-t5-buckets",
    draw_buckets,
    alt=(
        "Step plot of T5's bucket against relative position from -160 to "
        "160: one bucket per distance near zero, then wider steps, flat "
        f"from a distance of {last_from} on; the one-way curve is 0 for "
        "every later key"
    ),
)

# %% [markdown]
# ## RoPE's scaling rules
#
# Each rule on the same head: Llama 3's base and head size, a factor of
# 8 and an original length of 8192. The figure plots each frequency
# divided by the unscaled one against the unscaled wavelength.

# %%
BASE, D, FACTOR, L = 500000.0, 128, 8.0, 8192
plain_freq, _ = positions.rope_frequencies(D, BASE)
rules = {
    "linear": {"rope_type": "linear", "factor": FACTOR},
    "dynamic at 4 L": {
        "rope_type": "dynamic",
        "factor": FACTOR,
        "original_max_position_embeddings": L,
    },
    "yarn": {
        "rope_type": "yarn",
        "factor": FACTOR,
        "original_max_position_embeddings": L,
    },
    "llama3": {
        "rope_type": "llama3",
        "factor": FACTOR,
        "original_max_position_embeddings": L,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    },
}
scaled = {
    name: positions.rope_frequencies(
        D, BASE, s, seq_len=4 * L if "dynamic" in name else None
    )
    for name, s in rules.items()
}
wavelength = 2 * np.pi / plain_freq
ratio = {name: f / plain_freq for name, (f, _) in scaled.items()}
llama = ratio["llama3"]
glue.value(
    "llama3",
    {
        "base": BASE,
        "d": D,
        "factor": FACTOR,
        "L": L,
        "pairs": len(llama),
        "kept": int(np.isclose(llama, 1.0).sum()),
        "divided": int(np.isclose(llama, 1 / FACTOR).sum()),
        "blended": int(
            (~np.isclose(llama, 1.0) & ~np.isclose(llama, 1 / FACTOR)).sum()
        ),
        "short_wavelength": L / 4.0,
        "long_wavelength": L / 1.0,
    },
)
# the dynamic rule's new base, read back from its frequency of pair 1
dynamic_base = scaled["dynamic at 4 L"][0][1] ** (-D / 2)
dyn_ratio = ratio["dynamic at 4 L"]
glue.value(
    "dynamic",
    {
        "seq_len": 4 * L,
        "length_ratio": 4,
        "base": dynamic_base,
        # s l / L - (s - 1): the bracket raised to r / (r - 2)
        "bracket": FACTOR * 4 - (FACTOR - 1),
        "first_pair": dyn_ratio[0],  # pair 0 keeps its frequency, 1
        "slowest_slower": 1 / dyn_ratio[-1],  # the last pair: the bracket
        # the YaRN paper's b (l / L)^(r / (r - 2)): its last pair turns
        # (b' / b)^((r - 2) / r) = l / L times slower
        "paper_slowest_slower": (4 ** (D / (D - 2))) ** ((D - 2) / D),
        # Llama 3.1's own config.max_position_embeddings, which
        # transformers reads as L
        "llama31_max_positions": 131072,
    },
)


def draw_rules(fig, theme):
    ax = fig.subplots()
    # YaRN and Llama 3 share both ends: solid and dotted, different marks
    styles = {
        "linear": ("-", "."),
        "dynamic at 4 L": ("-", "."),
        "yarn": ("-", "o"),
        "llama3": (":", "x"),
    }
    for (name, values), color in zip(
        ratio.items(), theme.series, strict=False
    ):
        line, mark = styles[name]
        ax.plot(
            wavelength,
            values,
            color=color,
            label=name,
            linestyle=line,
            marker=mark,
            ms=3,
            mfc="none" if mark == "o" else color,
            lw=1.6 if line == ":" else 1.0,
        )
    ax.axvline(L, color=theme.muted, linestyle="--", lw=0.8)
    ax.annotate(
        f"L = {L}",
        (L, 1 / 30),
        xytext=(-3, 0),
        textcoords="offset points",
        ha="right",
        va="bottom",
        fontsize=10,
        color=theme.text,
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = [1 / 32, 1 / 8, 1 / 2, 1]
    ax.set_yticks(ticks, ["1/32", "1/8", "1/2", "1"])
    ax.minorticks_off()
    ax.set_xlabel("unscaled wavelength 2π / θ_i (positions)")
    ax.set_ylabel("scaled / unscaled frequency")
    ax.legend(  # below the axes, at the left: in sight on a phone
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(-0.2, -0.2),
        ncol=2,
        frameon=False,
    )
    ax.grid(alpha=0.3)


glue.figure(
    "positions-rope-rules",
    draw_rules,
    alt=(
        "Scaled over unscaled RoPE frequency against wavelength, log-log, "
        "for 64 pairs, a dashed line at L = 8192: linear is 1/8 "
        "everywhere; dynamic is 1 for the first pair and falls smoothly "
        f"with wavelength to 1/{glue.fmt(1 / dyn_ratio[-1], 3)}; YaRN and "
        "Llama 3 stay at 1 for short "
        "wavelengths, fall to 1/8 for long ones, with a ramp between"
    ),
    figsize=(3.6, 4.2),  # narrow: whole on a phone
)

# %% [markdown]
# ## YaRN's attention factor, `truncate`, DeepSeek's `mscale`
#
# gpt-oss's rope_parameters (transformers' GptOssConfig default): factor
# 32, beta 32 and 1, truncate False, original length 4096, base 150000,
# head size 64. DeepSeek-V3's rope_scaling: factor 40, mscale and
# mscale_all_dim both 1.

# %%
GPT_OSS = {
    "rope_type": "yarn",
    "factor": 32.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
    "original_max_position_embeddings": 4096,
}
untruncated, oss_factor = positions.rope_frequencies(64, 150000.0, GPT_OSS)
truncated, _ = positions.rope_frequencies(
    64, 150000.0, {**GPT_OSS, "truncate": True}
)
moved = np.abs(truncated / untruncated - 1)
yarn4 = {"rope_type": "yarn", "factor": 4.0}
yarn4["original_max_position_embeddings"] = 4096
DEEPSEEK = {
    "rope_type": "yarn",
    "factor": 40.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32,
    "beta_slow": 1,
}
mscale_only = {k: v for k, v in DEEPSEEK.items() if k != "mscale_all_dim"}
glue.value(
    "yarn",
    {
        "factor4": positions.rope_frequencies(128, 1e4, yarn4)[1],
        "gpt_oss": oss_factor,
        "truncate_pairs": int((moved > 1e-12).sum()),
        "pairs": len(moved),
        "truncate_max": moved.max(),
        "deepseek": positions.rope_frequencies(64, 1e4, DEEPSEEK)[1],
        "mscale_only": positions.rope_frequencies(64, 1e4, mscale_only)[1],
        "plain40": 0.1 * math.log(40) + 1,
        # DeepSeek's softmax scale times mscale(s, mscale_all_dim)^2
        "deepseek_softmax": (0.1 * 1.0 * math.log(40) + 1) ** 2,
    },
)
# Phi-3's LongRoPE: factor = max_position_embeddings / original = 32
PHI3 = {
    "rope_type": "longrope",
    "factor": 131072 / 4096,
    "original_max_position_embeddings": 4096,
    "short_factor": [1.0] * 48,
    "long_factor": [1.0] * 48,
}
glue.value(
    "longrope",
    {
        "factor": PHI3["factor"],
        "L": 4096,
        "attention": positions.rope_frequencies(96, 1e4, PHI3)[1],
    },
)
# transformers computes inv_freq in float32: how far that rounds it
glue.value(
    "float32_rounding",
    np.abs(plain_freq.astype(np.float32) / plain_freq - 1).max(),
)

# %% [markdown]
# ## A dynamic rule and the keys in a cache
#
# Dynamic NTK at factor 2, original length 64, head size 16. A key at
# position 10 was rotated when the sequence was 11 long (original
# frequencies) and cached; at length 128 the frequencies change. The
# query at 127 scores the cached key and the same key rotated again.

# %%
DYN = {"rope_type": "dynamic", "factor": 2.0}
DYN["original_max_position_embeddings"] = 64
q_vec, k_vec = rng.standard_normal((2, 1, 16))
old, _ = positions.rope_frequencies(16, 1e4, DYN, seq_len=11)
new, _ = positions.rope_frequencies(16, 1e4, DYN, seq_len=128)
cached_key = numpy_ref.apply_rope(k_vec, [10], inv_freq=old)
fresh_key = numpy_ref.apply_rope(k_vec, [10], inv_freq=new)
query = numpy_ref.apply_rope(q_vec, [127], inv_freq=new)
glue.value(
    "dynamic_cache",
    {
        "cached": (query @ cached_key.T).item(),
        "fresh": (query @ fresh_key.T).item(),
        "frequencies_moved": np.abs(new / old - 1).max(),
    },
)

# %% [markdown]
# ## Partial rotary
#
# GPT-NeoX's default partial_rotary_factor 0.25 on a head of 64: 16
# features turn, 48 pass through, and their part of a score is the same
# at every pair of positions.

# %%
d_head, r = 64, int(64 * 0.25)
qh, kh = rng.standard_normal((2, 1, d_head))
scores = []
PAIRS = ((0, 0), (100, 3), (7, 500))  # (query m, key n)
for m, n in PAIRS:
    qr = numpy_ref.apply_rope(qh, [m], rotary_dim=r)
    kr = numpy_ref.apply_rope(kh, [n], rotary_dim=r)
    scores.append((float(qr[0, :r] @ kr[0, :r]), float(qr[0, r:] @ kr[0, r:])))
glue.value(
    "partial",
    {
        "position_pairs": [list(pair) for pair in PAIRS],
        "d_head": d_head,
        "rotary_dim": r,
        "passed": d_head - r,
        "rotated_scores": [s[0] for s in scores],
        "passed_scores": [s[1] for s in scores],
    },
)

# %% [markdown]
# ## Layers without positions: Llama 4
#
# The default rule of Llama4TextConfig, no RoPE every fourth layer, for
# 48 layers; and the query temperature at a few positions.

# %%
N_LAYERS = 48
no_rope_layers = [int((i + 1) % 4 != 0) for i in range(N_LAYERS)]
without = [i for i, uses in enumerate(no_rope_layers) if uses == 0]
marks = np.array([0, 8190, 8191, 65535, 1_000_000])
glue.value(
    "llama4",
    {
        "layers": N_LAYERS,
        "without": without,
        "n_without": len(without),
        "positions": marks,
        "temperature": positions.query_temperature(marks),
    },
)
curve_p = np.unique(np.geomspace(1, 10_000_000, 400).astype(np.int64))
curve = positions.query_temperature(curve_p)


def draw_temperature(fig, theme):
    ax = fig.subplots()
    ax.plot(curve_p, curve, color=theme.series[0])
    ax.axvline(8192, color=theme.muted, linestyle="--", lw=0.8)
    ax.annotate(
        "floor_scale = 8192",
        (8192, 1.0),
        xytext=(-4, 4),
        textcoords="offset points",
        ha="right",
        fontsize=8,
        color=theme.muted,
    )
    ax.set_xscale("log")
    ax.set_xlabel("position p")
    ax.set_ylabel("factor on the query")
    ax.grid(alpha=0.3)


glue.figure(
    "positions-temperature",
    draw_temperature,
    alt=(
        "Llama 4's query temperature against position on a log axis, a "
        "dashed line at floor_scale 8192: 1 "
        "up to position 8190, then a staircase rising slowly, "
        f"{glue.fmt(curve[-1], 2)} at ten million"
    ),
)

# %% [markdown]
# The learned tables' sizes, from transformers' config defaults.

# %%
from transformers import BertConfig, GPT2Config  # noqa: E402

glue.value(
    "learned_rows",
    {
        "bert": BertConfig().max_position_embeddings,
        "gpt2": GPT2Config().max_position_embeddings,
    },
)

# YaRN's default betas (the "yarn" rule above gives none): the same
# frequencies as beta_fast 32 and beta_slow 1 given explicitly
YARN_DEFAULTS = {"beta_fast": 32, "beta_slow": 1}
explicit, _ = positions.rope_frequencies(
    D, BASE, {**rules["yarn"], **YARN_DEFAULTS}
)
if not np.array_equal(explicit, scaled["yarn"][0]):
    raise RuntimeError("rope_frequencies' YaRN defaults moved")
glue.value("yarn_defaults", YARN_DEFAULTS)
