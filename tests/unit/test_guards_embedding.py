"""Refusals of the door of embedding.py (mha_ref/guards/embedding.py)."""

import numpy as np
import pytest
import test_embedding as unit
import torch

from mha_ref.embedding import embed

table = unit.table  # its fixtures


@pytest.mark.parametrize("bad", [5, -1, [0, 7], [[1, -2]]])
def test_embed_refuses_an_id_out_of_range(table, bad):
    with pytest.raises(ValueError, match=r"token_ids must lie in 0 \.\. "):
        embed(bad, table)


@pytest.mark.parametrize(
    "bad", [[1.0, 2.0], [True, False], np.array([0.5]), "ab"]
)
def test_embed_refuses_ids_that_are_not_integers(table, bad):
    with pytest.raises(TypeError, match="token_ids must hold integers"):
        embed(bad, table)


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        (np.zeros(3), ValueError, r"table must be 2-D"),
        (np.zeros((2, 2, 2)), ValueError, r"table must be 2-D"),
        (np.array([[1.0, np.nan]]), ValueError, r"table of shape \(1, 2\)"),
        (np.array([["a", "b"]]), TypeError, r"table must hold numbers"),
        (torch.zeros(2, 2), TypeError, r"table is a torch.Tensor"),
    ],
)
def test_embed_refuses_a_bad_table(bad, error, match):
    with pytest.raises(error, match=match):
        embed([0], bad)
