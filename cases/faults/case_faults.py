"""Fault-injection package: one case per fault meshtest must survive (issue "Reliability and
diagnosis"). Tagged ``cpu_faults`` only, so no ``*_level0`` / ``*_level1`` gate selects them, and
not a Pants case target (see BUILD): src/tests/test_faults_torch.py runs this file and asserts,
per fault, the reported status, the named ranks and steps, that the cases after it still ran,
and that no rank process or device slot leaked. By hand::

    python -m meshtest run cases/faults/case_faults.py --tag cpu_faults --case-timeout 10 --artifacts-dir /tmp/faults

Every fault case is followed by an ``*_after_*`` case that must pass in the fresh launch.
"""
import os
import signal
import sys

from meshtest import InputSpec, OpShardCase, ScenarioCase, Shard, register

MESH = (2,)
FAULTS = ("cpu_faults",)


def doubled(x):
    return x * 2.0


def loop_on_rank1(x):
    """Infinite loop on rank 1 inside the distributed run: the case deadline must catch it."""
    if hasattr(x, "placements") and x.device_mesh.get_rank() == 1:
        while True:
            pass
    return x * 2.0


def all_reduce_ones(ctx):
    ctx.step("all_reduce")
    t = ctx.api.torch.ones(4)
    ctx.api.dist.all_reduce(t)
    assert float(t[0]) == ctx.world_size, f"all_reduce of ones gave {float(t[0])}"


def skip_collective_on_rank1(ctx):
    """Rank 1 skips the all_reduce rank 0 enters: without the end-of-case fence rank 0's
    all_reduce would pair with rank 1's next case and blame the wrong case."""
    ctx.step("all_reduce")
    if ctx.rank == 1:
        return
    ctx.api.dist.all_reduce(ctx.api.torch.ones(4))


def skip_collective_on_rank0(ctx):
    """The same with rank 0, which coordinates gloo's monitored barrier: its fence must outwait the
    peer's deadline so the peer is reported as timed out (with stacks), not rank 0 as gone."""
    ctx.step("all_reduce")
    if ctx.rank == 0:
        return
    ctx.api.dist.all_reduce(ctx.api.torch.ones(4))


def slow_rank0(ctx):
    """Not a fault: rank 0 takes 6 s, inside this case's 16 s deadline but past half the run's
    --case-timeout 10 the test uses. Rank 1 waits at the fence and the case passes. (Its 16 s
    also makes the launch's process-group timeout 8 s, half the longest deadline: longer than
    the faults' deadlines, so a peer waiting in a collective outlasts the faulty rank's.)"""
    import time

    ctx.step("slow")
    if ctx.rank == 0:
        time.sleep(6)


def exit_on_rank1(ctx):
    ctx.step("compute")
    if ctx.rank == 1:
        os._exit(7)
    ctx.api.dist.barrier()


def segfault_on_rank1(ctx):
    ctx.step("compute")
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    ctx.api.dist.barrier()


def sigkill_rank0(ctx):
    ctx.step("compute")
    if ctx.rank == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    ctx.api.dist.barrier()


def assertion_fails(ctx):
    ctx.step("check")
    assert ctx.rank < 0, "deliberate assertion failure"


def error_on_rank1(ctx):
    ctx.step("compute")
    if ctx.rank == 1:
        raise ValueError("deliberate error on rank 1 only")


def leak_default_dtype(ctx):
    """Changes a process-wide setting and leaves it: isolation reports this case, not the next."""
    ctx.step("leak")
    ctx.api.torch.set_default_dtype(ctx.api.torch.float64)
    ctx.api.torch.set_grad_enabled(False)


def fresh_state(ctx):
    """The innocent case after a leak: plain tensors are float32 and autograd is on again."""
    t = ctx.api.torch.ones(2, requires_grad=True)
    assert t.dtype == ctx.api.torch.float32, f"default dtype leaked into this case: {t.dtype}"
    assert (t * 2).requires_grad, "grad mode leaked into this case"


def mismatched_collectives(ctx):
    """Rank 0 all_reduces 4 floats while rank 1 all_gathers 8: with collective checks the ranks
    learn it at once, with each rank's collective named, instead of at the deadline."""
    api = ctx.api
    ctx.step("collective")
    if ctx.rank == 0:
        api.dist.all_reduce(api.torch.ones(4))
    else:
        api.dist.all_gather([api.torch.empty(8) for _ in range(ctx.world_size)], api.torch.ones(8))


def clean_exit_on_rank1(ctx):
    """sys.exit(0) inside a case: reported as such, and the rank goes on with the next case."""
    ctx.step("compute")
    if ctx.rank == 1:
        sys.exit(0)


def times_nan(x):
    return x * float("nan")


def break_communicator(ctx):
    """Rank 1 destroys the process group: the health probe after the error must find the
    group broken and the next case must run in a fresh launch."""
    ctx.step("break")
    if ctx.rank == 1:
        ctx.api.dist.destroy_process_group()
    raise RuntimeError(f"rank {ctx.rank}: communicator broken on purpose")


register(OpShardCase(name="fault_before", fn=doubled, inputs=[InputSpec((4, 4))], placements=[(Shard(0),)],
                     mesh_shape=MESH, tags=FAULTS))
# The signal drills (src/tests/test_faults_torch.py) stop the runner while rank 1 loops here, within
# its 4 s deadline; the launch's process-group timeout (8 s) outlasts the deadline and its stack dump.
register(OpShardCase(name="fault_hang_loop", fn=loop_on_rank1, inputs=[InputSpec((4, 4))], placements=[(Shard(0),)],
                     mesh_shape=MESH, tags=FAULTS, timeout_s=4))
register(OpShardCase(name="fault_after_hang", fn=doubled, inputs=[InputSpec((4, 4))], placements=[(Shard(0),)],
                     mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_skip_collective", fn=skip_collective_on_rank1, mesh_shape=MESH, tags=FAULTS,
                      timeout_s=4))
register(ScenarioCase(name="fault_after_skip", fn=all_reduce_ones, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_skip_collective_rank0", fn=skip_collective_on_rank0, mesh_shape=MESH, tags=FAULTS,
                      timeout_s=4))
register(ScenarioCase(name="fault_after_skip_rank0", fn=all_reduce_ones, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="slow_rank0_within_deadline", fn=slow_rank0, mesh_shape=MESH, tags=FAULTS, timeout_s=16))
register(ScenarioCase(name="fault_exit", fn=exit_on_rank1, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_after_exit", fn=all_reduce_ones, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_segv", fn=segfault_on_rank1, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_after_segv", fn=all_reduce_ones, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_sigkill", fn=sigkill_rank0, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_after_sigkill", fn=all_reduce_ones, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_assert", fn=assertion_fails, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_error_one_rank", fn=error_on_rank1, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_after_error", fn=all_reduce_ones, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_broken_communicator", fn=break_communicator, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_after_broken", fn=all_reduce_ones, mesh_shape=MESH, tags=FAULTS))
# Verdicts a user can trust: a leaked setting, ranks in different collectives, sys.exit(0) in a
# case, a reference that is all NaN. Each is reported in its own case; the case after it passes.
register(ScenarioCase(name="fault_state_leak", fn=leak_default_dtype, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_after_leak", fn=fresh_state, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_mismatched_collective", fn=mismatched_collectives, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_after_mismatch", fn=all_reduce_ones, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_clean_exit", fn=clean_exit_on_rank1, mesh_shape=MESH, tags=FAULTS))
register(ScenarioCase(name="fault_after_clean_exit", fn=all_reduce_ones, mesh_shape=MESH, tags=FAULTS))
register(OpShardCase(name="fault_all_nan_reference", fn=times_nan, inputs=[InputSpec((4, 4))],
                     placements=[(Shard(0),)], mesh_shape=MESH, tags=FAULTS))
register(OpShardCase(name="fault_after_nan", fn=doubled, inputs=[InputSpec((4, 4))], placements=[(Shard(0),)],
                     mesh_shape=MESH, tags=FAULTS))
