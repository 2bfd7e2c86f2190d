"""Where X comes from (NumPy): token ids looked up in an embedding
table, one row per token.

The position table added to the result is sinusoidal_encoding of
positions.py.
"""

from mha_ref.guards import embedding as check


# --8<-- [start:embed]
def embed(token_ids, table):
    """Row i of table for each id i: table[token_ids]."""
    token_ids, table = check.embed(
        token_ids, table
    )  # ids in range, a (vocab, d_model) table
    return table[token_ids]  # (..., d_model): one row per id
    # --8<-- [end:embed]
