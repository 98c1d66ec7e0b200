"""Shared helpers for meshtest's own tests."""
from __future__ import annotations

import textwrap

from meshtest.model.scan import ScannedCase


def case_file(tmp_path, name: str, body: str) -> str:
    """Write a case file with the usual imports; return its path."""
    path = tmp_path / name
    path.write_text(
        "from meshtest import CompareSpec, DerivedSpec, InputSpec, OpShardCase, Partial, Replicate, Shard, register\n"
        + textwrap.dedent(body)
    )
    return str(path)


def scanned(name: str, mesh_shape=(2,), names=None, tags=("cpu_level0",), needs_mesh=False, solo=False,
            file="f.py", lineno=1) -> ScannedCase:
    return ScannedCase(file=file, name=name, mesh_shape=tuple(mesh_shape), mesh_dim_names=names, tags=tuple(tags),
                       needs_mesh=needs_mesh, solo_launcher=solo, lineno=lineno)
