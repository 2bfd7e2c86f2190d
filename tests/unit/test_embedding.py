"""embed: table[token_ids], against torch's embedding lookup."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_ref.embedding import embed


@pytest.fixture
def table():
    return np.random.default_rng(0).standard_normal((5, 3))


def test_embed_picks_one_row_per_id():
    table = np.arange(12.0).reshape(4, 3)
    out = embed([2, 0, 2], table)
    np.testing.assert_array_equal(
        out, [[6.0, 7.0, 8.0], [0.0, 1.0, 2.0], [6.0, 7.0, 8.0]]
    )


@pytest.mark.parametrize("shape", [(4,), (2, 3), (2, 1, 3), (0,)])
def test_embed_matches_torch_functional_embedding(table, shape):
    ids = np.random.default_rng(1).integers(0, 5, shape)
    expected = F.embedding(torch.from_numpy(ids), torch.from_numpy(table))
    out = embed(ids, table)
    assert out.shape == (*shape, 3)
    np.testing.assert_array_equal(out, expected.numpy())


def test_embed_matches_nn_embedding_weights(table):
    layer = torch.nn.Embedding(5, 3, dtype=torch.float64)
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(table))
    ids = [[4, 1, 1, 0], [3, 2, 0, 4]]
    expected = layer(torch.tensor(ids)).detach().numpy()
    np.testing.assert_array_equal(embed(ids, table), expected)


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


def test_embed_takes_an_empty_list():
    assert embed([], np.zeros((2, 4))).shape == (0, 4)
