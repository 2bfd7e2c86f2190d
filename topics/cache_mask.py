"""Where the causal mask starts when two new queries meet five keys."""

from pipeline.output import fmt, fmt_list, markdown_table

DEPENDS = [
    "mha_ref/kv_cache.py",
    "mha_ref/torch_ref.py",
    "mha_ref/numpy_ref.py",
    "mha_ref/checks.py",
]


def compute():
    import torch

    from mha_ref import kv_cache, torch_ref

    values = [10.0, 20.0, 30.0, 40.0, 50.0]
    aligned, upper_left = kv_cache.cached_attention_example(values)
    query_positions = list(range(len(values) - 2, len(values)))  # [3, 4]
    key_positions = list(range(len(values)))
    aligned_mask = torch_ref.causal_mask_for_positions(
        query_positions, key_positions
    )
    # is_causal=True behaves as if the queries sat at positions 0 and 1
    upper_left_mask = torch_ref.causal_mask_for_positions(
        range(len(query_positions)), key_positions
    )
    # the same outputs as plain means over the allowed values
    v = torch.tensor(values, dtype=torch.float64)
    for mask, result in (
        (aligned_mask, aligned),
        (upper_left_mask, upper_left),
    ):
        means = torch.stack([v[~row].mean() for row in mask])
        if not torch.allclose(means, result):
            raise ValueError(f"{result.tolist()} != means {means.tolist()}")
    masked, unmasked, _ = kv_cache.single_new_query(values)
    return {
        "values": values,
        "query_positions": query_positions,
        "key_positions": key_positions,
        "aligned": aligned,
        "upper_left": upper_left,
        "aligned_mask": aligned_mask,
        "upper_left_mask": upper_left_mask,
        "single_query": {"masked": masked, "unmasked": unmasked},
    }


def _allowed(values, mask_row):
    return fmt_list(
        v for v, blocked in zip(values, mask_row, strict=True) if not blocked
    )


def render(data, out):
    values = data["values"]
    rows = [
        [
            str(pos),
            _allowed(values, data["aligned_mask"][i]),
            fmt(data["aligned"][i]),
            _allowed(values, data["upper_left_mask"][i]),
            fmt(data["upper_left"][i]),
        ]
        for i, pos in enumerate(data["query_positions"])
    ]
    out.table(
        "cache_mask",
        markdown_table(
            [
                "query position",
                "aligned: values seen",
                "aligned output",
                "upper-left: values seen",
                "upper-left output",
            ],
            rows,
            "rlrlr",
        ),
    )

    def draw(fig, theme):
        import matplotlib
        from matplotlib.colors import to_rgba

        panels = [
            ("aligned", "position-aligned mask (from positions)"),
            ("upper_left", "upper-left mask (is_causal=True)"),
        ]
        axes = fig.subplots(2, 1)
        for ax, (which, title) in zip(axes, panels, strict=True):
            mask = data[f"{which}_mask"]
            for i, row in enumerate(mask):
                for j, blocked in enumerate(row):
                    ax.add_patch(
                        matplotlib.patches.Rectangle(
                            (j, i),
                            1,
                            1,
                            facecolor=theme.masked
                            if blocked
                            else theme.series[0],
                            hatch="///" if blocked else None,
                            edgecolor=theme.text,
                            linewidth=0.8,
                        )
                    )
                    ax.text(
                        j + 0.5,
                        i + 0.5,
                        "blocked" if blocked else fmt(values[j]),
                        ha="center",
                        va="center",
                        fontsize=8 if blocked else 10,
                        color=theme.text
                        if blocked
                        else theme.text_on(to_rgba(theme.series[0])),
                    )
                ax.text(
                    len(row) + 0.15,
                    i + 0.5,
                    f"→ mean {fmt(data[which][i])}",
                    va="center",
                )
            ax.set_xlim(0, len(values) + 1.3)
            ax.set_ylim(len(mask), 0)
            ax.set_xticks(
                [j + 0.5 for j in data["key_positions"]],
                [f"key {j}" for j in data["key_positions"]],
            )
            ax.set_yticks(
                [i + 0.5 for i in range(len(mask))],
                [f"query pos {p}" for p in data["query_positions"]],
            )
            ax.tick_params(length=0)
            for side in ax.spines.values():
                side.set_visible(False)
            ax.set_title(title, fontsize=10, loc="left")
        q_pos, n_key = data["query_positions"], len(data["key_positions"])
        fig.suptitle(
            f"{len(q_pos)} new queries (positions "
            f"{', '.join(map(str, q_pos))}) against {n_key} "
            "cached + new keys, all scores 0"
        )

    q3, q4 = data["query_positions"]
    out.figure(
        "kv-masks",
        draw,
        figsize=(7.0, 3.4),
        alt=(
            f"Two masks of {len(data['query_positions'])} query rows by "
            f"{len(data['key_positions'])} key columns, each allowed cell "
            "labelled with the value it averages over. The position-aligned "
            f"mask lets query {q3} see keys 0 to {q3} (mean "
            f"{fmt(data['aligned'][0])}) and query {q4} all keys (mean "
            f"{fmt(data['aligned'][1])}). The upper-left mask of "
            "is_causal=True lets them see only the first one and two keys "
            f"(means {fmt(data['upper_left'][0])} and "
            f"{fmt(data['upper_left'][1])})."
        ),
    )
