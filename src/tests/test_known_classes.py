"""meshtest.strength.classes counts the generated corpus's marks by class from manifests; the
expected figures are counted by hand from the fixture below."""
from __future__ import annotations

import json

from meshtest.strength.classes import main


def _entry(op, known=None, random=False, uninitialised=False, weak="", tags=("cpu_level1",)):
    return {"op": op, "known_failure": known, "random": random, "uninitialised": uninitialised, "weak": weak,
            "tags": list(tags)}


def test_classes_totals_and_the_opinfos_without_a_passing_case(tmp_path, capsys):
    mark = {"step": "compare", "kind": "mismatch", "reason": "a reason", "upstream": "pytorch/pytorch#1",
            "signature": {}}
    cases = [_entry("add"), _entry("add", mark, tags=("cpu_local",)), _entry("dropout", random=True),
             _entry("new_empty", uninitialised=True), _entry("zeros_like", weak="all-zero reference"),
             _entry("conv", mark)]
    (tmp_path / "manifest_x.json").write_text(json.dumps({"cases": cases}))
    assert main(["classes", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "     2  mismatch at compare         a reason... (pytorch/pytorch#1)" in out
    assert ("total: 6 generated case(s), 2 marked in 1 class(es), 2 of them pinned by a value signature; "
            "1 random, 1 uninitialised memory") in out
    assert "level 0 (cpu_local): 1 marked in 1 group(s) by reference: pytorch/pytorch#1 1" in out
    # dropout (random) and conv (every case marked) have no case expected to pass; new_empty has one
    assert "OpInfos with no case expected to pass: 2 of 5 (1 random): conv, dropout (random)" in out
    assert "weak cases (a degenerate reference no other drawn sample could replace): 1 in 1 OpInfos" in out


def test_the_figures_docs_strength_quotes_are_the_committed_manifests():
    """docs/strength.md's ``known_classes`` block is ``known_classes.py --doc`` on the committed
    manifests, word for word: a hand edit of a figure, or a regeneration without the page, fails."""
    import os
    import re

    import meshtest
    from meshtest.model.generated import OPINFO_DIR
    from meshtest.strength.classes import count, doc_sentence

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__))))
    with open(os.path.join(repo, "docs", "strength.md"), encoding="utf-8") as f:
        page = f.read()
    found = re.search(r"<!-- known_classes: [^>]*-->\n(.*?)\n<!-- /known_classes -->", page, re.S)
    assert found, "docs/strength.md lost its known_classes block"
    assert " ".join(found.group(1).split()) == doc_sentence(count(os.path.join(repo, OPINFO_DIR))), (
        "docs/strength.md's figures differ from the committed manifests: paste `python3 tools/known_classes.py --doc`")
