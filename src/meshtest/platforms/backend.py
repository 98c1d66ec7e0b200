"""The ``ShardBackend`` port: what a platform must provide to run meshtest cases.

The platform-agnostic core (everything in :mod:`meshtest` except the adapters in :mod:`meshtest.platforms`)
talks to tensors, meshes and process groups only through this interface, and never imports
torch or mindspore. A backend supplies primitives; shared policy (comparison, step order,
result records) stays in the core.

Adding a platform — a minimal complete example::

    # my_pkg/my_backend.py
    import numpy as np
    import my_framework as mf
    from meshtest.platforms.backend import ShardBackend

    class MyBackend(ShardBackend):
        platform = "myfw"

        def init(self, device_kind, timeout_s):
            mf.dist.init(backend="ccl", timeout=timeout_s)
        def rank(self): return mf.dist.get_rank()
        def world_size(self): return mf.dist.get_world_size()
        def make_mesh(self, shape, names): return mf.DeviceMesh(shape, names)
        def make_tensor(self, array, dtype, requires_grad=False):
            return mf.tensor(array, dtype=getattr(mf, dtype))
        def clone(self, tensor): return tensor.clone()
        def distribute(self, tensor, mesh, placements):
            return mf.distribute_tensor(tensor, mesh, [self.to_platform(p) for p in placements])
        def local_to_global(self, tensor): return tensor.full_tensor()
        def is_tensor(self, obj): return isinstance(obj, mf.Tensor)
        def to_numpy(self, tensor): return tensor.float().numpy()
        def dtype_name(self, tensor): return str(tensor.dtype)
        def backward(self, outputs, grad_outputs): mf.autograd.backward(outputs, grad_outputs)
        def grad_of(self, tensor): return tensor.grad
        def any_rank(self, flag): return bool(mf.dist.all_reduce_max(int(flag)))
        def recover_after_failure(self, timeout_s): mf.dist.barrier(); return True
        def shutdown(self): mf.dist.destroy()
        # Only for scenario cases (optional): what the platform provides, and the names
        # scenarios use (see scenario_api below).
        def features(self):
            return frozenset({"dtensor", "tp.styles"} | ({"tp.no_parallel"} if hasattr(mf.tp, "NoParallel") else set()))
        def scenario_api(self):
            import types
            return types.SimpleNamespace(torch=mf, nn=mf.nn, F=mf.nn.functional,
                                         ColwiseParallel=mf.tp.ColwiseParallel, ...)

    # then declare it in my_pkg's packaging metadata, so meshtest finds it when installed:
    #   [project.entry-points."meshtest.backends"]
    #   myfw = "my_pkg.my_backend:MyBackend"
    # (or, in every process that runs meshtest, call meshtest.platforms.registry's
    # register_backend(BackendInfo("myfw", "my_pkg.my_backend:MyBackend", "torchrun"))).
    # docs/platforms.md has a complete, tested example.
"""
from __future__ import annotations

from .ports import ModelPort, PlacementPort, ProcessPort, StrengthPort, TensorPort


class ShardBackend(ProcessPort, TensorPort, PlacementPort, ModelPort, StrengthPort):
    """Port for one platform (the platform port). One instance per rank process.

    Its methods come in five parts (:mod:`meshtest.platforms.ports`): the rank process and its
    runtime, tensors, meshes and placements, modules/checkpoints/training, and suite strength.
    The abstract methods are the minimum for op cases; the rest have defaults.
    """

    #: platform name case targets declare (``meshtest_cases(platform=...)``).
    platform: str = ""
    #: the rank process ends with ``os._exit`` once its results are written, skipping interpreter
    #: teardown (gloo's threads can abort during static destruction: WORKSPACE-notes.md, "teardown
    #: aborts"); ``False``: a normal exit, for a runtime that reports its end at exit (MindSpore).
    hard_exit: bool = True
