"""pytest's selection vocabulary for cases: ``-k EXPRESSION`` and ``--lf`` / ``--ff``.

``-k`` takes pytest's own expression grammar (``and``, ``or``, ``not``, parentheses), compiled by
pytest (``_pytest.mark.expression.Expression``, the code behind ``pytest -k``: a well-kept
parser, not a copy of one). Each identifier matches a case, as in pytest, when it is a
case-insensitive substring of one of the case's keywords (:func:`case_keywords`): its name, its
file's name and directories, its tags (gate, ``mesh:<n>``, ``cap:<domain>``, ``layer:<n>``),
its kind and its test-plan ID. pytest is imported only when ``-k`` is given (the ``mindspore``
resolve has no pytest: ``-k`` there is an error that says so).

``--lf`` / ``--ff`` read the cases that failed when they last ran from a cache file,
:data:`LASTFAILED_FILE` under the cache directory (:func:`cache_dir`): ``$MESHTEST_CACHE_DIR``,
set by the Pants runner to the named cache ``meshtest_cache`` (shared by every sandbox, as
pytest's ``.pytest_cache`` is by every run in a checkout), else ``.meshtest_cache`` in the
working directory. Every run updates it for the cases it ran: a failing outcome
(:attr:`meshtest.status.Status.failing`) enters it, any other outcome of a case that ran
leaves it; cases not run keep their entry. The file is JSON ``{"file::case": true}``, written
under an ``fcntl`` lock by one run at a time and replaced atomically.
"""
from __future__ import annotations

import fcntl
import json
import os
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import SelectionError
from ..model.scan import ScannedCase

#: Environment variable naming the cache directory (set by the Pants runner)
CACHE_DIR_ENV = "MESHTEST_CACHE_DIR"
#: Its default, relative to the working directory
DEFAULT_CACHE_DIR = ".meshtest_cache"
#: The last-failed cases, under the cache directory
LASTFAILED_FILE = "lastfailed.json"
#: Values of ``RunOptions.last_failed``: ``"lf"`` (only the cases that failed last), ``"ff"``
#: (those first, then the rest)
LAST_FAILED_MODES = ("", "lf", "ff")


def cache_dir(explicit: str = "") -> str:
    """The cache directory: ``explicit``, else ``$MESHTEST_CACHE_DIR``, else ``.meshtest_cache``."""
    return explicit or os.environ.get(CACHE_DIR_ENV) or DEFAULT_CACHE_DIR


def case_keywords(c: ScannedCase) -> Tuple[str, ...]:
    """What ``-k`` identifiers are matched against: the case name, the file name (with and
    without ``.py``) and each of its directories, the case's filter tags
    (:meth:`ScannedCase.filter_tags`), its kind (``op``, ``scenario``, ``train``) and its test-plan
    ID. pytest matches an item's name, its parents' names and its markers the same way."""
    parts = [p for p in c.file.replace(os.sep, "/").split("/") if p]
    base = parts[-1] if parts else c.file
    words = [c.name, base, os.path.splitext(base)[0], *parts[:-1], *c.filter_tags(), c.kind]
    if c.spec_id:
        words.append(c.spec_id)
    return tuple(dict.fromkeys(words))


def keyword_matcher(expression: str) -> Callable[[ScannedCase], bool]:
    """A predicate on cases for a ``-k`` expression (pytest's grammar and matching).

    :raises SelectionError: the expression does not parse (pytest's message, with the column),
        or pytest cannot be imported.
    """
    try:
        from _pytest.mark.expression import Expression  # pytest's own -k parser (3rdparty/python/BUILD)
    except ImportError as e:  # the mindspore resolve
        raise SelectionError(f"-k {expression!r} needs pytest, which this environment lacks ({e})") from None
    try:
        compiled = Expression.compile(expression)
    except SyntaxError as e:
        raise SelectionError(f"-k {expression!r}: not a pytest expression: {e.msg} (column {e.offset})") from None

    def matches(c: ScannedCase) -> bool:
        words = [w.lower() for w in case_keywords(c)]

        def ident(name: str, **kwargs: object) -> bool:
            needle = name.lower()
            return any(needle in w for w in words)

        return compiled.evaluate(ident)

    return matches


def read_lastfailed(directory: str) -> Dict[str, bool]:
    """The last-failed case IDs (``file::case``) under ``directory``; ``{}`` when there is none.

    :raises SelectionError: the file exists but is not a JSON object (it names the file).
    """
    path = os.path.join(directory, LASTFAILED_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise SelectionError(f"{path}: cannot read the last-failed cases ({e}); delete it to start afresh") from None
    if not isinstance(doc, dict):
        raise SelectionError(f"{path}: expected a JSON object of 'file::case': true, got {type(doc).__name__}")
    return {str(k): True for k in doc}


def update_lastfailed(directory: str, ran: Iterable[str], failed: Iterable[str]) -> Dict[str, bool]:
    """Record a run: the IDs in ``failed`` enter the last-failed set, the others in ``ran`` leave
    it, any other entry stays. Returns the new set. The read-modify-write holds an exclusive
    ``fcntl`` lock on ``lastfailed.json.lock`` (concurrent Pants batches share the directory) and
    the file is replaced atomically."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, LASTFAILED_FILE)
    failed = set(failed)
    with open(path + ".lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            current = read_lastfailed(directory)
        except SelectionError:
            current = {}
        for cid in ran:
            current.pop(cid, None)
        current.update({cid: True for cid in failed})
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(dict(sorted(current.items())), f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    return current


def apply_last_failed(cases: Sequence[ScannedCase], mode: str, lastfailed: Dict[str, bool]
                      ) -> Tuple[List[ScannedCase], Optional[str]]:
    """``--lf``: only the cases among ``cases`` that failed last; ``--ff``: those first, then the
    others in their order. When none of ``cases`` failed last, every case is kept, as pytest's
    ``--lf`` does (``--last-failed-no-failures all``). Returns the cases and a line saying what was
    done (``None`` for mode ``""``)."""
    if not mode:
        return list(cases), None
    failed = [c for c in cases if c.id in lastfailed]
    if not failed:
        return list(cases), (f"--{mode}: no case of this selection failed last time "
                             f"({len(lastfailed)} recorded elsewhere); running all {len(cases)}")
    if mode == "lf":
        dropped = len(cases) - len(failed)
        return failed, f"--lf: running the {len(failed)} case(s) that failed last time, {dropped} deselected"
    rest = [c for c in cases if c.id not in lastfailed]
    return failed + rest, f"--ff: the {len(failed)} case(s) that failed last time first, then {len(rest)} more"


def narrow(cases: Sequence[ScannedCase], keyword: str = "", last_failed: str = "", directory: str = ""
           ) -> Tuple[List[ScannedCase], List[str], Tuple[str, ...]]:
    """The selection after ``-k`` (:func:`keyword_matcher`) and ``--lf``/``--ff``
    (:func:`apply_last_failed`, the cache read once from :func:`cache_dir` of ``directory``):
    the cases, the lines that say what was done, and the IDs among them that failed last time
    (what ``--ff`` puts first; ``()`` without ``--ff``).

    :raises SelectionError: a ``-k`` expression that does not parse, an unreadable cache file.
    """
    out, lines = list(cases), []
    if keyword:
        match = keyword_matcher(keyword)
        kept = [c for c in out if match(c)]
        lines.append(f"-k {keyword!r}: {len(kept)} case(s) selected, {len(out) - len(kept)} deselected")
        out = kept
    failed: Tuple[str, ...] = ()
    if last_failed:
        recorded = read_lastfailed(cache_dir(directory))
        out, line = apply_last_failed(out, last_failed, recorded)
        lines.append(line or "")
        if last_failed == "ff":
            failed = tuple(c.id for c in out if c.id in recorded)
    return out, lines, failed
