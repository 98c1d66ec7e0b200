"""Suite strength on torch: the propagator hook records calls, mutants are proven by witness,
``mutate`` kills mutants through real case runs (a hang and a crash included, leaving no
process), ``run --mutant`` reaches real ranks, and the cpu_level0 coverage equals its stored
baseline (~35 s of the one-process lane on 2 cores)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import meshtest
from tests.helpers import nightly, processes_alive

torch = pytest.importorskip("torch")

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
REPO = os.path.dirname(SRC_ROOT)


def _meshtest(*args, timeout=600):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC_ROOT, REPO])}
    return subprocess.run([sys.executable, "-m", "meshtest", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def world():
    from meshtest.platforms.torch.local_lane import TorchLocalBackend

    b = TorchLocalBackend()
    b.set_world(2)
    yield b, b.make_mesh((2,), ("d0",))
    b.shutdown()


def test_the_hook_records_each_distinct_call_with_its_rule_and_proves_mutants(world):
    from meshtest.model.placement import Replicate, Shard
    from meshtest.platforms.torch import rules, witness

    b, mesh = world
    with rules.CallRecorder() as rec:
        def contract():
            return torch.mm(b.distribute(torch.randn(4, 6), mesh, [Shard(1)]),
                            b.distribute(torch.randn(6, 3), mesh, [Shard(0)]))

        y = contract()
        contract()
        torch.softmax(b.distribute(torch.randn(4, 6), mesh, [Shard(1)]), dim=1)
        y.sum()
    torch.relu(b.distribute(torch.randn(4), mesh, [Replicate()]))  # after the recorder: not recorded
    ops = [c["op"] for c in rec.calls]
    assert ops == ["aten.mm.default", "aten._softmax.default", "aten.sum.default"]  # the second mm is the same call
    mm, softmax, total = rec.calls
    assert mm["out"] == [["P(sum)"]] and mm["args"][0] == {"t": [4, 6], "dtype": "float32", "p": ["S(1)"]}
    assert softmax["to"] == [["R"]] and softmax["args"][1:] == [{"v": 1}, {"v": False}]
    assert set(rules.fault_sites(mm)) == {"partial_as_replicate", "shard_instead_of_partial", "wrong_reduce_op"}
    assert set(rules.fault_sites(softmax)) == {"missing_redistribute", "gather_skipped", "gather_reversed"}
    assert "shard_instead_of_partial" not in rules.fault_sites(total)  # a 0-d output has no dim to shard

    ok, why = witness.prove("aten.mm.default:partial_as_replicate", rec.calls, b)
    assert ok and "differs from the reference" in why
    ok, why = witness.prove("aten._softmax.default:gather_skipped", rec.calls, b)
    assert ok and "inputs [['S(1)']]" in why
    ok, why = witness.prove("aten._softmax.default:partial_as_replicate", rec.calls, b)
    assert not ok and "no recorded call" in why
    odd = dict(mm, args=[{"x": "<object>"}] + mm["args"][1:])
    ok, why = witness.prove("aten.mm.default:wrong_reduce_op", [odd], b)
    assert not ok and "not replayable" in why
    with pytest.raises(ValueError, match="unknown fault 'nope'"):
        rules.activate("aten.mm.default:nope")


def test_each_fault_below_the_rules_is_proven_by_a_witness_and_has_its_site(world):
    """The faults of meshtest.platforms.torch.layer_faults (redistribute, collective, argument normalisation, view
    analysis, local offset): each has a site in a call that needs it and a witness that tells it
    apart."""
    from meshtest.model.placement import Partial, Shard
    from meshtest.platforms.torch import layer_faults, rules, witness

    b, mesh = world
    with rules.CallRecorder() as rec:
        torch.exp(b.distribute(torch.randn(4, 6), mesh, [Partial("sum")]))
        torch.softmax(b.distribute(torch.randn(4, 6), mesh, [Shard(1)]), dim=-1)
        torch.argmax(b.distribute(torch.randn(6, 4), mesh, [Shard(0)]), dim=0)
        b.distribute(torch.randn(4, 6), mesh, [Shard(1)]).view(4, 2, 3)
    by_op = {c["op"]: c for c in rec.calls}
    exp, softmax, argmax = by_op["aten.exp.default"], by_op["aten._softmax.default"], by_op["aten.argmax.default"]
    assert {"reduce_skipped", "reduce_op_swapped"} <= set(rules.fault_sites(exp))
    assert {"gather_reversed", "negative_dim_off"} <= set(rules.fault_sites(softmax))
    assert "shard_offset_dropped" in rules.fault_sites(argmax)
    assert not {"gather_reversed", "negative_dim_off"} & set(rules.fault_sites(exp))
    for mutant in ("aten.exp.default:reduce_skipped", "aten.exp.default:reduce_op_swapped",
                   "aten._softmax.default:gather_reversed", "aten._softmax.default:negative_dim_off",
                   "aten.argmax.default:shard_offset_dropped", "aten.view.default:view_split_piece"):
        ok, why = witness.prove(mutant, rec.calls, b)
        assert ok, (mutant, why)
    # gated by the operator: softmax's call has no Partial input, so the fault changes nothing there
    ok, why = witness.prove("aten._softmax.default:reduce_skipped", rec.calls, b)
    assert not ok, why
    assert set(layer_faults.LAYER_FAULTS) <= set(b.faults())


@nightly  # a mutation run (a long suite: its own command, docs/strength.md)
def test_mutate_kills_mutants_with_the_cases_that_catch_them(tmp_path):
    out = tmp_path / "m"
    r = _meshtest("mutate", "cases/torch/case_matmul.py", "--tag", "cpu_level0", "--op", "aten.mm.default",
                  "--fault", "partial_as_replicate", "--fault", "wrong_shard_dim", "--artifacts-dir", str(out),
                  "--slot-dir", str(tmp_path / "slots"))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "mutation.json").read_text())
    got = {m["mutant"]: m for m in doc["mutants"]}
    assert set(got) == {"aten.mm.default:partial_as_replicate", "aten.mm.default:wrong_shard_dim"}
    par = got["aten.mm.default:partial_as_replicate"]
    assert par["state"] == "killed"
    # exactly the cases whose product is a Partial (a sharded contracting dim) catch a lost reduction
    assert sorted(k.split("::")[1] for k in par["killers"]) == [
        "mm_contract_s1_s0_partial_mesh2", "mm_contract_s1_s0_partial_mesh4", "mm_dp_rows_tp_contract_partial_dp_tp"]
    assert len(par["cases"]) == 6
    assert doc["scores"]["cpu_level0"] == {"killed": 2, "proven": 2}
    assert "mutation score cpu_level0: 2/2 = 100.0 %" in r.stdout
    # the figures artifact says the same, with the command that reproduces it
    fig = json.loads((out / "figures.json").read_text())
    assert fig["states"] == {"killed": 2} and fig["scores"] == doc["scores"] and fig["survivors"] == []
    assert fig["made_by"].endswith("--fault partial_as_replicate --fault wrong_shard_dim --op 'aten.mm.default'")
    assert fig["cases"]["run_under_mutants"] == 6 and fig["build"]["torch"].startswith("2.")


@nightly  # a mutation run (a long suite: its own command, docs/strength.md)
def test_first_kill_gives_the_same_score_and_names_one_killing_case(tmp_path):
    out = tmp_path / "m"
    r = _meshtest("mutate", "cases/torch/case_matmul.py", "--tag", "cpu_level0", "--op", "aten.mm.default",
                  "--fault", "partial_as_replicate", "--fault", "wrong_shard_dim", "--first-kill", "--artifacts-dir",
                  str(out), "--slot-dir", str(tmp_path / "slots"))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "mutation.json").read_text())
    par = {m["mutant"]: m for m in doc["mutants"]}["aten.mm.default:partial_as_replicate"]
    assert par["state"] == "killed" and len(par["killers"]) == 1 and len(par["cases"]) < 6  # stopped at the kill
    assert doc["scores"]["cpu_level0"] == {"killed": 2, "proven": 2} and "--first-kill" in doc["made_by"]


@nightly  # mutation-mode drills (~35 s)
@pytest.mark.parametrize("case,how", [("mutant_hangs", "timeout"), ("mutant_exits", "crash")])
def test_a_hang_or_crash_under_a_mutant_is_a_kill_and_leaves_no_process(tmp_path, case, how):
    out = tmp_path / "m"
    r = _meshtest("mutate", "cases/faults/case_faults_mutant.py", "--tag", "cpu_faults", "--case", case,
                  "--op", "aten.mm.default", "--fault", "partial_as_replicate", "--case-timeout", "3",
                  "--artifacts-dir", str(out), "--slot-dir", str(tmp_path / "slots"), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    (m,) = json.loads((out / "mutation.json").read_text())["mutants"]
    assert m["state"] == "killed" and m["killers"] == {f"cases/faults/case_faults_mutant.py::{case}": how}
    assert processes_alive(str(out)) == []
    from meshtest.parent.slots import SlotPool

    with SlotPool(str(tmp_path / "slots"), 8).acquire(8, "after", timeout_s=2):
        pass


@nightly  # mutation mode on real gloo ranks (~16 s)
def test_run_with_a_mutant_fails_on_real_ranks(tmp_path):
    r = _meshtest("run", "cases/torch/case_matmul.py::mm_contract_s1_s0_partial_mesh2", "--mutant",
                  "aten.mm.default:partial_as_replicate", "--artifacts-dir", str(tmp_path / "a"),
                  "--slot-dir", str(tmp_path / "slots"))
    assert r.returncode == 1 and "FAIL    mm_contract_s1_s0_partial_mesh2" in r.stdout, r.stdout + r.stderr
    log = (tmp_path / "a" / "ranks" / "w2" / "rank1.log").read_text()
    assert "mutant aten.mm.default:partial_as_replicate active" in log


@nightly  # ~55 s: the whole cpu_level0 corpus recorded in the local lane (coverage-ops, docs/strength.md)
def test_cpu_level0_sharding_rule_coverage_equals_its_baseline(tmp_path):
    """A change to the cases (or to torch) that changes what the cpu_level0 corpus exercises
    fails here, listing each operator/placement kind lost or gained; after an intended change,
    `python -m meshtest coverage-ops --tag cpu_level0 --baseline default --write-baseline`."""
    r = _meshtest("coverage-ops", "--tag", "cpu_level0", "--baseline", "default", "--artifacts-dir",
                  str(tmp_path / "c"), "--slot-dir", str(tmp_path / "slots"))
    diff = "\n".join(line for line in r.stdout.splitlines() if line.startswith("coverage "))
    assert r.returncode == 0, diff[-4000:] + r.stderr[-2000:]
    assert "coverage equals the baseline" in r.stdout
    assert "<table id=\"families\">" in (tmp_path / "c" / "ops-coverage.html").read_text()
    fig = json.loads((tmp_path / "c" / "figures.json").read_text())
    assert f"{fig['exercised']} of {fig['registered']} registered operators exercised" in r.stdout
