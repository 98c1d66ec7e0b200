"""Reading a rank's log after its launch died: what the rank itself said about the case it was in.

A rank that dies inside a collective leaves, in its ``rank<k>.log``, the native library's own
error (C++ ``terminate called after throwing an instance of 'gloo::EnforceNotMet'`` and its
``what():`` line, an NCCL/HCCL/CUDA error), then CPython's ``Fatal Python error: Aborted`` and
faulthandler's dump of every thread, innermost frame first. Its peers see only consequences
("Connection reset by peer", a timeout), which differ from run to run. So the report leads with
the dead rank's own cause (:func:`crash_cause`), written without run-specific text (process ids,
addresses, build paths), and a timed-out rank is shown by the innermost frames of its stack dump
(:func:`innermost_frames`), where it was, not by the log's last lines, which are the outermost
frames of the launcher that forked it.

Stdlib only.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

#: Lines a native library (or the C++ runtime) writes when it aborts the process, most telling first.
_NATIVE = (
    re.compile(r"what\(\):\s*(?P<text>.+)"),                             # C++ exception text (gloo, c10d)
    re.compile(r"(?P<text>(?:NCCL|HCCL|CUDA|ACL|cuda|nccl) (?:error|Error|ERROR)\b.*)"),
    re.compile(r"(?P<text>\bE[A-Z]\d{4}\b.*)"),                           # Ascend error codes (EI0006, EJ0001)
    re.compile(r"terminate called after throwing an instance of '(?P<text>[^']+)'"),
)
_THROWN = re.compile(r"terminate called after throwing an instance of '([^']+)'")
_FATAL = re.compile(r"^Fatal Python error: (.+)$", re.M)
_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):\s*$", re.M)
_FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)\s*$')
#: Path prefixes cut from file names so the text is the same on every machine and run.
_PREFIXES = (re.compile(r"^.*?/site-packages/"), re.compile(r"^.*?/third_party/"),
             re.compile(r"^.*?/src/(?=meshtest/)"))
#: The frame of the rank harness that runs one case: a thread whose stack has it was in a case.
_CASE_FRAME = "run_one"


def short_path(path: str) -> str:
    """``/venv/lib/python3.11/site-packages/torch/_ops.py`` → ``torch/_ops.py`` (also build
    paths under ``third_party/``, a checkout's ``src/meshtest/``, and a path under the current
    directory — the ranks run in the runner's, a Pants sandbox's: ``cases/faults/case_faults.py``)."""
    here = os.path.join(os.getcwd(), "")
    if path.startswith(here):
        path = path[len(here):]
    for p in _PREFIXES:
        cut = p.sub("", path, count=1)
        if cut != path:
            return cut
    return path


def _clean(text: str) -> str:
    """Native text without run-specific parts: build paths cut, pids and hex addresses masked."""
    text = re.sub(r"(\[enforce fail at )(\S+?)(:\d+\])", lambda m: m.group(1) + short_path(m.group(2)) + m.group(3),
                  text)
    text = re.sub(r"\b0x[0-9a-f]{6,}\b", "0x…", text)
    return re.sub(r"\b(pid|PID)[ :=]+\d+", r"\1 …", text).strip()


def case_section(log: str, case: str) -> str:
    """The part of a rank log from case ``case``'s start line on (the whole log if not found)."""
    marker = f"case {case}: start"
    at = log.rfind(marker)
    return log if at < 0 else log[log.rfind("\n", 0, at) + 1:]


@dataclass(frozen=True)
class Stack:
    """One thread of a faulthandler dump: its frames, innermost first, as ``path:line in func``."""

    frames: Tuple[str, ...]

    @property
    def in_case(self) -> bool:
        return any(f.endswith(f" in {_CASE_FRAME}") for f in self.frames)


def stacks(text: str) -> List[Stack]:
    """Every thread's stack of the faulthandler dumps in ``text``, in order."""
    out = []
    for m in _THREAD.finditer(text):
        frames = []
        for line in text[m.end():].lstrip("\n").splitlines():
            f = _FRAME.match(line)
            if f is None:
                break
            frames.append(f"{short_path(f['path'])}:{f['line']} in {f['func']}")
        out.append(Stack(tuple(frames)))
    return out


def case_stack(text: str) -> Optional[Stack]:
    """The stack of the thread that ran the case: the last dump's thread with the rank harness's
    case frame in it, else the last dump's first thread; ``None`` without a dump."""
    found = stacks(text)
    if not found:
        return None
    return next((s for s in reversed(found) if s.in_case), found[-1])


def innermost_frames(text: str, n: int = 8) -> List[str]:
    """The ``n`` innermost frames of the case's thread (:func:`case_stack`), then ``... k outer
    frame(s)``; empty without a dump."""
    stack = case_stack(text)
    if stack is None:
        return []
    lines = list(stack.frames[:n])
    if len(stack.frames) > n:
        lines.append(f"... {len(stack.frames) - n} outer frame(s)")
    return lines


def native_error(text: str) -> Optional[str]:
    """The native library's own error line in ``text``, cleaned (:func:`_clean`): the C++
    exception's type and ``what()`` text, an NCCL/HCCL/CUDA error; ``None`` if there is none."""
    for pattern in _NATIVE:
        m = pattern.search(text)
        if m is None:
            continue
        found = _clean(m.group("text"))
        thrown = _THROWN.search(text)
        if thrown is not None and pattern is _NATIVE[0]:
            return f"{thrown.group(1)}: {found}"
        return found
    return None


def crash_cause(log: str, case: str, how: str) -> Tuple[Optional[str], List[str]]:
    """A dead rank's own cause for ``case``, from its log: ``(one line, evidence lines)``.

    The line is the same on every run of the same failure: with a native error line, only that
    (``died: gloo::EnforceNotMet: [enforce fail at gloo/transport/tcp/pair.cc:456] ... Received
    data size doesn't match expected size ...``) — the signal (an abort can end as SIGSEGV while
    unwinding) and the frame a thread was caught in vary from run to run, so they go to the
    evidence lines; without one, the exit, CPython's ``Fatal Python error`` and faulthandler's
    top frame (``died (killed by SIGSEGV): Fatal Python error: Segmentation fault; top frame
    cases/x.py:12 in fn``); with none of these the line is ``None`` (the log says nothing of
    its own: an ``os._exit``).

    :param how: the exit as :func:`meshtest.parent.launcher_log.describe_exit` words it.
    """
    text = case_section(log, case)
    native = native_error(text)
    fatal = _FATAL.search(text)
    stack = case_stack(text)
    top = stack.frames[0] if stack is not None and stack.frames else None
    if native:
        line: Optional[str] = f"died: {native}"
    elif fatal or top:
        line = f"died ({how})" + (f": Fatal Python error: {fatal.group(1).strip()}" if fatal else "") + (
            f"; top frame {top}" if top else "")
    else:
        line = None
    evidence = [ln.strip() for ln in text.splitlines() if any(p.search(ln) for p in _NATIVE) or _FATAL.match(ln)]
    evidence = [_clean(ln) for ln in dict.fromkeys(evidence)][:4]
    return line, evidence + innermost_frames(text, 6)
