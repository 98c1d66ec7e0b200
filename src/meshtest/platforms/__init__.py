"""Platforms behind the ``ShardBackend`` port (seed 000 §3.1 "后端适配", §3.4).

- :mod:`.backend` — the ``ShardBackend`` port and the platform registry (imports no platform)
- :mod:`.torch_gloo` — ``TorchGlooBackend``: torch.distributed.tensor on CPU over gloo

Only the adapters import a platform library, and only in rank processes.
"""
