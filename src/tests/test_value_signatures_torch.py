"""Canaries of the value signatures on real torch (issue 38), in the one-process lane: two
generated cases whose known failure is a wrong value — ``linalg.vector_norm`` of a
``Partial("max")`` input, ``nanmean`` of a ``Partial("sum")`` input with a NaN part — reproduce
their marks as they are, and turn ``fail`` ("known failure, but a different one", both
signatures) when a seeded fault makes the rule's reduce op another (``--mutant
OPERATOR:wrong_reduce_op``): before signatures, both stayed ``xfail`` under it (~25 s)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import meshtest

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
OPINFO = os.path.join("cases", "torch", "opinfo")
CASES = {"linalg.vector_norm.float32.s0.m2x2.S0Pmax": ("case_opinfo_math.py", "aten.linalg_vector_norm.default"),
         "nanmean.float32.s0.m2x2.S0Psum": ("case_opinfo_pointwise.py", "aten.nansum.default")}


def _run(tmp_path, name: str, mutant: str = "") -> dict:
    out = tmp_path / (mutant.replace(":", "_") or "plain")
    file, _ = CASES[name]
    cmd = [sys.executable, "-m", "meshtest", "run", os.path.join(OPINFO, file), "--tag", "cpu_local", "--case", name,
           "--artifacts-dir", str(out), "--slot-dir", str(tmp_path / "slots"), "-q"]
    proc = subprocess.run(cmd + (["--mutant", mutant] if mutant else []), capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=240)
    lines = (out / "results.jsonl").read_text().splitlines() if (out / "results.jsonl").exists() else []
    found = [json.loads(ln) for ln in lines]
    assert [o["case"] for o in found] == [name], proc.stdout[-3000:] + proc.stderr[-3000:]
    return found[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_wrong_reduce_op_under_a_value_mark_turns_the_case_red(tmp_path, name):
    assert _run(tmp_path, name)["status"] == "xfail"
    faulted = _run(tmp_path, name, f"{CASES[name][1]}:wrong_reduce_op")
    assert faulted["status"] == "fail"
    text = faulted["failures"][0]["error"]
    assert "known failure, but a different one: marked with signature <output[0] values" in text
    assert "this run's is <output[0] values" in text
