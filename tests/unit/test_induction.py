"""The trained-heads model: its forward, data, ablation and patching.

Tiny models in float64 and a few training steps: seconds, not minutes.
The page's own training runs in scripts/trained-heads.py.
"""

import pytest
import torch

from mha_ref import induction, torch_ref

VOCAB, T = 8, 12


@pytest.fixture
def model():
    torch.manual_seed(0)
    net = induction.AttentionOnly(VOCAB, T, d_model=16, n_head=4).double()
    with torch.no_grad():  # larger weights than the init: sharper heads
        for p in net.parameters():
            p.mul_(3.0)
    return net


@pytest.fixture
def batch():
    return induction.repeated_segments(
        6, T, VOCAB, torch.Generator().manual_seed(1)
    )


def all_heads(model, value):
    shape = (len(model.layers), model.n_head)
    return torch.full(shape, value, dtype=torch.bool)


# -- the forward: mha_ref's layer, heads removed or patched --------------


def test_forward_equals_mha_ref_layers(model, batch):
    """The per-head path is MultiHeadAttention.forward, layer by layer."""
    tokens = batch.tokens
    x = model.embed(tokens) + model.pos_embed.weight[:T]
    mask = torch_ref.causal_mask(T)
    expected_weights = []
    for mha in model.layers:
        y, w = mha(x, mask=mask)
        x = x + y
        expected_weights.append(w)
    logits, weights, _ = model(tokens)
    torch.testing.assert_close(logits, model.unembed(x), rtol=0, atol=1e-12)
    torch.testing.assert_close(
        weights, torch.stack(expected_weights), rtol=0, atol=1e-12
    )


def test_forward_keeping_every_head_equals_the_plain_forward(model, batch):
    plain, _, _ = model(batch.tokens)
    kept, _, _ = model(batch.tokens, keep=all_heads(model, True))
    assert torch.equal(plain, kept)


def test_forward_removing_a_head_equals_zeroing_its_wo_columns(model, batch):
    """keep=False on head (0, 2) is the same as cutting its block of
    Wo's input columns: the head writes nothing to the residual."""
    keep = all_heads(model, True)
    keep[0, 2] = False
    removed, _, _ = model(batch.tokens, keep=keep)
    plain, _, _ = model(batch.tokens)
    dh = model.layers[0].d_head
    with torch.no_grad():
        model.layers[0].wo.weight[:, 2 * dh : 3 * dh] = 0.0
    cut, _, _ = model(batch.tokens)
    torch.testing.assert_close(removed, cut, rtol=0, atol=1e-12)
    assert not torch.allclose(plain, cut)


def test_forward_removing_every_head_leaves_the_direct_path(model, batch):
    logits, _, heads = model(batch.tokens, keep=all_heads(model, False))
    direct = model.unembed(model.embed(batch.tokens) + model.pos_embed.weight)
    torch.testing.assert_close(logits, direct, rtol=0, atol=1e-12)
    assert torch.count_nonzero(heads) == 0


def test_forward_patching_every_head_reproduces_the_clean_run(model, batch):
    """Where clean and corrupted share their tokens (the repeat and after),
    the patched corrupted run is the clean run."""
    bad = induction.corrupt(batch, VOCAB, torch.Generator().manual_seed(2))
    clean, _, source = model(batch.tokens)
    patched, _, _ = model(
        bad.tokens, patch=all_heads(model, True), source=source
    )
    i = torch.arange(T)[None, :]
    same = i >= (batch.start + batch.length)[:, None]  # the repeat on
    assert same.any()
    torch.testing.assert_close(patched[same], clean[same], rtol=0, atol=1e-12)
    corrupted, _, _ = model(bad.tokens)
    assert not torch.allclose(corrupted[same], clean[same])


def test_forward_patching_no_head_is_the_corrupted_run(model, batch):
    bad = induction.corrupt(batch, VOCAB, torch.Generator().manual_seed(2))
    _, _, source = model(batch.tokens)
    patched, _, _ = model(
        bad.tokens, patch=all_heads(model, False), source=source
    )
    assert torch.equal(patched, model(bad.tokens)[0])


def test_forward_on_a_prefix_equals_the_first_rows(model, batch):
    """Causal: the first 5 positions do not see the rest.

    float64; the two lengths block their matmuls differently, so the
    rows agree to rounding (measured up to 2e-12), not bit for bit. A
    position that saw a later token would move by far more than 1e-9.
    """
    full, _, _ = model(batch.tokens)
    short, _, _ = model(batch.tokens[:, :5])
    torch.testing.assert_close(short, full[:, :5], rtol=0, atol=1e-9)


def test_fast_logits_equal_the_reference_forward(model, batch):
    """Training's SDPA path and the reference path: the same logits."""
    fast = model.logits(batch.tokens)
    reference, _, _ = model(batch.tokens)
    torch.testing.assert_close(fast, reference, rtol=0, atol=1e-10)


def test_arrays_round_trip_gives_the_same_model(model, batch):
    arrays = induction.to_arrays(model)
    assert arrays["0.wq"].shape == (16, 16)
    assert arrays["unembed"].shape == (16, VOCAB)
    twin = induction.from_arrays(arrays, n_head=4)
    assert torch.equal(twin(batch.tokens)[0], model(batch.tokens)[0])
    # x @ W: the arrays are nn.Linear's (out, in) weights transposed
    x = torch.randn(3, 16, dtype=torch.float64)
    torch.testing.assert_close(
        x @ torch.from_numpy(arrays["1.wo"]), model.layers[1].wo(x)
    )


# -- the data -------------------------------------------------------------


def test_repeated_segments_repeat_right_after_themselves():
    b = induction.repeated_segments(
        200, 24, 8, torch.Generator().manual_seed(0)
    )
    for row in range(200):
        s, n = int(b.start[row]), int(b.length[row])
        tokens = b.tokens[row]
        assert 3 <= n <= 12
        assert s + 2 * n <= 24
        assert torch.equal(tokens[s + n : s + 2 * n], tokens[s : s + n])
        expected = torch.full((24,), -1)
        i = torch.arange(s + n, s + 2 * n - 1)
        expected[i] = i - n + 1
        assert torch.equal(b.copy_from[row], expected)
    # copy_from points at the next token, wherever it is defined
    rows, i = torch.nonzero(b.copy_from >= 0, as_tuple=True)
    assert torch.equal(
        b.tokens[rows, b.copy_from[rows, i]], b.tokens[rows, i + 1]
    )


def test_repeated_segments_start_anywhere():
    b = induction.repeated_segments(
        2000, 24, 8, torch.Generator().manual_seed(0)
    )
    assert set(b.start.tolist()) == set(range(24 - 2 * 3 + 1))
    assert set(b.length.tolist()) == set(range(3, 13))


def test_repeated_segments_are_deterministic():
    first, second = (
        induction.repeated_segments(
            50, 24, 8, torch.Generator().manual_seed(7)
        )
        for _ in range(2)
    )
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    other = induction.repeated_segments(
        50, 24, 8, torch.Generator().manual_seed(8)
    )
    assert not torch.equal(first.tokens, other.tokens)


def test_corrupt_changes_every_token_of_the_first_copy_only(batch):
    bad = induction.corrupt(batch, VOCAB, torch.Generator().manual_seed(3))
    i = torch.arange(T)[None, :]
    s, n = batch.start[:, None], batch.length[:, None]
    first = (i >= s) & (i < s + n)
    assert torch.all(bad.tokens[first] != batch.tokens[first])
    assert torch.equal(bad.tokens[~first], batch.tokens[~first])
    assert bad.tokens.min() >= 0
    assert bad.tokens.max() < VOCAB
    assert torch.equal(bad.copy_from, batch.copy_from)


# -- scores, accuracy, patching ------------------------------------------


def test_head_scores_on_weights_built_by_hand(batch):
    """Head 0 reads the previous token; head 1 the key after the earlier
    copy (key 0 elsewhere); head 2 spreads evenly over its allowed keys.
    Segments are at least 3 long, so copy_from is never i - 1."""
    n = batch.tokens.shape[0]
    w = torch.zeros(1, n, 3, T, T, dtype=torch.float64)
    i = torch.arange(1, T)
    w[0, :, 0, 0, 0] = 1.0
    w[0, :, 0, i, i - 1] = 1.0
    w[0, :, 1, :, 0] = 1.0
    rows, q = torch.nonzero(batch.copy_from >= 0, as_tuple=True)
    w[0, rows, 1, q, 0] = 0.0
    w[0, rows, 1, q, batch.copy_from[rows, q]] = 1.0
    allowed = (~torch_ref.causal_mask(T)).double()
    w[0, :, 2] = allowed / allowed.sum(-1, keepdim=True)  # row i: 1/(i+1)
    back, copy = induction.head_scores(w, batch)
    uniform = 1.0 / (torch.arange(T, dtype=torch.float64) + 1)
    expected_back = [1.0, 1.0 / (T - 1), uniform[1:].mean().item()]
    expected_copy = [0.0, 1.0, uniform[q].mean().item()]
    assert back[0].tolist() == pytest.approx(expected_back, abs=1e-12)
    assert copy[0].tolist() == pytest.approx(expected_copy, abs=1e-12)
    two_back, _ = induction.head_scores(w, batch, offset=2)
    assert two_back[0, 0].item() == 0.0
    assert two_back[0, 2].item() == pytest.approx(uniform[2:].mean().item())


def test_rule_accuracy_votes_among_the_matches():
    """First query of the repeat (a 0): earlier 0s are followed by 2,
    2 and 1, so the vote says 2, the copy says 1. Second query (a 1):
    one earlier 1, followed by 3: right. One of two."""
    tokens = torch.tensor([[0, 2, 0, 2, 0, 1, 3, 0, 1, 3]])
    copy_from = torch.full((1, 10), -1)
    copy_from[0, 7:9] = torch.tensor([5, 6])
    batch = induction.Segments(
        tokens, copy_from, torch.tensor([4]), torch.tensor([3])
    )
    assert induction.rule_accuracy(batch, 1, vocab=4) == 0.5
    assert induction.rule_accuracy(batch, 3, vocab=4) == 0.5


def test_rule_accuracy_improves_with_longer_matches():
    b = induction.repeated_segments(
        300, 24, 8, torch.Generator().manual_seed(0)
    )
    one, two = (induction.rule_accuracy(b, c, 8) for c in (1, 2))
    assert 1 / 8 < one < two <= 1.0
    distinct = induction.repeated_segments(  # 64 letters: few repeats
        300, 24, 64, torch.Generator().manual_seed(0)
    )
    assert induction.rule_accuracy(distinct, 1, 64) > 0.8


def test_accuracy_counts_only_the_copyable_tokens(model, batch):
    logits, _, _ = model(batch.tokens)
    where = batch.copy_from[:, :-1] >= 0
    right = logits[:, :-1].argmax(-1) == batch.tokens[:, 1:]
    expected = right[where].double().mean().item()
    assert induction.accuracy(model, batch) == pytest.approx(expected)


def test_patching_the_only_head_of_one_layer_restores_everything(batch):
    """One layer, one head: the patched run is the clean one where it
    is measured, so the head restores exactly 1."""
    torch.manual_seed(0)
    net = induction.AttentionOnly(VOCAB, T, 8, 1, n_layer=1).double()
    bad = induction.corrupt(batch, VOCAB, torch.Generator().manual_seed(2))
    restored = induction.patching(net, batch, bad)
    assert restored.shape == (1, 1)
    assert restored[0, 0].item() == pytest.approx(1.0, abs=1e-9)


def test_patching_is_zero_for_a_head_that_writes_nothing(model, batch):
    bad = induction.corrupt(batch, VOCAB, torch.Generator().manual_seed(2))
    with torch.no_grad():  # head (1, 3) of the last layer writes 0
        dh = model.layers[1].d_head
        model.layers[1].wo.weight[:, 3 * dh :] = 0.0
    restored = induction.patching(model, batch, bad)
    assert restored.shape == (2, 4)
    assert restored[1, 3].item() == pytest.approx(0.0, abs=1e-12)


def test_accuracy_patching_zeros_equals_removing(model, batch):
    """A patch from an all-zero source is a zero ablation; a mean
    ablation patches the mean output instead."""
    _, _, heads = model(batch.tokens)
    patch = all_heads(model, False)
    patch[0, 1] = patch[1, 2] = True
    keep = ~patch
    zeros = torch.zeros_like(heads)
    assert induction.accuracy(
        model, batch, patch=patch, source=zeros
    ) == induction.accuracy(model, batch, keep=keep)
    nothing = all_heads(model, False)
    assert induction.accuracy(
        model, batch, patch=nothing, source=heads
    ) == induction.accuracy(model, batch)


# -- copying: a head's direct effect on the logits ------------------------


def centred_right_logit(model, batch, keep=None):
    """The centred logit of the letter after the earlier copy, at every
    query that can copy, by the model's own forward."""
    logits, _, _ = model(batch.tokens, keep=keep)
    b, q = torch.nonzero(batch.copy_from >= 0, as_tuple=True)
    letter = batch.tokens[b, batch.copy_from[b, q]]
    centred = logits[b, q] - logits[b, q].mean(-1, keepdim=True)
    return centred[torch.arange(len(b)), letter]


def test_copying_of_a_last_layer_head_is_what_removing_it_costs(model, batch):
    """In the last layer a head's direct effect is its whole effect: the
    centred logit falls by exactly its copying score when it goes."""
    scores = induction.copying(model, batch)
    with torch.no_grad():
        every = centred_right_logit(model, batch)
        for h in range(model.n_head):
            keep = all_heads(model, True)
            keep[1, h] = False
            lost = every - centred_right_logit(model, batch, keep)
            assert scores[1, h].item() == pytest.approx(
                lost.mean().item(), abs=1e-10
            )


def test_copying_is_zero_for_a_head_that_writes_nothing(model, batch):
    with torch.no_grad():  # head (0, 1) writes 0 into the residual
        dh = model.layers[0].d_head
        model.layers[0].wo.weight[:, dh : 2 * dh] = 0.0
    scores = induction.copying(model, batch)
    assert scores.shape == (2, 4)
    assert scores[0, 1].item() == 0.0
    assert scores.abs().sum().item() > 0


# -- training ------------------------------------------------------------


def test_train_is_deterministic_and_learns():
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        net = induction.AttentionOnly(VOCAB, T, 16, 2)
        runs.append(
            induction.train(
                net, 30, torch.Generator().manual_seed(0), batch_size=16
            )
        )
    assert runs[0] == runs[1]
    losses = runs[0][0]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) < sum(losses[:5])


# -- input checks --------------------------------------------------------


# -- refusals of what the tools cannot serve (issue 28) ------------------


def test_head_scores_offset_zero_is_the_diagonal(batch):
    w = torch.zeros(1, 6, 1, T, T, dtype=torch.float64)
    w[..., torch.arange(T), torch.arange(T)] = 0.25
    back, _ = induction.head_scores(w, batch, offset=0)
    assert back.tolist() == [[0.25]]


# -- composition scores: against the bilinear forms the layers compute ---


@pytest.mark.parametrize("head", [0, 2])
def test_composition_scores_equal_the_forms_the_layers_compute(model, head):
    """Feed the basis vectors e_j through the layers' own projections:
    layer 0's head writes y_j = e_j OV (one head, through Wo), layer 1's
    head h scores query a against key b as q(a) . k(b). K-composition
    reads y with the keys, Q-composition with the queries."""
    l0, l1 = model.layers[0], model.layers[1]
    d = l0.d_model
    eye = torch.eye(d, dtype=torch.float64)[None]  # (1, d, d): d "tokens"
    with torch.no_grad():
        _, _, v = l0.project(eye)  # (1, H, d, dh)
        only = torch.zeros_like(v)
        only[:, head] = v[:, head]
        y = l0.wo(l0.merge_heads(only))  # (1, d, d): row j is e_j OV
        q_e, k_e, _ = l1.project(eye)  # (1, H, d, dh)
        q_y, k_y, _ = l1.project(y)
        qk = q_e[0] @ k_e[0].transpose(-1, -2)  # (H, d, d)
        keys = q_e[0] @ k_y[0].transpose(-1, -2)  # e_i QK (e_j OV)^T
        queries = q_y[0] @ k_e[0].transpose(-1, -2)  # (e_i OV) QK e_j^T
        norm = torch.linalg.matrix_norm
        scale = norm(qk) * norm(y[0])
        want = torch.stack([norm(keys), norm(queries)]) / scale  # (2, H)
    got = induction.composition_scores(model, head)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(got[0], got[1])  # the two really differ
