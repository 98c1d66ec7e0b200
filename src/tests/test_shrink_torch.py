"""Shrinking a failing generated case (meshtest.strength.shrink), every rank simulated in this
process: a wrong ∞-norm of a Partial(max) input on the 2-D mesh shrinks to the same mismatch on
one mesh dim; a case that passes is refused; the signature keeps a wrong shape apart from wrong
values."""
from __future__ import annotations

import os

import pytest

import meshtest
from meshtest.strength.shrink import failure_kind, find_entry, shrink

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__))))
MATH = os.path.join(REPO, "cases", "torch", "opinfo", "case_opinfo_math.py")


def test_a_failing_case_shrinks_to_one_mesh_dim_and_fails_the_same_way():
    entry, doc = find_entry(f"{MATH}::linalg.vector_norm.float32.s0.m2x2.S0Pmax")
    found = shrink(entry, doc)
    assert found.signature == ("compare", "mismatch:values")
    assert found.minimal["mesh_shape"] == [2] and found.minimal["placements"] == [["P(max)"]], found.minimal
    assert found.steps and found.runs >= 3 and found.minimal["known_failure"] is None


def test_a_passing_case_is_not_shrunk():
    entry, doc = find_entry(f"{MATH}::sum.float32.s0.m2x2.S0Pmax")
    with pytest.raises(ValueError, match="passes with its ranks simulated"):
        shrink(entry, doc)


def test_the_signature_tells_a_wrong_shape_from_wrong_values():
    assert failure_kind("fail", "output[0]: shape (0, 4) != reference shape (1, 4)") == "mismatch:shape"
    assert failure_kind("fail", "output[0]: 3 of 4 elements outside rtol=...") == "mismatch:values"
    assert failure_kind("error", "RuntimeError: x") == "RuntimeError"
