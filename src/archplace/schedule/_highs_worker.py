"""Worker process of the ``highs`` backend: ``python -m archplace.schedule._highs_worker``.

Reads a pickled ``(ScheduleProblem, SolveOptions)`` on stdin, solves it with PHAZE's
MILP on HiGHS (:func:`archplace.schedule.milp.phaze_solve`) and writes the pickled
:class:`~archplace.schedule.base.ScheduleResult` on stdout.  It runs in its own
process because the highspy and OR-Tools wheels ship incompatible copies of
``libhighs.so.1`` (see :mod:`archplace.schedule.milp`).  Only ever fed by
:class:`~archplace.schedule.milp.HighsScheduler` (pickle is trusted here).
"""

from __future__ import annotations

import os
import pickle
import sys

from archplace.lifetime import guard_child
from archplace.schedule.milp import PARENT_ENV, phaze_solve


def main() -> None:
    """Solve the problem on stdin, write the result on stdout.  The worker ends when the
    process named by the environment variable :data:`PARENT_ENV` (else its parent) does."""
    guard_child(int(os.environ.get(PARENT_ENV, os.getppid())))
    problem, options = pickle.loads(sys.stdin.buffer.read())
    result = phaze_solve(problem, options, "highs")
    sys.stdout.buffer.write(pickle.dumps(result))
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
