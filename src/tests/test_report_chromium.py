"""The run report as a browser shows it: the targets index (tools/report_index.py) and a test
run's report.html (meshtest.report.html), opened in a real headless Chromium.

The test builds an artifacts tree as ``./pants test`` leaves it under ``dist/test/`` (two test
runs, one with a failing case on a 2-rank launch, with real rank logs and JSONL), writes the
index with the tool's CLI, and asserts on the DOM Chromium rendered (``--dump-dom``): the
failing case shows rank 1 with its step and error, the index lists the failing target first,
and every link in both pages resolves to a file. Screenshots go to ``extra-output/`` (Pants
copies it to ``dist/test/src.tests.test_report_chromium.py/``).

Chromium is Debian's ``chromium`` package; ``.ci/run`` installs it. Without a binary the test
skips, except under ``CI=true`` where it fails (src/tests/BUILD passes ``CI`` through Pants).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Dict, List, Optional
from urllib.parse import unquote, urldefrag

import pytest

from meshtest.contract import CaseOutcome, RankFailure
from meshtest.report.html import write_html_report
from meshtest.report.junit import write_junit
from meshtest.report.reporter import summary_lines
from meshtest.report.results import write_results

#: tools/report_index.py, found from this file: src/tests/ → the repository (or Pants sandbox) root.
REPORT_INDEX = Path(os.path.abspath(__file__)).parents[2] / "tools" / "report_index.py"
#: Names on PATH, then absolute paths (a Pants test process need not get the caller's PATH).
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/lib/chromium/chromium",
                  "/usr/bin/google-chrome", "/usr/bin/google-chrome-stable", "/snap/bin/chromium")
#: Debian's /usr/bin/chromium is a shell script that runs grep, uname, find, ...
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CHROMIUM_TIMEOUT_S = 60
SCREENSHOT_DIR = Path("extra-output")  # relative to the cwd: the sandbox root under Pants

FAILING_TARGET = "cases.torch.case_faulty.py+1"  # a batch: named after its first file
TRAINING_TARGET = "training-report"
PASSING_TARGET = "cases.torch.case_sort.py"
COMPARE_ERROR = ("AssertionError: Tensor-likes are not close!\n"
                 "Mismatched elements: 3 / 8 (37.5%)\n"
                 "expected placements <Shard(dim=0)> & got <Replicate()>")


def _search_path() -> str:
    return os.pathsep.join(p for p in (os.environ.get("PATH", ""), SYSTEM_PATH) if p)


def find_chromium(names=CHROMIUM_NAMES, paths=CHROMIUM_PATHS) -> Optional[str]:
    for name in names:
        found = shutil.which(name, path=_search_path())
        if found:
            return found
    return next((p for p in paths if os.path.isfile(p) and os.access(p, os.X_OK)), None)


def chromium_or_skip(binary: Optional[str]) -> str:
    """``binary``, or fail under ``CI=true`` (a CI run must not pass without the browser test)
    or skip elsewhere."""
    if binary:
        return binary
    message = ("no Chromium binary (looked for " + ", ".join(CHROMIUM_NAMES) + " on PATH and "
               + ", ".join(CHROMIUM_PATHS) + "); .ci/run installs Debian's chromium package "
               "(apt-get install --no-install-recommends chromium)")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("CI=true: " + message, pytrace=False)
    pytest.skip(message)


class Chromium:
    """Headless runs of one binary, each with a fresh profile and HOME under ``tmp``."""

    def __init__(self, binary: str, tmp: Path):
        self.binary, self.tmp, self.runs = binary, tmp, 0
        self.home = tmp / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "HOME": str(self.home), "PATH": _search_path(),
                    "XDG_CONFIG_HOME": str(self.home / ".config"), "XDG_CACHE_HOME": str(self.home / ".cache")}

    def run(self, *args: str) -> subprocess.CompletedProcess:
        self.runs += 1
        profile = self.tmp / f"profile{self.runs}"
        cmd = [self.binary, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=CHROMIUM_TIMEOUT_S)
        assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        return proc

    def dom(self, page: Path) -> str:
        """The DOM after Chromium loaded and rendered ``page``, serialized."""
        return self.run("--dump-dom", page.as_uri()).stdout

    def screenshot(self, page: Path, png: Path) -> None:
        png.parent.mkdir(parents=True, exist_ok=True)
        if png.exists():
            png.unlink()
        self.run(f"--screenshot={png.resolve()}", "--window-size=1400,900", page.as_uri())


class Tables(HTMLParser):
    """Every table row of a page: row attributes and cells (class, text, hrefs), plus every
    href and element id on the page."""

    def __init__(self, dom: str):
        super().__init__()
        self.rows: List[dict] = []
        self.hrefs: List[str] = []
        self.ids: List[str] = []
        self._cell: Optional[dict] = None
        self.feed(dom)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.append(a["id"])
        if tag == "tr":
            self.rows.append({"id": a.get("id", ""), "class": (a.get("class") or "").split(), "cells": []})
        elif tag in ("td", "th") and self.rows:
            self._cell = {"tag": tag, "class": (a.get("class") or "").split(), "text": "", "hrefs": []}
            self.rows[-1]["cells"].append(self._cell)
        elif tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
            if self._cell is not None:
                self._cell["hrefs"].append(a["href"])

    def handle_endtag(self, tag):
        if tag in ("td", "th", "tr"):
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data

    def row(self, row_id: str) -> Dict[str, dict]:
        """The row ``row_id`` as {column header: cell} (headers from the row's table's first row)."""
        idx = next(i for i, r in enumerate(self.rows) if r["id"] == row_id)
        header = next(r for r in reversed(self.rows[:idx]) if r["cells"] and r["cells"][0]["tag"] == "th")
        return dict(zip((c["text"].strip() for c in header["cells"]), self.rows[idx]["cells"]))


def _rank_files(run_dir: Path, launch: str, world_size: int, cases: List[CaseOutcome]) -> None:
    """rank<k>.log / rank<k>.jsonl as a launch writes them: a line per case and step."""
    d = run_dir / "ranks" / launch
    d.mkdir(parents=True)
    for rank in range(world_size):
        log, jsonl = [f"rank{rank} group {launch}: {len(cases)} case(s), mesh [{world_size}] ['d0']"], []
        for o in cases:
            failure = next((f for f in o.failures if f.rank == rank), None)
            steps = ["build", "derive", "reference", "distribute", "run", "gather", "compare"]
            jsonl.append({"event": "start", "case": o.case, "t": 1795970064.9, "timeout_s": 120.0})
            for step in steps[: steps.index(failure.step) + 1] if failure else steps:
                log.append(f"rank{rank} case {o.case}: step {step}")
                jsonl.append({"event": "step", "case": o.case, "step": step})
            status = failure.status.value if failure else "pass"
            log.append(f"rank{rank} case {o.case}: {status}" + (f"\n{failure.error}" if failure else ""))
            jsonl.append({"event": "result", "case": o.case, "status": status, "duration_s": o.slowest_s,
                          "step": failure.step if failure else "", "error": failure.error if failure else ""})
        (d / f"rank{rank}.log").write_text("\n".join(log) + "\n")
        (d / f"rank{rank}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in jsonl))


def _test_run(root: Path, name: str, outcomes: List[CaseOutcome]) -> Path:
    """One test run's directory as meshtest's runner leaves it under dist/test/."""
    run_dir = root / name
    run_dir.mkdir(parents=True, exist_ok=True)
    launches: Dict[str, List[CaseOutcome]] = {}
    for o in outcomes:
        launches.setdefault(o.launch_dir, []).append(o)
    for launch, cases in launches.items():
        _rank_files(run_dir, launch, cases[0].world_size, cases)
    write_results(str(run_dir / "results.jsonl"), outcomes)
    write_junit(str(run_dir / "junit.xml"), outcomes)
    (run_dir / "summary.txt").write_text("\n".join(summary_lines(outcomes)) + "\n")
    write_html_report(str(run_dir / "report.html"), outcomes, notes=["launches: w2-2 (2 ranks, 1 launch)"])
    return run_dir


def _artifacts(root: Path) -> None:
    faulty = "cases/torch/case_faulty.py"
    _test_run(root, FAILING_TARGET, [
        CaseOutcome("allgather_mesh2", faulty, "w2-2", 2, "pass", slowest_s=0.21, slowest_rank=0, launch_dir="w2-2"),
        CaseOutcome("allreduce_sum_mesh2", faulty, "w2-2", 2, "fail", slowest_s=0.84, slowest_rank=1, launch_dir="w2-2",
                    failures=[RankFailure(1, "fail", "compare", COMPARE_ERROR)]),
    ])
    _test_run(root, PASSING_TARGET, [
        CaseOutcome("sort_s0_mesh2", "cases/torch/case_sort.py", "w2-2", 2, "pass", slowest_s=0.35, slowest_rank=1,
                    launch_dir="w2-2"),
    ])
    # a training case: its losses file, as meshtest.rank.train.run_train writes it
    losses = root / TRAINING_TARGET / "cases" / "train_fsdp2_adam" / "losses_rank0.json"
    losses.parent.mkdir(parents=True)
    losses.write_text(json.dumps({"case": "train_fsdp2_adam", "losses": [2.3, 1.9, 1.7, 1.4, 1.3, 1.1],
                                  "baseline": [2.3, 1.9, 1.6, 1.4, 1.25, 1.1],
                                  "grad_norm": [4.0, 3.1, 2.5, 2.2, 1.9, 1.6],
                                  "baseline_grad_norm": [4.0, 3.0, 2.6, 2.2, 1.8, 1.6]}))
    # (its report alone, no results.jsonl: not a test run of the index)
    write_html_report(str(root / TRAINING_TARGET / "report.html"), [
        CaseOutcome("train_fsdp2_adam", "cases/torch/training/case_train_l2_sharding.py", "w2-2", 2, "pass",
                    slowest_s=1.2, slowest_rank=0, kind="train")])
    # a Pants test's extra output: no results.jsonl, so not a test run of the index
    (root / "src.tests.test_scan.py").mkdir()
    (root / "src.tests.test_scan.py" / "notes.txt").write_text("not a test run\n")


def _audit(slot_dir: Path) -> None:
    """A pool's audit log with an older run (t≈1000, left out) and the newest: target A holds slots
    0-3 for a 2-rank and then a 4-rank launch, target B slots 4-5 for a 2-rank launch."""
    def rec(t, event, target, slots, pid, **extra):
        return {"t": t, "event": event, "target": target, "slots": slots, "need": len(slots), "pid": pid,
                "size": 8, **extra}
    records = [
        rec(1000, "acquire", "old", [0, 1], 7), rec(1001, "launch", "old", [0, 1], 7, group="w2", cases=3),
        rec(1009, "launch_end", "old", [0, 1], 7, group="w2", wall_s=8, startup_s=2),
        rec(1010, "release", "old", [0, 1], 7),
        rec(5000, "acquire", "A", [0, 1, 2, 3], 1),
        rec(5001, "launch", "A", [0, 1], 1, group="w2", cases=10),
        rec(5002, "acquire", "B", [4, 5], 2), rec(5003, "launch", "B", [4, 5], 2, group="w2", cases=5),
        rec(5011, "launch_end", "A", [0, 1], 1, group="w2", wall_s=10, startup_s=3),
        rec(5011, "launch", "A", [0, 1, 2, 3], 1, group="w4", cases=20),
        rec(5020, "launch_end", "B", [4, 5], 2, group="w2", wall_s=17, startup_s=2),
        rec(5021, "release", "B", [4, 5], 2),
        rec(5031, "launch_end", "A", [0, 1, 2, 3], 1, group="w4", wall_s=20, startup_s=5),
        rec(5032, "release", "A", [0, 1, 2, 3], 1),
    ]
    slot_dir.mkdir(parents=True)
    (slot_dir / "audit.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_timeline_figures_from_an_audit_log(tmp_path):
    from meshtest.parent.slots import read_audit
    from meshtest.report import timeline

    _audit(tmp_path / "slots")
    tl = timeline.build(read_audit(str(tmp_path / "slots")))
    assert (tl.start, tl.end, tl.launches, len(tl.bars)) == (5000, 5032, 3, 8)  # the older run is left out
    assert round(tl.utilization, 4) == round((2 * 10 + 4 * 20 + 2 * 17) / (8 * 32), 4)
    assert round(tl.held, 4) == round((4 * 32 + 2 * 19) / (8 * 32), 4)
    assert round(tl.startup_share, 4) == round((2 * 3 + 4 * 5 + 2 * 2) / (2 * 10 + 4 * 20 + 2 * 17), 4)
    assert {b.slot for b in tl.bars if b.group == "w4"} == {0, 1, 2, 3}
    assert "slot-time in launches 52.3%" in timeline.summary(tl, "/pool")


def _assert_links_resolve(page: Path, parsed: Tables, ids_of: Dict[Path, List[str]]) -> int:
    """Every href of ``page`` names an existing file (relative to the page); a fragment names
    an element id of that file. Returns how many links were checked."""
    for href in parsed.hrefs:
        url, fragment = urldefrag(href)
        assert "://" not in url and not url.startswith("/"), f"{page.name}: not a relative link: {href}"
        target = (page.parent / unquote(url)).resolve() if url else page.resolve()  # "#id": this page
        assert target.is_file(), f"{page.name}: link {href} -> {target} does not exist"
        if fragment:
            ids = ids_of.setdefault(target, Tables(target.read_text(encoding="utf-8")).ids)
            assert unquote(fragment) in ids, f"{page.name}: link {href}: no element id {unquote(fragment)!r}"
    return len(parsed.hrefs)


def _assert_png(png: Path, width: int, height: int) -> None:
    data = png.read_bytes()
    assert len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG ({len(data)} bytes)"
    assert (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")) == (width, height)


def test_report_and_index_in_headless_chromium(tmp_path):
    chromium = Chromium(chromium_or_skip(find_chromium()), tmp_path / "chromium")
    root = tmp_path / "dist" / "test"
    _artifacts(root)
    _audit(tmp_path / "named_caches" / "meshtest_slots")
    os.symlink(tmp_path / "named_caches" / "meshtest_slots", tmp_path / "sandbox-link")
    proc = subprocess.run([sys.executable, str(REPORT_INDEX), str(root), f"--slot-dir={tmp_path / 'sandbox-link'}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    index = root / "index.html"
    assert str(index.resolve()) in proc.stdout
    report = root / FAILING_TARGET / "report.html"

    # the failing run's report: cases -> ranks matrix, as rendered
    dom = chromium.dom(report)
    assert "<tbody>" in dom, "not a DOM serialization (Chromium inserts tbody)"
    page = Tables(dom)
    row = page.row("allreduce_sum_mesh2")
    assert row["status"]["text"].strip() == "fail" and row["ranks"]["text"].strip() == "2"
    assert row["launch"]["text"].strip() == "w2-2" and row["slowest rank s"]["text"].strip() == "0.840"
    rank0, rank1 = row["rank 0"], row["rank 1"]
    assert rank0["class"] == ["rank", "pass"] and rank0["text"].strip().startswith("pass")
    assert rank1["class"] == ["rank", "fail"] and "fail @ compare" in rank1["text"]
    assert "rank(s) 1: fail at step compare" in " ".join(row["case"]["text"].split())  # the row's error block
    for line in COMPARE_ERROR.splitlines():  # the error, escaped in the source, reads as text, once
        assert row["case"]["text"].count(line) == 1 and line not in rank1["text"]
    assert rank1["hrefs"] == ["ranks/w2-2/rank1.log", "ranks/w2-2/rank1.jsonl"]
    assert "compare" in (report.parent / rank1["hrefs"][0]).read_text()
    passing = page.row("allgather_mesh2")
    assert passing["status"]["text"].strip() == "pass"
    assert [c["class"] for c in (passing["rank 0"], passing["rank 1"])] == [["rank", "pass"]] * 2
    # it leads with the failure: the counts, then a list linking to each failing case; its row first
    summary = dom.split('id="summary"', 1)[1].split("</section>", 1)[0]
    assert 'class="badge fail"' in summary and "fail: 1" in summary and "pass: 1" in summary
    failures = Tables(summary)
    assert failures.hrefs == ["#allreduce_sum_mesh2"]
    assert "fail at step compare: AssertionError: Tensor-likes are not close!" in " ".join(summary.split())
    case_rows = [r["id"] for r in page.rows if "case" in r["class"]]
    assert case_rows == ["allreduce_sum_mesh2", "allgather_mesh2"]  # failing first, though it ran second
    legend = {r["cells"][0]["text"]: r["cells"][0]["class"] for r in page.rows if r["cells"] and
              r["cells"][0]["tag"] == "td" and len(r["cells"]) == 2}
    assert {"xfail", "xpass", "unsupported", "not_run", "fail", "pass"} <= set(legend)
    assert len({legend[s][0] for s in ("xfail", "xpass", "unsupported", "pass")}) == 4  # each its own class
    ids_of: Dict[Path, List[str]] = {}
    assert _assert_links_resolve(report, page, ids_of) == 2 * 2 * 2 + 1  # cases x ranks x (log, jsonl), summary

    # the index: targets, the failing one first, linking to each run's report
    index_page = Tables(chromium.dom(index))
    targets = [r for r in index_page.rows if "target" in r["class"]]
    assert [r["id"] for r in targets] == [f"target-{FAILING_TARGET}", f"target-{PASSING_TARGET}"]
    assert ["failing" in targets[0]["class"], "failing" in targets[1]["class"]] == [True, False]
    failing = index_page.row(f"target-{FAILING_TARGET}")
    assert failing["target"]["text"].strip() == FAILING_TARGET
    assert failing["target"]["hrefs"] == [f"{FAILING_TARGET}/report.html"]
    assert (failing["pass"]["text"], failing["fail"]["text"], failing["cases"]["text"]) == ("1", "1", "2")
    assert failing["failing cases"]["hrefs"] == [f"{FAILING_TARGET}/report.html#allreduce_sum_mesh2"]
    slowest = failing["slowest case"]["text"]
    assert "allreduce_sum_mesh2" in slowest and "0.840 s, rank 1" in slowest
    passing = index_page.row(f"target-{PASSING_TARGET}")
    assert passing["target"]["hrefs"] == [f"{PASSING_TARGET}/report.html"]
    assert (passing["pass"]["text"], passing["fail"]["text"], passing["failing cases"]["text"]) == ("1", "0", "")
    assert "src.tests.test_scan.py" not in "".join(index_page.ids)
    assert _assert_links_resolve(index, index_page, ids_of) >= 2 + 2 + 2 * 3  # reports, slowest/failing cases, files
    # the slot pool's timeline: one row per slot, one bar per launch and slot, the pool by its real place
    index_dom = chromium.dom(index)
    newest, earlier = index_dom.split('class="slot-run"')[1:]  # newest run first, then the older one
    assert newest.count('class="slot-row"') == 8 and newest.count('class="launch"') == 8
    assert newest.count('data-group="w4"') == 4 and earlier.count('class="launch"') == 2
    pool_line = index_dom.split('id="pool">', 1)[1].split("<", 1)[0]
    assert str((tmp_path / "named_caches" / "meshtest_slots").resolve()) in pool_line
    assert "sandbox-link" not in pool_line
    assert "3 launch(es) over 32.0 s; slot-time in launches 52.3%" in pool_line

    # a training case's row: its loss and grad norm per step, parallel against the single device
    training = root / TRAINING_TARGET / "report.html"
    train_dom = chromium.dom(training)
    row = train_dom.split('id="train_fsdp2_adam"', 1)[1].split("</tr>", 1)[0]
    assert row.count('class="curve train"') == 2 and row.count('data-series="single device"') == 2

    # screenshots, kept as test artifacts
    shots = {"report-chromium.png": report, "index-chromium.png": index, "report-training-chromium.png": training}
    for name, source in shots.items():
        chromium.screenshot(source, SCREENSHOT_DIR / name)
        _assert_png(SCREENSHOT_DIR / name, 1400, 900)


#: Appended to a copy of a page: records how wide the page lays out in the window (the pages
#: themselves carry no script)
WIDTH_PROBE = ('<script>window.addEventListener("load", () => document.body.setAttribute("data-scroll-width", '
               'document.documentElement.scrollWidth));</script>')


def test_the_index_fits_a_1400_px_window_with_long_names(tmp_path):
    """Target, case and file names have no spaces to wrap at: the table must still fit."""
    chromium = Chromium(chromium_or_skip(find_chromium()), tmp_path / "chromium")
    root = tmp_path / "dist" / "test"
    long_file = "cases/torch/opinfo/case_opinfo_pointwise_level1_5.py"
    long_case = "nn.functional.scaled_dot_product_attention.float32.s0.m2x2.PminS1_RR_RR_RR.bwd"
    _test_run(root, "cases.torch.opinfo.case_opinfo_pointwise_level1_5.py+31 (local lane)", [
        CaseOutcome(long_case, long_file, "local", 4, "fail", slowest_s=2.5, slowest_rank=3, launch_dir="local",
                    failures=[RankFailure(3, "fail", "compare", COMPARE_ERROR)]),
        CaseOutcome(long_case + "_again", long_file, "local", 4, "pass", slowest_s=1.5, launch_dir="local")])
    proc = subprocess.run([sys.executable, str(REPORT_INDEX), str(root)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    probe = root / "index-probe.html"
    probe.write_text((root / "index.html").read_text().replace("</body>", WIDTH_PROBE + "</body>"))
    dom = chromium.run("--window-size=1400,900", "--virtual-time-budget=2000", "--dump-dom", probe.as_uri()).stdout
    width = int(dom.split('data-scroll-width="', 1)[1].split('"', 1)[0])
    assert width <= 1400, f"index.html lays out {width} px wide in a 1400 px window"


@pytest.mark.parametrize("ci", ["true", ""])
def test_missing_chromium_fails_under_ci_else_skips(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    assert find_chromium(names=("meshtest-no-such-browser",), paths=("/nonexistent/chromium",)) is None
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome, match=r"\.ci/run installs Debian's chromium"):
        chromium_or_skip(None)


def test_sharding_rule_coverage_table_in_headless_chromium(tmp_path):
    """``ops-coverage.html`` (meshtest.strength.coverage.write_html): one row per family coloured
    by how much is exercised, each family linking to its own table of operators and kinds."""
    from meshtest.strength import coverage

    chromium = Chromium(chromium_or_skip(find_chromium()), tmp_path / "chromium")
    mm = {"op": "aten.mm.default", "mesh": [2], "rule": True, "kwargs": {}, "out": [["P(sum)"]],
          "args": [{"t": [5, 6], "dtype": "float32", "p": ["S(1)"]}, {"t": [6, 4], "dtype": "float32", "p": ["S(0)"]}],
          "to": [["S(1)"], ["S(0)"]]}
    ops = coverage.by_operator({"f.py::a": [mm], "f.py::b": [mm]})
    rules = {"aten.mm.default": "matrix", "aten.bmm.default": "matrix", "aten.add.Tensor": "pointwise",
             "aten.embedding.default": "embedding"}
    ops["aten.embedding.default"] = coverage.OpCoverage("aten.embedding.default", {"f.py::c"}, {"R→MP"}, {2})
    page_path = tmp_path / "ops-coverage.html"
    coverage.write_html(str(page_path), coverage.by_family(ops, rules), ops)
    dom = chromium.dom(page_path)
    page = Tables(dom)
    fams = {r["cells"][0]["text"].strip(): r for r in page.rows if r["cells"] and r["cells"][0]["hrefs"]}
    assert {k: v["class"] for k, v in fams.items()} == {"embedding": ["all"], "matrix": ["some"], "pointwise": ["none"]}
    assert [c["text"].strip() for c in fams["matrix"]["cells"]] == ["matrix", "1", "2"]
    for href in (h for r in fams.values() for h in r["cells"][0]["hrefs"]):
        assert href.startswith("#") and href[1:] in page.ids
    mm_row = next(r for r in page.rows if r["cells"] and r["cells"][0]["text"].strip() == "aten.mm.default")
    assert [c["text"].strip() for c in mm_row["cells"]] == ["aten.mm.default", "2", "1", "S(0)  S(1)",
                                                             "in0: R S(0) P(sum); in1: R S(1) P(sum); uneven"]
    assert "2 of 4 registered operators exercised" in dom and "aten.bmm.default" in dom
    chromium.screenshot(page_path, SCREENSHOT_DIR / "ops-coverage.png")
