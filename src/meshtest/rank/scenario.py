"""What a :class:`meshtest.model.spec.ScenarioCase` function receives on each rank.

A scenario is written against the platform's API namespace (``ctx.api``), which the backend
supplies (:meth:`meshtest.platforms.backend.ShardBackend.scenario_api`), and asserts inside. Its steps
(``ctx.step("forward")``) are recorded like an op case's steps, so a hang or an error is
reported with the step it happened in; comparisons use the core's rules
(:func:`meshtest.rank.compare.compare_arrays`), so a scenario compares exactly like an op case.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional

from ..model.compare_spec import DEFAULT_ATOL, DEFAULT_RTOL, CompareSpec
from .compare import compare_arrays


class ScenarioContext:
    """Per-rank context of one scenario run.

    :ivar mesh: the launch's DeviceMesh (shape and axis names as the case declared).
    :ivar backend: this rank's :class:`meshtest.platforms.backend.ShardBackend`.
    :ivar api: the platform's scenario API namespace (see the backend's ``scenario_api``).
    :ivar rank: this process's global rank; ``world_size``: number of ranks.
    :ivar platform: the platform name, e.g. ``"torch"``.
    :ivar case: the case name (for messages).
    """

    def __init__(self, *, case: str, mesh: Any, backend: Any, api: Any,
                 on_step: Optional[Callable[[str], None]] = None):
        self.case = case
        self.mesh = mesh
        self.backend = backend
        self.api = api
        self.rank = backend.rank()
        self.world_size = backend.world_size()
        self.platform = backend.platform
        self.current_step = "run"
        self.notes: List[str] = []
        self._on_step = on_step

    def step(self, name: str) -> None:
        """Enter step ``name`` (reported with any failure or hang that happens in it)."""
        self.current_step = name
        if self._on_step is not None:
            self._on_step(name)

    def note(self, text: str) -> None:
        """Attach a line to this rank's result (measured figures, what was observed)."""
        self.notes.append(str(text))

    def assert_close(self, actual: Any, expected: Any, *, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                     label: str = "output", allow_nonfinite: bool = False) -> None:
        """Check two full (plain) tensors with ``|actual - expected| <= atol + rtol * |expected|``
        elementwise, shape and dtype equal (:func:`meshtest.rank.compare.compare_arrays`). The
        defaults are :meth:`CompareSpec.allclose`'s (torch's float32 tolerances); a non-finite
        ``expected`` fails unless ``allow_nonfinite``.

        :raises meshtest.rank.compare.CompareError: (an ``AssertionError``) naming ``label`` and the
            worst element.
        """
        self._compare(actual, expected, CompareSpec.allclose(rtol=rtol, atol=atol, allow_nonfinite=allow_nonfinite),
                      label)

    def assert_equal(self, actual: Any, expected: Any, label: str = "output", allow_nonfinite: bool = False) -> None:
        """Bitwise-equal values, shape and dtype. :raises meshtest.rank.compare.CompareError:"""
        self._compare(actual, expected, CompareSpec.equal(allow_nonfinite=allow_nonfinite), label)

    def _compare(self, actual: Any, expected: Any, spec: CompareSpec, label: str) -> None:
        b = self.backend
        compare_arrays(b.to_numpy(expected), b.to_numpy(actual), b.dtype_name(expected), b.dtype_name(actual),
                       spec, label=f"{label} (rank {self.rank})")
