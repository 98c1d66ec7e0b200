"""Rank entry: what every rank process of a launch runs (``python -m meshtest.entry --plan P``).

Per case, in the plan's order (identical on every rank), the pipeline of seed 000 §8.7:
``build → (derive) → reference → distribute → run → gather → compare``, then ``backward``
for cases with ``requires_grad`` inputs (``load`` is reported when the file could not be
imported). A case's error is
caught and recorded with the step it happened in; the next case still runs unless the
health probe finds the process group broken. Each rank writes ``rank<k>.jsonl`` (one result
line per case, then a ``rank_done`` line once every case is recorded) and ``rank<k>.log``
(its stdout/stderr, including native output) into the plan's ``out_dir``.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import math
import os
import signal
import sys
import time
import traceback

import numpy as np
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Tuple

from .backend import ShardBackend, load_backend
from .compare import CompareError, compare_arrays
from .errors import CaseFileError, MeshtestError
from .planner import FENCE_MARGIN_S, GAVE_UP_EXIT, read_plan
from .proctree import die_with_parent
from .registry import Registry, check_against_scan, load_case_file
from .scan import ScannedCase, scan_case_file
from .scenario import ScenarioContext
from .spec import OpShardCase, ScenarioCase

log = logging.getLogger("meshtest.rank")



@dataclass
class CaseResult:
    """One rank's result for one case (one JSONL line).

    :ivar status: ``pass``, ``fail`` (comparison or assertion), ``error`` (any other
        exception), ``xfail`` / ``xpass`` (for ``known_failure`` cases), ``unsupported`` (a
        scenario needs a platform feature the backend lacks; ``error`` names it).
    :ivar step: the last step reached (the failing one for fail/error).
    :ivar duration_s: wall-clock seconds of the whole case on this rank.
    """

    case: str
    file: str
    group: str
    rank: int
    status: str
    step: str
    duration_s: float
    error: str = ""
    known_failure: str = ""
    #: scenario notes (``ctx.note``), one per line
    detail: str = ""
    #: a scenario's stated divergence from the spec (see ``ScenarioCase.divergence``)
    divergence: str = ""


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
            f"case {case.name!r}: compare_outputs {case.compare_outputs} out of range: fn returned {len(outs)} output(s)"
        )
    return [(i, outs[i]) for i in idx]


def run_case(case: OpShardCase, backend: ShardBackend, mesh: Any, on_step=None) -> Tuple[str, str, str]:
    """Run one case's pipeline on this rank.

    :param on_step: called with each step's name as the step starts (progress for the watcher).

    :returns: ``(status, step, error)`` with status ``pass``/``fail``/``error`` (before the
        ``known_failure`` mapping).
    """
    step = "build"

    def enter(name: str) -> str:  # each step is logged, so a hang's rank log shows where it is
        log.info("case %s: step %s", case.name, name)
        if on_step is not None:
            on_step(name)
        return name

    try:
        enter(step)
        full = [
            backend.make_tensor(s.build_numpy(case.input_seed(i)), s.dtype, s.requires_grad)
            for i, s in enumerate(case.inputs)
        ]
        step = enter("derive")
        derived = [d.fn(*[backend.clone(t) for t in full]) for d in case.derived_inputs]
        step = enter("reference")
        ref_kwargs = {"mesh": None} if case.needs_mesh else {}
        ref_inputs = [backend.clone(t) for t in full + derived]
        expected = _outputs(case.fn(*ref_inputs, **ref_kwargs), backend, "fn (reference)")
        step = enter("distribute")
        placements = list(case.placements) + [d.placements for d in case.derived_inputs]
        dist_inputs = [backend.distribute(t, mesh, p) for t, p in zip(full + derived, placements)]
        step = enter("run")
        run_kwargs = {"mesh": mesh} if case.needs_mesh else {}
        actual = _outputs(case.fn(*dist_inputs, **run_kwargs), backend, "fn (distributed)")
        if len(actual) != len(expected):
            raise ValueError(f"fn returned {len(actual)} output(s) distributed but {len(expected)} on the reference")
        step = enter("gather")
        gathered = [(i, backend.local_to_global(o)) for i, o in _select(actual, case)]
        step = enter("compare")
        for i, g in gathered:
            e = expected[i]
            if not backend.is_tensor(e) or not backend.is_tensor(g):
                raise TypeError(f"output[{i}] is {type(g).__name__}, not a tensor; compare_outputs can leave it out")
            _compare(backend, e, g, case.compare, f"output[{i}]")
        if case.needs_grad:
            step = enter("backward")
            _check_gradients(case, backend, expected, gathered, ref_inputs, dist_inputs)
        return "pass", step, ""
    except CompareError as e:
        return "fail", step, str(e)
    except Exception as e:  # a case's own error must not stop the others
        return "error", step, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-4)}"


def run_scenario(case: ScenarioCase, backend: ShardBackend, mesh: Any, on_step=None) -> Tuple[str, str, str, str]:
    """Run one scenario on this rank.

    Before anything runs, ``case.requires`` is checked against ``backend.features()``: a
    missing feature gives ``unsupported`` at step ``features``, naming it.

    :returns: ``(status, step, error, notes)``; status ``pass``/``fail`` (``AssertionError``)/
        ``error`` (any other exception)/``unsupported``.
    """
    try:
        missing = [f for f in case.requires if f not in backend.features()]
        if missing:
            return ("unsupported", "features",
                    f"unsupported on platform {backend.platform}: missing feature(s) {', '.join(missing)}", "")
        api = backend.scenario_api()
    except NotImplementedError as e:  # an op-only platform
        return "unsupported", "features", f"unsupported on platform {backend.platform}: {e}", ""
    except Exception as e:
        return "error", "features", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-4)}", ""
    ctx = ScenarioContext(case=case.name, mesh=mesh, backend=backend, api=api, on_step=on_step)
    log.info("case %s: step run", case.name)
    ctx.step("run")
    try:
        case.fn(ctx)
        return "pass", ctx.current_step, "", "\n".join(ctx.notes)
    except AssertionError as e:
        return "fail", ctx.current_step, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-3)}", "\n".join(ctx.notes)
    except Exception as e:  # a case's own error must not stop the others
        return "error", ctx.current_step, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-4)}", "\n".join(ctx.notes)


def _compare(backend: ShardBackend, expected: Any, actual: Any, spec, label: str) -> None:
    compare_arrays(backend.to_numpy(expected), backend.to_numpy(actual), backend.dtype_name(expected),
                   backend.dtype_name(actual), spec, label=label)


def _check_gradients(case: OpShardCase, backend: ShardBackend, expected, gathered, ref_inputs, dist_inputs) -> None:
    """Back-propagate ``L = sum_i sum(out_i * G_i)`` on both paths and compare input gradients.

    Only float outputs enter the loss (integer outputs such as indices have no gradient).
    :raises CompareError: a gradient differs; ``ValueError``: no float output to differentiate.
    """
    from .spec import numpy_dtype

    ref_outs, dist_outs, grads = [], [], []
    for i, g in gathered:
        dtype = backend.dtype_name(expected[i])
        if numpy_dtype(dtype).kind != "f":
            continue
        seed_arr = np.random.default_rng(case.grad_seed(i)).standard_normal(backend.to_numpy(expected[i]).shape)
        ref_outs.append(expected[i])
        dist_outs.append(g)
        grads.append(backend.make_tensor(seed_arr.astype(numpy_dtype(dtype)), dtype))
    if not ref_outs:
        raise ValueError("requires_grad inputs but no compared float output to back-propagate from")
    backend.backward(ref_outs, grads)
    backend.backward(dist_outs, [backend.clone(g) for g in grads])
    spec = case.grad_compare or case.compare
    for k, spec_in in enumerate(case.inputs):
        if not spec_in.requires_grad:
            continue
        ref_grad, dist_grad = backend.grad_of(ref_inputs[k]), backend.grad_of(dist_inputs[k])
        if ref_grad is None or dist_grad is None:
            raise ValueError(f"input {k}: no gradient on the {'reference' if ref_grad is None else 'distributed'} path")
        _compare(backend, ref_grad, backend.local_to_global(dist_grad), spec, f"grad of input {k}")


def final_status(case, status: str) -> str:
    """Map a raw status through ``known_failure``: fail/error → ``xfail``, pass → ``xpass``
    (``unsupported`` stays: the case did not run)."""
    if case.known_failure is None or status == "unsupported":
        return status
    return "xpass" if status == "pass" else "xfail"


def _load_cases(plan_cases: List[ScannedCase]) -> Tuple[Dict[str, OpShardCase], Dict[str, str]]:
    """Import each file of the plan once, check it against a fresh static scan.

    :returns: (cases by name, load error by file).
    """
    registry = Registry()
    cases: Dict[str, OpShardCase] = {}
    errors: Dict[str, str] = {}
    for file in dict.fromkeys(c.file for c in plan_cases):
        try:
            scan = scan_case_file(file)
            if scan.error:
                raise CaseFileError(file, "static-scan", scan.error)
            loaded = load_case_file(file, registry)
            check_against_scan(scan, loaded)
            cases.update((c.name, c) for c in loaded)
        except MeshtestError as e:
            errors[file] = str(e)
    return cases, errors


def _redirect_output(out_dir: str, rank: int) -> None:
    """Send this process's fd 1 and 2 (Python and native output) to ``rank<k>.log``."""
    fd = os.open(os.path.join(out_dir, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s rank{rank} %(message)s", force=True)


class _Stream:
    """This rank's JSONL stream: results and the progress events the runner watches."""

    def __init__(self, path: str) -> None:
        self.f = open(path, "a", encoding="utf-8")

    def emit(self, doc: dict) -> None:
        self.f.write(json.dumps(doc) + "\n")
        self.f.flush()

    def record(self, r: CaseResult) -> None:
        self.emit(asdict(r))
        log.info("case %s: %s at step %s (%.3fs)%s", r.case, r.status, r.step, r.duration_s, f"\n{r.error}" if r.error else "")


def _deadline(case, plan: dict) -> float:
    """A case's deadline in seconds: its ``timeout_s``, else the run's ``--case-timeout``
    (also for a case whose file could not be loaded: ``case`` is ``None``)."""
    return float(getattr(case, "timeout_s", None) or plan["case_timeout_s"])


def _run_one(case, sc: ScannedCase, plan: dict, rank: int, backend: ShardBackend, mesh: Any,
             out: _Stream) -> str:
    """Run one case under its deadline and record it; returns the raw status."""
    timeout_s = _deadline(case, plan)
    out.emit({"event": "start", "case": case.name, "t": time.time(), "timeout_s": timeout_s})
    log.info("case %s: start (deadline %.0fs)", case.name, timeout_s)
    # At the deadline every thread's stack goes to this rank's log, before the runner kills the launch.
    faulthandler.dump_traceback_later(timeout_s, exit=False, file=sys.stderr)
    t0 = time.perf_counter()
    on_step = lambda st: out.emit({"event": "step", "case": case.name, "step": st})  # noqa: E731
    if isinstance(case, ScenarioCase):
        status, step, error, detail = run_scenario(case, backend, mesh, on_step)
    else:
        (status, step, error), detail = run_case(case, backend, mesh, on_step), ""
    faulthandler.cancel_dump_traceback_later()
    out.record(CaseResult(case.name, sc.file, plan["group_id"], rank, final_status(case, status), step,
                          time.perf_counter() - t0, error, case.known_failure or "", detail,
                          getattr(case, "divergence", None) or ""))
    return status


def _fails_suite(backend: ShardBackend, case: Optional[OpShardCase], status: str) -> bool:
    """Collective: whether the case's outcome over all ranks fails the suite (every rank gets the
    same answer). A plain case fails when any rank did not pass (``unsupported`` is not a
    failure); a ``known_failure`` case only when every rank passed (``xpass``), as in
    :func:`meshtest.reporter.aggregate`."""
    if case is not None and case.known_failure is not None:
        return not backend.any_rank(status != "pass")
    return backend.any_rank(status not in ("pass", "unsupported"))


def run_plan(plan: dict, rank: int, out: _Stream) -> Tuple[ShardBackend, bool]:
    """Run every case of the plan in order on this rank.

    After each case every rank passes :meth:`ShardBackend.case_fence` (after an error with a
    quarter of the run's case timeout: the health probe).

    :returns: (backend, broken) — ``broken`` when the fence failed (a peer did not reach the end
        of the case, or the process group is broken), and the remaining cases were left for a
        fresh launch.
    """
    cases, load_errors = _load_cases(plan["cases"])
    backend = load_backend(plan["platform"])
    # The process-group timeout (one per launch) is half the longest deadline among the plan's
    # cases: shorter than that case's deadline, and long enough for a peer that is legitimately
    # slow inside a long case (a rank waiting for it at the fence waits this long at most).
    pg_timeout_s = max(_deadline(cases.get(sc.name), plan) for sc in plan["cases"]) / 2
    backend.init(plan["device_kind"], timeout_s=pg_timeout_s)
    expected = math.prod(plan["mesh_shape"])
    if backend.world_size() != expected:  # the launcher's nproc must be prod(mesh_shape) (seed 000 §3.4)
        raise RuntimeError(f"launch {plan['group_id']} has {backend.world_size()} ranks but its mesh "
                           f"{tuple(plan['mesh_shape'])} needs {expected}")
    mesh = backend.make_mesh(tuple(plan["mesh_shape"]), tuple(plan["mesh_dim_names"]))
    for sc in plan["cases"]:
        if sc.file in load_errors:
            out.record(CaseResult(sc.name, sc.file, plan["group_id"], rank, "error", "load", 0.0, load_errors[sc.file]))
            status, case = "error", None
        else:
            case = cases[sc.name]
            status = _run_one(case, sc, plan, rank, backend, mesh, out)
        # Every rank, after every case: a bounded barrier. A rank that skipped a collective
        # waits here instead of pairing with its peers' next case; after an error the short
        # timeout is the health probe that decides between continuing and a fresh launch.
        # A peer still inside the case is killed at its deadline (+ the stack-dump grace) by the
        # runner, so the fence outwaits that: the hang is reported as the peer's timeout, with
        # stacks. Only rank 0 applies ``fence_s`` (gloo's monitored_barrier); the others wait at
        # most the process-group timeout, which the watcher is told too.
        fence_s = float(plan["case_timeout_s"]) / 4 if status == "error" else _deadline(case, plan) + FENCE_MARGIN_S
        out.emit({"event": "fence", "case": sc.name, "timeout_s": max(fence_s, pg_timeout_s)})
        if not backend.case_fence(timeout_s=fence_s):
            log.info("case %s: not every rank reached its end within %.0fs (after %s here); giving up this launch",
                     sc.name, fence_s, status)
            return backend, True
        if plan.get("fail_fast") and _fails_suite(backend, case, status):
            log.info("fail-fast gate: stopping after %s failed", sc.name)
            out.emit({"event": "stopped", "after": sc.name})
            break
    out.emit({"event": "rank_done", "rank": rank})
    return backend, False


def main(argv: Optional[List[str]] = None) -> int:
    """Run one launch's plan on this rank; exit 0 once every result is recorded (3: gave up)."""
    ap = argparse.ArgumentParser(prog="meshtest.entry")
    ap.add_argument("--plan", required=True, help="launch plan JSON written by the runner")
    args = ap.parse_args(argv)
    die_with_parent()  # a rank never outlives its launcher
    plan = read_plan(args.plan)
    rank = int(os.environ.get("RANK", "0"))
    _redirect_output(plan["out_dir"], rank)
    # torchrun stops the other ranks with SIGTERM when one fails: leave their stacks in their logs.
    faulthandler.register(signal.SIGTERM, file=sys.stderr, all_threads=True, chain=True)
    log.info("group %s: %d case(s), mesh %s %s, device slots %s", plan["group_id"], len(plan["cases"]),
             plan["mesh_shape"], plan["mesh_dim_names"], plan.get("slots"))
    out = _Stream(os.path.join(plan["out_dir"], f"rank{rank}.jsonl"))
    backend, broken = run_plan(plan, rank, out)
    out.f.close()
    if not broken:
        backend.recover_after_failure(timeout_s=float(plan["case_timeout_s"]))  # closing barrier
        backend.shutdown()
    log.info("rank %s", "gave up: the runner relaunches the remaining cases" if broken else "done")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: gloo's threads can abort the process during static
    # destruction after all work is done (see WORKSPACE-notes.md, "teardown aborts").
    os._exit(GAVE_UP_EXIT if broken else 0)


if __name__ == "__main__":
    sys.exit(main())
