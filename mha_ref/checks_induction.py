"""Old names of the trained heads' guards, kept importable: the doors
are in guards/induction.py (one per public function of induction.py)."""

# ruff: noqa: F401 (each name is re-exported)

from mha_ref.guards.induction import attention_only as model_sizes
from mha_ref.guards.induction import corrupt as vocab
from mha_ref.guards.induction import forward as run
from mha_ref.guards.induction import head_scores as offset
from mha_ref.guards.induction import patching as runs_differ
from mha_ref.guards.induction import repeated_segments as data
