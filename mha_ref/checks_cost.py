"""Old names of the cost model's guards, kept importable: the doors are
in guards/cost.py (one per public function of cost.py)."""

from mha_ref.guards.cost import NotAnIntegerError
from mha_ref.guards.cost import _checked as checked

__all__ = ["NotAnIntegerError", "checked"]
