"""Phased training cases and long runs on torch + gloo (~80 s on 2 cores): resume bugs caught at
the first diverging step, a save killed half-way never loaded, ``kill -9`` of the runner during
a phase leaving no rank and no slot, a rerun starting the case over from phase 1, a leaking and
a diverging long run named with their step and figures, and their curves in the HTML report."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import meshtest
from tests.helpers import assert_nothing_leaked, nightly, ranks_alive

SRC_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
REPO = os.path.dirname(SRC_ROOT)
FAULTS = os.path.join(REPO, "cases", "faults", "case_faults_phases.py")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC_ROOT, REPO])}


def _cli(tmp_path, *args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "meshtest", FAULTS, "--tag", "cpu_faults", "--artifacts-dir",
                           str(tmp_path / "out"), "--slot-dir", str(tmp_path / "slots"), *args],
                          capture_output=True, text=True, cwd=REPO, env=env or ENV, timeout=timeout)


def _results(out):
    return {json.loads(line)["case"]: json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()}


def test_a_resume_that_drops_the_optimizer_fails_at_the_first_resumed_step(tmp_path):
    """The resume-continuity canary (docs/strength.md, "Canaries"): on every landing, one drill."""
    proc = _cli(tmp_path, "--case", "fault_resume_drops_optimizer")
    result = _results(tmp_path / "out")["fault_resume_drops_optimizer"]
    assert result["status"] == "fail", proc.stdout + proc.stderr
    failure = result["failures"][0]
    assert failure["step"] == "phase2 compare"
    assert failure["error"].startswith("phase 2/2 (mesh (1,)): resumed run vs the continuous run: step 2 "), failure


@nightly  # ~60 s: the four drills; the optimizer's runs on every landing (the canary above)
def test_a_resume_that_drops_state_fails_at_the_first_diverging_step(tmp_path):
    proc = _cli(tmp_path, "--case", "fault_resume_drops_*")
    results = _results(tmp_path / "out")
    text = proc.stdout + proc.stderr
    assert {k: v["status"] for k, v in results.items()} == {
        "fault_resume_drops_optimizer": "fail", "fault_resume_drops_rng": "fail",
        "fault_resume_drops_data_position": "fail", "fault_resume_drops_scheduler": "fail"}, text
    # the optimizer's moments, the RNG and the data position act in the first resumed step (2);
    # the learning rate restored with the optimizer's param groups is right for step 2, the
    # scheduler's own count then moves it wrongly for step 3
    first = {"fault_resume_drops_optimizer": 2, "fault_resume_drops_rng": 2, "fault_resume_drops_data_position": 2,
             "fault_resume_drops_scheduler": 3}
    for name, step in first.items():
        failure = results[name]["failures"][0]
        assert failure["step"] == "phase2 compare", failure
        assert failure["error"].startswith(f"phase 2/2 (mesh (1,)): resumed run vs the continuous run: step {step} "), \
            failure
        assert "max abs diff" in failure["error"]
        assert results[name]["detail"].startswith("phase 1/2 pass in w1; "), results[name]  # phase 1s share w1


def test_phase_2_starts_once_phase_1_passed_while_phase_1s_launch_runs_on(tmp_path):
    """Phase 1 of ``fault_phase_hangs`` (no hang asked) is the first case of the ``w2`` launch,
    whose next case keeps rank 0 busy for 12 s: phase 2's launch starts on two other slots before
    ``w2`` ends, and the case's one outcome tells both phases."""
    from meshtest.parent.slots import read_audit

    proc = subprocess.run([sys.executable, "-m", "meshtest", FAULTS, os.path.join(REPO, "cases", "faults",
                                                                                   "case_faults.py"),
                           "--tag", "cpu_faults", "--case", "fault_phase_hangs", "--case", "slow_rank0_within_deadline",
                           "--pack", "fill", "--artifacts-dir", str(tmp_path / "out"), "--slot-dir",
                           str(tmp_path / "slots")], capture_output=True, text=True, cwd=REPO, env=ENV, timeout=600)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    results = _results(tmp_path / "out")
    assert results["slow_rank0_within_deadline"]["status"] == "pass", text
    outcome = results["fault_phase_hangs"]
    assert outcome["status"] == "pass" and outcome["detail"].startswith(
        "phase 1/2 pass in w2; phase 2/2 pass in w2-2-phase2of2-fault_phase_hangs"), outcome
    events = {(r["event"], r.get("group")): r for r in read_audit(str(tmp_path / "slots"))}
    shared_end = events[("launch_end", "w2")]["t"]
    phase2 = events[("launch", "w2-2-phase2of2-fault_phase_hangs")]
    assert phase2["t"] < shared_end, (phase2, shared_end)
    assert set(phase2["slots"]).isdisjoint(events[("launch", "w2")]["slots"])
    assert_nothing_leaked(str(tmp_path / "slots"), tmp_path / "out")


SAVE_AND_DIE = '''
import os, signal, sys
import torch
from cases.torch.training.models import adam, decaying_lr, mse, noisy_stack, regression
from meshtest import TrainCase
from meshtest.platforms.torch.gloo import TorchGlooBackend

case = TrainCase(name="interrupted", model=noisy_stack, data=regression, loss=mse, optimizer=adam,
                 scheduler=decaying_lr, steps=2, mesh_shape=(1,), tags=("cpu_faults",)).validated("inline")
backend = TorchGlooBackend()
backend.init("cpu", timeout_s=60)
mesh = backend.make_mesh((1,), ("d0",))
root, what = sys.argv[1], sys.argv[2]
if what == "save":
    backend.train(case, mesh, parallel=True, steps=2, save=root)
    # step 3's save dies after DCP wrote the tensors, while the rank's extra state is written
    torch.save = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    backend.train(case, mesh, parallel=True, start=2, steps=3, load=root, save=root)
else:
    notes = []
    snaps = backend.train(case, mesh, parallel=True, start=2, steps=3, load=root, notes=notes)
    print("LOADED", len(snaps), notes)
'''


def test_a_save_killed_half_way_is_never_loaded(tmp_path):
    script = tmp_path / "save_and_die.py"
    script.write_text(textwrap.dedent(SAVE_AND_DIE))
    env = {**ENV, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0",
           "LOCAL_RANK": "0"}
    root = tmp_path / "ck"

    def run(what):
        return subprocess.run([sys.executable, str(script), str(root), what], capture_output=True, text=True,
                              cwd=REPO, env=env, timeout=300)

    died = run("save")
    assert died.returncode == -signal.SIGKILL, died.stdout + died.stderr
    assert sorted(os.listdir(root)) == ["step_000002", "step_000003.partial"]
    assert os.listdir(root / "step_000003.partial"), "DCP had written step 3's tensors before the kill"
    loaded = run("load")
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr
    assert "LOADED 1" in loaded.stdout and "step_000002 (step 2, saved by 1 rank(s))" in loaded.stdout
    assert "ignored interrupted save(s): step_000003.partial" in loaded.stdout
    os.remove(root / "step_000002" / ".metadata")  # a committed checkpoint damaged afterwards
    broken = run("load")
    assert broken.returncode != 0
    assert f"CheckpointError: checkpoint {root / 'step_000002'} could not be loaded" in broken.stderr, broken.stderr


@nightly  # ~70 s drill: SIGKILL of the runner mid-phase, then a full rerun
def test_kill_9_during_a_phase_leaves_nothing_and_a_rerun_starts_from_phase_1(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "meshtest", FAULTS, "--tag", "cpu_faults", "--case", "fault_phase_hangs",
           "--artifacts-dir", str(out), "--slot-dir", str(tmp_path / "slots")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**ENV, "MESHTEST_FAULT_HANG": "1"})
    rank0 = out / "ranks" / "w2-2-phase2of2-fault_phase_hangs" / "rank0.jsonl"
    deadline = time.time() + 180
    while time.time() < deadline and not (rank0.exists() and "phase2 continuous" in rank0.read_text()):
        time.sleep(0.2)  # phase 2's ranks now sleep inside the case's parallelize step
    assert rank0.exists() and len(ranks_alive(str(out))) >= 2, "phase 2 should be running"
    saved = out / "cases" / "fault_phase_hangs" / "checkpoints" / "step_000002"
    assert saved.is_dir(), "phase 1 committed its checkpoint"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    deadline = time.time() + 15
    while time.time() < deadline and ranks_alive(str(out)):
        time.sleep(0.2)
    assert_nothing_leaked(str(tmp_path / "slots"), out, killed_holders=1)
    # the rerun starts over: phase 1 removes the old checkpoint (committing step 2 again over it
    # would fail) and trains from step 0; phase 2 then loads phase 1's fresh checkpoint
    rerun = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=ENV, timeout=600)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    outcome = _results(out)["fault_phase_hangs"]
    assert outcome["status"] == "pass" and outcome["detail"].startswith(
        "phase 1/2 pass in w2; phase 2/2 pass"), outcome
    assert "-- launch w2: 2 ranks" in rerun.stdout
    assert_nothing_leaked(str(tmp_path / "slots"), out, killed_holders=1)


LONG_RUN_FAULTS = os.path.join(REPO, "cases", "faults", "case_faults_long_run.py")


def test_a_leaking_or_diverging_long_run_fails_naming_the_figures_and_the_report_draws_it(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "meshtest", LONG_RUN_FAULTS, "--tag", "cpu_faults",
                           "--artifacts-dir", str(out), "--slot-dir", str(tmp_path / "slots")],
                          capture_output=True, text=True, cwd=REPO, env=ENV, timeout=300)
    results = _results(out)
    assert {k: v["status"] for k, v in results.items()} == {
        "fault_long_run_leaks": "fail", "fault_long_run_diverges": "fail"}, proc.stdout + proc.stderr
    leak = results["fault_long_run_leaks"]["failures"][0]
    assert leak["step"] == "stability" and leak["error"].startswith("peak RSS grew "), leak
    assert "from step 10 to step 59 (bound 8.0 MiB)" in leak["error"]
    grown = float(leak["error"].split()[3])
    assert 11.0 < grown < 14.0, leak  # 50 steps x 256 KiB kept = 12.5 MiB
    nan = results["fault_long_run_diverges"]["failures"][0]
    assert nan["step"] == "stability" and nan["error"].startswith("step ") and "is nan" in nan["error"], nan
    curve = json.loads((out / "cases" / "fault_long_run_leaks" / "curve_rank0.json").read_text())
    assert len(curve["loss"]) == len(curve["rss_kb"]) == len(curve["wall_s"]) == 60
    html = (out / "report.html").read_text()
    assert html.count('<figure class="curve">') == 4  # loss and RSS of each case
    assert 'aria-label="peak RSS per step, MiB"' in html and '<polyline class="rank0"' in html
