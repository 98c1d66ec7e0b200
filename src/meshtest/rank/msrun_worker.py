"""The script msrun starts: in its workers, :mod:`meshtest.rank.entry` (msrun starts a script
path, not a module); in its scheduler process (``MS_ROLE=MS_SCHED``: msrun runs the same script
there), only MindSpore's scheduler (:func:`meshtest.platforms.mindspore_msrun.run_scheduler`),
which writes no rank file. Run as a script, this file's directory would come first on
``sys.path`` and its sibling modules (``train``, ``pipeline``, ...) would shadow top-level names:
it is removed before anything imports.
"""
import os
import sys

if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

if __name__ == "__main__":
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        from meshtest.proctree import die_with_parent

        die_with_parent()  # never outlives msrun
        # only msrun's scheduler of a MindSpore launch gets here (the `mindspore` resolve's target has it)
        from meshtest.platforms.mindspore_msrun import run_scheduler  # pants: no-infer-dep

        sys.exit(run_scheduler())
    from meshtest.rank.entry import main

    sys.exit(main())
