"""Docs that stand on their own: the README, docs/, WORKSPACE-notes.md, and every docstring and
comment of src/, tools/ and cases/ name the concept they mean ("the gate rules", "the training
net's layer 3", "the TP plan's tolerance rule") instead of citing a section of a design document
the reader of this repository does not have; docs/architecture.md holds the one mapping table."""
from __future__ import annotations

import os
import re

import meshtest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__))))
#: A citation of a design document: "seed 000 §8.5", "Seed 003", a bare section sign
CITATION = re.compile(r"\b[Ss]eed 00[0-9]\b|§")
#: The one place the mapping may live
MAPPING = os.path.join("docs", "architecture.md")
#: This test, whose examples are citations
SELF = os.path.join("src", "tests", "test_docs_stand_alone.py")
#: Files that must be among those checked (the check saw the repository, not an empty sandbox)
MUST_SEE = ("README.md", MAPPING, os.path.join("src", "meshtest", "cli.py"),
            os.path.join("cases", "torch", "tp", "case_tp_c_numerics.py"), os.path.join("docs", "strength.md"))


def citations(text: str):
    """(line number, line) of each line of ``text`` that cites a design document's section."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if CITATION.search(line)]


def _files():
    for top in ("README.md", "WORKSPACE-notes.md"):
        if os.path.isfile(os.path.join(REPO, top)):
            yield top
    for root in ("docs", "src", "tools", "cases"):
        for d, _, names in os.walk(os.path.join(REPO, root)):
            for name in names:
                if name.endswith((".py", ".md")):
                    yield os.path.relpath(os.path.join(d, name), REPO)


def test_no_document_or_docstring_cites_a_design_document_section():
    seen, found = set(), []
    for rel in _files():
        seen.add(rel)
        if rel in (MAPPING, SELF):
            continue
        with open(os.path.join(REPO, rel), encoding="utf-8") as f:
            found += [f"{rel}:{n}: {line[:100]}" for n, line in citations(f.read())]
    assert not [m for m in MUST_SEE if m not in seen], "the check did not see the repository"
    assert not found, "name the concept instead (docs/architecture.md maps it to the design document):\n" + \
        "\n".join(found[:40])
    with open(os.path.join(REPO, MAPPING), encoding="utf-8") as f:
        assert len(citations(f.read())) >= 20  # the table itself


def test_the_check_sees_a_citation():
    assert citations("level0 gates are fail-fast (seed 000 §8.5)\nok\nSeed 003 class A") == [
        (1, "level0 gates are fail-fast (seed 000 §8.5)"), (3, "Seed 003 class A")]
    assert citations("tolerances of §9.4") and not citations("the gate rules; seed 42 draws the inputs")
