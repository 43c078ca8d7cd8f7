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

from archplace.schedule.milp import phaze_solve


def main() -> None:
    """Solve the problem on stdin, write the result on stdout.  HiGHS's C++ code may print (its
    banner) on file descriptor 1, which would corrupt the pickle: during the solve that
    descriptor points at stderr, and the result goes to the original stdout."""
    problem, options = pickle.loads(sys.stdin.buffer.read())
    sys.stdout.flush()
    result_fd = os.dup(1)
    os.dup2(2, 1)
    result = phaze_solve(problem, options, "highs")
    sys.stdout.flush()
    with os.fdopen(result_fd, "wb") as out:
        out.write(pickle.dumps(result))


if __name__ == "__main__":
    main()
