"""The parent side: one test process that selects, plans, launches and watches (suite planning and
the parent's scheduling). It never imports a platform.

- :mod:`.planner` — select cases and group them into launches (``Group``)
- :mod:`.runner` — the run: scan → select → plan → slots → launch groups → reports
- :mod:`.launch` — one watched launch of a group's ranks (``LaunchResult``)
- :mod:`.relaunch` — what launches next after a launch ended (a pure policy)
- :mod:`.outcomes` — every way the parent turns what it saw into a ``CaseOutcome``
- :mod:`.slots` — the device-slot pool (exclusive, crash-safe file locks)
- :mod:`.progress` — the live progress board
"""
