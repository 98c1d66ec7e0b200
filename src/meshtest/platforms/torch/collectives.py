"""torch's collective checks, read: ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` wraps each process group so
that a collective first compares every rank's fingerprint, and its error names them.
"""
from __future__ import annotations

import re
from typing import Optional

#: One rank's collective in torch's collective-check message.
_FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=\d+, "
                          r"OpType=(\w+)(?:, TensorShape=(\[[^\]]*\]))?(?:, TensorDtypes=(\w+))?")


def explain_mismatch(error: BaseException) -> Optional[str]:
    """Reads torch's "Detected mismatch between collectives on ranks" (collective checks on):
    ``collective mismatch: rank 0 entered ALLREDUCE [4] Float, rank 1 entered ALLGATHER [8]
    Float``."""
    text = str(error)
    if "Detected mismatch between collectives" not in text:
        return None
    entered = _FINGERPRINT.findall(text)
    if not entered:
        return None
    parts = dict.fromkeys(f"rank {r} entered {op} {shape} {dtypes}" for r, op, shape, dtypes in entered)
    return "collective mismatch: " + ", ".join(sorted(parts))
