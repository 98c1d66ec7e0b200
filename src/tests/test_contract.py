"""The parent–rank contract: every type round-trips through JSON, reading is strict, and a plan
of another version is refused naming both versions; the status predicates agree everywhere."""
from __future__ import annotations

import json

import pytest

from meshtest.contract import (
    PLAN_VERSION,
    CaseOutcome,
    CaseStarted,
    ContractError,
    FenceEntered,
    LaunchPlan,
    RankDone,
    RankFailure,
    RankRecord,
    StepEntered,
    Stopped,
    event_from_json,
    event_to_json,
)
from meshtest.status import EXPECTED, FAILING, NEUTRAL, PASSING, Status, worst
from tests.helpers import scanned

EVENTS = [
    CaseStarted("c", 1795970064.5, 120.0),
    StepEntered("c", "compare"),
    RankRecord("c", "f.py", "w2-2", 1, Status.FAIL, "compare", 0.25, "output[0]: 3 of 16 elements outside",
               detail="note", divergence=""),
    FenceEntered("c", 135.0),
    Stopped("c"),
    RankDone(1),
]


def _plan(**kw):
    base = dict(group_id="w4-2x2", platform="torch", device_kind="cpu", mesh_shape=(2, 2), mesh_dim_names=("d0", "d1"),
                out_dir="/o", case_timeout_s=30.0, cases=(scanned("a", (2, 2)), scanned("b", (2, 2), lineno=7)),
                slots=(4, 5, 6, 7), fail_fast=True)
    base.update(kw)
    return LaunchPlan(**base)


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_rank_event_round_trips_through_a_json_line(event):
    line = json.dumps(event_to_json(event))
    assert json.loads(line)["event"] == event.EVENT
    assert event_from_json(json.loads(line)) == event


def test_rank_events_are_read_strictly():
    with pytest.raises(ContractError, match="unknown event 'begin'"):
        event_from_json({"event": "begin", "case": "c"})
    with pytest.raises(ContractError, match=r"unknown field\(s\) colour.*StepEntered has case, step"):
        event_from_json({"event": "step", "case": "c", "step": "run", "colour": "red"})
    with pytest.raises(ContractError, match=r"missing field\(s\) timeout_s"):
        event_from_json({"event": "fence", "case": "c"})
    doc = event_to_json(EVENTS[2])
    with pytest.raises(ContractError, match="unknown status 'passed'"):
        event_from_json({**doc, "status": "passed"})


def test_launch_plan_round_trip_and_version_mismatch_names_both(tmp_path):
    plan = _plan()
    path = tmp_path / "plan.json"
    plan.write(str(path))
    assert LaunchPlan.read(str(path)) == plan
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "version": PLAN_VERSION + 1}))
    with pytest.raises(ContractError) as e:
        LaunchPlan.read(str(path))
    assert f"version {PLAN_VERSION + 1}" in str(e.value) and f"reads version {PLAN_VERSION}" in str(e.value)
    assert str(path) in str(e.value)
    with pytest.raises(ContractError, match=r"unknown field\(s\) retries"):
        LaunchPlan.from_json({**doc, "retries": 3})
    with pytest.raises(ContractError, match="unknown field"):
        LaunchPlan.from_json({**doc, "cases": [{**doc["cases"][0], "colour": "red"}]})


def test_case_outcome_round_trip_with_failures_and_no_rank():
    o = CaseOutcome("c", "f.py", "w2-2", 2, Status.TIMEOUT, 1.5, 0,
                    (RankFailure(0, Status.TIMEOUT, "all_reduce", "stuck"),
                     RankFailure(1, Status.WAITED, "fence", "w")),
                    launch_dir="w2-2", spec_id="A6")
    assert CaseOutcome.from_json(json.loads(json.dumps(o.to_json()))) == o
    none = RankFailure(None, Status.NOT_RUN, "-", "fail-fast")
    assert none.rank_label == "-" and RankFailure.from_json(none.to_json()) == none
    with pytest.raises(ContractError, match=r"unknown field\(s\) owner"):
        CaseOutcome.from_json({**o.to_json(), "owner": "x"})
    with pytest.raises(ValueError, match="unknown status 'ok'"):
        CaseOutcome("c", "f.py", "g", 1, "ok")


def test_status_predicates_partition_the_case_outcomes():
    outcomes = set(Status) - {Status.WAITED}
    groups = (FAILING, PASSING, EXPECTED, NEUTRAL)
    assert set().union(*groups) == outcomes and sum(map(len, groups)) == len(outcomes)  # disjoint
    assert Status.XFAIL.expected and not Status.XFAIL.passing and not Status.XFAIL.failing
    assert [s.value for s in Status if s.failing] == ["fail", "error", "xpass", "timeout", "crash", "missing"]
    assert Status.NOT_RUN.neutral and not Status.NOT_RUN.counts_as_run and not Status.NOT_RUN.failing
    assert worst([Status.PASS, Status.XFAIL, Status.ERROR, Status.CRASH]) is Status.CRASH
    assert worst([Status.PASS, Status.UNSUPPORTED]) is Status.UNSUPPORTED
    with pytest.raises(ValueError):
        worst([Status.WAITED])
