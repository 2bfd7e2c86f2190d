"""Refusals of the doors of positions.py (mha_ref/guards/positions.py)."""

import numpy as np
import pytest
import torch

from mha_ref import numpy_ref, torch_ref
from mha_ref.positions import (
    query_temperature,
    rope_frequencies,
    sinusoidal_encoding,
    t5_bias,
    t5_relative_bucket,
)

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()  # its config warnings

YARN = {"rope_type": "yarn", "factor": 4.0}


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: sinusoidal_encoding(4, 7), ValueError, "d must be even"),
        (lambda: sinusoidal_encoding(-1, 8), ValueError, "n_positions"),
        (lambda: sinusoidal_encoding(2.0, 8), TypeError, "n_positions"),
        (lambda: sinusoidal_encoding(4, 8, layout="x"), ValueError, "layout"),
        (
            lambda: sinusoidal_encoding(4, 8, frequencies="t2t"),
            ValueError,
            "frequencies",
        ),
        (lambda: t5_relative_bucket([0.5]), TypeError, "relative_position"),
        (lambda: t5_relative_bucket([1], num_buckets=2), ValueError, "num_b"),
        (lambda: t5_relative_bucket([1], max_distance=8), ValueError, "max_d"),
        (lambda: t5_bias(-1, 3, np.zeros((32, 2))), ValueError, "query_len"),
        (lambda: t5_bias(2, 3, np.zeros((31, 2))), ValueError, "table"),
        (lambda: t5_bias(2, 3.0, np.zeros((32, 2))), TypeError, "key_len"),
        (lambda: rope_frequencies(7, 1e4), ValueError, "d must be even"),
        (lambda: rope_frequencies(8, -1.0), ValueError, "base"),
        (
            lambda: rope_frequencies(8, 1e4, {"rope_type": "ntk"}),
            ValueError,
            "llama3",
        ),
        (lambda: rope_frequencies(8, 1e4, YARN), ValueError, "original_max"),
        (
            lambda: rope_frequencies(8, 1e4, {"rope_type": "linear"}),
            ValueError,
            "factor",
        ),
        (
            lambda: rope_frequencies(
                8, 1e4, {"rope_type": "linear", "factor": 0.5}
            ),
            ValueError,
            ">= 1",
        ),
        (
            lambda: rope_frequencies(
                8, 1e4, {"rope_type": "linear", "factor": 2, "mscale_al": 1}
            ),
            ValueError,
            "mscale_al",
        ),
        (
            lambda: rope_frequencies(
                10, 1e4, {"rope_type": "default", "partial_rotary_factor": 0.5}
            ),
            ValueError,
            "even",
        ),
        (
            lambda: rope_frequencies(
                8,
                1e4,
                {
                    "rope_type": "longrope",
                    "original_max_position_embeddings": 8,
                    "short_factor": [1] * 4,
                    "long_factor": [1] * 4,
                },
            ),
            ValueError,
            "factor or attention_factor",
        ),
        (
            lambda: rope_frequencies(
                8,
                1e4,
                {
                    "rope_type": "longrope",
                    "factor": 2.0,
                    "original_max_position_embeddings": 8,
                    "short_factor": [1] * 3,
                    "long_factor": [1] * 4,
                },
            ),
            ValueError,
            "short_factor",
        ),
        (lambda: rope_frequencies(8, 1e4, seq_len=-2), ValueError, "seq_len"),
        (lambda: rope_frequencies(8, 1e4, seq_len=2.5), TypeError, "seq_len"),
        (lambda: rope_frequencies(8, 1e4, "yarn"), TypeError, "scaling"),
        (lambda: query_temperature([-1]), ValueError, "positions"),
        (lambda: query_temperature([1.5]), TypeError, "positions"),
        (lambda: query_temperature([1], floor_scale=0), ValueError, "floor"),
        (
            lambda: numpy_ref.apply_rope(
                np.ones((2, 8)), [0, 1], rotary_dim=3
            ),
            ValueError,
            "rotary_dim",
        ),
        (
            lambda: torch_ref.apply_rope(
                torch.ones(2, 8), [0, 1], rotary_dim=10
            ),
            ValueError,
            "rotary_dim",
        ),
        (
            lambda: numpy_ref.apply_rope(
                np.ones((2, 8)), [0, 1], inv_freq=np.ones(3), rotary_dim=4
            ),
            ValueError,
            "inv_freq",
        ),
        (
            lambda: torch_ref.apply_rope(
                torch.ones(2, 8), [0, 1], inv_freq=[np.nan]
            ),
            ValueError,
            "inv_freq",
        ),
    ],
)
def test_positions_refuse_bad_input(call, error, words):
    with pytest.raises(error, match=words):
        call()
