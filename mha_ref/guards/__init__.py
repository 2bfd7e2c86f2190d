"""One door per public function: ``guards/<module>.py`` holds, for each
public function of ``mha_ref/<module>.py``, a guard of the same name
that checks its inputs in one call and returns them converted (nothing
new). A method's guard is named after the method (``extended``), a
constructor's after its class in snake case (``rolling_kv_cache``), and
where two classes of one module share a method name, the class name
goes first (``rms_norm_forward``). The helpers the doors share, free of
any one module, sit beside them: ``shapes.py`` (sizes and state_dicts),
``chunks.py`` (the chunks and window of a cache), ``values.py``
(numbers and sequences), ``arrays.py`` (the attention mirrors' arrays,
masks, positions and score modifiers; once ``mha_ref/checks.py``),
``tensors.py`` (tensors; once ``checks_torch.py``) and ``tiles.py``
(block sizes, a mask rule's tiles; once ``checks_tiles.py``).

Each raises ``ValueError`` or ``TypeError`` naming the argument and its
shape or value. ``mha_ref/checks.py``, ``checks_torch.py`` and
``checks_tiles.py`` only re-export arrays.py, tensors.py and tiles.py
under their old names.
"""
