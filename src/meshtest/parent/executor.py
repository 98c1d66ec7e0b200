"""Where a run's launches execute: this machine (the default) or a Ray cluster.

``local``: each launch is a child process of the runner on this machine's slot pool
(:mod:`meshtest.parent.slots`), as it always was. A Ray address places each launch on the
cluster's nodes (:mod:`meshtest.parent.ray_executor`, imported only then: Ray lives in a resolve
of its own). How a run names its executor, first found wins:

1. ``--executor`` (``python -m meshtest run``): ``local``, ``ray://HOST:PORT`` (Ray Client),
   ``ray:HOST:PORT`` or ``ray:auto`` (join the cluster as a driver, at its GCS address), or
   ``auto`` (a Ray cluster when ``$RAY_ADDRESS`` is set and Ray is installed, else ``local``);
2. ``$MESHTEST_EXECUTOR``;
3. the file ``executor`` in the slot pool's directory (one line), written by
   ``python -m meshtest executor ADDRESS``: under Pants the pool directory is the named cache
   ``meshtest_slots``, which is not part of any test process's cache key — the verdict does not
   depend on where the ranks ran, so a result computed on the cluster is reused by a local run
   and the other way round;
4. ``local``.

Stdlib only: the plugin and the default resolve import this module.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Any, Dict, Optional

#: The file in the slot pool's directory that names the pool's executor.
EXECUTOR_FILE = "executor"
#: Environment variable naming the executor (below ``--executor``, above the pool's file).
EXECUTOR_ENV = "MESHTEST_EXECUTOR"

_CONNECTED: Dict[str, Any] = {}


def ray_address(spec: str) -> Optional[str]:
    """The Ray address a spec names (``ray://HOST:PORT`` as is; ``ray:ADDRESS`` → ``ADDRESS``;
    ``auto`` → ``$RAY_ADDRESS`` when set and Ray is installed), or ``None`` for this machine.

    :raises ValueError: a spec that names neither (the message lists the forms).
    """
    spec = spec.strip()
    if spec in ("", "local"):
        return None
    if spec == "auto":
        found = os.environ.get("RAY_ADDRESS", "")
        return found if found and importlib.util.find_spec("ray") is not None else None
    if spec.startswith("ray://"):
        return spec
    if spec.startswith("ray:") and len(spec) > 4:
        return spec[4:]
    raise ValueError(f"unknown executor {spec!r}: use local, auto, ray://HOST:PORT (Ray Client), ray:HOST:PORT or "
                     "ray:auto (the cluster's GCS address, joined as a driver)")


def resolve(flag: str, slot_dir: str) -> str:
    """The executor spec of a run: ``flag`` (``--executor``), else ``$MESHTEST_EXECUTOR``, else the
    pool's :data:`EXECUTOR_FILE`, else ``local``."""
    if flag:
        return flag
    if os.environ.get(EXECUTOR_ENV):
        return os.environ[EXECUTOR_ENV]
    try:
        with open(os.path.join(slot_dir, EXECUTOR_FILE), encoding="utf-8") as f:
            return f.read().strip() or "local"
    except OSError:
        return "local"


def write_pool_executor(slot_dir: str, spec: str) -> str:
    """Make ``spec`` the executor of the pool in ``slot_dir`` (``local`` removes the file); the
    file's path.

    :raises ValueError: an unknown spec (:func:`ray_address`).
    """
    ray_address(spec)
    os.makedirs(slot_dir, exist_ok=True)
    path = os.path.join(slot_dir, EXECUTOR_FILE)
    if spec.strip() in ("", "local"):
        if os.path.exists(path):
            os.remove(path)
        return path
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(spec.strip() + "\n")
    os.replace(tmp, path)
    return path


def connect(spec: str) -> Any:
    """The executor object a spec names: ``None`` for this machine, else a connected
    :class:`meshtest.parent.ray_executor.RayExecutor` (one per process and address).

    :raises ImportError: Ray is not installed (it is in the ``ray`` resolve only).
    """
    address = ray_address(spec)
    if address is None:
        return None
    if address not in _CONNECTED:
        if importlib.util.find_spec("ray") is None:
            raise ImportError(f"executor {spec!r} needs Ray, which this environment does not have: run from the "
                              "`ray` resolve (3rdparty/python/requirements-ray.txt) or pip install ray")
        from . import ray_executor

        _CONNECTED[address] = ray_executor.RayExecutor(address)
    return _CONNECTED[address]
