"""Refusals of the doors of induction.py (mha_ref/guards/induction.py)."""

import pytest
import test_induction as unit
import torch
from test_induction import (
    VOCAB,
    T,
    all_heads,
)

from mha_ref import induction

batch, model = unit.batch, unit.model  # its fixtures


def test_from_arrays_refuses_arrays_of_the_wrong_shape(model):
    arrays = induction.to_arrays(model)
    arrays["1.wv"] = arrays["1.wv"][:, :8]
    with pytest.raises(ValueError, match=r"layers\.1\.wv"):
        induction.from_arrays(arrays, n_head=4)


def test_copying_refuses_a_batch_with_nothing_to_copy(model, batch):
    none = batch._replace(copy_from=torch.full_like(batch.copy_from, -1))
    with pytest.raises(ValueError, match="no query that can copy"):
        induction.copying(model, none)


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"tokens": torch.zeros(2, 3)}, TypeError, "tokens"),
        (
            {"tokens": torch.zeros(2, T + 1, dtype=torch.long)},
            ValueError,
            "t_max",
        ),
        ({"tokens": torch.full((1, 3), VOCAB)}, ValueError, "tokens"),
        ({"keep": torch.ones(2, 3, dtype=torch.bool)}, ValueError, "keep"),
        ({"keep": torch.ones(2, 4)}, TypeError, "keep"),
        ({"patch": torch.ones(2, 4, dtype=torch.bool)}, ValueError, "source"),
    ],
)
def test_forward_refuses_bad_inputs(model, kwargs, error, name):
    args = {"tokens": torch.zeros(1, 3, dtype=torch.long), **kwargs}
    with pytest.raises(error, match=name):
        model(**args)


def test_forward_refuses_a_source_of_the_wrong_shape(model):
    tokens = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="source"):
        model(
            tokens,
            patch=all_heads(model, True),
            source=torch.zeros(2, 1, 4, 4, 4),
        )


@pytest.mark.parametrize(
    ("args", "error", "name"),
    [
        ((0, 12, 8), ValueError, "n"),
        ((4, 12, 8.0), TypeError, "vocab"),
        ((4, 3, 8), ValueError, "min_len"),
    ],
)
def test_repeated_segments_refuses_bad_sizes(args, error, name):
    with pytest.raises(error, match=name):
        induction.repeated_segments(*args, torch.Generator())


def test_model_refuses_heads_that_do_not_split_d_model():
    with pytest.raises(ValueError, match="n_head"):
        induction.AttentionOnly(VOCAB, T, d_model=10, n_head=4)


def test_corrupt_refuses_a_vocabulary_of_one_token(batch):
    # with one token every "changed" token is the same one
    with pytest.raises(ValueError, match=r"vocab=1: .* needs vocab >= 2"):
        induction.corrupt(batch, 1, torch.Generator().manual_seed(3))


@pytest.mark.parametrize(
    ("offset", "error", "words"),
    [
        (T, ValueError, rf"offset={T} must lie in 0 \.\. T - 1 = {T - 1}"),
        (-1, ValueError, r"offset=-1 must lie in 0 \.\. T - 1"),
        (1.0, TypeError, r"offset must be an int, got 1\.0"),
    ],
)
def test_head_scores_refuses_offsets_with_no_key(batch, offset, error, words):
    w = torch.full((1, 6, 2, T, T), 1.0 / T, dtype=torch.float64)
    with pytest.raises(error, match=words):
        induction.head_scores(w, batch, offset=offset)


def test_patching_refuses_identical_runs(model, batch):
    # clean == corrupted: (patched - low) / (high - low) is 0 / 0
    with pytest.raises(ValueError, match=r"the same mean log-probability"):
        induction.patching(model, batch, batch)


@pytest.mark.parametrize(
    ("head", "error"), [(4, ValueError), (-1, ValueError), (1.0, TypeError)]
)
def test_composition_scores_refuses_a_head_out_of_range(model, head, error):
    with pytest.raises(error, match="head"):
        induction.composition_scores(model, head)


def test_composition_scores_refuses_a_one_layer_model():
    one = induction.AttentionOnly(VOCAB, T, d_model=8, n_head=2, n_layer=1)
    with pytest.raises(ValueError, match="2 layers"):
        induction.composition_scores(one, 0)
