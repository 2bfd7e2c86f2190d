"""Parameter counts per head count, and the weights of a small 4-head MHA."""

from pipeline.output import fmt, markdown_table

DEPENDS = ["mha_ref/torch_ref.py", "mha_ref/numpy_ref.py", "mha_ref/checks.py"]
D_MODEL = 512
HEAD_COUNTS = [1, 2, 4, 8, 16]


def parameter_rows():
    from mha_ref import torch_ref

    rows = []
    for n_head in HEAD_COUNTS:
        # device="meta": shapes and counts without allocating weights
        mha = torch_ref.MultiHeadAttention(D_MODEL, n_head, device="meta")
        qkv = sum(lin.weight.numel() for lin in (mha.wq, mha.wk, mha.wv))
        total = sum(p.numel() for p in mha.parameters())
        rows.append(
            {
                "n_head": n_head,
                "d_head": mha.d_head,
                "per_head_shape": f"{D_MODEL} x {mha.d_head}",
                "per_head_params": 4 * D_MODEL * mha.d_head,
                "qkv_params": qkv,
                "total_params": total,
                "total_over_d_model_sq": total / D_MODEL**2,
            }
        )
    return rows


def heads_example(d_model=16, n_head=4, t=8, seed=0, scale=3.0):
    """Per-head weights of a small causal self-attention, float64."""
    import torch

    from mha_ref import torch_ref

    torch.manual_seed(seed)
    mha = torch_ref.MultiHeadAttention(d_model, n_head, dtype=torch.float64)
    # inputs larger than unit scale give sharper, more distinct heads
    x = scale * torch.randn(1, t, d_model, dtype=torch.float64)
    mask = torch_ref.causal_mask(t)
    with torch.no_grad():
        _, weights = mha(x, mask=mask)  # (1, H, T, T)
    weights = weights[0]
    return {
        "d_model": d_model,
        "n_head": n_head,
        "t": t,
        "seed": seed,
        "input_scale": scale,
        "mask": mask,
        "weights": weights,
        "row_sums_max_error": float((weights.sum(-1) - 1).abs().max()),
        "future_weight": float(weights[:, mask].max()),
        # row 0 has one allowed key (weight 1): average the other rows
        "mean_row_max_per_head": weights[:, 1:].amax(dim=-1).mean(dim=-1),
    }


def compute():
    rows = parameter_rows()
    totals = {row["total_params"] for row in rows}
    if len(totals) != 1:
        raise ValueError(f"total parameters depend on n_head: {totals}")
    return {
        "d_model": D_MODEL,
        "rows": rows,
        "total_params": totals.pop(),
        "heads_example": heads_example(),
    }


def render(data, out):
    header = [
        "n_head",
        "d_head",
        "W_Q slice per head",
        "Q, K, V params",
        "all params",
        "all / d_model²",
    ]
    rows = [
        [
            r["n_head"],
            r["d_head"],
            r["per_head_shape"].replace("x", "×"),
            f"{r['qkv_params']:,}",
            f"{r['total_params']:,}",
            fmt(r["total_over_d_model_sq"]),
        ]
        for r in data["rows"]
    ]
    out.table("multiple_heads", markdown_table(header, rows, "rrrrrr"))

    ex = data["heads_example"]

    def draw(fig, theme):
        import matplotlib
        import numpy as np

        t = ex["t"]
        edges = np.arange(t + 1) - 0.5  # cell (i, j) centred on (j, i)
        mask = np.array(ex["mask"])
        # the masked future as one staircase polygon, grey and hatched
        stairs = []  # (x = key j, y = query i) corners, down the steps
        for i in range(t - 1):
            stairs += [(i + 0.5, i - 0.5), (i + 0.5, i + 0.5)]
        stairs += [(t - 0.5, t - 1.5), (t - 0.5, -0.5)]
        axes = fig.subplots(1, ex["n_head"], sharey=True)
        rows, cols = np.nonzero(~mask)  # only the allowed cells
        cells = [
            [
                (j - 0.5, i - 0.5),
                (j + 0.5, i - 0.5),
                (j + 0.5, i + 0.5),
                (j - 0.5, i + 0.5),
            ]
            for i, j in zip(rows, cols, strict=True)
        ]
        for head, ax in enumerate(axes):
            # vector cells (not imshow): a small, sharp SVG
            mesh = matplotlib.collections.PolyCollection(
                cells,
                array=np.array(ex["weights"][head])[rows, cols],
                cmap=theme.cmap,
                clim=(0, 1),
                linewidth=0,
            )
            ax.add_collection(mesh)
            ax.add_patch(
                matplotlib.patches.Polygon(
                    stairs,
                    closed=True,
                    facecolor=theme.masked,
                    hatch="///",
                    edgecolor=theme.muted,
                    linewidth=0,
                )
            )
            ax.set_aspect("equal")
            ax.set_xlim(edges[0], edges[-1])
            ax.set_ylim(edges[-1], edges[0])  # row 0 at the top
            ax.set_title(f"head {head + 1}")
            ax.set_xticks(range(t))
            ax.set_yticks(range(t))
            ax.tick_params(labelsize=7, length=2)
            ax.set_xlabel("key position j")
        axes[0].set_ylabel("query position i")
        bar = fig.colorbar(mesh, ax=axes, shrink=0.8)
        bar.set_label("weight (rows sum to 1)")
        fig.suptitle(
            f"Causal self-attention weights, {ex['n_head']} heads, "
            f"T = {t} (hatched grey = masked future)"
        )

    means = ", ".join(fmt(w, 2) for w in ex["mean_row_max_per_head"])
    out.figure(
        "heads-heatmap",
        draw,
        figsize=(7.0, 2.5),
        alt=(
            f"{ex['n_head']} heatmaps of {ex['t']} by {ex['t']} attention "
            "weights, one per head, of a causal self-attention on random "
            "inputs. Cells above the diagonal are masked (grey, hatched) and "
            "hold zero weight. Each head spreads its weight differently over "
            "the earlier positions: the largest weight in a row, averaged "
            f"over rows 2 to {ex['t']}, is {means} for heads 1 to "
            f"{ex['n_head']}."
        ),
    )
