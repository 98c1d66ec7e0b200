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
