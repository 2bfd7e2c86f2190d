"""The mask rules against code nobody here wrote, in float64.

1. PyTorch's FlexAttention (torch.nn.attention.flex_attention, torch
   2.13.0): its eager forward runs on the CPU. Each rule is written
   again as a ``mask_mod`` (True = allowed, as FlexAttention wants it,
   the way attention-gym writes them), attention runs through
   ``create_block_mask(..., device="cpu")`` and must match
   numpy_ref.attention with our dense mask (True = blocked). The
   BlockMask's count of non-empty blocks must match
   tiled.tiles_computed.
2. Hugging Face transformers 5.24.0, src/transformers/masking_utils.py:
   sliding_window_causal_mask_function, chunked_causal_mask_function,
   packed_sequence_mask_function, causal_mask_function and and_masks /
   or_masks, evaluated on every (query, key) pair.
"""

import functools
import warnings

import numpy as np
import pytest
import torch
import transformers
from torch.nn.attention import flex_attention as flex
from transformers import masking_utils

from mha_ref import conventions, numpy_ref, tiled, torch_ref

TORCH_VERSION, HF_VERSION = "2.13.0", "5.24.0"


def test_oracles_are_the_versions_named_here():
    # the claims of this file (and of the page) name these versions
    assert torch.__version__.split("+")[0] == TORCH_VERSION
    assert transformers.__version__ == HF_VERSION


H, TQ, TK, D = 2, 24, 40, 8
OFFSET = TK - TQ  # the queries are the last TQ positions, as in a cache
LENGTHS = [9, 1, 17, 13]  # four packed documents, 40 tokens
IDS = numpy_ref.document_ids(LENGTHS)  # (TK,)
OTHER_IDS = numpy_ref.document_ids([3, 20, 2, 15])  # another sequence


# our rules, as dense masks (True = blocked) on positions
def ours(name, q_pos, k_pos):
    rules = {
        "causal": lambda: numpy_ref.causal_mask_for_positions(q_pos, k_pos),
        "sliding_window": lambda: numpy_ref.sliding_window_mask(
            q_pos, k_pos, 7
        ),
        "sliding_window_sinks": lambda: numpy_ref.sliding_window_mask(
            q_pos, k_pos, 5, sink_tokens=3
        ),
        "chunked": lambda: numpy_ref.chunked_mask(q_pos, k_pos, 8),
        "prefix_lm": lambda: numpy_ref.prefix_lm_mask(q_pos, k_pos, 20),
        "document": lambda: numpy_ref.document_mask(IDS[q_pos], IDS[k_pos]),
        "document_other": lambda: numpy_ref.document_mask(
            OTHER_IDS[q_pos], OTHER_IDS[k_pos]
        ),
    }
    return rules[name]()


# the same rules as FlexAttention mask_mods (conventions.py, shown on
# the masks page): True = allowed, index-wise
FLEX_MODS = {
    "causal": lambda b, h, q, kv: kv <= q,
    "sliding_window": conventions.sliding_window_mod(7),
    "sliding_window_sinks": conventions.sliding_window_mod(5, sink_tokens=3),
    "chunked": conventions.chunked_mod(8),
    "prefix_lm": conventions.prefix_lm_mod(20),
    "document": conventions.document_mod(torch.from_numpy(IDS)),
    "document_other": conventions.document_mod(torch.from_numpy(OTHER_IDS)),
}


def flex_allowed(name, q, kv):
    return FLEX_MODS[name](0, 0, q, kv)


def flex_mod(*names):
    """A mask_mod allowing a pair when every named rule allows it."""

    def mask_mod(b, h, q, kv):
        allowed = flex_allowed(names[0], q, kv)
        for name in names[1:]:
            allowed = allowed & flex_allowed(name, q, kv)
        return allowed

    return mask_mod


SINGLE = [
    ("sliding_window",),
    ("sliding_window_sinks",),
    ("chunked",),
    ("prefix_lm",),
    ("document",),
    ("document_other",),
]
# rules combined with |: blocked when any blocks, which is
# FlexAttention's and_masks of the allowed pairs
COMBINED = [
    ("document", "causal"),  # varlen attention: packed and causal
    ("document", "sliding_window"),
    ("document_other", "chunked"),
    ("prefix_lm", "sliding_window"),
    ("chunked", "sliding_window_sinks"),
    ("document", "prefix_lm", "sliding_window_sinks"),
]
CASES = SINGLE + COMBINED


@pytest.fixture(scope="module")
def flex_run():
    """Every case in one FlexAttention call: batch entry b is case b.

    One create_block_mask and one eager forward (the first costs
    seconds: FlexAttention traces its mask_mod with vmap).
    """
    gen = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(len(CASES), H, t, D, generator=gen, dtype=torch.float64)
        for t in (TQ, TK, TK)
    )
    per_case = [
        flex.and_masks(*(flex_mod(name) for name in names)) for names in CASES
    ]

    def mask_mod(b, h, q_idx, kv_idx):
        # FlexAttention counts queries from 0: move them to their positions
        allowed = [m(b, h, q_idx + OFFSET, kv_idx) for m in per_case]
        return torch.stack(allowed)[b]

    block_mask = flex.create_block_mask(
        mask_mod, len(CASES), None, TQ, TK, device="cpu", BLOCK_SIZE=8
    )
    with warnings.catch_warnings():  # eager and unfused: the oracle
        warnings.simplefilter("ignore", UserWarning)
        out = flex.flex_attention(q, k, v, block_mask=block_mask)
    return q, k, v, out


@pytest.mark.slow
@pytest.mark.parametrize(
    "case", range(len(CASES)), ids=["|".join(c) for c in CASES]
)
def test_rules_match_flex_attention_mask_mod(flex_run, case):
    q, k, v, out = flex_run
    q_pos, k_pos = np.arange(OFFSET, TK), np.arange(TK)
    dense = np.zeros((TQ, TK), bool)
    for name in CASES[case]:
        dense = dense | ours(name, q_pos, k_pos)  # blocked by any rule
    want, _ = numpy_ref.attention(
        q[case].numpy(), k[case].numpy(), v[case].numpy(), dense
    )
    np.testing.assert_allclose(out[case].numpy(), want, rtol=0, atol=1e-13)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["causal", *(c[0] for c in SINGLE)])
@pytest.mark.parametrize("block", [4, 8])
def test_tiles_computed_matches_flex_block_mask(name, block):
    # FlexAttention's BlockMask keeps the blocks its mask_mod does not
    # empty (partial and full ones); our tiled loop computes the same
    # tiles. Square, from position 0, as create_block_mask indexes.
    t = TK
    block_mask = flex.create_block_mask(
        flex_mod(name), 1, 1, t, t, device="cpu", BLOCK_SIZE=block
    )
    kept = block_mask.kv_num_blocks.sum()
    if block_mask.full_kv_num_blocks is not None:
        kept = kept + block_mask.full_kv_num_blocks.sum()
    computed, total = tiled.tiles_computed(
        functools.partial(ours, name), np.arange(t), np.arange(t), block, block
    )
    assert total == (t // block) ** 2
    assert computed == int(kept)


# Hugging Face's mask functions take (batch, head, q_idx, kv_idx) and
# return True = allowed; they broadcast over index tensors


def hf_allowed(mask_function, tq, tk, batch=0):
    q_idx = torch.arange(tq)[:, None]  # (Tq, 1)
    kv_idx = torch.arange(tk)[None, :]  # (1, Tk)
    b = torch.tensor(batch)
    return mask_function(b, torch.tensor(0), q_idx, kv_idx).expand(tq, tk)


@pytest.mark.parametrize("window", [1, 2, 5, 16])
def test_sliding_window_mask_matches_hugging_face(window):
    # masking_utils.sliding_window_overlay: kv_idx > q_idx - sliding_window
    allowed = hf_allowed(
        masking_utils.sliding_window_causal_mask_function(window), 20, 20
    )
    ours_blocked = torch_ref.sliding_window_mask(range(20), range(20), window)
    torch.testing.assert_close(ours_blocked, ~allowed)


@pytest.mark.parametrize("chunk", [1, 3, 8])
def test_chunked_mask_matches_hugging_face(chunk):
    # masking_utils.chunked_overlay, with no left padding
    function = masking_utils.chunked_causal_mask_function(
        chunk, torch.zeros(1, dtype=torch.long)
    )
    allowed = hf_allowed(function, 20, 20)
    ours_blocked = torch_ref.chunked_mask(range(20), range(20), chunk)
    torch.testing.assert_close(ours_blocked, ~allowed)


def test_packed_causal_mask_matches_hugging_face_packed_sequences():
    # masking_utils.packed_sequence_mask_function: the ids of a packed
    # row, and_masks with causal_mask_function, as create_causal_mask
    # builds it for packed position_ids
    ids = torch.from_numpy(IDS)[None, :]  # (1, T)
    function = masking_utils.and_masks(
        masking_utils.causal_mask_function,
        masking_utils.packed_sequence_mask_function(ids),
    )
    allowed = hf_allowed(function, TK, TK)
    torch.testing.assert_close(torch_ref.packed_causal_mask(LENGTHS), ~allowed)
    # find_packed_sequence_indices: the same ids from position_ids alone
    position_ids = torch.cat([torch.arange(n) for n in LENGTHS])[None, :]
    found = masking_utils.find_packed_sequence_indices(position_ids)
    torch.testing.assert_close(found[0], torch_ref.document_ids(LENGTHS))


def test_or_of_rules_is_hugging_face_and_masks_of_allowed():
    # blocked = a | b  <=>  allowed = and_masks(not a, not b)
    function = masking_utils.and_masks(
        masking_utils.sliding_window_causal_mask_function(6),
        masking_utils.chunked_causal_mask_function(
            4, torch.zeros(1, dtype=torch.long)
        ),
    )
    allowed = hf_allowed(function, 20, 20)
    pos = torch.arange(20)
    blocked = torch_ref.sliding_window_mask(
        pos, pos, 6
    ) | torch_ref.chunked_mask(pos, pos, 4)
    torch.testing.assert_close(blocked, ~allowed)


def test_mask_mod_factories_refuse_bad_sizes():
    with pytest.raises(ValueError, match="window must be at least 1"):
        conventions.sliding_window_mod(0)
    with pytest.raises(TypeError, match="sink_tokens must be an int"):
        conventions.sliding_window_mod(3, sink_tokens=1.5)
    with pytest.raises(ValueError, match="chunk must be at least 1"):
        conventions.chunked_mod(0)
    with pytest.raises(ValueError, match="prefix must be at least 0"):
        conventions.prefix_lm_mod(-1)
    with pytest.raises(TypeError, match="ids must be a torch"):
        conventions.document_mod([0, 0, 1])
