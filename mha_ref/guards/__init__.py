"""One door per public function: ``guards/<module>.py`` holds, for each
public function of ``mha_ref/<module>.py``, a guard of the same name
that checks its inputs in one call and returns them converted (nothing
new). A method's guard is named after the method (``extended``), a
constructor's after its class in snake case (``rolling_kv_cache``), and
where two classes of one module share a method name, the class name
goes first (``rms_norm_forward``). The helpers the doors share, free of
any one module, sit beside them: ``shapes.py`` (sizes and state_dicts),
``chunks.py`` (the chunks and window of a cache), ``values.py``
(numbers and sequences).

Each raises ``ValueError`` or ``TypeError`` naming the argument and its
shape or value; the checks the attention mirrors share are in
``mha_ref/checks.py`` and ``mha_ref/checks_torch.py``.
"""
