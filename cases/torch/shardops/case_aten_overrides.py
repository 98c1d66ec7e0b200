"""The library's strategies for two aten operators (src/shardops/sharding/aten_*.py): its pinned
``logcumsumexp`` (scanned dim replicated, other dims kept sharded), and its request that ``erf``
run replicated, which torch 2.13 does not honour (docs/torch-bugs.md,
"register-sharding-single-dim": the output stays ``Shard(0)``), a known failure."""
import torch

import shardops  # noqa: F401 — defines torch.ops.shardops.* and registers their sharding
from meshtest import InputSpec, KnownFailure, OpShardCase, Replicate, Shard, register

L0 = ("cpu_level0", "cpu_level1")
L1 = ("cpu_level1",)


def logcumsumexp_dim1(x):
    return torch.logcumsumexp(x, 1)


def erf(x):
    return torch.erf(x)


register(OpShardCase(name="logcumsumexp_rows_s0_kept_grad_mesh2", fn=logcumsumexp_dim1,
                     inputs=[InputSpec((6, 5), requires_grad=True)], placements=[(Shard(0),)], mesh_shape=(2,),
                     output_placements=((Shard(0),),), tags=L0))
register(OpShardCase(name="logcumsumexp_scanned_s1_replicated_mesh2", fn=logcumsumexp_dim1,
                     inputs=[InputSpec((4, 6))], placements=[(Shard(1),)], mesh_shape=(2,),
                     output_placements=((Replicate(),),), tags=L1))
register(OpShardCase(name="erf_pinned_replicate_mesh2", fn=erf,
                     inputs=[InputSpec((6, 4))], placements=[(Shard(0),)], mesh_shape=(2,),
                     output_placements=((Replicate(),),), tags=L1,
                     known_failure=KnownFailure(
                         kind="mismatch", step="placement",
                         match=r"output\[0\]: placements \(Shard\(0\),\) != expected \(Replicate\(\),\)",
                         signature="output[0] placements (Shard(0),) vs (Replicate(),)",
                         reason="register_sharding stores a library's strategy for erf but torch consults erf's "
                                "single-dim strategy first, so the override is ignored without a warning",
                         upstream="docs/torch-bugs.md#register-sharding-single-dim")))
