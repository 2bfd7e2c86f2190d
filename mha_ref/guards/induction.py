"""The doors of induction.py: one guard per public function, same name
(the constructor's: attention_only)."""

from mha_ref.guards.arrays import integer, is_tensor, positive_integer

WEIGHTS = ("wq", "wk", "wv", "wo")  # each layer's, as to_arrays names them


def attention_only(vocab, t_max, n_layer):
    """The constructor's vocabulary, longest sequence and layers:
    positive ints (torch_ref.MultiHeadAttention checks the heads)."""
    for name, value in (
        ("vocab", vocab),
        ("t_max", t_max),
        ("n_layer", n_layer),
    ):
        positive_integer(value, name)


def forward(model, tokens, keep, patch, source):
    """forward's tokens (B, T) long in 0 .. vocab - 1; keep and patch bool
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


def repeated_segments(n, t, vocab, min_len):
    """The sizes: the segment and its repeat fit in t."""
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


def corrupt(vocab):
    """corrupt's vocab: another token exists to change one to: vocab >= 2."""
    positive_integer(vocab, "vocab")
    if vocab < 2:
        raise ValueError(
            f"vocab={vocab}: changing a token to another one needs vocab >= 2"
        )


def head_scores(offset, t):
    """An offset in 0 .. T - 1: the key that many positions back exists
    for some query."""
    integer(offset, "offset")
    if not 0 <= offset < t:
        raise ValueError(
            f"offset={offset} must lie in 0 .. T - 1 = {t - 1}: the key "
            f"offset positions back must exist for some query"
        )


def patching(high, low):
    """The clean and corrupted runs differ: patching restores a share
    of their difference, which must not be 0."""
    if high == low:
        raise ValueError(
            f"clean and corrupted runs give the same mean log-probability "
            f"of the right answer ({high:.6g}): the share restored, "
            f"(patched - corrupted) / (clean - corrupted), is undefined; "
            f"corrupt the clean batch first (see corrupt)"
        )


def logits(model, tokens):
    """logits' tokens, as forward checks them (no heads changed)."""
    forward(model, tokens, None, None, None)


def rule_accuracy(context):
    """The longest match the rule looks back for: an int >= 1."""
    positive_integer(context, "context")


def copying(copy_from):
    """A batch with a query that can copy (copy_from >= 0 somewhere)."""
    if not bool((copy_from >= 0).any()):
        raise ValueError("batch has no query that can copy: nothing to score")


def from_arrays(arrays):
    """The arrays of to_arrays(model): embed (vocab, d), pos_embed
    (t_max, d), unembed (d, vocab), "<layer>.wq" ... "<layer>.wo" (d, d)
    for layers 0 .. n_layer - 1, nothing else."""
    fit = "arrays do not fit the model"
    missing = [k for k in ("embed", "pos_embed", "unembed") if k not in arrays]
    if missing:
        raise ValueError(f"{fit}: missing {missing}")
    vocab, d = arrays["embed"].shape
    n_layer = sum(key.endswith(".wq") for key in arrays)
    want = {
        "embed": ("embed.weight", (vocab, d)),
        "pos_embed": ("pos_embed.weight", (arrays["pos_embed"].shape[0], d)),
        "unembed": ("unembed.weight", (d, vocab)),
    }
    for n in range(n_layer):
        for name in WEIGHTS:
            want[f"{n}.{name}"] = (f"layers.{n}.{name}.weight", (d, d))
    for key in want.keys() - arrays.keys():
        raise ValueError(f"{fit}: missing {key} ({want[key][0]})")
    for key in arrays.keys() - want.keys():
        raise ValueError(f"{fit}: unexpected {key!r}")
    for key, (name, shape) in want.items():
        got = tuple(arrays[key].shape)
        if got != shape:
            raise ValueError(
                f"{fit}: {key} has shape {got}, the model expects {shape} "
                f"for {name} (as x @ W)"
            )


def composition_scores(model, head):
    """A model with two layers at least and a layer-0 head index."""
    if len(model.layers) < 2:
        raise ValueError(
            f"model must have 2 layers at least, got {len(model.layers)}"
        )
    integer(head, "head")
    if not 0 <= head < model.n_head:
        raise ValueError(
            f"head must lie in 0 .. {model.n_head - 1}, got {head}"
        )
