"""Errors meshtest raises for bad case files and declarations.

Every message names the file, the case (when there is one) and the rule broken, so a
user can fix the declaration without reading framework code.
"""
from __future__ import annotations

from typing import Optional


class MeshtestError(Exception):
    """Base class of meshtest's own errors."""


class CaseDeclarationError(MeshtestError, ValueError):
    """A case declaration breaks a rule of the declarative model.

    :param file: path of the case file (as given to the loader or scanner), or ``"<unknown>"``.
    :param case: the case name, or ``None`` when the error is not tied to one case.
    :param rule: the rule's short id (see :mod:`meshtest.model.rules`), e.g. ``"placement-arity"``.
    :param detail: what is wrong and what to write instead.
    """

    def __init__(self, file: str, case: Optional[str], rule: str, detail: str):
        self.file = file
        self.case = case
        self.rule = rule
        self.detail = detail
        where = f"{file}: case {case!r}" if case else file
        super().__init__(f"{where}: rule {rule}: {detail}")


class CaseFileError(MeshtestError):
    """A case file cannot be read, parsed or imported, or disagrees with its static scan."""

    def __init__(self, file: str, rule: str, detail: str):
        self.file = file
        self.rule = rule
        self.detail = detail
        super().__init__(f"{file}: rule {rule}: {detail}")


class SelectionError(MeshtestError):
    """A command-line or environment filter selects no case, or names an unknown one."""


class DeviceUnavailable(MeshtestError):
    """This machine cannot run the selected launches on their device kind (no device, too few,
    the platform's device layer missing). The message is one line naming what is missing."""


class Unsupported(MeshtestError, NotImplementedError):
    """Raised by a platform adapter: the platform lacks what the case needs (an API, a kernel on
    this device). The case is reported ``unsupported on platform <name>: <message>`` — counted
    and listed apart, never passed, never failed."""


class CheckFailed(AssertionError):
    """meshtest's own verdict that a check of a case failed (the values, the metadata, a
    placement differ from the reference): not an exception the platform raised, so
    ``ExpectRaises`` without an exception class never takes it for the expected raise
    (:class:`meshtest.rank.compare.CompareError` is the one kind)."""
