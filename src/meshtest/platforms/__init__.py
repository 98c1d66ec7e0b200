"""Platforms behind the ``ShardBackend`` port (backend adapters, one per deployment).

- :mod:`.backend` — the ``ShardBackend`` port and the platform registry (imports no platform)
- :mod:`.torch` — the torch platform (torch.distributed.tensor): ``TorchBackend`` composed of its
  placement adapter, training and checkpoint runtimes, feature probes and process state, with one
  subclass per device kind (``gloo``: CPU; ``accel``: NPU, CUDA; ``local_lane``: every rank in one
  process), and its OpInfo generator, sharding-rule faults and their witness
- :mod:`.mindspore_msrun` — ``MindSporeBackend``: MindSpore over msrun

Only the adapters import a platform library, and only in rank processes.
"""
