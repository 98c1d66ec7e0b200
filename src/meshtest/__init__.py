"""meshtest: declarative test cases for distributed (sharded) operators.

A case file declares cases with :func:`register` and :class:`OpShardCase`; meshtest plans
them into launches, runs the single-device reference and the distributed op on every rank,
gathers and compares. This package (minus the adapters in :mod:`meshtest.platforms`) never
imports a platform such as torch. The layout and the data flow: docs/architecture.md.

Names are exported lazily (PEP 562) so that ``import meshtest.model.scan`` — done by the Pants
plugin inside Pants' own interpreter, which has no NumPy — loads only the stdlib scanner.
"""
import importlib

_EXPORTS = {
    "CompareError": "rank.compare",
    "CaseDeclarationError": "errors",
    "CaseFileError": "errors",
    "MeshtestError": "errors",
    "SelectionError": "errors",
    "Partial": "model.placement",
    "Replicate": "model.placement",
    "Shard": "model.placement",
    "StridedShard": "model.placement",
    "LocalInput": "model.local_input",
    "ExpectRaises": "model.compare_spec",
    "KnownFailure": "model.known",
    "register": "model.registry",
    "register_sweep": "model.registry",
    "register_generated": "model.registry",
    "GATE_TAGS": "model.rules",
    "FEATURES": "model.rules",
    "CompareSpec": "model.compare_spec",
    "DerivedSpec": "model.inputs",
    "InputSpec": "model.inputs",
    "OpShardCase": "model.spec",
    "ScenarioCase": "model.spec",
    "ScenarioContext": "rank.scenario",
    "Phase": "model.train",
    "Pipeline": "model.schedule",
    "ShardBackend": "platforms.backend",
    "Stability": "model.train",
    "Status": "status",
    "TrainCase": "model.train",
    "TrainCompare": "model.train",
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
