"""Old name of embedding.py's guard, kept importable: the door is in
guards/embedding.py."""

from mha_ref.guards.embedding import embed

__all__ = ["embed"]
