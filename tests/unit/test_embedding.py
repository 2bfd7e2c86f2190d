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


def test_embed_takes_an_empty_list():
    assert embed([], np.zeros((2, 4))).shape == (0, 4)
