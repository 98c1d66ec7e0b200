"""A known-failure rule's ``requires``: the case property its reason stands for, checked against
every case the rule names (``cases/torch/opinfo/known_failures.json``, :mod:`meshtest.strength.triage`).

A rule's reason says *why* its cases fail ("a Partial(max) input is carried into a complex
intermediate", "a view of an unevenly sharded dim"). ``requires`` states the same as a
predicate over a generated case's manifest entry (:mod:`meshtest.platforms.torch.opinfo`), so that
the generator can refuse a rule that names a case its reason does not describe::

    "requires": {"ops": ["fft.hfft*"], "any": ["in\\\\d:P\\\\((max|min)\\\\)"]}

Every key is optional (at least one is given); a case satisfies the predicate when every given key
holds:

- ``ops``: fnmatch patterns; the entry's OpInfo (``op``) matches one;
- ``dtypes``: the entry's dtype (``dtype``) is one of them;
- ``variants``: its overload is one of them (``""`` the functional form, ``inplace``, ``out``);
- ``backward``: ``true`` for a backward case (``grad_inputs`` not empty), ``false`` for a forward one;
- ``meshes``: its mesh shape, written ``2``, ``4``, ``2x2``, is one of them;
- ``any`` / ``all`` / ``none``: regular expressions over its *placement tokens*
  (:func:`placement_tokens`): some token fully matches one of ``any``; every token fully matches
  one of ``all``; no token fully matches any of ``none``.

Placement tokens, one set per case, for tensor input ``i`` on mesh dim ``j`` (as the module
:mod:`meshtest.strength.coverage` names placements): ``in<i>:R``, ``in<i>:S(<d>)``,
``in<i>:P(<op>)``; a tensor dim split over ``n`` ranks (the product of the sizes of the mesh dims
that shard it, as DTensor chunks it once per mesh dim) unevenly (``shape[d] % n``) adds
``in<i>:S(<d>)~``, and one that leaves a rank no element also ``in<i>:S(<d>)~empty`` (Shard
splits as ``torch.chunk`` does, ``ceil(size / n)`` per rank: size 4 over 3 ranks is 2, 2, 0); a
tensor dim sharded on both dims of a 2-D mesh adds ``in<i>:SS(<d>)``.

Stdlib only: the generator's checks run without torch.
"""
from __future__ import annotations

import fnmatch
import re
from typing import Any, Dict, List, Mapping, Optional, Set

from ..model.layout import chunk

#: The keys ``requires`` may hold (module docstring).
KEYS = ("ops", "dtypes", "variants", "backward", "meshes", "any", "all", "none")
_PATTERN_KEYS = ("any", "all", "none")
_VARIANTS = ("", "inplace", "out")


def placement_tokens(entry: Mapping[str, Any]) -> Set[str]:
    """The placement tokens (module docstring) of a manifest entry (``shapes``, ``placements``,
    ``mesh_shape``). A shard of a dim the shape does not have yields the plain token only."""
    mesh = list(entry["mesh_shape"])
    tokens: Set[str] = set()
    for i, (shape, per) in enumerate(zip(entry["shapes"], entry["placements"])):
        ranks: Dict[int, int] = {}  # tensor dim → ranks it is split over (the product of its mesh dims)
        times: Dict[int, int] = {}
        for j, p in enumerate(per):
            tokens.add(f"in{i}:{p}")
            if p.startswith("S(") and j < len(mesh):
                d = int(p[2:-1])
                ranks[d] = ranks.get(d, 1) * mesh[j]
                times[d] = times.get(d, 0) + 1
        for d, n in ranks.items():
            if d < len(shape) and shape[d] % n:
                tokens.add(f"in{i}:S({d})~")
            if d < len(shape) and not chunk(range(shape[d]), n)[-1]:  # the last rank holds none
                tokens.add(f"in{i}:S({d})~empty")
            if times[d] > 1:
                tokens.add(f"in{i}:SS({d})")
    return tokens


def validate(requires: Any, where: str) -> None:
    """Check a ``requires`` object's form.

    :param where: what to name in the error (``known_failures.json rule 3``).
    :raises ValueError: not an object; an unknown key; no key; ``ops``/``dtypes``/``meshes``/
        ``any``/``all``/``none`` not a non-empty list of strings; a pattern that is not a regular
        expression; ``variants`` naming no overload; ``backward`` not a boolean."""
    if not isinstance(requires, dict) or not requires:
        raise ValueError(f"{where}: requires must be a non-empty object of {', '.join(KEYS)}; got {requires!r}")
    unknown = sorted(set(requires) - set(KEYS))
    if unknown:
        raise ValueError(f"{where}: requires has unknown key(s) {', '.join(unknown)} (allowed: {', '.join(KEYS)})")
    for key, value in requires.items():
        if key == "backward":
            if not isinstance(value, bool):
                raise ValueError(f"{where}: requires.backward must be true or false; got {value!r}")
            continue
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{where}: requires.{key} must be a non-empty list of strings; got {value!r}")
        if key == "variants" and not set(value) <= set(_VARIANTS):
            raise ValueError(f"{where}: requires.variants may hold {_VARIANTS!r} only; got {value!r}")
        if key in _PATTERN_KEYS:
            for v in value:
                try:
                    re.compile(v)
                except re.error as e:
                    raise ValueError(f"{where}: requires.{key}: {v!r} is not a regular expression ({e})") from None


def unmet(requires: Mapping[str, Any], entry: Mapping[str, Any]) -> List[str]:
    """The keys of ``requires`` a manifest entry does not satisfy, each with what the entry has
    (``[]``: it satisfies the predicate), e.g. ``["any ['in\\\\d:P\\\\(.*'] — tokens in0:R in0:S(0)"]``."""
    out: List[str] = []
    tokens: Optional[Set[str]] = None
    for key, want in requires.items():
        if key == "ops":
            ok = any(fnmatch.fnmatchcase(entry["op"], p) for p in want)
            seen = entry["op"]
        elif key == "dtypes":
            ok, seen = entry["dtype"] in want, entry["dtype"]
        elif key == "variants":
            ok, seen = entry.get("variant", "") in want, entry.get("variant", "") or "functional"
        elif key == "backward":
            ok, seen = bool(entry.get("grad_inputs")) == want, "backward" if entry.get("grad_inputs") else "forward"
        elif key == "meshes":
            seen = "x".join(str(n) for n in entry["mesh_shape"])
            ok = seen in want
        else:
            tokens = placement_tokens(entry) if tokens is None else tokens
            hits = [t for t in tokens if any(re.fullmatch(p, t) for p in want)]
            ok = bool(hits) if key == "any" else len(hits) == len(tokens) if key == "all" else not hits
            seen = "tokens " + " ".join(sorted(tokens))
        if not ok:
            out.append(f"{key} {want!r} — {seen}")
    return out
