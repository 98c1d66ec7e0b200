"""The declarative model: what a case file declares (the declaration model and its discovery).

- :mod:`.spec` — ``OpShardCase``, ``ScenarioCase``, ``InputSpec``, ``DerivedSpec``, ``CompareSpec``
- :mod:`.placement` — ``Shard(d)``, ``Replicate()``, ``Partial(op)``
- :mod:`.schema` — the one table of case fields (static or not), read by the scan and the dataclasses
- :mod:`.rules` — the declaration rules, shared by registration and the scan
- :mod:`.scan` — the static scan of case files (``ScannedCase``, ``FileScan``); stdlib only
- :mod:`.sweep` — placement sweeps (``register_sweep``)
- :mod:`.registry` — ``register()``, importing a case file, and the check against its scan

Both sides read the model: the parent plans from the scan; the ranks import case files and
check them against the scan. Importing this package imports nothing else (the Pants plugin
loads ``meshtest.model.scan`` on CPython 3.9 without NumPy).
"""
