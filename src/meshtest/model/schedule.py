"""Pipeline-parallel declarations of a training case: :class:`Pipeline` (a named schedule of
torch's ``torch.distributed.pipelining``, or a custom action table) and rule ``pipeline``.
Platform-free.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Tuple

from ..errors import CaseDeclarationError

#: Pipeline schedules by name (torch: ``torch.distributed.pipelining.Schedule<name>``), and
#: ``"actions"``: a custom action table (:attr:`Pipeline.actions`).
SCHEDULES = ("GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV",
             "actions")
#: Schedules that run one stage per rank; the others run ``stages_per_rank`` stages on each rank.
SINGLE_STAGE_SCHEDULES = ("GPipe", "1F1B")
#: Multi-stage schedules whose stages sit on the ranks as a V (rank r: stages r and 2·pp-1-r);
#: the others loop (rank r: stages r, r+pp, r+2·pp, ...).
V_SCHEDULES = ("ZBVZeroBubble", "DualPipeV")

#: One compute action of a custom table: ``<stage><F|B|I|W><micro-batch>`` (torch's action
#: notation: forward, full backward, backward of the input, backward of the weight).
_ACTION_RE = re.compile(r"^\d+[FBIW]\d+$")
#: One communication action of a custom table (torch's notation): the stage sends its forward
#: output to the next stage (``SEND_F``) or its input gradient to the previous one (``SEND_B``);
#: the receiving stage posts the matching ``RECV_F`` / ``RECV_B`` for that micro-batch.
_COMM_RE = re.compile(r"^(\d+)(SEND_F|RECV_F|SEND_B|RECV_B)(\d+)$")
#: Each send's matching receive: (its kind, the stage offset of the receiver)
_PEER = {"SEND_F": ("RECV_F", 1), "SEND_B": ("RECV_B", -1)}


@dataclass(frozen=True)
class Pipeline:
    """A pipeline-parallel plan of a :class:`TrainCase` (``TrainCase(pipeline=Pipeline(...))``):
    the model cut into stages, a schedule, its micro-batches; meshtest builds the stages and the
    schedule on each rank and runs every step through it.

    The schedule's loss is the case's ``loss`` divided by ``grad_accum`` (and by ``microbatches``
    when ``scale_grads=False``, torch then summing the micro-batches' gradients unscaled), so the
    gradients equal the single-device baseline's for micro-batches of equal size; the compared
    loss is the mean of the micro-batch losses (their sum without ``scale_grads``), on the rank
    holding the last stage.

    :param split: ``split(model, stage, num_stages) -> module``: the part of ``model`` stage
        ``stage`` (0-based) runs, its parameter names kept so that they match the whole model's
        (e.g. the model with the other blocks removed). Its forward takes the previous stage's
        output (the first stage: the micro-batch inputs).
    :param schedule: one of :data:`SCHEDULES` (torch: ``ScheduleGPipe``, ``Schedule1F1B``, ...;
        ``"actions"``: the table in ``actions``).
    :param stages_per_rank: stages each rank runs: 1 for ``GPipe``/``1F1B``; 2 or more for the
        multi-stage schedules (2 for the V-shaped ones). ``num_stages = pp * stages_per_rank``.
    :param microbatches: the schedule's micro-batches per step (``n_microbatches``); the batch's
        rows must divide by it.
    :param scale_grads: the schedule divides the gradients by ``microbatches`` (torch's default).
    :param actions: with ``schedule="actions"``: one row per pipeline rank, ``{rank: "0F0 0F1
        0B0 0B1"}``. Compute actions only (``<stage><F|B|I|W><micro-batch>``): torch adds the
        sends and receives (its compute-only lowering). Or a compute+comms table, also naming
        each ``<stage><SEND_F|RECV_F|SEND_B|RECV_B><micro-batch>`` where the rank runs it
        (``"1RECV_F0 1F0 1B0 1SEND_B0"``): torch runs the order as written (its ``compute_comms``
        format), meshtest adding only torch's ``REDUCE_GRAD`` after each stage's last backward,
        which scales the gradients as the other schedules do. Every send needs its receive on
        the rank of the peer stage and the other way round (rule ``pipeline``). A rank runs the
        stages its row names.
    :param axis: the mesh axis the stages are spread over; ``None``: the whole (1-D) mesh. On a
        mesh of more axes, ``parallelize`` (if any) is applied to each stage's module (FSDP or TP
        over the other axes).
    """

    split: Callable[..., Any]
    schedule: str = "GPipe"
    stages_per_rank: int = 1
    microbatches: int = 4
    scale_grads: bool = True
    actions: Optional[Mapping[int, str]] = None
    axis: Optional[str] = None

    def validated(self, file: str, name: str, mesh_shape: Tuple[int, ...],
                  names: Optional[Tuple[str, ...]]) -> "Pipeline":
        """Rule ``pipeline``; returns a normalised copy (``actions`` as a tuple of (rank, row) pairs).

        :raises CaseDeclarationError: naming the field and what it must be.
        """
        def bad(text: str) -> CaseDeclarationError:
            return CaseDeclarationError(file, name, "pipeline", text)

        if not callable(self.split):
            raise bad(f"Pipeline.split must be callable as split(model, stage, num_stages); got {self.split!r}")
        if self.schedule not in SCHEDULES:
            raise bad(f"Pipeline.schedule {self.schedule!r} unknown; use one of {', '.join(SCHEDULES)}")
        for field_name in ("stages_per_rank", "microbatches"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise bad(f"Pipeline.{field_name} must be an integer >= 1; got {value!r}")
        if not isinstance(self.scale_grads, bool):
            raise bad(f"Pipeline.scale_grads must be True or False; got {self.scale_grads!r}")
        if self.axis is None and len(mesh_shape) != 1:
            raise bad(f"Pipeline.axis must name the pipeline axis of the {len(mesh_shape)}-D mesh {names}")
        if self.axis is not None and self.axis not in (names or ()):
            raise bad(f"Pipeline.axis {self.axis!r} is not one of the mesh axis names {names}")
        pp = mesh_shape[0] if self.axis is None else mesh_shape[(names or ()).index(self.axis)]
        if self.schedule in SINGLE_STAGE_SCHEDULES and self.stages_per_rank != 1:
            raise bad(f"schedule {self.schedule} runs one stage per rank; stages_per_rank is {self.stages_per_rank}")
        if self.schedule in V_SCHEDULES and self.stages_per_rank != 2:
            raise bad(f"schedule {self.schedule} places two stages per rank as a V; stages_per_rank must be 2")
        actions = self._validated_actions(bad, pp)
        return dataclasses.replace(self, actions=actions)

    def _validated_actions(self, bad: Callable[[str], CaseDeclarationError], pp: int) -> Any:
        if (self.schedule == "actions") != (self.actions is not None):
            raise bad('Pipeline.actions and schedule="actions" go together: the table is the schedule')
        if self.actions is None:
            return None
        rows = dict(self.actions) if isinstance(self.actions, Mapping) else None
        if rows is None or sorted(rows) != list(range(pp)):
            raise bad(f"Pipeline.actions must map every pipeline rank 0..{pp - 1} to its row; got {self.actions!r}")
        holder, comms = {}, {}
        for rank, row in sorted(rows.items()):
            tokens = row.split() if isinstance(row, str) else None
            wrong = [t for t in tokens or () if not (_ACTION_RE.match(t) or _COMM_RE.match(t))]
            if not tokens or wrong:
                raise bad(f"Pipeline.actions[{rank}] must be compute actions '<stage><F|B|I|W><micro>' (and, for a "
                          "compute+comms table, '<stage><SEND_F|RECV_F|SEND_B|RECV_B><micro>') separated by spaces, "
                          f"e.g. '0F0 0F1 0B0 0B1'; got {row!r}")
            stages = {int(re.match(r"\d+", t).group()) for t in tokens}
            if any(s >= pp * self.stages_per_rank for s in stages):
                raise bad(f"Pipeline.actions[{rank}] names stage(s) {sorted(stages)}; there are "
                          f"{pp * self.stages_per_rank} (pp {pp} x stages_per_rank {self.stages_per_rank})")
            holder.update({s: rank for s in stages})
            comms.update({(int(m.group(1)), m.group(2), int(m.group(3))): rank
                          for m in (_COMM_RE.match(t) for t in tokens) if m})
            self._check_data_order(bad, rank, tokens)
        for (stage, kind, micro), rank in sorted(comms.items()):
            if kind not in _PEER:
                continue
            want, step = _PEER[kind]
            peer = (stage + step, want, micro)
            if peer not in comms or comms[peer] != holder.get(stage + step):
                raise bad(f"Pipeline.actions[{rank}] sends {stage}{kind}{micro} but the rank of stage {stage + step} "
                          f"posts no {stage + step}{want}{micro}: a send without its receive would hang")
        for (stage, kind, micro), rank in sorted(comms.items()):
            sender = {"RECV_F": (stage - 1, "SEND_F"), "RECV_B": (stage + 1, "SEND_B")}.get(kind)
            if sender is not None and (sender[0], sender[1], micro) not in comms:
                raise bad(f"Pipeline.actions[{rank}] receives {stage}{kind}{micro} but no rank runs "
                          f"{sender[0]}{sender[1]}{micro}: a receive without its send would hang")
        return tuple(sorted(rows.items()))

    @staticmethod
    def _check_data_order(bad: Callable[[str], CaseDeclarationError], rank: int, tokens: list) -> None:
        """In one row, a send comes after the compute that makes what it sends (``SEND_F`` after
        its ``F``, ``SEND_B`` after its ``B`` or ``I``) and a receive before the compute that
        reads it (``RECV_F`` before its ``F``, ``RECV_B`` before its ``B`` or ``I``): torch's
        stage reads the buffers at those actions."""
        at = {t: i for i, t in enumerate(tokens)}
        for i, t in enumerate(tokens):
            m = _COMM_RE.match(t)
            if not m:
                continue
            stage, kind, micro = m.group(1), m.group(2), m.group(3)
            computes = ("F",) if kind.endswith("_F") else ("B", "I")
            where = [at[f"{stage}{c}{micro}"] for c in computes if f"{stage}{c}{micro}" in at]
            if kind.startswith("SEND") and not any(j < i for j in where):
                raise bad(f"Pipeline.actions[{rank}] runs {t} before {stage}{'|'.join(computes)}{micro}, which makes "
                          "what it sends")
            if kind.startswith("RECV") and not any(j > i for j in where):
                raise bad(f"Pipeline.actions[{rank}] runs {t} with no {stage}{'|'.join(computes)}{micro} after it to "
                          "read what it receives")

    @property
    def with_comms(self) -> bool:
        """Whether ``actions`` is a compute+comms table (names a send or a receive)."""
        return self.actions is not None and any(_COMM_RE.match(t) for _, row in self.actions for t in row.split())

    def stages_of(self, pp_rank: int, pp: int) -> Tuple[int, ...]:
        """The stage indices pipeline rank ``pp_rank`` runs (loop, V, or its row of ``actions``)."""
        if self.actions is not None:
            row = dict(self.actions)[pp_rank]
            return tuple(sorted({int(re.match(r"\d+", t).group()) for t in row.split()}))
        if self.schedule in V_SCHEDULES:
            return (pp_rank, 2 * pp - 1 - pp_rank)
        return tuple(pp_rank + k * pp for k in range(self.stages_per_rank))
