"""What the warm launcher imports once per run for the torch platform (:mod:`meshtest.parent.warm`).

Imported in the launcher server before it forks a launch: torch, DTensor, the elastic worker
machinery the CPU launcher forks its ranks with, the torch backends and the rank entry — what a
new interpreter spent ~3.5 s of CPU importing at every launch. ``OMP_NUM_THREADS`` defaults to 1
before torch reads it, as each launch's environment sets it (torchrun's rule for several ranks
per node). Importing starts no thread: the launches forked from this process fork their ranks
while single-threaded (:mod:`meshtest.rank.torch_launcher`).
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch.distributed.tensor  # noqa: E402,F401
from torch.distributed.elastic.multiprocessing import start_processes  # noqa: E402,F401

from ..platforms.torch import gloo, local_lane  # noqa: E402,F401
from . import entry, torch_launcher  # noqa: E402,F401
