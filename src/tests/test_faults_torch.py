"""Fault injection through torchrun + gloo: a hang and a rank crash lose no result, no later
case, no rank process and no device slot (~40 s on 2 cores).

The fault cases live here, not under cases/, so no gate ever selects them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from html.parser import HTMLParser

import meshtest

from tests.helpers import case_file

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))

FAULTS = """
import os
import torch
import torch.distributed as dist

def ok(x):
    return x * 2.0

def hang_on_rank1(x):
    if hasattr(x, "placements") and dist.get_rank() == 1:
        while True:  # never returns: the case deadline must catch it
            pass
    return x * 2.0

def exit_on_rank1(x):
    if hasattr(x, "placements") and dist.get_rank() == 1:
        os._exit(7)
    return x * 2.0

register(OpShardCase(name="f1_before", fn=ok, inputs=[InputSpec((4, 4))], placements=[(Shard(0),)], mesh_shape=(2,), tags=("cpu_level1",)))
register(OpShardCase(name="f2_hang", fn=hang_on_rank1, inputs=[InputSpec((4, 4))], placements=[(Shard(0),)], mesh_shape=(2,), tags=("cpu_level1",), timeout_s=6))
register(OpShardCase(name="f3_after_hang", fn=ok, inputs=[InputSpec((4, 4))], placements=[(Shard(0),)], mesh_shape=(2,), tags=("cpu_level1",)))
register(OpShardCase(name="f4_crash", fn=exit_on_rank1, inputs=[InputSpec((4, 4))], placements=[(Shard(0),)], mesh_shape=(2,), tags=("cpu_level1",)))
register(OpShardCase(name="f5_after_crash", fn=ok, inputs=[InputSpec((4, 4))], placements=[(Shard(0),)], mesh_shape=(2,), tags=("cpu_level1",)))
"""


def _ranks_alive(marker: str) -> list:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "meshtest.entry" in line and marker in line]


def test_hang_and_crash_are_reported_and_later_cases_still_run(tmp_path):
    path = case_file(tmp_path, "case_faults.py", FAULTS)
    out = tmp_path / "out"
    slots = tmp_path / "slots"
    env = {**os.environ, "PYTHONPATH": SRC_ROOT}
    proc = subprocess.run([sys.executable, "-m", "meshtest", path, "--artifacts-dir", str(out), "--slot-dir", str(slots)],
                          capture_output=True, text=True, env=env, timeout=400)
    text = proc.stdout
    assert proc.returncode == 1, text + proc.stderr
    status = {json.loads(l)["case"]: json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()}
    assert {k: v["status"] for k, v in status.items()} == {
        "f1_before": "pass", "f2_hang": "timeout", "f3_after_hang": "pass", "f4_crash": "crash", "f5_after_crash": "pass"}
    hang = {f["rank"]: f for f in status["f2_hang"]["failures"]}
    # rank 1 loops inside fn; rank 0 waits for it in the gather's collective.
    assert (hang[0]["step"], hang[1]["step"]) == ("gather", "run")
    assert "TIMEOUT f2_hang" in text and "rank(s) 1: timeout at step run" in text
    # The stack dump taken at the deadline shows the looping line of the case file.
    assert "hang_on_rank1" in (out / "ranks" / "w2-2" / "rank1.log").read_text()
    crash = {f["rank"]: f for f in status["f4_crash"]["failures"]}
    assert crash[1]["status"] == "crash" and crash[1]["step"] == "run"
    assert crash[1]["error"].startswith("the rank died (exit 7) before recording the case")
    assert "relaunching 3 case(s) of w2-2: f2_hang ended its launch (timeout)" in text
    assert (out / "ranks" / "w2-2.relaunch1").is_dir() and (out / "ranks" / "w2-2.relaunch2").is_dir()
    # Nothing leaked: no rank process of this run survives, and every slot is free again.
    assert _ranks_alive(str(out)) == []
    from meshtest.slots import SlotPool, audit_stats, read_audit
    with SlotPool(str(slots), 8).acquire(8, "after", timeout_s=2):
        pass
    assert audit_stats(read_audit(str(slots))).open_leases == 0


TEARDOWN = """
import os
import torch.distributed as dist

def abort_in_teardown(x):
    # Reproduces the gloo teardown abort: rank 1's process-group teardown, which runs only
    # after every result is recorded and the closing barrier passed, raises SIGABRT.
    if hasattr(x, "placements") and dist.get_rank() == 1:
        dist.destroy_process_group = lambda *a, **k: os.abort()
    return x * 2.0

def ok(x):
    return x * 2.0

def abort_now(x):
    if hasattr(x, "placements") and dist.get_rank() == 1:
        os.abort()
    return x * 2.0

register(OpShardCase(name="t1_abort_in_teardown", fn=abort_in_teardown, inputs=[InputSpec((4, 4))],
                     placements=[(Shard(0),)], mesh_shape=(2,), tags=("cpu_level1",)))
register(OpShardCase(name="t2_fine", fn=ok, inputs=[InputSpec((4, 4))],
                     placements=[(Shard(0),)], mesh_shape=(2,), tags=("cpu_level1",)))
register(OpShardCase(name="t3_abort_before_recording", fn=abort_now, inputs=[InputSpec((4, 4))],
                     placements=[(Shard(0), Replicate())], mesh_shape=(2, 1), tags=("cpu_level1",)))
"""


def test_teardown_abort_keeps_results_but_an_abort_before_recording_is_a_crash(tmp_path):
    path = case_file(tmp_path, "case_teardown.py", TEARDOWN)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": SRC_ROOT}
    proc = subprocess.run([sys.executable, "-m", "meshtest", path, "--artifacts-dir", str(out),
                           "--slot-dir", str(tmp_path / "slots")], capture_output=True, text=True, env=env, timeout=300)
    text = proc.stdout
    status = {json.loads(l)["case"]: json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()}
    assert {k: v["status"] for k, v in status.items()} == {
        "t1_abort_in_teardown": "pass", "t2_fine": "pass", "t3_abort_before_recording": "crash"}, text
    assert "teardown warning: launch w2-2 ended with exit 1 after every rank recorded every case" in text
    t3 = {f["rank"]: f for f in status["t3_abort_before_recording"]["failures"]}
    assert t3[1]["error"].startswith("the rank died (killed by SIGABRT) before recording the case")
    assert proc.returncode == 1  # only because of t3


class _Report(HTMLParser):
    """Collects the case rows of report.html: id → (text, hrefs)."""

    def __init__(self):
        super().__init__()
        self.rows, self._row = {}, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "case" in (a.get("class") or "").split():
            self._row = a["id"]
            self.rows[self._row] = ["", []]
        elif tag == "a" and self._row:
            self.rows[self._row][1].append(a["href"])

    def handle_endtag(self, tag):
        if tag == "tr":
            self._row = None

    def handle_data(self, data):
        if self._row:
            self.rows[self._row][0] += data


def test_html_report_shows_failing_ranks_and_links_resolve(tmp_path):
    path = case_file(tmp_path, "case_faults.py", FAULTS)
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "meshtest", path, "--artifacts-dir", str(out), "--slot-dir", str(tmp_path / "s")],
                   capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC_ROOT}, timeout=400)
    report = _Report()
    report.feed((out / "report.html").read_text())
    assert set(report.rows) == {"f1_before", "f2_hang", "f3_after_hang", "f4_crash", "f5_after_crash"}
    text, links = report.rows["f4_crash"]
    assert "crash @ run" in text and "the rank died (exit 7)" in text
    assert any("w2-2.relaunch1/rank1.log" in href for href in links)
    text, links = report.rows["f2_hang"]
    assert "timeout @ gather" in text and "timeout @ run" in text
    all_links = [href for _, hrefs in report.rows.values() for href in hrefs]
    assert len(all_links) == 5 * 2 * 2  # 5 cases x 2 ranks x (log, jsonl)
    assert all((out / href).is_file() for href in all_links)


def test_sigterm_keeps_recorded_results_and_leaves_no_rank(tmp_path):
    import signal
    import time

    path = case_file(tmp_path, "case_faults.py", FAULTS)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "meshtest", path, "--artifacts-dir", str(out),
                             "--slot-dir", str(tmp_path / "s")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": SRC_ROOT})
    rank0 = out / "ranks" / "w2-2" / "rank0.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (rank0.exists() and '"f2_hang"' in rank0.read_text()):
        time.sleep(0.2)  # f1_before is recorded; rank 1 now loops inside f2_hang
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "run interrupted (SystemExit); results so far are kept" in stdout
    assert [json.loads(l)["case"] for l in (out / "results.jsonl").read_text().splitlines()] == ["f1_before"]
    assert (out / "report.html").is_file() and (out / "junit.xml").is_file()
    assert (out / "ranks" / "w2-2" / "rank1.log").is_file()  # the rank logs stay
    assert _ranks_alive(str(out)) == []
