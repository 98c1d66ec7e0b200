"""A case that comes near its deadline is said so before it flakes into a timeout.

Each case runs under a :class:`CaseClock`: it notes when each pipeline step starts and samples
the case's thread's Python stack every :data:`SAMPLE_S` seconds (``sys._current_frames``, from a
daemon thread; a sample costs microseconds, and a case shorter than one interval takes none). When
the case took :data:`NEAR_DEADLINE` of its deadline or more, :meth:`CaseClock.note` gives one line
for the report — the time against the deadline, the time per step, and where the slowest step
spent its samples: the deepest frame inside the platform library that at least half of them were
under (the slow path: ``torch/distributed/tensor/_sharding_prop.py:... in propagate_op_sharding``)
and the innermost frame seen most often. A verdict never depends on this; a
timeout stays the verdict of a case past its deadline.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

from ..model.rules import NEAR_DEADLINE_NOTE

#: Fraction of its deadline from which a case is reported as near it.
NEAR_DEADLINE = 0.5
#: Seconds between two stack samples.
SAMPLE_S = 0.25
#: How a near-deadline note starts (the closing summary lists them once).
NEAR_NOTE = NEAR_DEADLINE_NOTE


def _where(frame) -> Tuple[str, str]:
    """(file, ``file:line in function``); a call into an operator object adds the operator
    (``torch/_ops.py:875 in __call__ [aten.mm.default]``): there Python hands over to native code,
    and the operator is the slow path's name."""
    code = frame.f_code
    label = f"{_short(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
    if code.co_name == "__call__":
        target = frame.f_locals.get("self")
        if type(target).__name__ in _OPERATOR_TYPES:
            label += f" [{target}]"
    return code.co_filename, label


#: Types of operator objects whose ``__call__`` frame is labelled with the operator (torch's).
_OPERATOR_TYPES = ("OpOverload", "OpOverloadPacket", "HigherOrderOperator")


def _short(path: str) -> str:
    for marker in ("/site-packages/", "/src/"):
        if marker in path:
            return path.split(marker, 1)[1]
    here = os.path.join(os.getcwd(), "")
    return path[len(here):] if path.startswith(here) else path


class CaseClock:
    """Step times and stack samples of one case on this rank (see the module docstring).

    :param deadline_s: the case's deadline, seconds.
    :param library: path prefixes of the platform library (``ShardBackend.library_paths()``).
    """

    def __init__(self, deadline_s: float, library: Sequence[str] = (), interval_s: float = SAMPLE_S) -> None:
        self.deadline_s, self.interval_s = deadline_s, interval_s
        self.library = tuple(os.path.join(os.path.abspath(p), "") for p in library)
        self.steps: List[Tuple[str, float]] = []
        self.samples: Dict[str, List[Tuple[str, ...]]] = {}
        self._thread_id = threading.get_ident()
        self._stop = threading.Event()
        self._sampler: Optional[threading.Thread] = None
        self.t0 = time.perf_counter()

    def __enter__(self) -> "CaseClock":
        self.t0 = time.perf_counter()
        self._sampler = threading.Thread(target=self._sample, name="meshtest-case-clock", daemon=True)
        self._sampler.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=2 * self.interval_s)

    def step(self, name: str) -> None:
        """The case entered step ``name`` now."""
        self.steps.append((name, time.perf_counter()))

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            frame = sys._current_frames().get(self._thread_id)
            if frame is None:
                continue
            stack = []
            while frame is not None:
                stack.append(_where(frame))
                frame = frame.f_back
            # only the frames inside the case: below the harness's run_one (a forked rank runs
            # under the launcher's torch frames, which say nothing about the case)
            cut = next((i for i, (path, label) in enumerate(stack) if label.endswith(" in run_one")
                        and path.endswith(os.path.join("rank", "entry.py"))), len(stack))
            step = self.steps[-1][0] if self.steps else "build"
            self.samples.setdefault(step, []).append(tuple(stack[:cut]))

    def step_times(self, end: float) -> List[Tuple[str, float]]:
        """(step, seconds) in order, a step entered twice summed (``placement`` around ``backward``)."""
        out: Dict[str, float] = {}
        marks = self.steps + [("", end)]
        for (name, t), (_, nxt) in zip(marks, marks[1:]):
            out[name] = out.get(name, 0.0) + nxt - t
        return list(out.items())

    def note(self, elapsed_s: float) -> Optional[str]:
        """The report line for a case that took ``elapsed_s`` seconds, or ``None`` when it was not
        near its deadline (:data:`NEAR_DEADLINE`)."""
        if elapsed_s < NEAR_DEADLINE * self.deadline_s:
            return None
        times = self.step_times(self.t0 + elapsed_s)
        slowest = max(times, key=lambda kv: kv[1], default=("", 0.0))
        line = (f"{NEAR_NOTE} {elapsed_s:.1f} s of its {self.deadline_s:.0f} s deadline "
                f"({100 * elapsed_s / self.deadline_s:.0f}%); steps " + ", ".join(f"{s} {t:.1f} s" for s, t in times))
        profile = self.profile(slowest[0])
        return line + (f"; slowest step {slowest[0]}: {profile}" if profile else "")

    def profile(self, step: str) -> str:
        """Where ``step`` spent its samples: the deepest library frame at least half of them were
        under, and the innermost frame seen most often (each with its share of the samples);
        ``""`` without samples."""
        stacks = self.samples.get(step, [])
        if not stacks:
            return ""
        under: Counter = Counter()
        depth: Dict[str, float] = {}
        leaves: Counter = Counter()
        for stack in stacks:
            if not stack:
                continue
            leaves[stack[0][1]] += 1
            seen = set()
            for i, (path, label) in enumerate(stack):
                if path.startswith(self.library) and label not in seen:
                    seen.add(label)
                    under[label] += 1
                    depth[label] = max(depth.get(label, 0), len(stack) - 1 - i)  # from the outermost frame
        n = len(stacks)
        parts = []
        common = [label for label, k in under.items() if k >= n / 2]
        if common:
            label = max(common, key=lambda lb: depth[lb])
            parts.append(f"{100 * under[label] / n:.0f}% under {label}")
        if leaves:
            top = leaves.most_common(2)
            parts.append("innermost " + ", ".join(f"{label} ({100 * k / n:.0f}%)" for label, k in top))
        return f"{n} stack samples, " + "; ".join(parts)
