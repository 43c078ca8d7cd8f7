"""Fitting a chip's efficiency parameters to measured training runs.

The fit minimises ``sum_i (log t_i(x) - log m_i)^2`` over the chosen parameters ``x`` within the
registry's bounds (:mod:`archplace.calibration.parameters`), where ``m_i`` is run ``i``'s measured
iteration time (``Run.published_iteration_time_s``) and ``t_i(x)`` archplace's prediction of it
(:func:`archplace.front.api.evaluate` on the hardware with ``x`` written in, a
:class:`~archplace.front.specs.resolved.ResolvedHardware`). Log time makes every run weigh the same
whatever its length, and a residual of ``r`` is a time ratio of ``exp(r)``.

The optimizer is SciPy's bounded trust-region reflective least squares
(``scipy.optimize.least_squares``, ``method="trf"``; Branch, Coleman and Li, SIAM J. Sci.
Comput. 21(1), 1999) with a two-point finite-difference Jacobian, run on each parameter scaled
to ``[0, 1]`` over its bounds. It is deterministic: the same runs and start give the same result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from archplace.base.errors import ArchplaceError, ConfigError
from archplace.calibration.parameters import Parameter
from archplace.front import api
from archplace.front.specs.resolved import ResolvedHardware
from archplace.validation.runs import Run, evaluate_kwargs, model_argument

_TOLERANCE = 1e-10
"""ftol, xtol and gtol of the fit: far below any difference a measurement can show (a relative
change of 1e-10 in the cost), so it stops on convergence, not on a loose tolerance."""
_DIFF_STEP = 1e-5
"""Finite-difference step, relative to the [0, 1] scale of each parameter (a change of 1e-5 of
its bounds' width): well above the rounding of an iteration time, well below any curvature."""
_MAX_EVALUATIONS = 400
"""Residual evaluations (each one prediction per run) before the fit gives up."""


def with_values(hardware: ResolvedHardware, parameters: Sequence[Parameter],
                values: Sequence[float] | np.ndarray) -> ResolvedHardware:
    """``hardware`` with each parameter set to its value."""
    for parameter, value in zip(parameters, values, strict=True):
        hardware = parameter.write(hardware, float(value))
    return hardware


def start_values(hardware: ResolvedHardware, parameters: Sequence[Parameter]) -> np.ndarray:
    """Each parameter's value on ``hardware`` (the fit's start), clipped into its bounds.

    Raises:
        ConfigError: the hardware lacks a parameter (no ``efficiency`` or ``cluster`` section).
    """
    return np.array([min(max(p.read(hardware), p.low), p.high) for p in parameters])


class RunSet:
    """Runs ready to be predicted on any candidate hardware: each run's
    :func:`archplace.front.api.evaluate` arguments (its model written as a ``config.json`` under
    ``directory``, which must outlive the set) and its measured iteration time.

    Attributes:
        runs: the runs, in order.
        measured_s: their measured iteration times, seconds (array of ``len(runs)``).
        evaluations: predictions made so far (one run on one hardware each).
    """

    def __init__(self, runs: Sequence[Run], directory: Path, variant: str) -> None:
        self.runs = tuple(runs)
        self.variant = variant
        self.measured_s = np.array([run.published_iteration_time_s() for run in self.runs])
        self._kwargs = [evaluate_kwargs(run, model_argument(run, directory), variant)
                        for run in self.runs]
        self.evaluations = 0

    def predict_one(self, index: int, hardware: ResolvedHardware) -> float:
        """Predicted iteration time of run ``index`` on ``hardware``, seconds.

        Raises:
            ArchplaceError: the run cannot be evaluated (as :func:`archplace.front.api.evaluate`).
        """
        self.evaluations += 1
        return float(api.evaluate(**{**self._kwargs[index], "hardware": hardware}).iteration_time_s)

    def predict(self, indices: Sequence[int], hardware: ResolvedHardware) -> np.ndarray:
        """Predicted iteration times of the runs ``indices`` on ``hardware``, seconds."""
        return np.array([self.predict_one(i, hardware) for i in indices])


@dataclass(frozen=True)
class Solution:
    """What one fit found.

    Attributes:
        values: the fitted value of each parameter, in order.
        start: the start values.
        evaluations: residual evaluations the optimizer asked for.
        message: the optimizer's stopping reason.
        insensitive: the parameters no fitted run depends on (:func:`_insensitive`): they are
            left out of the fit and stay at their start value.
    """

    values: tuple[float, ...]
    start: tuple[float, ...]
    evaluations: int
    message: str
    insensitive: tuple[str, ...]


def fit(run_set: RunSet, indices: Sequence[int], hardware: ResolvedHardware,
        parameters: Sequence[Parameter], start: Sequence[float] | None = None) -> Solution:
    """Fit ``parameters`` to the runs ``indices`` of ``run_set`` (module docstring).

    Args:
        run_set: the prepared runs.
        indices: which of them to fit to (at least one).
        hardware: the hardware whose parameters are fitted (others stay as they are).
        parameters: the registry entries to fit.
        start: start values (default: ``hardware``'s, :func:`start_values`).

    Raises:
        ConfigError: no run, fewer runs than parameters, or the hardware lacks a parameter.
        ArchplaceError: a run cannot be evaluated at some candidate.
    """
    if not indices:
        raise ConfigError("calibrate: no run to fit to")
    if len(indices) < len(parameters):
        raise ConfigError(f"calibrate: fitting {len(parameters)} parameters needs at least as many "
                          f"runs, got {len(indices)}", fields=("fit",))
    x0 = start_values(hardware, parameters) if start is None else np.asarray(start, dtype=float)
    measured = np.log(run_set.measured_s[list(indices)])
    at_start = run_set.predict(indices, with_values(hardware, parameters, x0))
    insensitive = _insensitive(run_set, indices, hardware, parameters, x0, at_start)
    free = [j for j, p in enumerate(parameters) if p.name not in insensitive]
    if not free:
        return Solution(tuple(float(v) for v in x0), tuple(float(v) for v in x0), 1,
                        "no fitted run depends on any parameter", insensitive)
    low = np.array([parameters[j].low for j in free])
    width = np.array([parameters[j].high - parameters[j].low for j in free])
    seen: dict[tuple[float, ...], np.ndarray] = {}

    def values_of(u: np.ndarray) -> np.ndarray:
        values = x0.copy()
        values[free] = np.clip(low + width * np.clip(u, 0.0, 1.0), low, low + width)
        return values

    def residuals(u: np.ndarray) -> np.ndarray:
        key = tuple(float(v) for v in u)
        if key not in seen:
            candidate = with_values(hardware, parameters, values_of(u))
            seen[key] = np.log(run_set.predict(indices, candidate)) - measured
        return seen[key]

    u0 = np.clip((x0[free] - low) / width, 0.0, 1.0)
    from scipy.optimize import least_squares  # scipy only when a fit runs (the CLI starts fast)

    result = least_squares(residuals, u0, bounds=(0.0, 1.0), method="trf", diff_step=_DIFF_STEP,
                           ftol=_TOLERANCE, xtol=_TOLERANCE, gtol=_TOLERANCE,
                           max_nfev=_MAX_EVALUATIONS)
    return Solution(tuple(float(v) for v in values_of(result.x)), tuple(float(v) for v in x0),
                    int(result.nfev), str(result.message), insensitive)


_SENSITIVITY_STEP = 0.01
"""How far (a fraction of its bounds' width) each parameter is moved from its start to see
whether any fitted run depends on it."""


def _insensitive(run_set: RunSet, indices: Sequence[int], hardware: ResolvedHardware,
                 parameters: Sequence[Parameter], x0: np.ndarray, at_start: np.ndarray) -> tuple[str, ...]:
    """The parameters whose move by :data:`_SENSITIVITY_STEP` of their width (towards the inside
    of their bounds) changes no run's prediction."""
    names = []
    for j, parameter in enumerate(parameters):
        step = _SENSITIVITY_STEP * (parameter.high - parameter.low)
        moved = x0.copy()
        moved[j] = x0[j] + step if x0[j] + step <= parameter.high else x0[j] - step
        if np.array_equal(run_set.predict(indices, with_values(hardware, parameters, moved)), at_start):
            names.append(parameter.name)
    return tuple(names)


@dataclass(frozen=True)
class RunResidual:
    """One run of a calibration, before and after the fit.

    Attributes:
        case, source: the run's ``case`` and ``source``.
        measured_s: its measured iteration time, seconds.
        before_s: predicted with the start values, seconds.
        after_s: predicted with the fitted values, seconds.
    """

    case: str
    source: str
    measured_s: float
    before_s: float
    after_s: float

    @property
    def error_before(self) -> float:
        """Relative throughput error with the start values (> 0: predicted too fast), as
        ``Run.error_of``."""
        return self.measured_s / self.before_s - 1.0

    @property
    def error_after(self) -> float:
        """Relative throughput error with the fitted values."""
        return self.measured_s / self.after_s - 1.0

    def to_dict(self) -> dict[str, Any]:
        """Plain dict: the fields, the log residuals and the errors."""
        return {"case": self.case, "source": self.source, "measured_s": self.measured_s,
                "predicted_before_s": self.before_s, "predicted_after_s": self.after_s,
                "log_residual_before": math.log(self.before_s / self.measured_s),
                "log_residual_after": math.log(self.after_s / self.measured_s),
                "error_before": self.error_before, "error_after": self.error_after}


@dataclass(frozen=True)
class FittedParameter:
    """A fitted parameter: its registry name, bounds, start and fitted value."""

    name: str
    low: float
    high: float
    start: float
    value: float

    @property
    def at_bound(self) -> bool:
        """The fit ended on a bound (the runs ask for a value outside the physical range)."""
        return math.isclose(self.value, self.low, rel_tol=1e-6) or math.isclose(
            self.value, self.high, rel_tol=1e-6)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields."""
        return {"name": self.name, "low": self.low, "high": self.high, "start": self.start,
                "value": self.value}


def evaluable(run_set: RunSet, hardware: ResolvedHardware) -> tuple[list[int], list[str], np.ndarray]:
    """The runs of ``run_set`` that evaluate on ``hardware``: (their indices, one line per run
    that does not, their predicted times in seconds)."""
    indices, skipped, times = [], [], []
    for i, run in enumerate(run_set.runs):
        try:
            times.append(run_set.predict_one(i, hardware))
        except ArchplaceError as exc:
            skipped.append(f"{run.case}: skipped, it cannot be evaluated ({type(exc).__name__}: {exc})")
            continue
        indices.append(i)
    return indices, skipped, np.array(times)


def mean_max_abs(errors: Sequence[float]) -> tuple[float, float]:
    """(mean |error|, max |error|) of ``errors``; NaN for none."""
    if not errors:
        return math.nan, math.nan
    magnitudes = [abs(e) for e in errors]
    return sum(magnitudes) / len(magnitudes), max(magnitudes)
