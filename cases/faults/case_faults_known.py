"""Known-failure fixtures: a mark passes only the failure it declares (tag ``cpu_faults``: no gate
runs these; src/tests/test_known_failures_torch.py does, and asserts each verdict).

- ``kf_typo_before_the_bug``: marked as torch's missing ``fill_.Tensor`` rule at step ``run``,
  but ``fn`` has a typo that raises at ``reference``: ``fail``, naming what was expected and what
  happened (before the strict mark this was ``xfail``);
- ``kf_reproduced``: the declared raise at the declared step: ``xfail``;
- ``kf_fixed``: marked, but passes: ``xpass`` (the mark must go);
- ``kf_declared_crash``: a rank aborts inside gloo's size check at ``run`` (the ranks
  all-reduce tensors of different sizes): the declared crash, ``xfail``;
- ``kf_other_crash``: the same abort under a mark expecting another message: ``crash``, saying
  what was expected;
- ``kf_near_deadline``: passes, but in over half of its deadline: reported near it, with its
  slowest step and the frame it spent its time in (it runs before the crashes).

By hand: ``python -m meshtest run cases/faults/case_faults_known.py --tag cpu_faults``.
"""
from meshtest import CompareSpec, InputSpec, KnownFailure, OpShardCase, Replicate, Shard, register

FAULTS = ("cpu_faults",)
NO_FILL_RULE = KnownFailure(kind="raises", step="run", match=r"NotImplementedError: .*aten\.fill_\.Tensor",
                            reason="aten.fill_.Tensor has no DTensor sharding strategy",
                            upstream="docs/torch-bugs.md#fill-tensor-strategy")
SIZE_CHECK = KnownFailure(kind="crash", step="run", match=r"Received data size doesn't match expected size",
                          reason="the ranks all-reduce tensors of different sizes, and gloo aborts a rank on its "
                                 "size check",
                          divergence="a fixture: the crash is the case's own, made to test how a declared crash "
                                     "is judged")
OTHER_CRASH = KnownFailure(kind="crash", step="run", match=r"NCCL watchdog timeout",
                           reason="a crash this case does not have", upstream="pytorch/pytorch#1")


def typo_then_setitem(y):
    y = y.dobule()  # noqa: the typo under test (AttributeError at step reference)
    y[:, 1] = 5.0
    return y


def setitem_column(y):
    y = y.clone()
    y[:, 1] = 5.0
    return y


def doubled(x):
    return x * 2.0


def collective_sizes_differ(x):
    """On the distributed path the ranks all-reduce tensors of different sizes, so gloo aborts a
    rank on its size check (a native crash at step run)."""
    if not hasattr(x, "placements"):
        return x
    import torch
    import torch.distributed as dist

    t = torch.ones(2 + 3 * dist.get_rank())
    dist.all_reduce(t)
    return x


register(OpShardCase(name="kf_typo_before_the_bug", fn=typo_then_setitem, inputs=[InputSpec((4, 6))],
                     placements=[(Shard(0),)], mesh_shape=(2,), compare=CompareSpec.equal(), tags=FAULTS,
                     known_failure=NO_FILL_RULE))
register(OpShardCase(name="kf_reproduced", fn=setitem_column, inputs=[InputSpec((4, 6))],
                     placements=[(Shard(0),)], mesh_shape=(2,), compare=CompareSpec.equal(), tags=FAULTS,
                     known_failure=NO_FILL_RULE))
register(OpShardCase(name="kf_fixed", fn=doubled, inputs=[InputSpec((4, 6))], placements=[(Shard(0),)],
                     mesh_shape=(2,), compare=CompareSpec.equal(), tags=FAULTS, known_failure=NO_FILL_RULE))


def slow_on_the_distributed_path(x):
    """Over half of its 8 s deadline in one Python frame on the distributed path (a stand-in for
    torch's slow sharding propagation): reported near its deadline, naming the frame. It runs
    before the crashing cases, in a launch whose earlier cases paid DTensor's first-op warm-up
    (seconds on a loaded machine), so the busy step is the slowest one."""
    if hasattr(x, "placements"):
        import time

        deadline = time.perf_counter() + 4.5
        while time.perf_counter() < deadline:
            sum(range(1000))
    return x * 2.0


register(OpShardCase(name="kf_near_deadline", fn=slow_on_the_distributed_path, inputs=[InputSpec((4, 6))],
                     placements=[(Shard(0),)], mesh_shape=(2,), compare=CompareSpec.equal(), tags=FAULTS,
                     timeout_s=8.0))

register(OpShardCase(name="kf_declared_crash", fn=collective_sizes_differ, inputs=[InputSpec((4, 4))],
                     placements=[(Replicate(),)], mesh_shape=(2,), compare=CompareSpec.equal(), tags=FAULTS,
                     known_failure=SIZE_CHECK))
register(OpShardCase(name="kf_other_crash", fn=collective_sizes_differ, inputs=[InputSpec((4, 4))],
                     placements=[(Replicate(),)], mesh_shape=(2,), compare=CompareSpec.equal(), tags=FAULTS,
                     known_failure=OTHER_CRASH))

