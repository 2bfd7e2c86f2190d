"""Old name of embedding.py's guard, kept importable: the door is in
guards/embedding.py."""

# ruff: noqa: F401 (each name is re-exported)

from mha_ref.guards.embedding import embed
