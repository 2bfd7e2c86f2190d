"""Where X comes from (NumPy): token ids looked up in an embedding
table, one row per token.

The position table added to the result is sinusoidal_encoding of
positions.py.
"""

from mha_ref.guards import embedding as check


# --8<-- [start:embed]
def embed(token_ids, table):
    """Row i of table for each id i."""
    # refuse bad ids or a bad table
    token_ids, table = check.embed(
        token_ids,
        table,
    )
    # one row per id: (..., d_model)
    return table[token_ids]
    # --8<-- [end:embed]
