"""The torch platform: torch.distributed.tensor behind meshtest's ``ShardBackend`` port.

Its rooms:

- :mod:`.backend` — ``TorchBackend``, the port's methods, composing the rooms below;
- :mod:`.gloo` — ``TorchGlooBackend``: the ``cpu`` device kind over gloo (the main job's);
- :mod:`.accel` — ``TorchHcclBackend`` (Ascend, torch_npu) and ``TorchNcclBackend`` (CUDA);
- :mod:`.local_lane` — ``TorchLocalBackend``: every rank simulated in one process;
- :mod:`.placement` — the placement adapter: placements, dtypes, layouts, ``DTensor.from_local``;
- :mod:`.training` — the training runtime: loop, pipeline stages and schedules, parameter
  placement, gradient sync, clipping;
- :mod:`.checkpoint` — the checkpoint runtime: DCP and full-state-dict phases, an op case's
  round trip;
- :mod:`.probes` — the feature probes; :mod:`.isolation` — the process state a case could leak;
  :mod:`.collectives` — torch's collective checks read; :mod:`.api` — the names cases use;
- :mod:`.opinfo` — the generated cases from torch's OpInfo database;
- :mod:`.rules`, :mod:`.layer_faults`, :mod:`.witness` — mutation mode's faults in DTensor's
  sharding rules and the layers below them, and the replay that proves a mutant.

Only rank processes (and the generator) import this package: the runner never imports torch.
"""
