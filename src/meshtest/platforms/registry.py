"""Where each platform's backend lives: the registry the runner and the ranks read.

A platform is named by string (``"module:Class"``), so the core never imports it: built in
(``torch``, ``mindspore``, registered at the end of this module), added in process with
:func:`register_backend`, or installed through the :data:`ENTRY_POINT_GROUP` entry points.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Tuple

if TYPE_CHECKING:
    from .backend import ShardBackend


@dataclass(frozen=True)
class BackendInfo:
    """Where a platform's backend lives, named by string so the core never imports it.

    :param platform: platform name.
    :param target: ``"module.path:ClassName"`` of the :class:`ShardBackend` subclass.
    :param launcher: launcher kind the parent uses (see :mod:`meshtest.parent.launch`).
    :param local_target: ``"module.path:ClassName"`` of the backend that simulates every rank in
        one process (the ``local`` lane, ``--tag=cpu_local``), or ``""`` when the platform has none.
    :param device_targets: per device kind, the backend for that device when it is not ``target``.
    :param submeshes: the backend makes a case's mesh as replicas on sub-meshes of a larger
        launch (:meth:`ShardBackend.make_replicated_mesh`), so the planner may run a small
        group's op cases in a larger launch (:func:`meshtest.parent.planner.merge_small_groups`).
    :param warm: modules imported once per run by the warm launcher (:mod:`meshtest.parent.warm`)
        on the ``cpu`` device kind, which then forks each launch's launcher from itself; ``()``:
        every launch starts a new interpreter.
    """

    platform: str
    target: str
    launcher: str
    local_target: str = ""
    #: device kind → ``"module:Class"`` of the backend for that device (e.g. torch on ``npu``:
    #: the hccl backend); a kind not listed uses ``target``.
    device_targets: Tuple[Tuple[str, str], ...] = ()
    submeshes: bool = False
    warm: Tuple[str, ...] = ()


_BACKENDS: Dict[str, BackendInfo] = {}


def register_backend(info: BackendInfo) -> None:
    """Make ``info.platform`` available to the runner and the ranks."""
    _BACKENDS[info.platform] = info


#: Entry-point group through which an installed package adds a platform without editing
#: meshtest: ``<platform name> = "<module>:<ShardBackend subclass>"`` (launched with torchrun).
ENTRY_POINT_GROUP = "meshtest.backends"


def _entry_point_backends() -> Dict[str, BackendInfo]:
    from importlib.metadata import entry_points

    eps = entry_points()
    group = eps.select(group=ENTRY_POINT_GROUP) if hasattr(eps, "select") else eps.get(ENTRY_POINT_GROUP, [])
    # Not imported here: the parent process never imports a platform (its module may import
    # torch); the ranks import it in load_backend. torchrun is the only launcher kind so far.
    return {ep.name: BackendInfo(ep.name, ep.value, "torchrun") for ep in group}


def backend_info(platform: str) -> BackendInfo:
    """The registered platform ``platform``: built in (``torch``), added with
    :func:`register_backend`, or found in the :data:`ENTRY_POINT_GROUP` entry points.

    :raises KeyError: with the known platforms, when ``platform`` is none of these.
    """
    if platform in _BACKENDS:
        return _BACKENDS[platform]
    plugged = _entry_point_backends()
    if platform in plugged:
        register_backend(plugged[platform])
        return plugged[platform]
    raise KeyError(f"unknown platform {platform!r}; known: {sorted(set(_BACKENDS) | set(plugged))} "
                   f"(add one through the {ENTRY_POINT_GROUP!r} entry-point group, see docs/platforms.md)")


def load_backend(platform: str, lane: str = "ranks", device_kind: str = "cpu") -> ShardBackend:
    """Import and instantiate the backend of ``platform`` for ``lane`` and ``device_kind`` (rank
    side, and the device probe's own process; never the runner).

    :raises KeyError: the platform is unknown, or has no backend for the ``local`` lane.
    """
    info = backend_info(platform)
    target = info.local_target if lane == "local" else dict(info.device_targets).get(device_kind, info.target)
    if not target:
        raise KeyError(f"platform {platform!r} has no one-process (local) lane backend")
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)()


register_backend(BackendInfo("torch", "meshtest.platforms.torch.gloo:TorchGlooBackend", launcher="torchrun",
                             local_target="meshtest.platforms.torch.local_lane:TorchLocalBackend",
                             device_targets=(("npu", "meshtest.platforms.torch.accel:TorchHcclBackend"),
                                             ("cuda", "meshtest.platforms.torch.accel:TorchNcclBackend")),
                             submeshes=True, warm=("meshtest.rank.torch_warm",)))
register_backend(BackendInfo("mindspore", "meshtest.platforms.mindspore_msrun:MindSporeBackend", launcher="msrun"))
