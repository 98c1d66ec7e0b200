"""The platform-agnostic dtype names a case may declare (the platform maps each to its own).

Its own module so that :mod:`meshtest.model.spec` and :mod:`meshtest.model.local_input`, which
both validate dtypes, import it rather than each other."""
from __future__ import annotations

#: Platform-agnostic dtype names. bfloat16 has no NumPy type: it is built as float32 and
#: the backend casts it (so its values are the float32 values rounded to bfloat16).
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool")
#: The float dtypes (``randn``, ``requires_grad`` and non-finite checks apply to these).
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
