"""The rank side: what each rank process of a launch runs (the rank's execution flow).

- :mod:`.entry` — the process harness (``python -m meshtest.rank.entry --plan P``): streams,
  faulthandler, the end-of-case fence, fail-fast, exit codes
- :mod:`.pipeline` — the per-case pipeline ``build → derive → reference → distribute → run →
  gather → compare → backward`` and the scenario runner, each returning a ``StepResult``
- :mod:`.scenario` — ``ScenarioContext``, what a scenario function receives
- :mod:`.compare` — the comparison rules shared by every platform
"""
