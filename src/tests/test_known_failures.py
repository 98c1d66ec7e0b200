"""Every known-failure mark of the corpus says what it expects and where it is reported: a kind,
a step and a pattern, and an upstream reference — a pytorch/pytorch (or other repository) issue
or PR, a URL, or a section of docs/torch-bugs.md / docs/mindspore-bugs.md with a reproduction,
which must exist (read statically; no torch)."""
from __future__ import annotations

import glob
import os
import re

import pytest

import meshtest
from meshtest import KnownFailure
from meshtest.model.scan import scan_case_file, scan_case_source

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__))))
CORPUS = ("cases/torch/*.py", "cases/torch/tp/case_*.py", "cases/torch/training/case_*.py", "cases/mindspore/case_*.py",
          "cases/torch/opinfo/case_*.py", "cases/torch/shardops/case_*.py")


def _marked():
    for pattern in CORPUS:
        for path in sorted(glob.glob(os.path.join(REPO, pattern))):
            if not os.path.basename(path).startswith("case_"):
                continue
            scan = scan_case_file(path)
            assert scan.error is None, scan.error
            yield from ((os.path.relpath(path, REPO), c) for c in scan.cases if c.known_failure is not None)


def _sections(doc: str) -> set:
    with open(os.path.join(REPO, doc), encoding="utf-8") as f:
        return {m.group(1) for m in re.finditer(r"^## ([\w-]+)\s*$", f.read(), re.M)}


def test_every_mark_cites_an_upstream_report_or_a_documented_reproduction():
    marked = list(_marked())
    assert len(marked) >= 80  # 29 torch (op, TP plan, training) + 3 MindSpore + 56 generated (level 0)
    missing = []
    for path, case in marked:
        kf = case.known_failure
        assert kf.kind in ("mismatch", "raises", "crash") and kf.step and kf.match, (path, case.name)
        for ref in (kf.upstream or "").split(", "):
            if ref.startswith("docs/"):
                doc, _, section = ref.partition("#")
                if section not in _sections(doc):
                    missing.append(f"{path}::{case.name} cites {ref}, which {doc} does not have")
    assert not missing, missing


def test_the_static_scan_reads_a_mark_through_a_module_level_name():
    source = '''
from meshtest import KnownFailure, OpShardCase, register
BUG = KnownFailure(kind="raises", step="run", match=r"no strategy", reason="r", upstream="pytorch/pytorch#7")
register(OpShardCase(name="a", fn=f, inputs=[], placements=[], mesh_shape=(2,), tags=("cpu_level0",),
                     known_failure=BUG))
register(OpShardCase(name="b", fn=f, inputs=[], placements=[], mesh_shape=(2,), tags=("cpu_level0",),
                     known_failure="a reason without the failure"))
'''
    scan = scan_case_source("case_k.py", source)
    (broken,) = scan.broken  # the plain string breaks case b alone
    assert broken.name == "b" and "rule known-failure" in broken.error and "saying which failure" in broken.error
    assert scan.error is None and [c.name for c in scan.cases] == ["a"]
    assert scan.cases[0].known_failure == KnownFailure(
        kind="raises", step="run", match="no strategy", reason="r", upstream="pytorch/pytorch#7")
    assert type(scan.cases[0]).from_json(scan.cases[0].to_json()) == scan.cases[0]


@pytest.mark.parametrize("ref, ok", [("pytorch/pytorch#1", True), ("https://github.com/x/y/issues/1", True),
                                     ("docs/torch-bugs.md#x-y", True), ("a/b#1, c/d#2", True),
                                     ("#123", False), ("see torch", False), ("a/b#1,c/d#2", False)])
def test_upstream_forms(ref, ok):
    from meshtest.errors import CaseDeclarationError

    kf = KnownFailure(kind="raises", step="run", match="x", reason="r", upstream=ref)
    if ok:
        assert kf.validated("f.py", "c") is kf
    else:
        with pytest.raises(CaseDeclarationError, match="rule known-failure"):
            kf.validated("f.py", "c")
