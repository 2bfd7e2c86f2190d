"""Where the causal mask starts when a KV cache holds earlier positions.

Positions 0, 1, 2 are cached; 3 and 4 arrive together. The two new
queries must see five keys, and the mask must come from positions.
"""

import torch
import torch.nn.functional as F

from mha_ref import torch_ref


# --8<-- [start:kv-cache-example]
def cached_attention_example(values=(10.0, 20.0, 30.0, 40.0, 50.0)):
    """Zero scores make attention a plain mean of the allowed values.

    >>> aligned, upper_left = cached_attention_example()
    >>> aligned.tolist(), upper_left.tolist()
    ([25.0, 30.0], [10.0, 15.0])
    """
    n_key = len(values)
    query_positions = torch.arange(n_key - 2, n_key)  # [3, 4]: the new ones
    key_positions = torch.arange(n_key)  # [0, 1, 2, 3, 4]: cache + new
    q = torch.zeros(1, 1, 2, 2, dtype=torch.float64)  # (B, H, Tq, d)
    k = torch.zeros(1, 1, n_key, 2, dtype=torch.float64)  # (B, H, Tk, d)
    v = torch.tensor(values, dtype=torch.float64).view(1, 1, n_key, 1)
    blocked = torch_ref.causal_mask_for_positions(
        query_positions, key_positions
    )  # (Tq, Tk), True = a later position
    aligned = F.scaled_dot_product_attention(
        q, k, v, attn_mask=~blocked, dropout_p=0.0  # SDPA: True = allowed
    )
    # is_causal=True aligns the mask to the upper left: query row 0 is
    # treated as position 0 and sees only the first key
    upper_left = F.scaled_dot_product_attention(
        q, k, v, is_causal=True, dropout_p=0.0
    )
    return aligned.flatten(), upper_left.flatten()
# --8<-- [end:kv-cache-example]


def single_new_query(values=(10.0, 20.0, 30.0, 40.0, 50.0)):
    """One new query at the last position: no key lies in its future.

    Returns the output with the position mask and without any mask.
    """
    n_key = len(values)
    blocked = torch_ref.causal_mask_for_positions([n_key - 1], range(n_key))
    q = torch.zeros(1, 1, 1, 2, dtype=torch.float64)
    k = torch.zeros(1, 1, n_key, 2, dtype=torch.float64)
    v = torch.tensor(values, dtype=torch.float64).view(1, 1, n_key, 1)
    masked, _ = torch_ref.attention(q, k, v, blocked)
    unmasked, _ = torch_ref.attention(q, k, v)
    return masked.flatten(), unmasked.flatten(), blocked
