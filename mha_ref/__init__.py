"""Multi-head attention, from the equations to tested code.

``numpy_ref`` is the teaching version, ``torch_ref`` the same in PyTorch,
``kv_cache`` and ``pitfalls`` hold the worked examples the site shows.
Masks are boolean with True = blocked throughout.
"""

__all__ = ["checks", "numpy_ref"]
