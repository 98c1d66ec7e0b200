"""Where launches run (meshtest.parent.executor), platform-free: the spec forms, the order a run
finds its executor in, the pool's executor file, and a lost node's case reported ``error`` by the
relaunch policy, with the rest of the group relaunched."""
from __future__ import annotations

import pytest

from meshtest.parent import executor, relaunch
from meshtest.status import Status


def test_spec_forms_name_this_machine_or_a_ray_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert executor.ray_address("local") is None and executor.ray_address("") is None
    assert executor.ray_address("ray://head:10001") == "ray://head:10001"  # Ray Client, as is
    assert executor.ray_address("ray:10.0.0.1:6379") == "10.0.0.1:6379" and executor.ray_address("ray:auto") == "auto"
    assert executor.ray_address("auto") is None  # no $RAY_ADDRESS: this machine
    with pytest.raises(ValueError, match="unknown executor 'slurm'.*ray://HOST:PORT"):
        executor.ray_address("slurm")


def test_the_flag_then_the_environment_then_the_pools_file_then_local(tmp_path, monkeypatch):
    monkeypatch.delenv(executor.EXECUTOR_ENV, raising=False)
    pool = str(tmp_path / "pool")
    assert executor.resolve("", pool) == "local"
    path = executor.write_pool_executor(pool, "ray:head:6379")
    assert open(path).read() == "ray:head:6379\n" and executor.resolve("", pool) == "ray:head:6379"
    monkeypatch.setenv(executor.EXECUTOR_ENV, "ray://other:10001")
    assert executor.resolve("", pool) == "ray://other:10001"
    assert executor.resolve("local", pool) == "local"
    monkeypatch.delenv(executor.EXECUTOR_ENV)
    executor.write_pool_executor(pool, "local")  # removes the file
    assert executor.resolve("", pool) == "local"
    with pytest.raises(ValueError):
        executor.write_pool_executor(pool, "nonsense")


def test_a_lost_node_makes_the_case_it_ended_an_error_and_the_rest_run_again():
    facts = relaunch.LaunchFacts(recorded=frozenset({"f::a"}), started=frozenset({"f::a", "f::b"}),
                                 stopped_after=None, rendezvous_clash=False, timed_out=False, clean=False,
                                 exit_text="killed by SIGKILL", launch_name="w8", group_id="w8",
                                 cluster_error="node 1 (10.0.0.2, ranks 4-7) left the cluster mid-launch")
    d = relaunch.decide(["f::a", "f::b", "f::c"], facts)
    assert d.complete == ("f::a",) and d.interrupted == ("f::b",) and d.interrupted_status is Status.ERROR
    assert d.next_cases == ("f::c",) and d.suspect is None


def test_one_nodes_command_of_a_launch_across_nodes():
    """Node 1 of 2 x 4 ranks, node 0's rendezvous at 10.0.0.1:29500: the forked launcher, torchrun
    (static rendezvous) and msrun each get the node's rank count, its index and node 0's address."""
    from meshtest.parent.launch import launch_command

    common = dict(master_port=29500, nnodes=2, node_rank=1, master_addr="10.0.0.1", python="py")
    fork, _ = launch_command("torchrun", 4, ["--plan", "p.json"], start="fork", **common)
    assert fork == ["py", "-m", "meshtest.rank.torch_launcher", "--nproc=4", "--nnodes=2", "--node-rank=1",
                    "--master-addr=10.0.0.1", "--master-port=29500", "--", "--plan", "p.json"]
    spawn, _ = launch_command("torchrun", 4, ["--plan", "p.json"], start="spawn", **common)
    assert spawn[:9] == ["py", "-m", "torch.distributed.run", "--nnodes=2", "--node-rank=1", "--master-addr=10.0.0.1",
                         "--master-port=29500", "--nproc-per-node=4", "-m"]
    msrun, _ = launch_command("msrun", 4, ["--plan", "p.json"], log_dir="logs", **common)
    assert {"--worker_num=8", "--local_worker_num=4", "--master_addr=10.0.0.1", "--node_rank=1"} <= set(msrun)
    with pytest.raises(ValueError, match="needs the rendezvous port of node 0"):
        launch_command("torchrun", 4, ["--plan", "p.json"], nnodes=2, node_rank=1)
