"""Drills of launches placed across the nodes of a cluster (tag ``cpu_faults``: no gate runs them;
src/tests/test_ray_executor.py does, on a two-node Ray cluster of 4 slots per node, and asserts
each verdict). Every 8-rank case here spans both nodes (ranks 0-3 on node 0, 4-7 on node 1).

* ``nodes_all_reduce_8``: every rank all-reduces a one and notes the sum: passes, with the same
  verdict and records placed 4 + 4 on the cluster as on one node of 8.
* ``nodes_rank5_dies``: rank 5 (on node 1) kills itself at step ``die`` (SIGKILL, as an OOM kill
  would): a ``crash`` whose leading rank is 5, named with its node.
* ``nodes_wait_for_node_loss``: every rank waits at step ``wait`` in 1 s barriers for up to a minute;
  the drill removes node 1 (its raylet and everything on it) meanwhile: the case is ``error``
  naming the node, long before its deadline.
* ``nodes_after_4``: 4 ranks all-reduce a one: passes (on the node that is left), so the run
  goes on after a node is lost.
"""
import os
import signal
import time

from meshtest import ScenarioCase, register

T = ("cpu_faults",)


def all_reduce_ones(ctx):
    torch, dist = ctx.api.torch, ctx.api.dist
    one = torch.ones(1)
    dist.all_reduce(one)
    assert int(one.item()) == ctx.world_size, f"sum {one.item()} on rank {ctx.rank}"
    ctx.note(f"the {ctx.world_size} ranks all-reduced their ones to {int(one.item())}")


def rank5_dies(ctx):
    # every rank past its build first: under load a rank still building when rank 5 dies was
    # itself seen dead and, its node's report written first, named the root cause (the open race
    # of docs/scale.md, "A rank that dies on another node")
    ctx.api.dist.barrier()
    ctx.step("die")
    if ctx.rank == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    ctx.api.dist.barrier()


def wait_for_node_loss(ctx):
    ctx.step("wait")
    for _ in range(60):
        ctx.api.dist.barrier()
        time.sleep(1.0)


register(ScenarioCase(name="nodes_all_reduce_8", fn=all_reduce_ones, mesh_shape=(8,), tags=T))
register(ScenarioCase(name="nodes_rank5_dies", fn=rank5_dies, mesh_shape=(8,), tags=T, solo_launcher=True))
register(ScenarioCase(name="nodes_wait_for_node_loss", fn=wait_for_node_loss, mesh_shape=(8,), tags=T,
                      timeout_s=90, solo_launcher=True))
register(ScenarioCase(name="nodes_after_4", fn=all_reduce_ones, mesh_shape=(4,), tags=T))
