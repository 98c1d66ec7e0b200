"""Fault fixtures for the MindSpore lane (tag ``cpu_faults``: no gate selects them). Run by
src/tests/test_mindspore_lane.py, which asserts each report:

- ``ms_fault_rank1_asserts``: rank 1's own assertion fails → ``fail`` naming rank 1 and its step;
- ``ms_fault_rank1_dies``: rank 1's process exits mid-case (``os._exit``) → ``crash`` reported as
  soon as the process is gone (msrun itself exits ~45 s later, at its scheduler's node timeout), with
  rank 1's log; no worker survives;
- ``ms_fault_after_death_runs``: the case after the crash runs in a fresh launch and passes.
"""
import os

import numpy as np

from meshtest import ScenarioCase, register

TAGS = ("cpu_faults",)


def rank1_asserts(ctx):
    ctx.step("all_reduce")
    out = ctx.api.comm.all_reduce(ctx.api.Tensor(np.ones(2, np.float32)))
    ctx.step("check")
    assert ctx.rank != 1, f"rank 1 disagrees on purpose (all_reduce gave {ctx.backend.to_numpy(out).tolist()})"


def rank1_dies(ctx):
    ctx.step("exit")
    if ctx.rank == 1:
        print("ms_fault_rank1_dies: rank 1 exits with code 7 now", flush=True)
        os._exit(7)
    ctx.api.comm.barrier()  # rank 0 waits here for a peer that never comes


def after_death_runs(ctx):
    ctx.step("all_gather")
    out = ctx.api.comm.all_gather(ctx.api.Tensor(np.full((1, 2), ctx.rank, np.float32)))
    ctx.assert_equal(out, np.array([[0, 0], [1, 1]], np.float32), label="all_gather")


register(ScenarioCase(name="ms_fault_rank1_asserts", fn=rank1_asserts, mesh_shape=(2,), tags=TAGS,
                      requires=("collectives",)))
register(ScenarioCase(name="ms_fault_rank1_dies", fn=rank1_dies, mesh_shape=(2,), tags=TAGS,
                      requires=("collectives",), timeout_s=120))
register(ScenarioCase(name="ms_fault_after_death_runs", fn=after_death_runs, mesh_shape=(2,), tags=TAGS,
                      requires=("collectives",)))
