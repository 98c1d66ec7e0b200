"""The per-case pipeline on one rank, free of process concerns (the rank's execution flow).

An op case runs ``build → (derive) → reference → distribute → (redistribute) → (checkpoint) →
(parallelize) → run → (redistribute-output) → placement → output-metadata → gather → compare``,
then ``backward``
when an input ``requires_grad`` (the steps in brackets when the case declares them); a
scenario runs its function after the platform-feature check. Both return a
:class:`StepResult`; neither raises for a case's own failure, so the harness
(:mod:`meshtest.rank.entry`) runs the next case whatever happened.

How an exception becomes a status (:func:`_from_exception`):

- the case's ``expect_raises`` matches it (type, message regex, step) → ``pass``;
- ``expect_raises`` is set and something else was raised → ``fail``, naming both (with
  ``or_pass``, a completed case whose checks hold is a ``pass``, one that differs a ``fail``);
- a comparison (:class:`CompareError`) or a scenario's own ``assert`` → ``fail``;
- an ``AssertionError`` raised inside the platform library (a file under
  ``backend.library_paths()``) → ``error``: the library's internal check, not the case's;
- ``SystemExit`` (``sys.exit(0)`` inside the case) → ``error`` "exited with code 0 inside the case";
- anything else → ``error``, led by the platform's one-line reading of it when it has one
  (``backend.explain``: e.g. which collective each rank entered).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import Unsupported
from ..model.compare_spec import ExpectRaises
from ..model.inputs import numpy_dtype
from ..model.known import PASSED, rank_groups
from ..model.local_input import LocalInput, assemble, coords
from ..model.spec import OpShardCase, ScenarioCase
from ..platforms.backend import ShardBackend
from ..status import Status
from .compare import CompareError, compare_arrays, text_digest
from .metadata import check_against_reference
from .scenario import ScenarioContext

log = logging.getLogger("meshtest.rank")

#: Called with each step's name as the step starts (the harness emits it for the watcher).
OnStep = Optional[Callable[[str], None]]


@dataclass(frozen=True)
class StepResult:
    """How one case went on this rank, before the ``known_failure`` mapping.

    :ivar status: ``pass``, ``fail`` (a comparison or assertion), ``error`` (any other
        exception) or ``unsupported`` (a scenario needs a feature the platform lacks).
    :ivar step: the last step reached (the failing one for fail/error).
    :ivar error: the message, with the last frames of the traceback for errors.
    :ivar notes: a scenario's ``ctx.note`` lines (and "raised as expected" for ``expect_raises``).
    """

    status: Status
    step: str
    error: str = ""
    notes: Tuple[str, ...] = ()

    @property
    def detail(self) -> str:
        return "\n".join(self.notes)


def _trace(e: BaseException, limit: int = -4) -> str:
    """``Type: message`` and the last ``-limit`` frames of the traceback being handled."""
    return f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=limit)}"


def _raised_under(e: BaseException, roots: Sequence[str]) -> Optional[str]:
    """``file:line`` where ``e`` was raised, if that file lies under one of ``roots``."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return None
    path = os.path.abspath(tb.tb_frame.f_code.co_filename)
    if any(path.startswith(os.path.join(os.path.abspath(r), "")) for r in roots):
        return f"{path}:{tb.tb_lineno}"
    return None


def _from_exception(e: BaseException, step: str, backend: ShardBackend, expect: Optional[ExpectRaises],
                    default_step: Optional[str], notes: Tuple[str, ...] = (), own_asserts: bool = False) -> StepResult:
    """The status of a case that raised ``e`` at ``step`` (see the module docstring)."""
    if isinstance(e, Unsupported):
        return StepResult(Status.UNSUPPORTED, step, f"unsupported on platform {backend.platform}: {e}", notes)
    if expect is not None:
        wanted = dataclasses.replace(expect, step=expect.step or default_step)
        if wanted.matches(e, step):
            return StepResult(Status.PASS, step, "", notes + (f"raised as expected: {type(e).__name__}: {e}",))
        if isinstance(e, CompareError) and wanted.or_pass:
            return StepResult(Status.FAIL, step, f"expected {wanted.describe()}; neither: it completed and differs "
                                                 f"at step {step}: {e.report()}", notes)
        return StepResult(Status.FAIL, step, f"expected {wanted.describe()}; got {type(e).__name__} at step {step}: "
                                             f"{e}\n{traceback.format_exc(limit=-3)}", notes)
    if isinstance(e, SystemExit):
        return StepResult(Status.ERROR, step, f"exited with code {e.code} inside the case (SystemExit at step {step}): "
                                              f"a case must not end its rank process\n{traceback.format_exc(limit=-3)}",
                          notes)
    if isinstance(e, CompareError):
        return StepResult(Status.FAIL, step, e.report(), notes)
    if isinstance(e, AssertionError):
        where = _raised_under(e, backend.library_paths())
        if where is not None:
            return StepResult(Status.ERROR, step, f"AssertionError raised inside {backend.platform} ({where}): the "
                                                  f"platform's internal check, not the case's\n{_trace(e)}", notes)
        if own_asserts:
            return StepResult(Status.FAIL, step, _trace(e, limit=-3), notes)
    reading = backend.explain(e)
    return StepResult(Status.ERROR, step, (f"{reading}\n" if reading else "") + _trace(e), notes)


def _completed(step: str, expect: Optional[ExpectRaises], default_step: Optional[str],
               notes: Tuple[str, ...] = ()) -> StepResult:
    if expect is not None and expect.or_pass:
        return StepResult(Status.PASS, step, "", notes + (f"completed and right (expect_raises {expect.describe()})",))
    if expect is not None:
        wanted = dataclasses.replace(expect, step=expect.step or default_step)
        return StepResult(Status.FAIL, step, f"expected {wanted.describe()}; the case completed without raising "
                                             f"(last step {step})", notes)
    return StepResult(Status.PASS, step, "", notes)


class _PassedExpectedStep(Exception):
    """Raised by :meth:`_Steps.enter` when an ``expect_raises`` case leaves the step the
    exception was expected in: the verdict (fail) is known, and the later steps hold
    collectives that a rank which did raise never enters."""


class _Steps:
    """The step a case is in: logged (so a hang's rank log shows it) and reported to ``on_step``.

    :param stop_after: the step an expected exception belongs to; entering any other step
        after it (``placement``, a local check between two steps, aside) raises
        :class:`_PassedExpectedStep`.
    """

    def __init__(self, case: str, on_step: OnStep, stop_after: Optional[str] = None) -> None:
        self.case, self.on_step, self.current, self.stop_after = case, on_step, "build", stop_after
        self._reached = False

    def enter(self, name: str) -> None:
        if self.stop_after is not None:
            if self._reached and name not in (self.stop_after, "placement"):
                raise _PassedExpectedStep()
            self._reached = self._reached or name == self.stop_after
        self.current = name
        log.info("case %s: step %s", self.case, name)
        if self.on_step is not None:
            self.on_step(name)


def run_case(case: OpShardCase, backend: ShardBackend, mesh: Any, on_step: OnStep = None,
             checkpoint_dir: Optional[str] = None) -> StepResult:
    """Run one op case's pipeline on this rank (statuses: see the module docstring).

    :param checkpoint_dir: where the step ``checkpoint`` saves (the same path on every rank)."""
    expect = case.expect_raises
    stop = (expect.step or "run") if expect is not None and not expect.or_pass else None
    steps = _Steps(case.name, on_step, stop)
    try:
        _op_pipeline(case, backend, mesh, steps, checkpoint_dir)
    except _PassedExpectedStep:
        pass
    except Exception as e:  # a case's own error must not stop the others
        return _from_exception(e, steps.current, backend, case.expect_raises, "run")
    except SystemExit as e:
        return _from_exception(e, steps.current, backend, case.expect_raises, "run")
    return _completed(steps.current, case.expect_raises, "run")


def _op_pipeline(case: OpShardCase, backend: ShardBackend, mesh: Any, steps: _Steps,
                 checkpoint_dir: Optional[str]) -> None:
    steps.enter("build")
    full, local_of = _build(case, backend, mesh)
    steps.enter("derive")
    derived = [d.fn(*[backend.clone(t) for t in full]) for d in case.derived_inputs]
    steps.enter("reference")
    for i, t in enumerate(full):
        if isinstance(t, _NoGlobal):
            raise ValueError(f"inputs[{i}] (LocalInput, checked=False): the platform accepted locals that make no "
                             f"global tensor ({t.reason}), so there is no reference to compare with")
    ref_inputs = [backend.clone(t) for t in full + derived]
    ref_module = () if case.module is None else (backend.build_module(case.module, case.module_seed()),)
    expected = _outputs(case.fn(*ref_module, *ref_inputs, **_fn_kwargs(case, backend, None)), backend,
                        "fn (reference)")
    steps.enter("distribute")
    dist_inputs = [local_of(i) if local_of(i) is not None else backend.distribute(t, mesh, case.placements[i])
                   for i, t in enumerate(full)]
    dist_inputs += [backend.distribute(t, mesh, d.placements) for t, d in zip(derived, case.derived_inputs)]
    op_inputs = dist_inputs
    if case.redistribute_inputs is not None:
        steps.enter("redistribute")
        op_inputs = [t if p is None else backend.redistribute(t, mesh, p)
                     for t, p in zip(dist_inputs, tuple(case.redistribute_inputs) + (None,) * len(derived))]
    if case.checkpoint_inputs is not None:
        steps.enter("checkpoint")
        op_inputs = _checkpoint_inputs(case, backend, mesh, op_inputs, checkpoint_dir)
        # a loaded input is a leaf of its own: the gradient compared is the one it receives
        dist_inputs = [op_inputs[i] if i < len(case.inputs) and case.checkpoint_inputs[i] is not None else t
                       for i, t in enumerate(dist_inputs)]
    dist_module: Tuple[Any, ...] = ()
    if case.module is not None:
        steps.enter("parallelize")
        dist_module = (backend.parallelize_module(backend.build_module(case.module, case.module_seed()), mesh,
                                                  case.plan),)
    steps.enter("run")
    if case.local_fn is not None:
        actual = backend.local_map(case.local_fn, mesh, op_inputs, case.local_output_placements)
    else:
        actual = _outputs(case.fn(*dist_module, *op_inputs, **_fn_kwargs(case, backend, mesh)), backend,
                          "fn (distributed)")
    if len(actual) != len(expected):
        raise ValueError(f"the distributed call returned {len(actual)} output(s) but fn {len(expected)} on the "
                         "reference")
    if case.redistribute_outputs is not None:
        steps.enter("redistribute-output")
        if len(case.redistribute_outputs) != len(actual):
            raise ValueError(f"redistribute_outputs has {len(case.redistribute_outputs)} entries for "
                             f"{len(actual)} output(s)")
        actual = tuple(o if p is None else backend.redistribute(o, mesh, p)
                       for o, p in zip(actual, case.redistribute_outputs))
    if case.output_placements is not None:
        steps.enter("placement")
        _check_placements(backend, case.output_placements, actual, "output")
    selected = _select(actual, case)
    steps.enter("output-metadata")
    _check_output_metadata(backend, selected)
    _check_against_reference(backend, expected, selected, case)
    steps.enter("gather")
    gathered = [(i, backend.local_to_global(o)) for i, o in selected]
    plain = _plain_outputs(backend, selected, op_inputs)
    steps.enter("compare")
    compared = []
    for i, g in gathered:
        if not backend.is_tensor(expected[i]) or not backend.is_tensor(g):
            raise TypeError(f"output[{i}] is {type(g).__name__}, not a tensor; compare_outputs can leave it out")
        ranks, failed = _compare(backend, expected[i], g, case.compare, f"output[{i}]")
        if i in plain:
            failed = {r: CompareError(f"{e} ({PLAIN_OUTPUT_HINT.format(i=i)})", e.signature) for r, e in failed.items()}
        compared.append((ranks, failed))
    _raise_if_wrong(compared)
    if case.needs_grad:
        steps.enter("backward")
        _backward(case, backend, expected, gathered)
        if case.grad_placements is not None:
            steps.enter("placement")
            grads = [backend.grad_of(t) if s.requires_grad else None for s, t in zip(case.inputs, dist_inputs)]
            _check_placements(backend, case.grad_placements, grads, "grad of input")
            steps.enter("backward")
        _compare_gradients(case, backend, ref_inputs, dist_inputs)


def _fn_kwargs(case: OpShardCase, backend: ShardBackend, mesh: Any) -> Dict[str, Any]:
    """The keyword arguments of ``fn``: ``mesh`` (``needs_mesh``; ``None`` on the reference call)
    and ``local`` (``fn(..., *, local)``: a :class:`LocalRegion`)."""
    kwargs: Dict[str, Any] = {}
    if case.needs_mesh:
        kwargs["mesh"] = mesh
    if case.takes_local:
        kwargs["local"] = LocalRegion(backend, mesh, len(case.mesh_shape))
    return kwargs


class LocalRegion:
    """``local`` of an op case's ``fn(..., *, local)``: ``local(g, *out_placements,
    reference=None)`` returns a function of tensors that runs ``g`` on local tensors inside the
    distributed call (:meth:`ShardBackend.local_map`: each rank's local parts in, ``g``'s outputs
    wrapped with ``out_placements``, one tuple per output, one placement per mesh dimension), and
    ``reference`` (default ``g``) on the full tensors in the reference call, both with ``mesh=``
    (``None`` on the reference). One output: the tensor; several: a tuple.

    :param mesh: the DeviceMesh; ``None`` for the reference call.
    :raises ValueError: (when called) no ``out_placements``, or one whose length is not the mesh's
        dimension count."""

    def __init__(self, backend: ShardBackend, mesh: Any, mesh_ndim: int) -> None:
        self.backend, self.mesh, self.mesh_ndim = backend, mesh, mesh_ndim

    def __call__(self, g: Callable[..., Any], *out_placements: Sequence[Any],
                 reference: Optional[Callable[..., Any]] = None) -> Callable[..., Any]:
        if not out_placements or any(len(tuple(p)) != self.mesh_ndim for p in out_placements):
            raise ValueError(f"local({getattr(g, '__name__', g)!r}, ...) needs the placements of each output, one "
                             f"placement per mesh dimension ({self.mesh_ndim}); got {out_placements!r}")
        if self.mesh is None:
            return lambda *tensors: (reference or g)(*tensors, mesh=None)
        placements = tuple(tuple(p) for p in out_placements)

        def run(*tensors: Any) -> Any:
            outs = self.backend.local_map(g, self.mesh, tensors, placements)
            return outs[0] if len(outs) == 1 else outs
        return run


def _checkpoint_inputs(case: OpShardCase, backend: ShardBackend, mesh: Any, inputs: List[Any],
                       directory: Any) -> List[Any]:
    """The declared save and load of ``case.checkpoint_inputs`` (:meth:`ShardBackend.checkpoint_roundtrip`;
    ``directory`` ``None`` when the caller gave the case none, which the platform refuses)."""
    chosen = {i: p for i, p in enumerate(case.checkpoint_inputs) if p is not None}
    loaded = backend.checkpoint_roundtrip({f"input{i}": inputs[i] for i in chosen}, mesh,
                                          {f"input{i}": p for i, p in chosen.items()}, directory)
    return [loaded[f"input{i}"] if i in chosen else t for i, t in enumerate(inputs)]


def _build(case: OpShardCase, backend: ShardBackend, mesh: Any):
    """The full (reference) inputs, and for each input declared by locals, its distributed
    tensor (``local_of(i)``; ``None`` for an :class:`InputSpec`, which is distributed later)."""
    full: List[Any] = []
    dist = {}
    for i, s in enumerate(case.inputs):
        if isinstance(s, LocalInput):
            np_dtype = numpy_dtype(s.dtype)
            try:
                whole, locals_ = assemble(s, case.mesh_shape, case.placements[i], np_dtype)
            except ValueError as e:
                if s.checked:
                    raise ValueError(f"inputs[{i}] (LocalInput): {e}") from None
                full.append(_NoGlobal(str(e)))
                locals_ = {c: np.asarray(s.local(c)).astype(np_dtype) for c in coords(case.mesh_shape)}
            else:
                full.append(backend.make_tensor(whole, s.dtype, s.requires_grad))
            dist[i] = (locals_, s)
        else:
            full.append(backend.make_tensor(s.build_numpy(case.input_seed(i)), s.dtype, s.requires_grad))
    made = {i: backend.from_locals(locals_, s.dtype, mesh, case.mesh_shape, case.placements[i], s.shape,
                                   s.requires_grad, checked=s.checked)
            for i, (locals_, s) in dist.items()}
    return full, made.get


@dataclass(frozen=True)
class _NoGlobal:
    """In place of the full tensor of a ``LocalInput(checked=False)`` whose locals do not assemble."""

    reason: str


def run_scenario(case: ScenarioCase, backend: ShardBackend, mesh: Any, on_step: OnStep = None) -> StepResult:
    """Run one scenario on this rank.

    Before anything runs, ``case.requires`` is checked against ``backend.features()``: a
    missing feature gives ``unsupported`` at step ``features``, naming it. Then ``case.fn(ctx)``
    (statuses: see the module docstring; the scenario's own ``assert`` is ``fail``).
    """
    try:
        missing = [f for f in case.requires if f not in backend.features()]
        if missing:
            return StepResult(Status.UNSUPPORTED, "features",
                              f"unsupported on platform {backend.platform}: missing feature(s) {', '.join(missing)}")
        api = backend.scenario_api()
    except NotImplementedError as e:  # an op-only platform
        return StepResult(Status.UNSUPPORTED, "features", f"unsupported on platform {backend.platform}: {e}")
    except Exception as e:
        return StepResult(Status.ERROR, "features", _trace(e))
    ctx = ScenarioContext(case=case.name, mesh=mesh, backend=backend, api=api, on_step=on_step)
    log.info("case %s: step run", case.name)
    ctx.step("run")
    try:
        case.fn(ctx)
    except (Exception, SystemExit) as e:  # a case's own error must not stop the others
        return _from_exception(e, ctx.current_step, backend, case.expect_raises, None, tuple(ctx.notes),
                               own_asserts=True)
    return _completed(ctx.current_step, case.expect_raises, None, tuple(ctx.notes))


def _check_placements(backend: ShardBackend, expected: Sequence[Optional[tuple]], tensors: Sequence[Any],
                      what: str) -> None:
    """Each tensor's placements equal the declared ones (``None`` entries are not checked).

    :raises CompareError: naming the tensor, the expected and the actual placements.
    """
    if len(expected) != len(tensors):
        raise CompareError(f"{len(expected)} expected {what} placement(s) declared for {len(tensors)} {what}(s)")
    for i, (want, t) in enumerate(zip(expected, tensors)):
        if want is None:
            continue
        got = backend.placements_of(t) if t is not None else None
        if got is None:
            raise CompareError(f"{what}[{i}]: placements {tuple(want)} expected, but it is not a distributed tensor")
        if tuple(got) != tuple(want):
            raise CompareError(f"{what}[{i}]: placements {tuple(got)} != expected {tuple(want)}",
                               f"{what}[{i}] placements {tuple(got)} vs {tuple(want)}")


def _outputs(obj: Any, backend: ShardBackend, what: str) -> Tuple[Any, ...]:
    if backend.is_tensor(obj):
        return (obj,)
    if isinstance(obj, (tuple, list)) and obj:
        return tuple(obj)
    raise TypeError(f"{what} returned {type(obj).__name__}, not a tensor or a tuple of tensors")


def _select(outs: Tuple[Any, ...], case: OpShardCase) -> List[Tuple[int, Any]]:
    idx = case.compare_outputs if case.compare_outputs is not None else tuple(range(len(outs)))
    bad = [i for i in idx if i >= len(outs)]
    if bad:
        raise IndexError(
            f"case {case.name!r}: compare_outputs {case.compare_outputs} out of range: fn returned {len(outs)} "
            "output(s)"
        )
    return [(i, outs[i]) for i in idx]


def _check_output_metadata(backend: ShardBackend, outputs: Sequence[Tuple[int, Any]]) -> None:
    """Every rank's DTensor of each output has the same global shape, stride and placements
    (:meth:`ShardBackend.metadata_by_rank`), and, when the ranks' local parts differ in shape,
    each is the one the platform lays out (ranks whose locals differ off the layout would pair
    collectives of different sizes in the gather; ranks that are all off the same way gather a
    tensor the comparison then judges), before any rank enters the gather.

    :raises CompareError: they differ; the message gives each rank's value (ranks that agree grouped).
    """
    for i, out in outputs:
        by_rank = backend.metadata_by_rank(out)
        if not by_rank:
            continue
        groups: Dict[Any, List[int]] = {}
        for r, meta in sorted(by_rank.items()):
            groups.setdefault(tuple(meta[:3]), []).append(r)
        if len(groups) > 1:
            told = "; ".join(f"rank(s) {','.join(map(str, ranks))}: shape {list(m[0])} stride {list(m[1])} "
                             f"placements ({', '.join(m[2])})" for m, ranks in groups.items())
            raise CompareError(f"output[{i}]: the ranks' DTensors disagree on its global metadata, so gathering it "
                               f"would pair collectives of different sizes: {told}",
                               f"output[{i}] metadata @{text_digest(told)}")
        layouts = {r: meta[3] for r, meta in sorted(by_rank.items()) if len(meta) > 3}
        off = {r: (local, laid) for r, (local, laid) in layouts.items() if tuple(local) != tuple(laid)}
        if off and len({tuple(local) for local, _ in layouts.values()}) > 1:
            told = "; ".join(f"rank {r}: local {tuple(local)}; the layout gives {tuple(laid)}"
                             for r, (local, laid) in off.items())
            raise CompareError(f"output[{i}]: the ranks hold local parts of different shapes, not the ones the "
                               f"platform lays out for the global shape {list(next(iter(groups))[0])}, so gathering "
                               f"it would pair collectives of different sizes: {told}",
                               f"output[{i}] local-layout @{text_digest(told)}")


def _check_against_reference(backend: ShardBackend, expected: Sequence[Any], outputs: Sequence[Tuple[int, Any]],
                             case: OpShardCase) -> None:
    """Each compared output's global stride, contiguity and requires_grad against the reference
    output's (:mod:`meshtest.rank.metadata`), the fields in ``case.compare.metadata_exempt`` left out.

    :raises CompareError: a field differs (the first one, of the first output where one does)."""
    for i, out in outputs:
        want, got = backend.tensor_meta(expected[i]), backend.tensor_meta(out)
        if want is not None and got is not None:
            check_against_reference(want, got, f"output[{i}]", case.compare.metadata_exempt)


#: Added to a failed comparison of an output the distributed call returned as a plain tensor
#: while its inputs were distributed: meshtest took it for the full value.
PLAIN_OUTPUT_HINT = ("output[{i}] of the distributed call is a plain tensor, which meshtest takes for the full value; "
                     "if it is each rank's local part (torch: a ParallelStyle's default use_local_output=True, "
                     "to_local()), return the distributed tensor instead")


def _plain_outputs(backend: ShardBackend, outputs: Sequence[Tuple[int, Any]], inputs: Sequence[Any]) -> set:
    """Indices of ``outputs`` that are not distributed tensors when some input is one (none when
    the platform cannot report placements)."""
    try:
        if not any(backend.placements_of(t) is not None for t in inputs if backend.is_tensor(t)):
            return set()
        return {i for i, o in outputs if backend.is_tensor(o) and backend.placements_of(o) is None}
    except NotImplementedError:
        return set()


def _compare(backend: ShardBackend, expected: Any, actual: Any, spec, label: str
             ) -> Tuple[List[int], Dict[int, CompareError]]:
    """Compare on every rank this process answers for: one in a rank process; all of them when
    the backend simulates the ranks (the one-process lane). Returns those ranks and each one's
    error where its values differ (:func:`_raise_if_wrong` raises them, after every output)."""
    want, got = backend.to_numpy_by_rank(expected), backend.to_numpy_by_rank(actual)
    failed: Dict[int, CompareError] = {}
    for r in sorted(got):
        try:
            compare_arrays(want[r], got[r], backend.dtype_name(expected), backend.dtype_name(actual), spec,
                           label=label)
        except CompareError as e:
            failed[r] = e
    return sorted(got), failed


def _raise_if_wrong(compared: Sequence[Tuple[List[int], Dict[int, CompareError]]]) -> None:
    """Raise one :class:`CompareError` for every output (or gradient) of ``compared``
    (:func:`_compare`'s results) that differs on some rank; nothing when none does.

    In a rank process the error joins the outputs' messages and signatures. When the process
    simulates the ranks, the message is the first failing rank's (``on simulated rank(s) 0,1 of
    4 (first, 0): output[0]: ...``) and the signature each rank's, grouped: the one signature when
    every rank saw the same, else ``ranks 0 of 4: <sig> | ranks 1,3 of 4: pass | ...``
    (:mod:`meshtest.model.known`, "Value signatures").

    :raises CompareError: some output differs.
    """
    if not compared or not any(failed for _, failed in compared):
        return
    ranks = compared[0][0]
    per_rank = {r: [failed[r] for _, failed in compared if r in failed] for r in ranks}
    if len(ranks) == 1:
        raise CompareError.joined(per_rank[ranks[0]])
    wrong = [r for r in ranks if per_rank[r]]
    by_sig: Dict[str, List[int]] = {}
    for r in ranks:
        sig = "; ".join(e.signature for e in per_rank[r]) if per_rank[r] else PASSED
        by_sig.setdefault(sig, []).append(r)
    signature = next(iter(by_sig)) if len(by_sig) == 1 else rank_groups(by_sig, len(ranks))
    raise CompareError(f"on simulated rank(s) {','.join(map(str, wrong))} of {len(ranks)} (first, {wrong[0]}): "
                       f"{CompareError.joined(per_rank[wrong[0]])}", signature)


def _backward(case: OpShardCase, backend: ShardBackend, expected, gathered) -> None:
    """Back-propagate ``L = sum_i sum(out_i * G_i)`` on both paths.

    Only float outputs a gradient flows through on the reference enter the loss (integer outputs
    such as indices have none, nor does an op's non-differentiable output such as batch norm's
    saved statistics: :meth:`ShardBackend.differentiable`); a distributed output that is not
    differentiable where the reference's is stays in, and its backward fails.
    :raises ValueError: no such output to differentiate.
    """
    ref_outs, dist_outs, grads = [], [], []
    for i, g in gathered:
        dtype = backend.dtype_name(expected[i])
        if numpy_dtype(dtype).kind != "f" or not backend.differentiable(expected[i]):
            continue
        seed_arr = np.random.default_rng(case.grad_seed(i)).standard_normal(backend.to_numpy(expected[i]).shape)
        ref_outs.append(expected[i])
        dist_outs.append(g)
        grads.append(backend.make_tensor(seed_arr.astype(numpy_dtype(dtype)), dtype))
    if not ref_outs:
        raise ValueError("requires_grad inputs but no compared float output a gradient flows through to "
                         "back-propagate from")
    backend.backward(ref_outs, grads)
    backend.backward(dist_outs, [backend.clone(g) for g in grads])


def _compare_gradients(case: OpShardCase, backend: ShardBackend, ref_inputs, dist_inputs) -> None:
    """Compare every ``requires_grad`` input's gathered gradient with the reference's.

    :raises CompareError: a gradient differs; ``ValueError``: a path has no gradient.
    """
    spec = case.grad_compare or case.compare
    compared = []
    for k, spec_in in enumerate(case.inputs):
        if not spec_in.requires_grad:
            continue
        ref_grad, dist_grad = backend.grad_of(ref_inputs[k]), backend.grad_of(dist_inputs[k])
        if ref_grad is None or dist_grad is None:
            raise ValueError(f"input {k}: no gradient on the {'reference' if ref_grad is None else 'distributed'} path")
        compared.append(_compare(backend, ref_grad, backend.local_to_global(dist_grad), spec, f"grad of input {k}"))
    _raise_if_wrong(compared)
