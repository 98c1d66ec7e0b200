"""meshtest: declarative test cases for distributed (sharded) operators.

A case file declares cases with :func:`register` and :class:`OpShardCase`; meshtest plans
them into launches, runs the single-device reference and the distributed op on every rank,
gathers and compares. This package (minus :mod:`meshtest.backends`) never imports a
platform such as torch.

Names are exported lazily (PEP 562) so that ``import meshtest.scan`` — done by the Pants
plugin inside Pants' own interpreter, which has no NumPy — loads only the stdlib scanner.
"""
import importlib

_EXPORTS = {
    "CompareError": "compare",
    "CaseDeclarationError": "errors",
    "CaseFileError": "errors",
    "MeshtestError": "errors",
    "SelectionError": "errors",
    "Partial": "placement",
    "Replicate": "placement",
    "Shard": "placement",
    "register": "registry",
    "register_sweep": "registry",
    "GATE_TAGS": "rules",
    "CompareSpec": "spec",
    "DerivedSpec": "spec",
    "InputSpec": "spec",
    "OpShardCase": "spec",
    "ScenarioCase": "spec",
    "ScenarioContext": "scenario",
    "FEATURES": "rules",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'meshtest' has no attribute {name!r}")


def __dir__():
    return __all__
