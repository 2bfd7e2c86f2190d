"""The old name of mha_ref/guards/tensors.py (the tensor checks),
kept so that ``from mha_ref import checks_torch`` still works."""

from mha_ref.guards.tensors import *  # noqa: F403
