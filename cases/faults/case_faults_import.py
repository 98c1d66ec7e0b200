"""Fault: a case file that raises while being imported (a missing module). Its cases are
reported ``error`` at step ``load`` with the traceback; other files of the same run still run."""
import meshtest_no_such_module  # noqa: F401  (the fault)

from meshtest import ScenarioCase, register


def never(ctx):
    raise AssertionError("never runs")


register(ScenarioCase(name="fault_import_error", fn=never, mesh_shape=(2,), tags=("cpu_faults",)))
