"""Platforms behind the ``ShardBackend`` port (backend adapters, one per deployment).

- :mod:`.backend` — the ``ShardBackend`` port and the platform registry (imports no platform)
- :mod:`.torch_gloo` — ``TorchGlooBackend``: torch.distributed.tensor on CPU over gloo

Only the adapters import a platform library, and only in rank processes.
"""
