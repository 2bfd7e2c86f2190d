"""The door of embedding.py: one guard per public function, same name."""

import numpy as np

from mha_ref.guards.arrays import array_of, finite, not_a_tensor


def embed(token_ids, table):
    """int ids in range(vocab), a finite 2-D table.

    Returns the ids as an int64 array and the table as a float array.
    """
    not_a_tensor(table, "table", "torch.nn.functional.embedding")
    not_a_tensor(token_ids, "token_ids", "torch.nn.functional.embedding")
    table = array_of(table, "table", np.asarray)
    if table.ndim != 2:
        raise ValueError(
            f"table must be 2-D (vocab, d_model), got shape {table.shape}"
        )
    if table.dtype.kind not in "fiu" or table.dtype == bool:
        raise TypeError(f"table must hold numbers, got dtype {table.dtype}")
    finite(table, "table")
    ids = array_of(token_ids, "token_ids", np.asarray)
    if ids.size == 0 and ids.dtype.kind == "f":  # [] reads as float64
        ids = ids.astype(np.int64)
    if ids.dtype.kind not in "iu":  # a float or bool id is no row number
        raise TypeError(
            f"token_ids must hold integers, got dtype {ids.dtype} and "
            f"shape {ids.shape}"
        )
    vocab = table.shape[0]
    out = (ids < 0) | (ids >= vocab)
    if out.any():
        raise ValueError(
            f"token_ids must lie in 0 .. vocab - 1 = {vocab - 1} (table "
            f"of shape {table.shape}), got {ids[out].flat[0]}"
        )
    return ids.astype(np.int64), table
