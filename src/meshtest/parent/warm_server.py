"""Imported first by the warm launcher's fork server (:mod:`meshtest.parent.warm`): the fork server
dies with the runner that started it, whatever ends the runner (the kernel's parent-death signal,
:func:`meshtest.proctree.die_with_parent`), and every launch forked from it dies with it.

(The fork server would otherwise outlive a runner killed with ``SIGKILL``: it exits when every
holder of its "alive" pipe is gone, and each process it forks holds one.)
"""
from ..proctree import die_with_parent

die_with_parent()
