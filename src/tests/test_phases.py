"""Phased training cases without torch: checkpoint directories (commit by rename, partial saves
never loaded), the static scan of ``phases=``, the planner's one launch per phase, and how the
runner chains the phases' outcomes into the case's one outcome."""
from __future__ import annotations

import json
import os

import pytest

from meshtest import CaseDeclarationError, Phase, TrainCase, checkpoints
from meshtest.contract import CaseOutcome, RankFailure
from meshtest.model.scan import scan_case_source
from meshtest.parent.outcomes import phase_chain
from meshtest.parent.planner import LaunchSchedule, phase_groups, plan_groups
from meshtest.status import Status
from tests.helpers import scanned


def test_a_checkpoint_is_loadable_only_once_committed(tmp_path):
    root = str(tmp_path / "ck")
    with pytest.raises(checkpoints.CheckpointError, match="no committed checkpoint in .*the phase before did not"):
        checkpoints.latest(root)
    first = checkpoints.prepare(root, 2)
    (tmp_path / "ck" / "step_000002.partial" / "data").write_text("x")
    assert checkpoints.commit(root, 2, {"world_size": 2}) == checkpoints.step_dir(root, 2)
    assert not os.path.exists(first)
    checkpoints.prepare(root, 3)  # a save of step 3 that never committed: the process died
    found = checkpoints.latest(root)
    assert (found.step, found.meta["world_size"], found.meta["step"]) == (2, 2, 2)
    assert found.ignored == (checkpoints.partial_dir(root, 3),)
    assert "ignored interrupted save(s): step_000003.partial" in checkpoints.describe(found)
    with pytest.raises(FileExistsError):
        checkpoints.prepare(root, 2) and checkpoints.commit(root, 2, {})


def test_only_partial_saves_is_an_error_naming_them(tmp_path):
    root = str(tmp_path / "ck")
    checkpoints.prepare(root, 4)
    with pytest.raises(checkpoints.CheckpointError, match=r"interrupted save\(s\) not loaded: .*step_000004.partial"):
        checkpoints.latest(root)


def test_a_committed_checkpoint_with_a_broken_marker_is_an_error(tmp_path):
    root = str(tmp_path / "ck")
    checkpoints.prepare(root, 1)
    path = checkpoints.commit(root, 1, {})
    with open(os.path.join(path, checkpoints.MARKER), "w") as f:
        f.write("{")
    with pytest.raises(checkpoints.CheckpointError, match="has no readable meshtest-checkpoint.json"):
        checkpoints.latest(root)
    checkpoints.wipe(root)
    assert not os.path.exists(root)


PHASED = '''
from meshtest import Phase, TrainCase, register
register(TrainCase(name="resumed", model=m, data=d, loss=l, mesh_shape=(4,), mesh_dim_names=("dp",),
                   phases=(Phase(steps=2, mesh_shape=(2, 2), mesh_dim_names=("dp", "tp")), Phase(steps=1),
                           Phase(steps=1, mesh_shape=(2,))),
                   tags=("cpu_level1",), capabilities=("resume",), layer=4))
register(TrainCase(name="plain", model=m, data=d, loss=l, mesh_shape=(2,), tags=("cpu_level1",)))
'''


def test_the_scan_reads_every_phase_mesh_and_the_target_needs_the_largest():
    scan = scan_case_source("case_p.py", PHASED)
    assert scan.error is None, scan.error
    resumed = scan.cases[0]
    assert resumed.phase_meshes == (((4,), ("dp",)), ((2, 2), ("dp", "tp")), ((4,), ("dp",)), ((2,), ("dp",)))
    assert resumed.device_need == 4 and scan.device_need == 4
    assert "mesh:2" in resumed.filter_tags() and "mesh:4" in resumed.filter_tags()
    assert scan.cases[1].phase_meshes == ()
    assert json.loads(json.dumps(resumed.to_json())) == resumed.to_json()
    from meshtest.model.scan import ScannedCase
    assert ScannedCase.from_json(resumed.to_json()) == resumed


@pytest.mark.parametrize("phases, words", [
    ("(Phase(2),)", "phase 2 must be written as Phase(steps=..., mesh_shape=...) with keywords"),
    ("(Phase(steps=1, mesh_shape=MESH()),)", "phase 2 mesh_shape= must be a literal"),
    ("PHASES", "phases= must be a tuple of Phase(...) calls written out"),
    ("(Phase(steps=1, mesh_shape=(2,), mesh_dim_names=('a', 'b')),)", "rule mesh-dim-names"),
])
def test_phases_the_scan_cannot_read_are_errors_naming_the_case(phases, words):
    source = f'''
register(TrainCase(name="bad", model=m, data=d, loss=l, mesh_shape=(2,), phases={phases}, tags=("cpu_level1",)))
'''
    scan = scan_case_source("case_bad.py", source)
    assert scan.errors and "case 'bad'" in scan.errors and words in scan.errors, scan.errors


def test_each_later_phase_is_a_launch_of_its_own_after_the_other_groups():
    scan = scan_case_source("case_p.py", PHASED)
    groups = plan_groups(list(scan.cases) + [scanned("op", mesh_shape=(2,))])
    assert [g.group_id for g in groups] == [
        "w2", "w4", "w4-2x2-phase2of4-resumed", "w4-4-phase3of4-resumed", "w2-2-phase4of4-resumed"]
    assert [c.name for c in groups[0].cases] == ["plain", "op"]
    assert [(c.name, c.phase) for c in groups[1].cases] == [("resumed", 1)]  # phase 1: a w4 launch
    second = groups[2]
    assert second.phase == (2, 4) and second.mesh_dim_names == ("dp", "tp")
    assert [(c.phase, c.mesh_shape) for c in second.cases] == [(2, (2, 2))]


def test_phase_1_is_the_first_case_of_the_launch_of_its_world_size_and_later_phases_launch_alone():
    scan = scan_case_source("case_p.py", PHASED)
    groups = plan_groups(list(scan.cases) + [scanned("op4", mesh_shape=(2, 2)), scanned("op2", mesh_shape=(2,))])
    assert [g.group_id for g in groups] == [
        "w2", "w4", "w4-2x2-phase2of4-resumed", "w4-4-phase3of4-resumed", "w2-2-phase4of4-resumed"]
    shared = groups[1]
    assert [(c.name, c.phase, c.mesh_shape) for c in shared.cases] == [("resumed", 1, (4,)), ("op4", None, (2, 2))]
    assert shared.phase is None and shared.mesh_shape == (4,) and [c.name for c in shared.phase_units()] == ["resumed"]
    solo = scanned("alone", mesh_shape=(4,), solo=True)  # a solo launcher's launch is its case's alone
    by_id = {g.group_id: [c.name for c in g.cases] for g in plan_groups(list(scan.cases) + [solo])}
    assert by_id["w4"] == ["resumed"] and by_id["w4-solo-alone"] == ["alone"]
    two = scan_case_source("case_q.py", PHASED.replace('"resumed"', '"again"'))
    shared = plan_groups(list(scan.cases) + list(two.cases))[1]  # phase 1 of both cases: one launch
    assert [(c.file, c.name, c.phase) for c in shared.cases] == [("case_p.py", "resumed", 1), ("case_q.py", "again", 1)]


def test_a_later_phase_starts_while_the_launch_of_the_earlier_one_runs_on():
    scan = scan_case_source("case_p.py", PHASED)
    groups = plan_groups(list(scan.cases) + [scanned("op4", mesh_shape=(4,))])
    sched = LaunchSchedule(list(groups), list(range(10)))
    started = []
    while (g := sched.startable()) is not None:
        sched.take(g)
        started.append(g.group_id)
    assert started == ["w4", "w2"]  # the chain of 3 later phases first; phase 2 waits for phase 1
    sched.phase_passed("case_p.py::resumed", 1)  # every rank of w4 recorded phase 1's pass; w4 runs on
    assert sched.startable().group_id == "w4-2x2-phase2of4-resumed"
    failed = LaunchSchedule(list(groups), list(range(10)))
    assert failed.startable().group_id == "w4"
    failed.take(groups[1])
    failed.give_back("w4")  # w4 ended without phase 1 passing: no later phase ever starts
    failed.take(failed.startable())  # w2, which has no phase
    assert failed.startable() is None and failed.pending == []


def test_phase_1_in_a_shared_launch_chains_and_the_other_outcomes_pass_through():
    scan = scan_case_source("case_p.py", PHASED)
    groups = plan_groups(list(scan.cases) + [scanned("op4", mesh_shape=(4,))])
    shared = groups[1]
    held = {}
    other = CaseOutcome("op4", "f.py", "w4", 4, Status.PASS)
    assert phase_chain(shared, [_outcome(Status.PASS, "w4"), other], held) == [other]
    assert held["case_p.py::resumed"].detail == "phase 1/4 pass in w4"  # held by case ID


def _outcome(status, group, step="phase1 compare"):
    failures = () if status is Status.PASS else (RankFailure(0, status, step, "phase 1/2 (mesh (2,)): step 0 loss"),)
    return CaseOutcome("resumed", "case_p.py", group, 2, status, failures=failures, launch_dir=group)


def test_phase_outcomes_chain_into_one_outcome_per_case():
    scan = scan_case_source("case_p.py", PHASED)
    groups = phase_groups(scan.cases[0])  # each phase alone (phase 1 as a launch of its own)
    held = {}
    assert phase_chain(groups[0], [_outcome(Status.PASS, groups[0].group_id)], held) == []
    assert phase_chain(groups[1], [_outcome(Status.PASS, groups[1].group_id)], held) == []
    (final,) = phase_chain(groups[2], [_outcome(Status.FAIL, groups[2].group_id, "phase3 compare")], held)
    assert held == {} and final.status is Status.FAIL and final.failures[0].step == "phase3 compare"
    assert final.detail == ("phase 1/4 pass in w4-4-phase1of4-resumed; phase 2/4 pass in w4-2x2-phase2of4-resumed; "
                            "phase 3/4 fail in w4-4-phase3of4-resumed")
    (first,) = phase_chain(groups[0], [_outcome(Status.ERROR, groups[0].group_id)], held)
    assert first.status is Status.ERROR and held == {}


def _train(**kw):
    base = dict(name="t", model=len, data=len, loss=lambda out, target: out, mesh_shape=(2,), mesh_dim_names=("dp",),
                tags=("cpu_level1",))
    return TrainCase(**{**base, **kw}).validated("case_t.py")


@pytest.mark.parametrize("kw, words", [
    (dict(phases=(Phase(steps=0),)), "phase 2: steps must be an integer >= 1"),
    (dict(phases=(Phase(steps=1, mesh_shape=(2, 2)),), batch_split="dp"), "phase 2: batch_split 'dp' is not one"),
    (dict(phases=[2]), "phases must be a tuple of Phase"),
    (dict(restore=("model", "weights")), "restore must be a tuple of"),
    (dict(scheduler=3), "scheduler must be callable or None"),
])
def test_phase_declaration_rules(kw, words):
    with pytest.raises(CaseDeclarationError, match="case_t.py") as e:
        _train(**kw)
    assert words in str(e.value) and "'t'" in str(e.value)


def test_a_phase_inherits_what_it_does_not_declare():
    case = _train(phases=(Phase(steps=3, mesh_shape=(4,)),), parallelize=print, steps=2, batch_split="dp")
    later = case.phase_case(2)
    assert (later.mesh_shape, later.mesh_dim_names, later.parallelize, later.batch_split, later.steps) == (
        (4,), ("dp",), print, "dp", 3)
    assert case.phase_start(1) == 0 and case.phase_start(2) == 2
    assert case.phase_meshes() == (((2,), ("dp",)), ((4,), ("dp",)))


def test_a_mark_on_a_later_phase_leaves_earlier_phases_unjudged():
    """A phased case marked at ``phase2 resume`` passes phase 1 plainly (held for phase 2, which
    the mark judges); a mark at phase 1, or on an unphased case, judges as always."""
    from meshtest import KnownFailure
    from meshtest.model.known import marks_a_later_phase

    mark = KnownFailure(kind="raises", step="phase2 resume", match="x", reason="r", upstream="pytorch/pytorch#1")
    assert marks_a_later_phase(mark, 1)
    assert not marks_a_later_phase(mark, 2) and not marks_a_later_phase(mark, None)
    assert not marks_a_later_phase(KnownFailure(kind="raises", step="run", match="x", reason="r",
                                                upstream="pytorch/pytorch#1"), 1)
    assert not marks_a_later_phase(None, 1)
