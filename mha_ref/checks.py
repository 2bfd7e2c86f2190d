"""The old name of mha_ref/guards/arrays.py (the checks the attention
mirrors share), kept so that ``from mha_ref import checks`` still works.

Each public function has its door in mha_ref/guards/<module>.py; the
helpers the doors share live in mha_ref/guards/.
"""

from mha_ref.guards.arrays import *  # noqa: F403
from mha_ref.guards.arrays import EMPTY_ROWS  # noqa: F401
from mha_ref.guards.numpy_ref import (  # noqa: F401
    attention as scored_attention_arrays,
)
