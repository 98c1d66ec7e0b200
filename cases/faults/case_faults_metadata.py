"""An op case whose output has a different global shape on each rank (tag ``cpu_faults``: no
gate runs it; src/tests/test_output_metadata_torch.py does, on gloo and in the one-process lane).

Each rank's DTensor claims another global shape; a gather of it would pair collectives of
different sizes and gloo would abort a rank inside them. meshtest compares every output's global
metadata across the ranks first (step ``output-metadata``): the case fails there, naming each
rank's shape, and no rank crashes.
"""
from meshtest import CompareSpec, InputSpec, OpShardCase, Replicate, register


def global_shape_differs_per_rank(x):
    """On the distributed path, rank r's output claims the global shape (4 + 12 r, 4)."""
    if not hasattr(x, "placements"):
        return x
    import torch
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor import Shard as TorchShard

    r = x.device_mesh.get_rank()
    local = torch.ones(2 + 3 * r, 4)
    return DTensor.from_local(local, x.device_mesh, [TorchShard(0)], run_check=False,
                              shape=torch.Size((4 + 12 * r, 4)), stride=(4, 1))


def doubled(x):
    return x * 2.0


register(OpShardCase(name="md_global_shape_per_rank", fn=global_shape_differs_per_rank, inputs=[InputSpec((4, 4))],
                     placements=[(Replicate(),)], mesh_shape=(2,), compare=CompareSpec.equal(), tags=("cpu_faults",)))
register(OpShardCase(name="md_after_it", fn=doubled, inputs=[InputSpec((4, 4))], placements=[(Replicate(),)],
                     mesh_shape=(2,), compare=CompareSpec.equal(), tags=("cpu_faults",)))
