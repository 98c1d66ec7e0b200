"""Unsupported is probed, never hard-coded: the torch backend asks the installed torch for every
platform feature a case may require, so a torch that gains one (a DTensor strategy for the CPU
flash-attention kernel, a CPU RNG tracker, a symmetric-memory backend) runs its cases (no launch)."""
from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor

from meshtest.model.rules import FEATURES
from meshtest.platforms.torch.gloo import TorchGlooBackend
from meshtest.platforms.torch.probes import FEATURE_PROBES


def test_every_feature_has_a_probe():
    # ``collectives`` is MindSpore's ctx.api.comm; every other feature is asked of torch
    assert set(FEATURE_PROBES) == set(FEATURES) - {"collectives"}


def test_torch_2_13_on_cpu_lacks_exactly_what_it_lacks():
    missing = set(FEATURE_PROBES) - TorchGlooBackend().features()
    assert missing == {"tp.no_parallel", "tp.reduce_dtype", "context_parallel", "dtensor_rng", "symmetric_memory"}


def test_context_parallel_appears_with_a_strategy_for_the_cpu_attention_kernel(monkeypatch):
    prop = DTensor._op_dispatcher.sharding_propagator
    kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    assert "context_parallel" not in TorchGlooBackend().features()
    monkeypatch.setitem(prop.op_strategy_funcs, kernel, prop.op_strategy_funcs[
        torch.ops.aten._scaled_dot_product_flash_attention.default])
    assert "context_parallel" in TorchGlooBackend().features()


def test_dtensor_rng_appears_when_the_cpu_module_can_set_an_rng_state(monkeypatch):
    assert "dtensor_rng" not in TorchGlooBackend().features()
    monkeypatch.setattr(torch.cpu, "set_rng_state", torch.set_rng_state, raising=False)
    assert "dtensor_rng" in TorchGlooBackend().features()


def test_symmetric_memory_appears_with_a_backend_for_the_device(monkeypatch):
    import torch.distributed._symmetric_memory as symm

    assert "symmetric_memory" not in TorchGlooBackend().features()
    monkeypatch.setattr(symm, "get_backend", lambda device: "TEST" if str(device) == "cpu" else None)
    assert "symmetric_memory" in TorchGlooBackend().features()
