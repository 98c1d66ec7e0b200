"""Aggregation over ranks and the report lines a person reads."""
from __future__ import annotations

from dataclasses import replace

from meshtest import KnownFailure
from meshtest.contract import RankRecord
from meshtest.parent.outcomes import aggregate
from meshtest.report.reporter import format_outcome, summary_lines
from meshtest.status import Status


def rec(rank, status="pass", step="compare", dur=0.01, error=""):
    return RankRecord(case="c", file="f.py", group="g", rank=rank, status=Status(status), step=step, duration_s=dur,
                      error=error)


def test_all_ranks_pass_reports_slowest_rank():
    o = aggregate("c", "f.py", "w2-2", 2, {0: rec(0, dur=0.5), 1: rec(1, dur=0.7)}, "")
    assert (o.status, o.slowest_s, o.slowest_rank, o.failures) == ("pass", 0.7, 1, ())
    assert format_outcome(o).startswith("PASS    c  [w2 w2-2]  0.700s (slowest rank 1)")


def test_failure_names_case_ranks_step_and_error():
    by_rank = {0: rec(0), 1: rec(1, "fail", "compare", error="output[0]: 3 of 16 elements outside"), 2: rec(2),
               3: rec(3, "fail", "compare", error="output[0]: 3 of 16 elements outside")}
    o = aggregate("mm_bad", "cases/torch/case_mm.py", "w4-4", 4, by_rank, "")
    assert o.status == "fail"
    text = format_outcome(o)
    assert "FAIL    mm_bad" in text and "cases/torch/case_mm.py" in text
    assert "rank(s) 1,3: fail at step compare: output[0]: 3 of 16 elements outside" in text


def test_error_beats_fail_and_missing_rank_is_reported():
    by_rank = {0: rec(0, "fail"), 1: rec(1, "error", "run", error="RuntimeError: boom\nTraceback...")}
    assert aggregate("c", "f", "g", 2, by_rank, "").status == "error"
    o = aggregate("c", "f", "g", 3, {0: rec(0), 1: rec(1)}, "launch g exited -6")
    assert o.status == "missing"
    assert "rank(s) 2: missing at step ?: launch g exited -6" in format_outcome(o)


def test_known_failure_outcomes():
    """A rank that passes beside a rank that reproduced the mark is not the mark: the case fails,
    naming the rank (issue 38; a mark whose signature records passing ranks has them judged xfail
    on their rank: src/tests/test_value_signatures.py)."""
    mixed = aggregate("c", "f", "g", 2, {0: rec(0, "xfail"), 1: rec(1, "xpass")}, "")
    assert mixed.status == "fail"
    assert "rank(s) 1 passed" in format_outcome(mixed)
    assert aggregate("c", "f", "g", 2, {0: rec(0, "xpass"), 1: rec(1, "xpass")}, "").status == "xpass"


def test_summary_closing_line_counts():
    outs = [aggregate(n, "f", "g", 1, {0: rec(0, s)}, "") for n,
            s in [("a", "pass"), ("b", "fail"), ("c", "xfail"), ("d", "xpass")]]
    lines = summary_lines(outs, ["launch g: ..."])
    assert lines[0] == "launch g: ..."
    assert lines[-1] == "meshtest: 1 passed, 1 xfailed, 2 failed"


def test_known_failures_are_listed_separately_with_reasons():
    outs = [replace(aggregate("a", "f", "g", 1, {0: rec(0, "xfail")}, ""), known_failure="torch bug #123"),
            replace(aggregate("b", "f", "g", 1, {0: rec(0, "xpass")}, ""), known_failure="torch bug #456")]
    lines = summary_lines(outs)
    assert "known failures (the platform is wrong; reported, never hidden):" in lines
    assert "  XFAIL  a: torch bug #123" in lines
    assert "  XPASS  b: torch bug #456  <- passes now: remove known_failure" in lines
    assert lines[-1] == "meshtest: 0 passed, 1 xfailed, 1 failed"


PEERS = KnownFailure(kind="raises", step="run", match="primitive descriptor", reason="r",
                     upstream="pytorch/pytorch#1", peers="output-metadata: Timed out waiting")


def test_ranks_that_waited_for_a_known_failure_make_it_xfail_and_only_then():
    """One rank reproduces the known failure at step run (oneDNN refuses its local shapes); its
    peers go on to the output-metadata exchange and time out waiting for it. That is the known
    failure, named as such, when its mark names how the peers fail (``peers=``); a peer failing
    at the marked step or before it, another way, or passing, is not."""
    waited = {0: rec(0, "fail", "output-metadata", error="Timed out waiting 60000ms for recv operation"),
              1: rec(1, "fail", "output-metadata", error="Timed out waiting 60000ms for send operation"),
              2: rec(2, "xfail", "run", error="RuntimeError: could not create a primitive descriptor")}
    assert aggregate("c", "f", "g", 3, waited, "").status == "fail"  # a mark that does not name its peers
    o = aggregate("c", "f", "g", 3, waited, "", known=PEERS)
    assert o.status == "xfail"
    assert "known failure reproduced on rank(s) 2 at step run; rank(s) 0,1 went on and failed waiting" in o.detail
    assert {f.rank for f in o.failures} == {0, 1, 2}
    for other in (rec(0, "fail", "run", error="another error"), rec(0, "error", "build", error="boom"),
                  rec(0, "fail", "output-metadata", error="x")):
        by_rank = {0: other, 1: rec(1, "xfail", "run")} if other.step != "output-metadata" else \
            {0: other, 1: rec(1, "xfail", "run"), 2: rec(2, "pass")}
        assert aggregate("c", "f", "g", len(by_rank), by_rank, "", known=PEERS).status != "xfail"
    assert aggregate("c", "f", "g", 3, {0: waited[0], 2: waited[2]}, "lost", known=PEERS).status == "missing"
    # a training case's own steps are not op steps, and a scenario's names its own: no absorption
    train = {0: rec(0, "fail", "compare"), 1: rec(1, "xfail", "golden")}
    assert aggregate("c", "f", "g", 2, train, "", known=PEERS).status == "fail"
    assert aggregate("c", "f", "g", 3, waited, "", kind="scenario", known=PEERS).status == "fail"
    assert "known failure reproduced: rank(s) 2 xfail at step run" in format_outcome(o)


def test_the_op_steps_the_verdict_orders_are_the_ones_the_pipeline_enters_in_that_order():
    """``rules.OP_STEPS`` (whose order decides which ranks waited for a known failure) must be
    the rank pipeline's steps in the order it enters them: a step renamed or added there fails here."""
    import re
    from pathlib import Path

    import meshtest.rank.pipeline as pipeline
    from meshtest.model.rules import OP_STEPS

    body = Path(pipeline.__file__).read_text(encoding="utf-8")
    op = body[body.index("def _op_pipeline("):body.index("def _checkpoint_inputs(")]
    entered = list(dict.fromkeys(re.findall(r'steps\.enter\("([a-z-]+)"\)', op)))
    assert entered == list(OP_STEPS)  # in first-entered order (placement and backward come again later)
