"""The symptom of each of the six mistakes in mha_ref/pitfalls.py."""

DEPENDS = [
    "mha_ref/pitfalls.py",
    "mha_ref/numpy_ref.py",
    "mha_ref/torch_ref.py",
    "mha_ref/checks.py",
]


def mask_demo():
    """Two scores, the second key blocked: mask before vs zero after."""
    import numpy as np

    from mha_ref import numpy_ref, pitfalls

    blocked = np.array([False, True])
    scores = np.array([0.0, 0.0])
    underflow = np.array([-1000.0, 0.0])  # the allowed key scores far lower

    def masked_before(s):
        return numpy_ref.softmax(np.where(blocked, -np.inf, s))

    with np.errstate(invalid="ignore"):  # 0 / 0 is the point here
        underflow_renormalised = pitfalls.wrong_mask_after_softmax(
            underflow, blocked, renormalise=True
        )
    return {
        "scores": scores,
        "blocked": blocked,
        "softmax": numpy_ref.softmax(scores),
        "masked_before": masked_before(scores),
        "zeroed_after": pitfalls.wrong_mask_after_softmax(scores, blocked),
        "renormalised": pitfalls.wrong_mask_after_softmax(
            scores, blocked, renormalise=True
        ),
        "underflow_scores": underflow,
        "underflow_softmax": numpy_ref.softmax(underflow),
        "underflow_zeroed_after": pitfalls.wrong_mask_after_softmax(
            underflow, blocked
        ),
        "underflow_renormalised": underflow_renormalised,
        "underflow_masked_before": masked_before(underflow),
    }


def head_split(t=4, d_model=8, n_head=2):
    """Where each entry of the split comes from: (position, channel)."""
    import numpy as np

    from mha_ref import numpy_ref, pitfalls

    # entry (t, c) holds the number t * d_model + c: its own address
    x = np.arange(t * d_model).reshape(1, t, d_model)
    right = numpy_ref.MultiHeadAttention(d_model, n_head).split_heads(x)[0]
    wrong = pitfalls.wrong_split_heads(x, n_head)[0]  # (H, T, dh)
    rows = np.arange(t)[None, :]  # the position each row should hold
    return {
        "t": t,
        "d_model": d_model,
        "n_head": n_head,
        "d_head": d_model // n_head,
        "right_positions": right // d_model,
        "right_channels": right % d_model,
        "wrong_positions": wrong // d_model,
        "wrong_channels": wrong % d_model,
        "wrong_rows_at_own_position": int(
            np.all(wrong // d_model == rows[..., None], axis=-1).sum()
        ),
        "rows": n_head * t,
    }


def wrong_split(rng):
    from mha_ref import numpy_ref, pitfalls

    x = rng.standard_normal((2, 4, 8))  # (B, T, d_model)
    right = numpy_ref.MultiHeadAttention(8, 2).split_heads(x)
    wrong = pitfalls.wrong_split_heads(x, 2)
    return {
        "shape_right": list(right.shape),
        "shape_wrong": list(wrong.shape),
        "same_shape": right.shape == wrong.shape,
        "max_abs_diff": float(abs(right - wrong).max()),
    }


def wrong_view_error():
    import torch

    out = torch.zeros(2, 4, 6, 8)  # (B, H, T, dh)
    try:
        out.transpose(1, 2).view(2, 6, 32)  # no .contiguous()
    except RuntimeError as error:
        return str(error)
    raise ValueError("transpose(1, 2).view(...) did not raise")


def wrong_layout(seed=0):
    """Copying nn.Linear weights to x @ W without the transpose."""
    import numpy as np
    import torch

    from mha_ref import pitfalls, torch_ref

    torch.manual_seed(seed)
    module = torch_ref.MultiHeadAttention(8, 2, dtype=torch.float64)
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    with torch.no_grad():
        expected, _ = module(x)
    right = torch_ref.to_numpy(module)
    wrong = torch_ref.to_numpy(module)
    wrong.Wq, wrong.Wk, wrong.Wv, wrong.Wo = (
        pitfalls.wrong_copy_from_linear(lin.weight.detach().numpy())
        for lin in (module.wq, module.wk, module.wv, module.wo)
    )
    expected = expected.numpy()
    return {
        "max_abs_diff": float(np.abs(wrong(x.numpy())[0] - expected).max()),
        "right_max_abs_diff": float(
            np.abs(right(x.numpy())[0] - expected).max()
        ),
    }


def wrong_scale(rng, d_model=512, n_head=8, n_rows=500, n_keys=16):
    """Median largest weight with sqrt(d_head) vs sqrt(d_model)."""
    import numpy as np

    from mha_ref import numpy_ref, pitfalls

    d_head = d_model // n_head
    q = rng.standard_normal((n_rows, 1, d_head))  # one head's query
    k = rng.standard_normal((n_rows, n_keys, d_head))
    right = numpy_ref.softmax(q @ k.swapaxes(-2, -1) / np.sqrt(d_head))
    wrong = numpy_ref.softmax(pitfalls.wrong_scale_scores(q, k, d_model))
    return {
        "d_model": d_model,
        "d_head": d_head,
        "n_keys": n_keys,
        "uniform_weight": 1 / n_keys,
        "max_weight_right": float(np.median(right.max(axis=-1))),
        "max_weight_wrong": float(np.median(wrong.max(axis=-1))),
    }


def compute():
    import numpy as np

    from mha_ref import numpy_ref, pitfalls

    rng = np.random.default_rng(0)
    scores = rng.standard_normal((3, 3))
    by_column = pitfalls.wrong_softmax_axis(scores)
    out = rng.standard_normal((1, 2, 4, 4))  # (B, H, T, dh)
    merged = numpy_ref.MultiHeadAttention(8, 2).merge_heads(out)
    return {
        "mask_demo": mask_demo(),
        "head_split": head_split(),
        "wrong_split": wrong_split(rng),
        "wrong_view_error": wrong_view_error(),
        "wrong_axis": {
            "scores": scores,
            "row_sums": by_column.sum(axis=-1),
            "col_sums": by_column.sum(axis=-2),
            "right_row_sums": numpy_ref.softmax(scores).sum(axis=-1),
        },
        "wrong_merge": {
            "max_abs_diff": float(
                np.abs(pitfalls.wrong_merge_heads(out) - merged).max()
            ),
        },
        "wrong_layout": wrong_layout(),
        "wrong_scale": wrong_scale(rng),
    }


def render(data, out):
    split = data["head_split"]

    def draw(fig, theme):
        import matplotlib
        import numpy as np

        colours = matplotlib.colors.ListedColormap(theme.series[: split["t"]])
        panels = [
            ("right", "reshape (B, T, H, dh) + transpose"),
            ("wrong", "direct reshape (B, H, T, dh)"),
        ]
        axes = fig.subplots(1, 2, sharey=True)
        for ax, (which, title) in zip(axes, panels, strict=True):
            positions = np.array(split[f"{which}_positions"])
            channels = np.array(split[f"{which}_channels"])
            h, t, dh = positions.shape
            grid = positions.reshape(h * t, dh)
            ax.pcolormesh(
                np.arange(dh + 1) - 0.5,
                np.arange(h * t + 1) - 0.5,
                grid,
                cmap=colours,
                vmin=-0.5,
                vmax=split["t"] - 0.5,
                edgecolor=theme.text,
                linewidth=0.3,
            )
            ax.set_ylim(h * t - 0.5, -0.5)  # head 0, row 0 at the top
            for (r, c), pos in np.ndenumerate(grid):
                chan = channels.reshape(h * t, dh)[r, c]
                ax.text(
                    c,
                    r,
                    f"t{pos} c{chan}",
                    ha="center",
                    va="center",
                    fontsize=7.5,
                    color=theme.text_on(colours(pos)),
                )
            for boundary in range(1, h):
                ax.axhline(boundary * t - 0.5, color=theme.text, lw=2)
            ax.set_xticks(range(dh))
            ax.set_xlabel("column within the head")
            ax.set_title(title, fontsize=10)
        labels = [
            f"head {i // split['t']}, row {i % split['t']}"
            for i in range(split["rows"])
        ]
        axes[0].set_yticks(range(split["rows"]), labels)
        fig.suptitle(
            f"Where each head's entries come from: position t, channel c "
            f"(T = {split['t']}, d_model = {split['d_model']})"
        )

    out.figure(
        "head-split",
        draw,
        figsize=(7.0, 3.6),
        alt=(
            f"Two grids of {split['rows']} rows (head, row) by "
            f"{split['d_head']} columns, each cell coloured by the token "
            "position it came from and labelled with that position and input "
            "channel. With reshape then transpose, row r of every head holds "
            "position r and each head its own block of channels. With a "
            f"direct reshape only {split['wrong_rows_at_own_position']} of "
            f"{split['rows']} rows hold their own position: each head is a "
            "pile of slices from other positions and other heads' channels."
        ),
    )
