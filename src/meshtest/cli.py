"""Command line: ``python -m meshtest`` (pytest-like local runs).

Examples::

    python -m meshtest cases/torch/case_sort.py                 # every case of the file
    python -m meshtest cases/torch/case_sort.py::sort_2d_dp     # one case
    python -m meshtest cases/torch/*.py --case 'sort_*' --tag cpu_level0
    MESHTEST_CASE_FILTER='sort_*,topk_*' python -m meshtest cases/torch/case_sort.py
    python -m meshtest scan cases/torch/case_sort.py            # static scan as JSON
    python -m meshtest count cases/torch/*.py                   # cases by family, mesh, gate
    python -m meshtest list cases/torch/case_sort.py -k 'mesh4 and not backward'   # what would run
    python -m meshtest cases/torch/case_sort.py -k 'mesh4 and not backward' --lf -q  # pytest's words
    python -m meshtest progress --watch 5                        # live: cases done / total per running target
    python -m meshtest executor ray:127.0.0.1:6379 --pants       # launches of this pool (and ./pants') on Ray
    python -m meshtest ids cases/torch/tp/seed003_ids.txt cases/torch/tp/*.py   # every test-plan ID covered?
    python -m meshtest coverage cases/torch/training/seed001_domains.txt cases/torch/training/case_*.py
    python -m meshtest coverage-ops --tag cpu_level0 --baseline default   # sharding-rule coverage vs the baseline
    python -m meshtest mutate --tag cpu_level0                          # kill matrix of sharding-rule mutants
    python -m meshtest generate opinfo [--check [--full]]               # cases from torch's OpInfo database
    python -m meshtest triage dist/test [--shrink]                      # their failures, grouped by signature
    python -m meshtest triage dist/test --write-signatures              # pin the marked cases' wrong values
    python -m meshtest shrink FILE::CASE                                # a failing generated case made minimal
    python -m meshtest repro FILE::CASE                                 # a standalone torchrun script of a case
    python -m meshtest dispatch-map cases/torch/shardops [--check]      # which rule module each case reaches
    python -m meshtest figures --add DIR/figures.json NAME [--check]    # docs/strength.md's figures from artifacts
"""
from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
from typing import Optional, Sequence

from . import queries
from .contract import DEFAULT_CASE_TIMEOUT_S
from .errors import DeviceUnavailable, SelectionError
from .model.rules import DEVICE_KINDS
from .parent.planner import gate_is_fail_fast
from .parent.slots import DEFAULT_SLOTS, SlotRequestError
from .queries import split_specs

#: Environment variable with comma-separated fnmatch patterns of case names to run.
CASE_FILTER_ENV = "MESHTEST_CASE_FILTER"
#: Environment variable: when set (to anything but ""), ``run`` plans and prints its launch
#: groups and starts nothing (under Pants too: `[test].extra_env_vars` passes it, and it is then
#: part of the cache key). ``tools/check-shards`` uses it to see which targets a shard runs.
DRY_RUN_ENV = "MESHTEST_DRY_RUN"



def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m meshtest", description="Run declarative distributed-op cases.")
    sub = ap.add_subparsers(dest="command")
    r = sub.add_parser("run", help="run cases (the default command)")
    r.add_argument("specs", nargs="+", metavar="FILE[::CASE]", help="case files, optionally ::case_name")
    r.add_argument("--case", action="append", default=[], metavar="PATTERN",
                   help="fnmatch pattern on case names (repeatable)")
    r.add_argument("--tag", "--gate", action="append", default=[], dest="tags", metavar="TAG",
                   help="a Pants --tag clause, e.g. cpu_level0, mesh:2,mesh:4 (ORed) or -mesh:8; clauses are ANDed")
    r.add_argument("--artifacts-dir", default=None,
                   help="where rank logs and results go (default: dist/meshtest/run-<time>)")
    r.add_argument("--platform", default="torch")
    r.add_argument("--device-kind", default="cpu", choices=DEVICE_KINDS)
    r.add_argument("--case-timeout", type=float, default=DEFAULT_CASE_TIMEOUT_S, metavar="SECONDS",
                   help=f"deadline of one case (default {DEFAULT_CASE_TIMEOUT_S:g})")
    r.add_argument("--slots", type=int, default=int(os.environ.get("MESHTEST_SLOTS", DEFAULT_SLOTS)),
                   help="size of the device-slot pool shared by concurrent runs (default $MESHTEST_SLOTS or 8)")
    r.add_argument("--slot-dir", default="",
                   help="the pool's lock directory (default $MESHTEST_SLOT_DIR or ~/.cache/meshtest/slots)")
    r.add_argument("--executor", default="", metavar="EXECUTOR",
                   help="where launches run: local (this machine's pool), auto, ray://HOST:PORT (Ray Client) or "
                        "ray:HOST:PORT / ray:auto (a Ray cluster's GCS address); default $MESHTEST_EXECUTOR, else the "
                        "pool's executor file (python -m meshtest executor), else local")
    r.add_argument("--device-need", type=int, default=None, metavar="N",
                   help="slots to hold for the whole run (a build target's resource tag); default: enough for every "
                        "launch at once, up to --slots")
    r.add_argument("--fail-fast", action=argparse.BooleanOptionalAction, default=None,
                   help="stop at the first failing case (default: on when --tag selects a level0 gate)")
    r.add_argument("--collective-checks", choices=("auto", "on", "off"), default="auto",
                   help="the platform's collective fingerprint checks: on in every launch; auto (default): a case "
                        "that timed out or broke the process group is re-run alone with them to name the collective "
                        "each rank entered; off")
    r.add_argument("--lane", choices=("ranks", "local"), default="",
                   help="ranks: one process per rank (torchrun); local: every rank of each case simulated in one "
                        "process (torch's LocalTensorMode; op cases and layer-0 scenarios). Default: local when "
                        "--tag=cpu_local selects the run, else ranks")
    r.add_argument("--local-processes", type=int, default=0,
                   help="local lane: processes at once (default: one per CPU core, at most --slots)")
    r.add_argument("--pack", choices=("launches", "fill"), default="launches",
                   help="launches (default): hold the largest launch's slots and run launches as they fit; fill: hold "
                        "up to every slot, split long launch groups and run them at once (a device node, where a "
                        "launch's start-up dominates; tools/packing_model.py compares the two)")
    r.add_argument("--durations-from", action="append", default=[], metavar="RESULTS", dest="durations_from",
                   help="results.jsonl (or a directory of runs, e.g. dist/test) whose case durations weigh splits "
                        "and launch order; repeatable")
    _pytest_selection_args(r)
    r.add_argument("--target", default="", help="label of the requester in the slot audit log (a Pants address)")
    r.add_argument("--record-ops", action="store_true",
                   help="record each case's sharding-rule calls into ops<k>.jsonl beside the rank logs "
                        "(merged by `coverage-ops --from DIR`)")
    r.add_argument("--record-dispatch", action="store_true",
                   help="record which module served each operator a case dispatched into dispatch<k>.jsonl "
                        "beside the rank logs (the dispatch map: `dispatch-map DIR` records and writes it)")
    r.add_argument("--mutant", default="", metavar="OPERATOR:FAULT",
                   help="run with one mutant of the platform's sharding rules active (see `mutate`), e.g. "
                        "aten.mm.default:partial_as_replicate")
    s = sub.add_parser("scan", help="print the static scan of case files as JSON")
    s.add_argument("files", nargs="+")
    c = sub.add_parser("count", help="count registered cases by family (file), mesh and gate")
    c.add_argument("files", nargs="+")
    ls = sub.add_parser("list", help="the cases a run would select, one line each (pytest's --collect-only): "
                                     "ID, kind, gates, mesh, expected verdict and why")
    ls.add_argument("files", nargs="*", metavar="FILE[::CASE]",
                    help="case files, optionally ::case_name (default: every cases/<platform>/**/case_*.py)")
    ls.add_argument("--tag", "--gate", action="append", default=[], dest="tags", metavar="TAG",
                    help="a Pants --tag clause, as for run")
    ls.add_argument("--case", action="append", default=[], metavar="PATTERN", help="fnmatch pattern on case names")
    ls.add_argument("-k", dest="keyword", default="", metavar="EXPRESSION", help="pytest's -k expression, as for run")
    ls.add_argument("--platform", default="torch", help="the platform whose cases/<platform> is the default")
    ls.add_argument("--device-kind", default="cpu", choices=DEVICE_KINDS)
    ls.add_argument("--json", action="store_true", help="one JSON object per case instead of columns")
    p = sub.add_parser("progress", help="show live progress of meshtest runs sharing a slot pool "
                                        "(e.g. every target of ./pants test)")
    p.add_argument("--slot-dir", default="",
                   help="the pool directory (default $MESHTEST_SLOT_DIR or ~/.cache/meshtest/slots; "
                        "under Pants: ~/.cache/pants/named_caches/meshtest_slots)")
    p.add_argument("--watch", type=float, default=0.0, metavar="SECONDS", help="repeat every SECONDS until interrupted")
    x = sub.add_parser("executor", help="show or set where the launches of runs sharing a slot pool execute (the "
                                        "pool's executor file: not part of any Pants cache key)")
    x.add_argument("spec", nargs="?", default=None,
                   help="local, auto, ray://HOST:PORT, ray:HOST:PORT or ray:auto (omit: show the current one)")
    x.add_argument("--slot-dir", action="append", default=[], metavar="DIR",
                   help="the pool directory (repeatable; default $MESHTEST_SLOT_DIR or ~/.cache/meshtest/slots)")
    x.add_argument("--pants", action="store_true",
                   help="also the pool of ./pants test (the named cache ~/.cache/pants/named_caches/meshtest_slots)")
    i = sub.add_parser("ids", help="check that every ID of a test-plan manifest has cases (spec_id=) and no case "
                                   "names an unknown ID")
    i.add_argument("manifest", help="file with one 'ID<TAB>feature' line per test-plan item")
    i.add_argument("files", nargs="+")
    v = sub.add_parser("coverage", help="the capability domain x layer matrix of training cases (the training "
                                        "quality net): "
                                        "what runs on a platform, or what a run's results show")
    v.add_argument("manifest", help="file with one 'domain<TAB>description' line per capability domain")
    v.add_argument("files", nargs="+")
    v.add_argument("--platform", default="",
                   help="judge each cell by the platform's probed features (e.g. torch): covered only by a case "
                        "that can run there")
    v.add_argument("--results", action="append", default=[], metavar="DIR",
                   help="judge each cell by a run's results (results.jsonl files or dist/test): covered only by "
                        "a case that passed or reproduced its known failure (repeatable)")
    _strength_parsers(sub)
    return ap


def _pytest_selection_args(r: argparse.ArgumentParser) -> None:
    """pytest's words for selecting and reporting (:mod:`meshtest.parent.selection`); under Pants
    they come after ``--``: ``./pants test cases/torch/case_sort.py -- -k 'mesh4 and not backward'``."""
    g = r.add_argument_group("pytest's selection and reporting options")
    g.add_argument("-k", dest="keyword", default="", metavar="EXPRESSION",
                   help="only cases matching pytest's -k expression (and, or, not, parentheses); an identifier "
                        "matches a case when it is a case-insensitive substring of its name, its file's name or "
                        "directories, a tag (cpu_level0, mesh:4, cap:fsdp, layer:1), its kind or its test-plan ID")
    lf = g.add_mutually_exclusive_group()
    lf.add_argument("--lf", "--last-failed", dest="last_failed", action="store_const", const="lf", default="",
                    help="only the cases that failed the last time they ran (all, when none of them did)")
    lf.add_argument("--ff", "--failed-first", dest="last_failed", action="store_const", const="ff",
                    help="the cases that failed last time first, then the others")
    g.add_argument("--cache-dir", default="", metavar="DIR",
                   help="where the last-failed cases are kept (default $MESHTEST_CACHE_DIR, else .meshtest_cache; "
                        "under Pants the named cache meshtest_cache)")
    g.add_argument("-x", "--exitfirst", dest="fail_fast", action="store_const", const=True,
                   help="stop at the first failing case (as --fail-fast)")
    g.add_argument("-v", "--verbose", action="count", default=0,
                   help="each case line also names its file and its rank-log directory")
    g.add_argument("-q", "--quiet", action="count", default=0, help="a line only for failing cases")
    g.add_argument("--durations", type=int, default=-1, metavar="N",
                   help="list the N slowest cases at the end (0: all); recorded durations to plan with are "
                        "--durations-from")


def _strength_parsers(sub) -> None:
    """The suite-strength subcommands (``docs/strength.md``)."""
    o = sub.add_parser("coverage-ops", help="sharding-rule coverage: operators and input placements the cases "
                                            "exercise, against the rules the platform registers")
    _strength_args(o)
    o.add_argument("--from", dest="from_dirs", action="append", default=[], metavar="DIR",
                   help="merge ops<k>.jsonl recorded under DIR (a `run --record-ops` or dist/test) instead of running")
    o.add_argument("--baseline", default="", metavar="PATH",
                   help="compare with a stored baseline (exit 1 on any change); 'default': "
                        "cases/torch/strength/cpu_level0_ops.json")
    o.add_argument("--write-baseline", action="store_true", help="store the result as the baseline")
    o.add_argument("--all", action="store_true", help="list every uncovered operator")
    fg = sub.add_parser("figures", help="copy the figures.json of a mutate or coverage-ops run to "
                                        "docs/figures/NAME.json and rewrite the docs/strength.md blocks that quote it")
    fg.add_argument("--add", nargs=2, action="append", default=[], metavar=("ARTIFACT", "NAME"),
                    help="copy ARTIFACT (DIR/figures.json of mutate or coverage-ops) to docs/figures/NAME.json")
    fg.add_argument("--check", action="store_true",
                    help="only compare the blocks with their files; exit 1 naming each that differs")
    m = sub.add_parser("mutate", help="mutation mode: seeded faults in the sharding rules, one at a time; prints "
                                      "the kill matrix and the score per gate")
    _strength_args(m)
    m.add_argument("--op", action="append", default=[], metavar="PATTERN",
                   help="only operators matching this fnmatch pattern (repeatable), e.g. 'aten.sum*'")
    m.add_argument("--fault", action="append", default=[], help="only this fault (repeatable)")
    m.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="mutants at once (default: CPU cores)")
    m.add_argument("--case-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="deadline of one case under a mutant (default 60)")
    m.add_argument("--first-kill", action="store_true",
                   help="stop each mutant's cases at the first that kills it: the same score, one killing case named "
                        "per mutant, far less time at level 1 (mutation-testing tools' default)")
    g = sub.add_parser("generate", help="write the manifests of generated op cases (docs/strength.md, "
                                        "'Generated cases')")
    g.add_argument("source", choices=["opinfo"], help="opinfo: torch's OpInfo database")
    g.add_argument("--out", default="", metavar="DIR", help="where the files go (default cases/torch/opinfo)")
    g.add_argument("--op", action="append", default=[], metavar="KEY",
                   help="only this OpInfo (name or name.variant; repeatable)")
    g.add_argument("--nightly", action="store_true",
                   help="every sample, dtype, mesh and placement pattern, tagged cpu_nightly (not committed)")
    g.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 when the files on disk differ from what would be written: "
                        "regenerates only the families whose recorded digest changed (seconds)")
    g.add_argument("--full", action="store_true",
                   help="with --check: regenerate every family and compare (minutes; the nightly job)")
    t = sub.add_parser("triage", help="failures of generated cases grouped by signature (OpInfo, placement kind, "
                                      "step, error kind)")
    t.add_argument("results", nargs="+", metavar="RESULTS", help="results.jsonl files or directories (dist/test)")
    t.add_argument("--manifests", default="", metavar="DIR", help="the manifests (default cases/torch/opinfo)")
    t.add_argument("--shrink", action="store_true", help="shrink one example of each group to a minimal failing case")
    t.add_argument("--write-signatures", action="store_true",
                   help="record the value signature of every case a mismatch rule marks at compare, backward or "
                        "output-metadata in the manifests' signatures.json (then: python -m meshtest generate opinfo)")
    rp = sub.add_parser("repro", help="write a standalone script (torch and numpy only) that reproduces an op case "
                                      "under torchrun: inputs, mesh, placements, the op, the comparison")
    rp.add_argument("spec", metavar="FILE::CASE")
    rp.add_argument("--out", default="", metavar="PATH", help="where the script goes (default repro_<case>.py)")
    k = sub.add_parser("shrink", help="shrink failing generated cases to minimal ones that fail the same way")
    k.add_argument("specs", nargs="+", metavar="FILE::CASE")
    k.add_argument("--out", default="", metavar="PATH", help="also write the original and minimal entries as JSON")
    d = sub.add_parser("dispatch-map", help="record which rule module served each operator the cases of a "
                                            "directory dispatch, into DIR/dispatch_map.json (docs/running.md, "
                                            "'Only the affected ops')")
    d.add_argument("directory", metavar="DIR")
    d.add_argument("--library", action="append", default=[], metavar="NAMESPACE",
                   help="an operator namespace the map tracks (default: the committed map's)")
    d.add_argument("--lane", choices=("local", "ranks"), default="local")
    d.add_argument("--check", action="store_true", help="write nothing; exit 1 when the committed map differs")
    d.add_argument("--slot-dir", default="", help="the device-slot pool's lock directory (as for `run`)")


def _strength_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="*", metavar="FILE", help="case files (default: every cases/<platform>/**/case_*.py)")
    p.add_argument("--tag", "--gate", action="append", default=[], dest="tags", metavar="TAG",
                   help="a Pants --tag clause selecting the cases, e.g. cpu_level0")
    p.add_argument("--case", action="append", default=[], metavar="PATTERN",
                   help="fnmatch pattern on case names (repeatable)")
    p.add_argument("--artifacts-dir", default=None, help="where the run and the tables go "
                                                         "(default: dist/meshtest/<command>-<time>)")
    p.add_argument("--platform", default="torch")
    p.add_argument("--slot-dir", default="", help="the device-slot pool's lock directory (as for `run`)")












def _cmd_run(args: argparse.Namespace) -> int:
    from .parent.options import RunOptions
    from .parent.runner import run

    files, names = split_specs(args.specs)
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        print(f"meshtest: no such case file: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.mutant and (":" not in args.mutant or not args.mutant.rpartition(":")[0]):
        print(f"meshtest: --mutant {args.mutant!r}: expected OPERATOR:FAULT, e.g. "
              "aten.mm.default:partial_as_replicate (the faults: docs/strength.md)",
              file=sys.stderr)
        return 2
    env_patterns = [p for p in os.environ.get(CASE_FILTER_ENV, "").split(",") if p.strip()]
    patterns = tuple(args.case + [p.strip() for p in env_patterns])
    out = args.artifacts_dir or os.path.join(
        "dist", "meshtest", "run-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    )
    opts = RunOptions(artifacts_dir=out, platform=args.platform, device_kind=args.device_kind,
                      tag_filters=tuple(args.tags), name_patterns=patterns,
                      file_patterns=tuple((f, tuple(n)) for f, n in names.items()), case_timeout_s=args.case_timeout,
                      slots=args.slots, slot_dir=args.slot_dir, device_need=args.device_need, target=args.target,
                      fail_fast=gate_is_fail_fast(args.tags) if args.fail_fast is None else args.fail_fast,
                      collective_checks=args.collective_checks, lane=args.lane,
                      local_processes=args.local_processes, pack=args.pack,
                      durations_from=tuple(args.durations_from), record_ops=args.record_ops, mutant=args.mutant,
                      executor=args.executor, record_dispatch=args.record_dispatch,
                      keyword=args.keyword, last_failed=args.last_failed, cache_dir=args.cache_dir,
                      verbosity=min(1, args.verbose) if args.verbose > args.quiet else -min(1, args.quiet),
                      slowest=args.durations)
    try:
        if os.environ.get(DRY_RUN_ENV):
            return _dry_run(files, opts)
        result = run(files, opts)
    except (SelectionError, SlotRequestError, DeviceUnavailable) as e:
        print(f"meshtest: {e}", file=sys.stderr)
        return 2
    print(f"meshtest: {result.launches} launch(es); artifacts in {out}")
    if not result.outcomes:
        print(f"meshtest: no case selected (device kind {args.device_kind}, tags {args.tags or 'any'})")
        return 0
    return 0 if result.ok else 1


def _cmd_strength(args: argparse.Namespace) -> int:
    from .strength import run as strength

    files = args.files or strength.default_files(args.platform)
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        print(f"meshtest: no such case file: {', '.join(missing)}", file=sys.stderr)
        return 2
    out = args.artifacts_dir or os.path.join(
        "dist", "meshtest", f"{args.command}-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    try:
        if args.command == "mutate":
            return strength.cmd_mutate(files, args.tags, out, args.platform, args.op, args.fault, args.jobs,
                                       args.case_timeout, args.case, args.slot_dir, args.first_kill)
        return strength.cmd_coverage(files, args.tags, out, args.from_dirs, args.platform,
                                     strength.baseline_path(args.baseline), args.write_baseline, args.all, args.case,
                                     args.slot_dir)
    except (SelectionError, SlotRequestError, ValueError) as e:
        print(f"meshtest: {e}", file=sys.stderr)
        return 2


def _dry_run(files: Sequence[str], opts) -> int:
    """Print what ``run`` would launch (``$MESHTEST_DRY_RUN``): the run plan
    (:func:`meshtest.parent.plan.make_plan`, the one the run itself makes); exit 1 when a file
    fails its scan."""
    from .parent.plan import make_plan
    from .parent.runner import scan_files

    cases, errors, _ = scan_files(files)
    plan = make_plan(cases, opts)
    for line in plan.notes:
        print(f"meshtest: {line}")
    print(f"meshtest: dry run ({DRY_RUN_ENV}): {len(plan.selected)} case(s) from {len(files)} file(s) in "
          f"{len(plan.groups)} launch group(s), {plan.need} device slot(s); nothing launched")
    for f in files:
        print(f"  file {f}: {sum(c.file == f for c in plan.selected)} case(s)")
    for g in plan.groups:
        print(f"  would launch {g.group_id}: {len(g.cases)} case(s), {g.processes} process(es)")
    for o in plan.refused:
        print(f"  refused {o.file}::{o.case}: {o.failures[0].error if o.failures else o.detail}")
    for e in errors:
        print(f"  scan error {e.file}: {e.failures[0].error if e.failures else e.case}")
    return 1 if errors else 0


def _bad_input_exits_2(command) -> int:
    """``command()``'s exit code; a ``ValueError`` (bad input: it names the file, the case and the
    rule) is printed as one line and exits 2."""
    try:
        return command()
    except ValueError as e:
        print(f"meshtest: {e}", file=sys.stderr)
        return 2


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through the runner, which kills its launch


#: Pants' named cache of the slot pool (``[GLOBAL].named_caches_dir``'s default) that ``./pants
#: test`` links into every sandbox (``tools/pants-plugins/meshtest_pants/runner_command.py``)
PANTS_POOL_DIR = os.path.join(os.path.expanduser("~"), ".cache", "pants", "named_caches", "meshtest_slots")


def _cmd_executor(spec: Optional[str], slot_dirs: Sequence[str], pants: bool) -> int:
    """``python -m meshtest executor [SPEC]``: print, or set, the executor of each named pool."""
    from .parent import executor
    from .parent.slots import default_slot_dir

    dirs = list(slot_dirs) or [default_slot_dir()]
    if pants:
        dirs.append(PANTS_POOL_DIR)
    for d in dirs:
        if spec is None:
            print(f"{d}: {executor.resolve('', d)}")
        else:
            path = executor.write_pool_executor(d, spec)
            print(f"{d}: {spec.strip() or 'local'} ({path})")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in ("run", "scan", "count", "list", "ids", "coverage", "coverage-ops", "mutate", "progress",
                                "executor", "generate", "triage", "shrink", "repro", "dispatch-map", "figures", "-h",
                                "--help"):
        argv.insert(0, "run")
    args = _parser().parse_args(argv)
    try:
        if args.command == "scan":
            return queries.scan(args.files)
        if args.command == "count":
            return queries.count(args.files)
        if args.command == "list":
            return queries.list_cases(args)
        if args.command == "ids":
            return queries.ids(args.manifest, args.files)
        if args.command == "coverage":
            return queries.coverage(args.manifest, args.files, args.platform, args.results)
        if args.command == "progress":
            return queries.progress(args.slot_dir, args.watch)
        if args.command == "executor":
            return _bad_input_exits_2(lambda: _cmd_executor(args.spec, args.slot_dir, args.pants))
    except BrokenPipeError:  # `... scan | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    if args.command == "run":
        return _cmd_run(args)
    if args.command in ("coverage-ops", "mutate"):
        return _cmd_strength(args)
    if args.command == "figures":
        from .strength.figures import cmd_figures

        return cmd_figures(args.add, args.check)
    if args.command == "generate":
        from .model.generated import OPINFO_DIR
        from .strength.generate import cmd_generate  # pants: no-infer-dep (torch's; one target holds the package)

        return _bad_input_exits_2(lambda: cmd_generate(args.out or OPINFO_DIR, args.op, args.nightly, args.check,
                                                       default_dir=not args.out, full=args.full))
    if args.command == "triage":
        from .model.generated import OPINFO_DIR
        from .strength.triage import cmd_triage, write_signatures

        try:
            if args.write_signatures:
                return write_signatures(args.results, args.manifests or OPINFO_DIR, sys.stdout)
            return cmd_triage(args.results, args.manifests or OPINFO_DIR, sys.stdout, shrink=args.shrink)
        except ValueError as e:
            print(f"meshtest: {e}", file=sys.stderr)
            return 2
        except BrokenPipeError:  # `... triage | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
    if args.command == "repro":
        from .repro import cmd_repro

        return _bad_input_exits_2(lambda: cmd_repro(args.spec, args.out))
    if args.command == "dispatch-map":
        from .parent.dispatch_record import record

        return _bad_input_exits_2(lambda: record(args.directory.rstrip("/"), args.library, args.lane, args.check,
                                                 slot_dir=args.slot_dir))
    if args.command == "shrink":
        from .strength.shrink import cmd_shrink  # pants: no-infer-dep (torch's; one target holds the package)

        return _bad_input_exits_2(lambda: cmd_shrink(args.specs, args.out))
    _parser().print_help()
    return 2
