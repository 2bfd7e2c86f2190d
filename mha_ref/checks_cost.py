"""Old names of the cost model's guards, kept importable: the doors are
in guards/cost.py (one per public function of cost.py)."""

# ruff: noqa: F401 (each name is re-exported)

from mha_ref.guards.cost import NotAnIntegerError
from mha_ref.guards.cost import _checked as checked
