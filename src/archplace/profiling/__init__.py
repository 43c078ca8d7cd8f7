"""``archplace profile``: measure one's own chip.

On a machine with a CUDA GPU and PyTorch, :func:`profile` times a grid of GEMMs, attention
calls, softmax, layer norm, GeLU and an HBM copy (:mod:`archplace.profiling.grid`), with CUDA
events, warm-up and the median of repeats (:mod:`archplace.profiling.timer`), and writes one
table per kernel class in the format of the shipped measured tables
(:mod:`archplace.cost.measured_tables`; :mod:`archplace.profiling.tables`).  On the CPU the same
code runs on torch's CPU backend (host clock), which tests the plumbing.

torch is imported when :func:`profile` runs, never when this package is imported.
"""

from __future__ import annotations

from archplace.profiling.grid import GRIDS, KERNELS
from archplace.profiling.run import ProfiledTable, ProfileResult, profile
from archplace.profiling.tables import TableGemm, open_table, table_gemm

__all__ = ["GRIDS", "KERNELS", "ProfileResult", "ProfiledTable", "TableGemm", "open_table", "profile",
           "table_gemm"]
