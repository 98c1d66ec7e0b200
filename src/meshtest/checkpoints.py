"""Checkpoint directories of phased training cases: written aside, committed by a rename, read
only when committed.

A phase saves step ``k`` into ``<case dir>/step_<k>.partial/``: the platform writes its files
there (every rank), then, once every rank has written, one rank writes the marker
:data:`MARKER` (JSON: step, world size, mesh, what was saved) and renames the directory to
``step_<k>/``. ``rename(2)`` within one filesystem is atomic, so a launch killed during a save
(``kill -9``, a node lost) leaves a ``.partial`` directory, never a ``step_<k>/`` without its
marker, and :func:`latest` never returns it: the previous checkpoint stays the one that loads.
The same pattern as torchtitan's and Megatron's "latest" tracker file, without the race of a
tracker written before the data is complete.

Stdlib only: the platform writes the tensors (``ShardBackend.train``), this module only names,
commits and finds directories.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

#: The file whose presence makes a checkpoint directory complete; written last, before the rename.
MARKER = "meshtest-checkpoint.json"
_STEP_DIR = re.compile(r"^step_(\d{6})$")
_PARTIAL = re.compile(r"^step_(\d{6})\.partial$")


class CheckpointError(RuntimeError):
    """No loadable checkpoint: none committed, or a committed one that is unreadable. The message
    names the directory and what was found there (partial saves included)."""


@dataclass(frozen=True)
class Found:
    """A committed checkpoint.

    :ivar path: its directory. :ivar step: the number of steps trained when it was saved.
    :ivar meta: the marker's JSON. :ivar ignored: uncommitted (``.partial``) directories beside it.
    """

    path: str
    step: int
    meta: Dict[str, Any]
    ignored: Tuple[str, ...] = ()


def step_dir(root: str, step: int) -> str:
    """``<root>/step_<step, 6 digits>``: where the checkpoint of ``step`` steps is committed."""
    return os.path.join(root, f"step_{step:06d}")


def partial_dir(root: str, step: int) -> str:
    """``<root>/step_<step>.partial``: where it is written before the commit."""
    return step_dir(root, step) + ".partial"


def prepare(root: str, step: int) -> str:
    """Make an empty ``.partial`` directory for ``step`` (one rank, before the others write) and
    return it; a leftover of an interrupted save of the same step is removed first."""
    path = partial_dir(root, step)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def commit(root: str, step: int, meta: Dict[str, Any]) -> str:
    """Write the marker into the ``.partial`` directory of ``step`` and rename it to
    ``step_<step>``; call once every rank has written (after a barrier), from one rank.

    :raises FileExistsError: ``step_<step>`` is already committed (a step is saved once).
    """
    path, final = partial_dir(root, step), step_dir(root, step)
    if os.path.exists(final):
        raise FileExistsError(f"checkpoint {final} is already committed")
    tmp = os.path.join(path, MARKER + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({**meta, "step": step}, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(path, MARKER))
    os.rename(path, final)
    return final


def latest(root: str) -> Found:
    """The committed checkpoint with the most steps under ``root``.

    :raises CheckpointError: ``root`` has no committed checkpoint (the message lists the partial
        ones, i.e. interrupted saves), or the newest one's marker is unreadable.
    """
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    ignored = tuple(os.path.join(root, n) for n in names if _PARTIAL.match(n))
    committed: List[Tuple[int, str]] = [(int(m.group(1)), n) for n in names for m in [_STEP_DIR.match(n)] if m]
    if not committed:
        raise CheckpointError(f"no committed checkpoint in {root}"
                              + (f"; interrupted save(s) not loaded: {', '.join(ignored)}" if ignored else
                                 " (the phase before did not save one)"))
    step, name = max(committed)
    path = os.path.join(root, name)
    try:
        with open(os.path.join(path, MARKER), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path} has no readable {MARKER}: {e}") from None
    return Found(path, step, meta, ignored)


def wipe(root: str) -> None:
    """Remove a case's checkpoints: phase 1 starts from nothing, so a rerun after an interrupted
    run starts the case over instead of resuming a stale checkpoint."""
    shutil.rmtree(root, ignore_errors=True)


def describe(found: Optional[Found]) -> str:
    """One line for a rank's notes: which checkpoint loaded, and what was skipped."""
    if found is None:
        return "no checkpoint"
    text = f"loaded {found.path} (step {found.step}, saved by {found.meta.get('world_size', '?')} rank(s))"
    if found.ignored:
        text += f"; ignored interrupted save(s): {', '.join(os.path.basename(p) for p in found.ignored)}"
    return text
