"""What a machine is: the snapshot model, live probes and readers of recorded evidence.

This package is the only code in dlrig that touches hardware or the OS. Everything else
(checks, estimators, renderers) works on the frozen `Machine` it produces.
"""

from dlrig.machine.model import SCHEMA_VERSION, Machine

__all__ = ["SCHEMA_VERSION", "Machine"]
