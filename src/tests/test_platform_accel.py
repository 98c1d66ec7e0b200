"""Wiring of the accelerator platforms on this CPU machine (docs/platforms.md).

- Torch on Ascend (hccl), through a test double of torch_npu's device layer
  (src/tests/doubles/torch_npu): from `--tag=npu_level0` selection to ranks that select
  `npu:<local rank>` among the devices `ASCEND_RT_VISIBLE_DEVICES` leaves them (the launch's
  device slots), in an `hccl` process group, running real DTensor cases (tensors on the host:
  `MESHTEST_HOST_TENSORS=1`, the part only Ascend hardware can check).
- Torch on CUDA (nccl) and on NPU without torch_npu: the gate fails at once, in one line naming
  what is missing, before any slot is taken or rank started.
- The msrun launch command and its log harvest, which the MindSpore lane's own tests
  (test_mindspore_lane.py, resolve `mindspore`) run for real.
"""
import os
import re
import subprocess
import sys
import time

from meshtest.parent.launch import DEVICE_VISIBILITY_ENV, MSRUN_WORKER, launch_command
from meshtest.parent.launcher_log import harvest_msrun_logs
from meshtest.parent.slots import SlotPool
from meshtest.rank.entry import rank_from_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOUBLES = os.path.join(ROOT, "src", "tests", "doubles")
CASES = os.path.join("cases", "torch", "case_sort.py")


def _run(args, tmp_path, extra_pythonpath=(), env_extra=None, timeout=300):
    env = dict(os.environ)
    env.pop("MESHTEST_HOST_TENSORS", None)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src"), ROOT, *extra_pythonpath])
    env.update(env_extra or {})
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "meshtest", "run", *args, f"--artifacts-dir={tmp_path / 'out'}",
                           f"--slot-dir={tmp_path / 'slots'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - t0


def test_npu_gate_runs_ranks_on_hccl_with_the_launch_devices_visible(tmp_path):
    # another test process holds device slots 0-1: the launch must get other devices, and see only those
    with SlotPool(str(tmp_path / "slots"), 8).acquire(2, "someone else", timeout_s=5):
        done, _ = _run([CASES, "--device-kind=npu", "--tag=npu_level0"], tmp_path, [DOUBLES],
                       {"MESHTEST_HOST_TENSORS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed, 0 failed" in done.stdout
    logs = {}
    for launch in os.listdir(tmp_path / "out" / "ranks"):
        for name in os.listdir(tmp_path / "out" / "ranks" / launch):
            if name.startswith("rank") and name.endswith(".log"):
                logs[(launch, name)] = (tmp_path / "out" / "ranks" / launch / name).read_text()
    # one 4-rank launch: the 2-rank case joins it on two replicas of its mesh (planner.merge_small_groups),
    # each an hccl sub-mesh of the launch's devices
    assert sorted(logs) == [("w4", f"rank{r}.log") for r in range(4)]
    assert all("case sort_dim1_s0_mesh2: pass" in text for text in logs.values())
    for (launch, name), text in logs.items():
        rank = int(name[len("rank"):-len(".log")])
        line = next(ln for ln in text.splitlines() if "process group" in ln)
        assert f"process group hccl, device npu:{rank} (torch.npu.current_device() = {rank})" in line, line
        visible = [int(v) for v in re.search(r"ASCEND_RT_VISIBLE_DEVICES=([0-9,]+),", line).group(1).split(",")]
        assert 0 not in visible and 1 not in visible, f"{launch}: sees the slots another process holds: {line}"
        assert len(visible) == (4 if launch.startswith("w4") else 2)


def test_npu_gate_without_torch_npu_fails_at_once_in_one_line(tmp_path):
    done, wall = _run([CASES, "--device-kind=npu", "--tag=npu_level0"], tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "cannot run 2 selected case(s) on device kind 'npu' here: torch_npu is not usable here" in lines[0]
    assert "Ascend node with CANN" in lines[0]
    assert not (tmp_path / "out" / "ranks").exists()  # no launch started
    assert wall < 60


def test_cuda_gate_on_a_cpu_build_fails_at_once_in_one_line(tmp_path):
    done, wall = _run([CASES, "--device-kind=cuda", "--tag=cuda_level0"], tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert ("on device kind 'cuda' here: torch 2.13.0+cpu sees no cuda device (torch.cuda.is_available() is "
            "False") in line
    assert not (tmp_path / "out" / "ranks").exists()
    assert wall < 60


def test_device_slots_reach_each_kind_in_its_own_variable():
    assert DEVICE_VISIBILITY_ENV == {"cpu": "MESHTEST_SLOT_IDS", "npu": "ASCEND_RT_VISIBLE_DEVICES",
                                     "cuda": "CUDA_VISIBLE_DEVICES"}


def test_msrun_command_runs_one_node_of_workers_with_this_python_first_on_path(tmp_path):
    cmd, env = launch_command("msrun", 4, ["--plan", "p.json"], python="/opt/venv/bin/python", master_port=29555,
                              log_dir=str(tmp_path / "msrun"))
    assert cmd[:3] == ["/opt/venv/bin/python", "-m", "mindspore.parallel.cluster.run"]
    assert {"--worker_num=4", "--local_worker_num=4", "--master_port=29555", f"--log_dir={tmp_path / 'msrun'}",
            "--join=True"} <= set(cmd)
    assert cmd[-3:] == [MSRUN_WORKER, "--plan", "p.json"] and os.path.isfile(MSRUN_WORKER)
    assert env["PATH"].split(os.pathsep)[0] == "/opt/venv/bin"  # msrun starts workers with `python` from PATH


def test_msrun_logs_are_folded_into_the_rank_and_launcher_logs(tmp_path):
    logs = tmp_path / "msrun"
    logs.mkdir()
    (logs / "worker_1.log").write_text("ImportError: no module named foo\n")
    (logs / "worker_0.log").write_text("")
    (logs / "scheduler.log").write_text("node 1 timed out\n")
    (tmp_path / "rank1.log").write_text("own output\n")
    harvest_msrun_logs(str(tmp_path), str(logs), 2)
    # msrun's part came first; the rank's own last lines stay last, where a report's tail reads them
    assert (tmp_path / "rank1.log").read_text() == (
        "-- msrun's msrun/worker_1.log (before the rank's own output):\nImportError: no module named foo\n"
        "-- the rank's own output:\nown output\n")
    assert not (tmp_path / "rank0.log").exists()  # nothing to fold: no empty header
    assert "-- msrun's msrun/scheduler.log:\nnode 1 timed out" in (tmp_path / "launcher.log").read_text()


def test_rank_number_comes_from_torchrun_or_msrun(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("RANK_ID", "3")
    assert rank_from_env() == 3
    monkeypatch.setenv("RANK", "1")
    assert rank_from_env() == 1


def test_msrun_names_the_worker_that_failed_first(tmp_path):
    from meshtest.parent.launcher_log import msrun_first_failure

    log = tmp_path / "launcher.log"
    log.write_text("Start worker process with rank id:1 ...\n[ERROR] ME(1:2,MainProcess):2026-12-02 [_api.py:365] "
                   "Worker process 4242 exit with exception. Error code: 7.\n[WARNING] There's worker exits with "
                   "exception, kill all other workers.\n")
    assert msrun_first_failure(str(log)) == (4242, 7)
    log.write_text("All workers successfully exit!\n")
    assert msrun_first_failure(str(log)) is None


def test_the_npu_config_installs_torch_npu_for_every_runner():
    """The NPU backend imports torch_npu by name (importlib), which Pants' inference cannot see: without
    an explicit runner dependency the torch-npu resolve's runner PEX lacks it and every NPU run fails
    with "No module named 'torch_npu'" (found by running pants.npu.toml here: docs/platforms.md)."""
    import tomllib

    from meshtest.platforms.torch.accel import TorchHcclBackend

    with open(os.path.join(ROOT, "pants.npu.toml"), "rb") as f:
        config = tomllib.load(f)
    assert config["python"]["default_resolve"] == "torch-npu" and config["meshtest"]["device_kind"] == "npu"
    wanted = "3rdparty/python:npu-reqs#" + TorchHcclBackend.device_layer.replace("_", "-")
    assert wanted in config["meshtest"]["runner_dependencies"]
    with open(os.path.join(ROOT, "3rdparty", "python", "requirements-torch-npu.txt")) as f:
        pins = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
    assert "torch_npu==2.13.0" in pins and "torch==2.13.0" in pins  # torch_npu X.Y pairs with torch X.Y
