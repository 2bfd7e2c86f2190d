"""A small attention-only transformer that learns to copy, in PyTorch.

Two layers of torch_ref.MultiHeadAttention on a residual stream, learned
token and position embeddings, no MLP and no normalisation, trained on
random sequences in which a segment repeats right after itself. Every
head's output can be removed (ablation) or taken from another run
(activation patching). Masks are boolean with True = blocked.
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from mha_ref import torch_ref
from mha_ref.guards import induction as check


# --8<-- [start:model]
class AttentionOnly(nn.Module):
    """Embeddings, n_layer attention layers with residuals, unembedding."""

    def __init__(self, vocab, t_max, d_model, n_head, n_layer=2):
        super().__init__()
        check.attention_only(vocab, t_max, n_layer)
        self.vocab, self.t_max, self.n_head = vocab, t_max, n_head
        self.embed = nn.Embedding(vocab, d_model)  # token -> vector
        self.pos_embed = nn.Embedding(t_max, d_model)  # learned positions
        self.layers = nn.ModuleList(
            torch_ref.MultiHeadAttention(d_model, n_head)
            for _ in range(n_layer)
        )
        self.unembed = nn.Linear(d_model, vocab, bias=False)  # -> logits
        # --8<-- [end:model]

    # --8<-- [start:forward]
    def forward(self, tokens, keep=None, patch=None, source=None):
        """tokens (B, T) -> logits (B, T, vocab), weights, head outputs.

        keep (n_layer, n_head) bool: False removes a head (it writes 0).
        patch (n_layer, n_head) bool: True takes that head's output from
        source (n_layer, B, H, T, dh), the head outputs of another run.
        """
        check.forward(self, tokens, keep, patch, source)  # see below
        return self._forward(tokens, keep, patch, source)

    def _forward(self, tokens, keep, patch, source):
        # unchecked: patching runs the model once per head with it
        t = tokens.shape[1]
        x = self.embed(tokens) + self.pos_embed.weight[:t]  # (B, T, d)
        mask = torch_ref.causal_mask(t, device=tokens.device)  # (T, T)
        weights, heads = [], []
        # --8<-- [start:forward-layers]
        for n, mha in enumerate(self.layers):
            q, k, v = mha.project(x)  # (B, H, T, dh) each
            z, w = torch_ref.attention(q, k, v, mask)  # (B, H, T, dh)
            if patch is not None:  # these heads: the other run's output
                z = torch.where(patch[n][:, None, None], source[n], z)
            if keep is not None:  # a removed head writes nothing
                z = z * keep[n][:, None, None].to(z.dtype)
            # each layer adds Concat(heads) Wo to the residual stream
            x = x + mha.wo(mha.merge_heads(z))  # (B, T, d_model)
            # --8<-- [end:forward-layers]
            weights.append(w)
            heads.append(z)
        # logits, (L, B, H, T, T) weights, (L, B, H, T, dh) head outputs
        return self.unembed(x), torch.stack(weights), torch.stack(heads)
        # --8<-- [end:forward]

    # --8<-- [start:fast-forward]
    def logits(self, tokens):
        """The same logits through SDPA, without weights: for training."""
        check.logits(self, tokens)
        t = tokens.shape[1]
        x = self.embed(tokens) + self.pos_embed.weight[:t]  # (B, T, d)
        for mha in self.layers:
            q, k, v = mha.project(x)  # (B, H, T, dh) each
            # is_causal: SDPA's own causal mask (Tq = Tk), no mask tensor
            z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + mha.wo(mha.merge_heads(z))  # (B, T, d_model)
        return self.unembed(x)  # (B, T, vocab)
        # --8<-- [end:fast-forward]


# --8<-- [start:data]
class Segments(NamedTuple):
    tokens: torch.Tensor  # (n, T) random tokens, one segment repeated
    copy_from: torch.Tensor  # (n, T) key to copy for query i, else -1
    start: torch.Tensor  # (n,) where the first copy starts
    length: torch.Tensor  # (n,) its length L; the copy starts at start + L


def repeated_segments(n, t, vocab, generator, min_len=3):
    """n random sequences of t tokens; a segment of random length L
    (min_len .. t // 2) at a random start repeats right after itself.

    Inside the repeat, token i equals token i - L, so the next token is
    the one after the earlier occurrence: copy_from[i] = i - L + 1.
    """
    check.repeated_segments(n, t, vocab, min_len)
    tokens = torch.randint(0, vocab, (n, t), generator=generator)
    length = torch.randint(min_len, t // 2 + 1, (n,), generator=generator)
    # start uniform in 0 .. t - 2L: no fixed position predicts the copy
    start = (torch.rand(n, generator=generator) * (t - 2 * length + 1)).long()
    i = torch.arange(t)[None, :]  # (1, T)
    s, L = start[:, None], length[:, None]  # (n, 1)
    repeat = (i >= s + L) & (i < s + 2 * L)  # (n, T) the second copy
    tokens = tokens.gather(1, torch.where(repeat, i - L, i))  # copy it
    # the last token of the repeat has no next token in the repeat
    can_copy = repeat & (i < s + 2 * L - 1)  # (n, T)
    copy_from = torch.where(can_copy, i - L + 1, -1)  # (n, T)
    return Segments(tokens, copy_from, start, length)
    # --8<-- [end:data]


# --8<-- [start:corrupt]
def corrupt(batch, vocab, generator):
    """The same sequences with every token of the first copy changed:
    the second copy stays, but nothing before it matches it any more."""
    check.corrupt(vocab)  # another token exists: vocab >= 2
    n, t = batch.tokens.shape
    i = torch.arange(t)[None, :]  # (1, T)
    s, L = batch.start[:, None], batch.length[:, None]  # (n, 1)
    first = (i >= s) & (i < s + L)  # (n, T) the first copy
    # add 1 .. vocab - 1 (mod vocab): another token, never the same one
    shift = torch.randint(1, vocab, (n, t), generator=generator)
    changed = (batch.tokens + shift) % vocab  # (n, T)
    return batch._replace(tokens=torch.where(first, changed, batch.tokens))
    # --8<-- [end:corrupt]


# --8<-- [start:rules]
def rule_accuracy(batch, context, vocab):
    """Accuracy of a rule with no weights: among the earlier positions
    whose last letters match the current ones best (up to ``context``
    letters), vote for the letter that followed them; a tie goes to the
    latest. Attention averages over matches much like this vote."""
    check.rule_accuracy(context)  # an int >= 1
    tokens = batch.tokens  # (n, T)
    t = tokens.shape[1]
    same = tokens[:, :, None] == tokens[:, None, :]  # (n, Tq, Tk)
    run, length = same, same.long()  # letters matched, counted backwards
    for r in range(1, context):
        back = torch.zeros_like(same)  # query i - r against key j - r
        back[:, r:, r:] = same[:, :-r, :-r]
        run = run & back
        length = length + run.long()
    i = torch.arange(t)
    length = length * (i[None, :] < i[:, None])  # keys before the query
    best = length.amax(dim=-1, keepdim=True)  # (n, Tq, 1)
    chosen = (length == best) & (best > 0)  # (n, Tq, Tk)
    after = F.one_hot(tokens.roll(-1, dims=1), vocab)  # (n, Tk, vocab)
    votes = chosen.double() @ after.double()  # (n, Tq, vocab)
    latest = (chosen * i).argmax(dim=-1, keepdim=True)  # (n, Tq, 1)
    votes = votes + 0.5 * after.gather(1, latest.expand(-1, -1, vocab))
    guess = votes.argmax(dim=-1)  # (n, Tq), no match: votes all 0
    right = (best[..., 0] > 0) & (guess == tokens.roll(-1, dims=1))
    return right[batch.copy_from >= 0].float().mean().item()
    # --8<-- [end:rules]


# --8<-- [start:train]
LR = 6e-3  # AdamW's learning rate: the page's models are trained at it


def train(model, steps, generator, batch_size=64, lr=LR):
    """AdamW on fresh random batches; loss and accuracy of each step.

    The loss counts only the tokens that can be copied: the rest of a
    sequence is random, and no model can predict it.
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses, accuracies = [], []
    for _ in range(steps):
        batch = repeated_segments(
            batch_size, model.t_max, model.vocab, generator
        )
        logits = model.logits(batch.tokens)  # (B, T, vocab), via SDPA
        where = batch.copy_from[:, :-1] >= 0  # (B, T - 1)
        guess = logits[:, :-1][where]  # (N, vocab) predicts token i + 1
        target = batch.tokens[:, 1:][where]  # (N,)
        loss = F.cross_entropy(guess, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        accuracies.append((guess.argmax(-1) == target).float().mean().item())
    return losses, accuracies
    # --8<-- [end:train]


# --8<-- [start:scores]
def head_scores(weights, batch, offset=1):
    """(n_layer, n_head) mean weights: on the key ``offset`` positions
    back (1: the previous token), and on the key after the earlier copy.
    """
    t = weights.shape[-1]  # weights: (L, B, H, T, T)
    check.head_scores(offset, t)  # some query has such a key
    i = torch.arange(offset, t)  # queries that have such a key
    back = weights[..., i, i - offset].mean(dim=(1, 3))  # (L, H)
    b, q = torch.nonzero(batch.copy_from >= 0, as_tuple=True)  # (N,) each
    k = batch.copy_from[b, q]  # (N,) the key after the earlier copy
    copy = weights[:, b, :, q, k]  # (N, L, H): advanced indexing first
    return back, copy.mean(dim=0)  # (L, H) each
    # --8<-- [end:scores]


# --8<-- [start:copying]
def copying(model, batch):
    """(n_layer, n_head): each head's direct effect on the logit of the
    letter after the earlier copy, at the queries that can copy: its
    output through its rows of Wo and the unembedding, straight to the
    logits, centred over the letters (logits move together freely)."""
    check.copying(batch.copy_from)  # a query at least can copy
    with torch.no_grad():
        _, _, heads = model(batch.tokens)  # (L, B, H, T, dh)
        b, q = torch.nonzero(batch.copy_from >= 0, as_tuple=True)  # (N,)
        letter = batch.tokens[b, batch.copy_from[b, q]]  # (N,) to copy
        z = heads[:, b, :, q]  # (N, L, H, dh): advanced indexing first
        scores = []
        for n, mha in enumerate(model.layers):
            # --8<-- [start:copying-direct]
            # head h owns rows h * dh .. (h + 1) * dh of Wo (as x @ W)
            wo = mha.wo.weight.T.reshape(model.n_head, mha.d_head, -1)
            to_logits = wo @ model.unembed.weight.T  # (H, dh, vocab)
            direct = torch.einsum("nhc,hcv->nhv", z[:, n], to_logits)
            direct = direct - direct.mean(-1, keepdim=True)  # (N, H, V)
            picked = direct[torch.arange(len(b)), :, letter]  # (N, H)
            # --8<-- [end:copying-direct]
            scores.append(picked.mean(dim=0))  # (H,)
    return torch.stack(scores)  # (L, H), in logits
    # --8<-- [end:copying]


# --8<-- [start:ablation]
def accuracy(model, batch, keep=None, patch=None, source=None):
    """Share of the copyable next tokens the model predicts, with the
    heads where keep is False removed (and those in patch taken from
    source, as in forward: a mean ablation passes their mean output)."""
    with torch.no_grad():
        logits, _, _ = model(batch.tokens, keep, patch, source)  # (B, T, V)
    where = batch.copy_from[:, :-1] >= 0  # (B, T - 1)
    right = logits[:, :-1].argmax(-1) == batch.tokens[:, 1:]  # (B, T - 1)
    return right[where].float().mean().item()
    # --8<-- [end:ablation]


# --8<-- [start:patching]
def patching(model, clean, corrupted):
    """(n_layer, n_head): the share of the right answer's log-probability
    that patching one head's output from clean into corrupted restores
    (0: none, the corrupted run; 1: all of it, the clean run)."""

    def log_p(tokens, patch=None, source=None):
        run = model if patch is None else model._forward  # checked once
        logits, _, heads = run(tokens, None, patch, source)
        where = clean.copy_from[:, :-1] >= 0  # same in both runs
        lp = logits[:, :-1].log_softmax(-1)  # (B, T - 1, vocab)
        right = lp.gather(-1, clean.tokens[:, 1:, None])[..., 0][where]
        return right.mean().item(), heads

    with torch.no_grad():
        high, source = log_p(clean.tokens)  # source: clean head outputs
        low, _ = log_p(corrupted.tokens)
        check.patching(high, low)  # else there is nothing to restore
        n_layer, n_head = source.shape[0], source.shape[2]
        restored = torch.zeros(n_layer, n_head)
        for n in range(n_layer):
            for h in range(n_head):
                # --8<-- [start:patching-one-head]
                patch = torch.zeros(n_layer, n_head, dtype=torch.bool)
                patch[n, h] = True  # this one head from the clean run
                got, _ = log_p(corrupted.tokens, patch, source)
                restored[n, h] = (got - low) / (high - low)  # high != low
                # --8<-- [end:patching-one-head]
    return restored
    # --8<-- [end:patching]


def to_arrays(model):
    """The weights as float NumPy arrays, each used as x @ W (in, out).

    Keys: embed (vocab, d), pos_embed (t_max, d), unembed (d, vocab),
    and "<layer>.wq" ... "<layer>.wo" (d_model, d_model).
    """
    arrays = {
        "embed": model.embed.weight,
        "pos_embed": model.pos_embed.weight,
        "unembed": model.unembed.weight.T,  # nn.Linear stores (out, in)
    }
    for n, mha in enumerate(model.layers):
        for name in ("wq", "wk", "wv", "wo"):
            arrays[f"{n}.{name}"] = getattr(mha, name).weight.T
    return {k: v.detach().cpu().numpy().copy() for k, v in arrays.items()}


def from_arrays(arrays, n_head, dtype=torch.float64):
    """An AttentionOnly holding the weights of to_arrays(model)."""
    check.from_arrays(arrays)  # the names and shapes to_arrays gives
    vocab, d_model = arrays["embed"].shape
    n_layer = sum(key.endswith(".wq") for key in arrays)
    t_max = arrays["pos_embed"].shape[0]
    model = AttentionOnly(vocab, t_max, d_model, n_head, n_layer).to(dtype)
    state = {  # to_arrays' names -> the module's, transposed back
        "embed.weight": arrays["embed"],
        "pos_embed.weight": arrays["pos_embed"],
        "unembed.weight": arrays["unembed"].T,
    }
    for key, value in arrays.items():
        if "." in key:  # "<layer>.wq": layers.<layer>.wq.weight, (out, in)
            layer, name = key.split(".")
            state[f"layers.{layer}.{name}.weight"] = value.T
    model.load_state_dict(
        {k: torch.tensor(v, dtype=dtype) for k, v in state.items()}
    )
    return model


# --8<-- [start:composition]
def composition_scores(model, head):
    """(2, n_head): Elhage et al.'s K- and Q-composition scores of layer
    0's head ``head`` with each layer-1 head: ||QK OV^T|| and ||OV QK||
    over ||QK|| ||OV|| (Frobenius). Rows act on x (x @ W): a layer-1
    query reads x_q QK x_k^T, a layer-0 head writes x @ OV."""
    check.composition_scores(model, head)
    l0, l1 = model.layers[0], model.layers[1]
    dh = l0.d_head

    def cols(linear, h):  # head h's columns of W (as x @ W)
        return linear.weight.T[:, h * dh : (h + 1) * dh]  # (d, dh)

    with torch.no_grad():
        wo_rows = l0.wo.weight.T[head * dh : (head + 1) * dh]  # (dh, d)
        ov = cols(l0.wv, head) @ wo_rows  # (d, d)
        qk = torch.stack(
            [cols(l1.wq, h) @ cols(l1.wk, h).T for h in range(model.n_head)]
        )  # (H, d, d)
        norm = torch.linalg.matrix_norm
        scale = norm(qk) * norm(ov)  # (H,)
        k = norm(qk @ ov.T) / scale  # keys read what head wrote
        q = norm(ov @ qk) / scale  # queries read what head wrote
    return torch.stack([k, q])  # (2, H)
    # --8<-- [end:composition]
