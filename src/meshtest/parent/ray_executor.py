"""Launches placed by Ray: a launch that fits a node runs on one node, a larger one on several.

The runner's plan and the rank contract stay node-blind: a launch is still "``processes`` ranks
of the rank entry, writing ``rank<k>.jsonl`` into the launch directory", and the
:class:`meshtest.parent.launch.RankWatcher` reads those files as it does for a local launch. What
Ray adds is where the ranks run:

- every node of the cluster offers its device slots as a custom resource,
  :data:`SLOT_RESOURCE` (``ray start --resources='{"meshtest_slot": 8}'``; on an accelerator node
  Ray's own ``GPU``/``NPU`` resources set ``CUDA_VISIBLE_DEVICES``/``ASCEND_RT_VISIBLE_DEVICES``
  for the process it places);
- a launch asks for a placement group: one bundle of ``processes`` slots on one node
  (``STRICT_PACK``) when it fits the largest node, else ``nnodes`` bundles of ``processes /
  nnodes`` slots on distinct nodes (``STRICT_SPREAD``, a gang: all or nothing, so two launches
  never hold half a cluster each);
- a :class:`NodeLauncher` actor per bundle starts that node's launcher — torch's forked launcher
  (:mod:`meshtest.rank.torch_launcher` with ``--nnodes/--node-rank/--master-addr/--master-port``,
  torchrun's static rendezvous) or ``torchrun`` itself — node 0 first: its actor picks the
  store's port on its own address and the others join it;
- each rank learns its node (``MESHTEST_NODE``: ``<index>:<Ray node id>``), which its records
  carry: the report's only trace of placement;
- ending a launch kills every node's process tree (the actors' own ``Popen`` groups) and removes
  the placement group, which releases the slots. A node lost mid-launch (its raylet gone, so its
  actor dies with it; the actor's launcher and ranks die with their parent,
  ``PR_SET_PDEATHSIG``) ends the launch at once: :attr:`RayLaunch.lost` names the node and its
  ranks, and the runner reports the case ``error``.

The artifacts directory must be the same path on every node (a shared filesystem, as DCP's
checkpoints need anyway): each node's actor checks it sees the launch's plan file before it
starts, and a node that does not fails the launch with that message.

Only the ``ray`` resolve installs Ray (``3rdparty/python/requirements-ray.txt``); nothing else
imports this module unless a run names a Ray executor (``--executor ray://HOST:PORT``, ``auto``).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import psutil
import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..contract import NODE_ENV
from ..model import rules
from ..proctree import die_with_parent, kill_tree

#: The custom Ray resource a node offers one unit of per device slot.
SLOT_RESOURCE = "meshtest_slot"
#: Seconds a launch waits for its placement group (the cluster's slots) before it fails.
PLACEMENT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ClusterShape:
    """The slots of a Ray cluster's nodes (those offering :data:`SLOT_RESOURCE`).

    :ivar node_slots: slots per node, largest first.
    """

    node_slots: Tuple[int, ...]

    @property
    def largest(self) -> int:
        return self.node_slots[0] if self.node_slots else 0

    @property
    def total(self) -> int:
        return sum(self.node_slots)

    def nodes_for(self, processes: int) -> int:
        """How many nodes a launch of ``processes`` ranks spans (:func:`meshtest.model.rules.nodes_needed`
        with the largest node's slots)."""
        return rules.nodes_needed(processes, self.largest)


def split_ranks(processes: int, nnodes: int) -> int:
    """Ranks per node of a launch spread over ``nnodes`` nodes.

    :raises ValueError: ``processes`` does not divide by ``nnodes`` (torchrun's static rendezvous
        gives every node the same number of ranks).
    """
    if processes % nnodes:
        raise ValueError(f"a launch of {processes} ranks cannot be spread evenly over {nnodes} nodes")
    return processes // nnodes


def connect(address: str) -> ClusterShape:
    """Join the Ray cluster at ``address`` as a driver (``ray.init``; ``auto``: the cluster this
    machine belongs to) unless this process already has, and read its shape.

    :raises ConnectionError: no cluster there (Ray's own message).
    :raises ValueError: the cluster has no node offering :data:`SLOT_RESOURCE`.
    """
    if not ray.is_initialized():
        # the node actors import meshtest from the same checkout (the shared filesystem the
        # artifacts need too), found through the workers' PYTHONPATH
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        ray.init(address=address, namespace="meshtest", log_to_driver=False, logging_level="ERROR",
                 runtime_env={"env_vars": {"PYTHONPATH": package_root}})
    shape = cluster_shape()
    if not shape.node_slots:
        raise ValueError(f"the Ray cluster at {address} has no node offering the {SLOT_RESOURCE!r} resource; start its "
                         f"nodes with ray start --resources='{{\"{SLOT_RESOURCE}\": 8}}'")
    return shape


def cluster_shape() -> ClusterShape:
    """The slots of the live nodes of the connected cluster, largest first."""
    slots = [int(n["Resources"].get(SLOT_RESOURCE, 0)) for n in ray.nodes() if n.get("Alive")]
    return ClusterShape(tuple(sorted((s for s in slots if s > 0), reverse=True)))


@ray.remote(num_cpus=0, max_restarts=0)
class NodeLauncher:
    """One node's share of a launch: its launcher process and everything below it."""

    def __init__(self) -> None:
        self.proc: Optional[subprocess.Popen] = None

    def where(self) -> Tuple[str, str]:
        """(this node's address, its Ray node id)."""
        return ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id()

    def free_port(self) -> int:
        """A TCP port free on this node's address now (node 0's store binds it)."""
        import socket

        with socket.socket() as s:
            s.bind((ray.util.get_node_ip_address(), 0))
            return s.getsockname()[1]

    def start(self, cmd: List[str], env: Dict[str, str], log_path: str, plan_path: str, cwd: str) -> int:
        """Start the node's launcher in ``cwd`` (the runner's working directory, where the plan's
        relative case-file paths start; its own session, appended to ``log_path``); its pid.

        :raises FileNotFoundError: this node does not see ``plan_path`` (no shared filesystem).
        """
        if not os.path.exists(plan_path):
            raise FileNotFoundError(f"node {ray.util.get_node_ip_address()} does not see the launch plan {plan_path}: "
                                    "the Ray executor needs the artifacts directory at the same path on every node "
                                    "(a shared filesystem)")
        log = open(log_path, "a", encoding="utf-8")
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                     start_new_session=True, preexec_fn=die_with_parent)
        log.close()
        return self.proc.pid

    def poll(self) -> Optional[int]:
        return None if self.proc is None else self.proc.poll()

    def end(self) -> Optional[int]:
        """SIGKILL the launcher's process group and every descendant; its exit code."""
        if self.proc is None:
            return None
        kill_tree(self.proc.pid)
        return self.proc.wait()


#: ``command(nnodes, node_rank, master_addr, master_port)`` → (argv, the environment it adds)
CommandFor = Callable[[int, int, str, Optional[int]], Tuple[List[str], Dict[str, str]]]


class RayLaunch:
    """A launch of ``processes`` ranks placed by Ray (see the module docstring); the handle
    :func:`meshtest.parent.launch.launch` polls and ends like a local ``Popen``.

    :ivar nodes: per node of the launch, ``(index, address, Ray node id)``.
    :ivar lost: ``""``, or what was lost: ``node 1 (10.0.0.2, ranks 4-7) left the cluster mid-launch``.
    """

    def __init__(self, processes: int, command: CommandFor, env: Dict[str, str], log_path: str, plan_path: str,
                 shape: ClusterShape, timeout_s: float = PLACEMENT_TIMEOUT_S) -> None:
        self.nnodes = shape.nodes_for(processes)
        self.per_node = split_ranks(processes, self.nnodes)
        strategy = "STRICT_PACK" if self.nnodes == 1 else "STRICT_SPREAD"
        self.group = placement_group([{SLOT_RESOURCE: self.per_node}] * self.nnodes, strategy=strategy)
        self.lost = ""
        self.actors: List[Any] = []
        self.nodes: List[Tuple[int, str, str]] = []
        self._ended: Optional[int] = None
        try:
            ray.get(self.group.ready(), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(self.group)
            raise RuntimeError(f"the Ray cluster gave no {self.nnodes} node(s) of {self.per_node} free "
                               f"{SLOT_RESOURCE} within {timeout_s:.0f} s (cluster: "
                               f"{cluster_shape().node_slots})") from None
        self.actors = [NodeLauncher.options(
            resources={SLOT_RESOURCE: self.per_node},
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=i)).remote()
            for i in range(self.nnodes)]
        where = ray.get([a.where.remote() for a in self.actors])
        self.nodes = [(i, addr, node_id) for i, (addr, node_id) in enumerate(where)]
        master_addr = where[0][0] if self.nnodes > 1 else "127.0.0.1"
        port = ray.get(self.actors[0].free_port.remote()) if self.nnodes > 1 else None
        starts = []
        for i, actor in enumerate(self.actors):
            cmd, extra = command(self.nnodes, i, master_addr, port)
            node_env = {**env, **extra, NODE_ENV: f"{i}:{where[i][1][:8]}"}
            starts.append(actor.start.remote(cmd, node_env, log_path, plan_path, os.getcwd()))
        ray.get(starts)

    def poll(self) -> Optional[int]:
        """The launch's exit code: the first non-zero one as soon as a node's launcher failed (the
        launch is over: :meth:`end` stops the other nodes), ``0`` once every node's ended cleanly,
        ``-9`` once a node is lost (:attr:`lost` says which), else ``None``."""
        if self.lost:
            return -signal.SIGKILL
        codes: List[Optional[int]] = []
        for (index, addr, node_id), actor in zip(self.nodes, self.actors):
            try:
                codes.append(ray.get(actor.poll.remote(), timeout=30))
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as e:
                first = index * self.per_node
                last = first + self.per_node - 1
                self.lost = (f"node {index} ({addr}, Ray node {node_id[:8]}, ranks {first}-{last}) left the cluster "
                             f"mid-launch: {type(e).__name__}")
                return -signal.SIGKILL
        failed = next((c for c in codes if c), None)
        if failed is not None:  # one node's launcher failed: the launch is over (as torchrun's agents tear down)
            return failed
        return None if any(c is None for c in codes) else 0

    def end(self) -> int:
        """Kill every node's launcher tree, remove the actors and the placement group (the slots
        go back to the cluster); the launch's exit code."""
        if self._ended is not None:
            return self._ended
        codes: List[Optional[int]] = []
        for actor in self.actors:
            try:
                codes.append(ray.get(actor.end.remote(), timeout=30))
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                codes.append(-signal.SIGKILL)  # its node is gone, and its processes with it
            ray.kill(actor, no_restart=True)
        remove_placement_group(self.group)
        self._ended = (-signal.SIGKILL if self.lost else next((c for c in codes if c), 0) if codes else 0)
        return self._ended


class RayExecutor:
    """Starts launches as :class:`RayLaunch` on the cluster at ``address`` (``auto``, ``HOST:PORT``
    of its GCS, or ``ray://HOST:PORT`` for Ray Client), which :func:`connect` joins."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.shape = connect(address)

    def start(self, processes: int, command: CommandFor, env: Dict[str, str], log_path: str,
              plan_path: str) -> RayLaunch:
        return RayLaunch(processes, command, env, log_path, plan_path, self.shape)

    def describe(self) -> str:
        slots = list(self.shape.node_slots)
        return f"Ray cluster {self.address}: {len(slots)} node(s) of {slots} slots"


def wait_until_free(expected: Dict[str, float], timeout_s: float = 30.0) -> Dict[str, float]:
    """Poll ``ray.available_resources()`` until it holds at least ``expected``; what it holds."""
    deadline = time.monotonic() + timeout_s
    while True:
        free = ray.available_resources()
        if all(free.get(k, 0) >= v for k, v in expected.items()) or time.monotonic() > deadline:
            return free
        time.sleep(0.2)


def node_processes(markers: Sequence[str]) -> List[psutil.Process]:
    """Processes on this machine whose command line contains one of ``markers`` (a drill's
    check that a launch left no process behind on any node of a one-machine cluster)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(p.info.get("cmdline") or ())
        if any(m in cmdline for m in markers):
            found.append(p)
    return found
