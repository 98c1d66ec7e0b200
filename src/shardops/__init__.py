"""shardops: a small operator library as a team keeps one, for meshtest's docs and tests.

Custom operators (:mod:`shardops.ops`, ``torch.library.custom_op`` in the ``shardops``
namespace: ``torch.ops.shardops.<name>``) and their DTensor sharding, one module per operator
under :mod:`shardops.sharding` (``register_sharding``), plus one module that overrides the
strategy of an aten operator. Importing the package defines the operators and imports every
sharding module present: they are found on disk (:func:`load_sharding`), not imported by name,
so that a build tool's import graph does not tie a case to every rule module — which ones a case
reaches is recorded by meshtest's dispatch map (docs/running.md, "Only the affected ops").
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import List

from . import ops  # noqa: F401 — defines torch.ops.shardops.*


def load_sharding() -> List[str]:
    """Import every module of :mod:`shardops.sharding` present, each registering its operator's
    DTensor sharding (idempotent: a module is imported once). Returns their names, sorted.

    :raises ImportError: a sharding module fails to import (its error, unchanged)."""
    from . import sharding

    names = sorted(m.name for m in pkgutil.iter_modules(sharding.__path__) if not m.ispkg)
    for name in names:
        importlib.import_module(f"{sharding.__name__}.{name}")
    return names


SHARDING_MODULES = load_sharding()
