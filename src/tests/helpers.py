"""Shared helpers for meshtest's own tests."""
from __future__ import annotations

import os
import textwrap

import pytest

from meshtest.model.scan import ScannedCase

#: Variable that turns on the nightly tests (docs/ci.md, "Nightly"): `MESHTEST_NIGHTLY=1 ./pants test src:: tools::`.
NIGHTLY_ENV = "MESHTEST_NIGHTLY"

#: Marks a long test whose property CI checks elsewhere, or a long drill: it runs in the nightly
#: command, and is reported skipped, with this reason, in `./pants test src:: tools::`.
nightly = pytest.mark.skipif(os.environ.get(NIGHTLY_ENV) != "1",
                             reason=f"nightly test: {NIGHTLY_ENV}=1 ./pants test src:: tools:: runs it (docs/ci.md)")


def case_file(tmp_path, name: str, body: str) -> str:
    """Write a case file with the usual imports; return its path."""
    path = tmp_path / name
    path.write_text(
        "from meshtest import CompareSpec, DerivedSpec, InputSpec, OpShardCase, Partial, Replicate, Shard, register\n"
        + textwrap.dedent(body)
    )
    return str(path)


def scanned(name: str, mesh_shape=(2,), names=None, tags=("cpu_level0",), needs_mesh=False, solo=False,
            file="f.py", lineno=1) -> ScannedCase:
    return ScannedCase(file=file, name=name, mesh_shape=tuple(mesh_shape), mesh_dim_names=names, tags=tuple(tags),
                       needs_mesh=needs_mesh, solo_launcher=solo, lineno=lineno)


def processes_alive(marker: str, also: str = "") -> list:
    """Command lines of live processes whose arguments contain ``marker`` (and ``also``), this
    test process excluded (read from /proc: ``ps`` cuts piped output at 80 columns, which would
    hide a long artifacts path)."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in args and also in args and pid != str(os.getpid()):
            found.append(f"{pid} {args}")
    return found


def forked_holding(path: str) -> list:
    """Live processes forked by the warm launcher (showing the fork server's command line,
    ``multiprocessing.forkserver``) that hold a file open under ``path``: a warm launch's launcher
    (its ``launcher.log``) and its ranks (their logs)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == str(os.getpid()):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().replace(b"\0", b" ").decode(errors="replace")
            if "multiprocessing.forkserver" not in args:
                continue
            held = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        if any(h.startswith(path) for h in held):
            found.append(f"{pid} {args} (holding files under {path})")
    return found


def ranks_alive(marker: str) -> list:
    """Command lines of live rank processes whose arguments contain ``marker``: started as
    ``meshtest.rank.entry``, or forked by (and showing the command line of) the CPU launcher
    ``meshtest.rank.torch_launcher``, which counts too; and a warm launch's processes, which show
    the fork server's command line, holding files under ``marker`` (:func:`forked_holding`)."""
    return (processes_alive(marker, also="meshtest.rank.entry")
            + processes_alive(marker, also="meshtest.rank.torch_launcher")
            + forked_holding(os.path.abspath(marker)))


def assert_nothing_leaked(slot_dir: str, out: str, killed_holders: int = 0) -> None:
    """No rank process of the run writing to ``out`` lives and the whole 8-slot pool in
    ``slot_dir`` can be taken at once. The audit log shows a lease without release only for a
    holder that was SIGKILLed (no code runs to write it; the kernel released its locks)."""
    from meshtest.parent.slots import SlotPool, audit_stats, read_audit

    assert ranks_alive(str(out)) == []
    with SlotPool(slot_dir, 8).acquire(8, "after", timeout_s=2):
        pass
    assert audit_stats(read_audit(slot_dir)).open_leases == killed_holders


def run_with_site(tmp_path, args: list, label: str, site: str = "", extra_path: tuple = ()) -> tuple:
    """``python -m meshtest run <args> --artifacts-dir <tmp>/<label> --slot-dir <tmp>/slots -q``
    with ``meshtest``'s source root on ``PYTHONPATH`` and, when ``site`` is given, a
    ``sitecustomize.py`` of that text before it (every process of the run imports it: a seeded
    fault in the platform). Returns (the results by case, the run's stdout and stderr tails).

    :param extra_path: more ``PYTHONPATH`` entries after the source root (the repository root,
        for case files that import ``cases.*``)."""
    import json
    import subprocess
    import sys

    import meshtest

    src_root = os.path.dirname(os.path.dirname(os.path.abspath(meshtest.__file__)))
    out = tmp_path / label
    path = [src_root, *extra_path]
    if site:
        (tmp_path / f"site-{label}").mkdir(exist_ok=True)
        (tmp_path / f"site-{label}" / "sitecustomize.py").write_text(site)
        path.insert(0, str(tmp_path / f"site-{label}"))
    proc = subprocess.run([sys.executable, "-m", "meshtest", "run", *args, "--artifacts-dir", str(out),
                           "--slot-dir", str(tmp_path / "slots"), "-q"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(path)}, timeout=300,
                          cwd=extra_path[0] if extra_path else None)
    lines = (out / "results.jsonl").read_text().splitlines() if (out / "results.jsonl").exists() else []
    return {json.loads(line)["case"]: json.loads(line) for line in lines}, proc.stdout[-3000:] + proc.stderr[-3000:]
