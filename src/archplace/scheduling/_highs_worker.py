"""Worker process of the ``highs`` backend:
``python -m archplace.scheduling._highs_worker JOB RESULT``.

Reads a pickled ``(ScheduleProblem, SolveOptions)`` from the file ``JOB``, solves it
with PHAZE's MILP on HiGHS (:func:`archplace.scheduling.milp.phaze_solve`) and writes the
pickled :class:`~archplace.scheduling.base.ScheduleResult` to the file ``RESULT``.  The
result goes through a file, never stdout: HiGHS (highspy 1.16 and later) prints a
banner and its log to file descriptor 1 from C code, which no Python-level redirect
catches.  Whatever the worker prints is only kept for the error message.  It runs in
its own process because the highspy and OR-Tools wheels ship incompatible copies of
``libhighs.so.1`` (see :mod:`archplace.scheduling.milp`).  Only ever fed by
:class:`~archplace.scheduling.milp.HighsScheduler` (pickle is trusted here).
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

from archplace.base.lifetime import guard_child
from archplace.scheduling.milp import PARENT_ENV, phaze_solve


def main(argv: list[str] | None = None) -> None:
    """Solve the problem in the file ``argv[0]``, write the result to the file ``argv[1]``.
    The worker ends when the process named by the environment variable :data:`PARENT_ENV`
    (else its parent) does."""
    guard_child(int(os.environ.get(PARENT_ENV, os.getppid())))
    job, out = argv if argv is not None else sys.argv[1:]
    problem, options = pickle.loads(Path(job).read_bytes())
    result = phaze_solve(problem, options, "highs")
    partial = Path(out + ".part")
    partial.write_bytes(pickle.dumps(result))
    partial.replace(out)  # the parent sees a whole result or none


if __name__ == "__main__":
    main()
