"""JUnit XML for CI browsers: one ``<testsuite>`` per case file, one ``<testcase>`` per case.

Written with the ``junitparser`` library. A failing case carries a ``<failure>`` (comparison)
or ``<error>`` (anything else: exception, crash, timeout, missing rank) whose message names
the ranks and the step, and whose text is the report's detail lines. ``xfail`` is
``<skipped type="pytest.xfail">`` with the known failure as its message, as pytest writes an
xfail (a CI browser counts it apart from passes); ``xpass`` is a failure (the known-failure mark
must go); ``unsupported`` is ``<skipped type="unsupported">`` whose message names the missing
platform feature.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

from ..contract import CaseOutcome
from ..status import Status
from .reporter import format_outcome


def _message(o: CaseOutcome) -> str:
    parts = []
    for f in o.failures:
        first = (f.error.strip().splitlines() or [""])[0]
        parts.append(f"rank {f.rank_label}: {f.status} at step {f.step}: {first}")
    if o.diagnosis:
        parts.append(f"diagnosis: {o.diagnosis}")
    return "; ".join(dict.fromkeys(parts)) or o.status.value


def write_junit(path: str, outcomes: Sequence[CaseOutcome]) -> None:
    """Write ``outcomes`` as JUnit XML to ``path``; times are the slowest rank's, in seconds."""
    by_file: Dict[str, List[CaseOutcome]] = {}
    for o in outcomes:
        by_file.setdefault(o.file, []).append(o)
    xml = JUnitXml(name="meshtest")
    for file, items in by_file.items():
        suite = TestSuite(file)
        for o in items:
            case = TestCase(o.case, classname=file, time=o.slowest_s)
            if o.status in (Status.FAIL, Status.XPASS):
                result = Failure(_message(o) if o.status is Status.FAIL else "passed but is marked known_failure",
                                 o.status.value)
                result.text = format_outcome(o)
                case.result = [result]
            elif o.status is Status.UNSUPPORTED:
                case.result = [Skipped(_message(o), Status.UNSUPPORTED.value)]
            elif o.status is Status.XFAIL:
                case.result = [Skipped(f"known failure: {o.known_failure}" if o.known_failure else _message(o),
                                       "pytest.xfail")]
                case.system_out = "known failure (xfail) reproduced: " + _message(o)
            elif not o.status.passing:
                result = Error(_message(o), o.status.value)
                result.text = format_outcome(o)
                case.result = [result]
            suite.add_testcase(case)
        xml.add_testsuite(suite)
    xml.write(path, pretty=True)
