"""Input checks of the trained heads (induction.py): the model's tokens
and head flags, the data's sizes, the scores' offset, the patching runs.

Each raises ``ValueError`` or ``TypeError`` naming the argument and its
shape or value; the checks both frameworks share are in checks.py.
"""

from mha_ref.checks import integer, is_tensor, positive_integer


def model_sizes(vocab, t_max, n_layer):
    """The model's vocabulary, longest sequence and layers: positive."""
    for name, value in (
        ("vocab", vocab),
        ("t_max", t_max),
        ("n_layer", n_layer),
    ):
        positive_integer(value, name)


def run(model, tokens, keep, patch, source):
    """tokens (B, T) long in 0 .. vocab - 1; keep and patch bool
    (n_layer, n_head); source (n_layer, B, H, T, dh) with patch."""
    if not is_tensor(tokens) or str(tokens.dtype) != "torch.int64":
        got = getattr(tokens, "dtype", type(tokens).__name__)
        raise TypeError(f"tokens must be a torch.long tensor, got {got}")
    if tokens.dim() != 2 or not 1 <= tokens.shape[1] <= model.t_max:
        raise ValueError(
            f"tokens must be (B, T) with 1 <= T <= t_max={model.t_max}, "
            f"got shape {tuple(tokens.shape)}"
        )
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= model.vocab):
        raise ValueError(f"tokens must lie in 0 .. {model.vocab - 1}")
    heads = (len(model.layers), model.n_head)
    for name, flags in (("keep", keep), ("patch", patch)):
        if flags is None:
            continue
        if not is_tensor(flags) or str(flags.dtype) != "torch.bool":
            raise TypeError(f"{name} must be a bool tensor {heads}")
        if tuple(flags.shape) != heads:
            raise ValueError(
                f"{name} must be (n_layer, n_head) = {heads}, got shape "
                f"{tuple(flags.shape)}"
            )
    if (patch is None) != (source is None):
        raise ValueError("patch and source go together: pass both or none")
    if source is not None:
        d_head = model.layers[0].d_head
        want = (*heads[:1], tokens.shape[0], heads[1], tokens.shape[1], d_head)
        if tuple(source.shape) != want:
            raise ValueError(
                f"source must be (n_layer, B, H, T, dh) = {want}, got "
                f"shape {tuple(source.shape)}"
            )


def data(n, t, vocab, min_len):
    """repeated_segments's sizes: the segment and its repeat fit in t."""
    for name, value in (("n", n), ("t", t), ("vocab", vocab)):
        positive_integer(value, name)
    positive_integer(min_len, "min_len")
    if not 2 <= min_len <= t // 2:
        raise ValueError(
            f"min_len={min_len} must lie in 2 .. t // 2 = {t // 2}: the "
            f"segment and its repeat must fit in t={t} tokens"
        )
    if vocab < 2:
        raise ValueError(f"vocab={vocab}: a changed token needs vocab >= 2")


def vocab(vocab):
    """Another token exists to change one to: vocab >= 2."""
    positive_integer(vocab, "vocab")
    if vocab < 2:
        raise ValueError(
            f"vocab={vocab}: changing a token to another one needs vocab >= 2"
        )


def offset(offset, t):
    """0 .. T - 1: the key offset positions back exists for a query."""
    integer(offset, "offset")
    if not 0 <= offset < t:
        raise ValueError(
            f"offset={offset} must lie in 0 .. T - 1 = {t - 1}: the key "
            f"offset positions back must exist for some query"
        )


def runs_differ(high, low):
    """Patching restores a share of a difference: it must not be 0."""
    if high == low:
        raise ValueError(
            f"clean and corrupted runs give the same mean log-probability "
            f"of the right answer ({high:.6g}): the share restored, "
            f"(patched - corrupted) / (clean - corrupted), is undefined; "
            f"corrupt the clean batch first (see corrupt)"
        )
