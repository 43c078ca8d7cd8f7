"""How well a calibration predicts runs it was not fitted to: :func:`cross_validate`.

* leave-one-out (LOO): each run predicted by the parameters fitted to all the others;
* leave-one-source-out (LOSO): each run predicted by the parameters fitted to the runs of the
  other sources (:func:`source_group`: the publication, so a paper's runs never calibrate its
  own prediction);
* in sample: each run predicted by the parameters fitted to all of them (what ``archplace
  calibrate`` reports, an optimistic figure).

Errors are relative throughput errors as ``Run.error_of`` (> 0: predicted too fast). Every fit
starts from the hardware's own values, as ``archplace calibrate`` does.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from archplace.base.errors import ConfigError
from archplace.calibration.calibrate import runs_on
from archplace.calibration.fit import RunSet, evaluable, fit, mean_max_abs, with_values
from archplace.calibration.parameters import Parameter, default_fit, parse_fit
from archplace.front.specs.resolved import ResolvedHardware
from archplace.validation.runs import DEFAULT_VARIANT, Run


def source_group(run: Run) -> str:
    """The publication a run comes from: its ``source`` up to the first comma, less a trailing
    parenthesis (``"Narayanan et al. SC 2021, Table 1 row 1.7B; ..."`` -> ``"Narayanan et al. SC
    2021"``; ``"llm-foundry benchmarking README (commit 8c8dd48), ..."`` -> ``"llm-foundry
    benchmarking README"``)."""
    first = run.source.split(",", 1)[0].strip()
    return re.sub(r"\s*\([^()]*\)$", "", first)


@dataclass(frozen=True)
class CrossValidation:
    """Errors per run, in the order of ``cases``; None where a fit had too few runs.

    Attributes:
        hardware: the hardware calibrated, as given.
        parameters: the names of the fitted parameters.
        cases: the runs on that hardware that evaluate.
        groups: each run's source group (:func:`source_group`).
        uncalibrated: errors with the hardware's own values.
        in_sample: errors with the parameters fitted to every run.
        loo: leave-one-out errors.
        loso: leave-one-source-out errors (None for every run when there is one source).
        skipped: one line per run left out.
    """

    hardware: str
    parameters: tuple[str, ...]
    cases: tuple[str, ...]
    groups: tuple[str, ...]
    uncalibrated: tuple[float, ...]
    in_sample: tuple[float, ...]
    loo: tuple[float | None, ...]
    loso: tuple[float | None, ...]
    skipped: tuple[str, ...]

    def summary(self, kind: str) -> tuple[float, float, int]:
        """(mean |error|, max |error|, runs counted) of ``kind``: ``uncalibrated``,
        ``in_sample``, ``loo`` or ``loso`` (NaN, NaN, 0 where no run has one)."""
        errors = [e for e in getattr(self, kind) if e is not None]
        mean, worst = mean_max_abs(errors)
        return mean, worst, len(errors)


def _predict_held_out(run_set: RunSet, fit_on: Sequence[int], held_out: Sequence[int],
                      base: ResolvedHardware, parameters: Sequence[Parameter]) -> list[float] | None:
    if len(fit_on) < len(parameters) or not fit_on:
        return None
    solution = fit(run_set, fit_on, base, parameters)
    fitted = with_values(base, parameters, solution.values)
    return [float(run_set.measured_s[i] / t - 1.0)
            for i, t in zip(held_out, run_set.predict(held_out, fitted), strict=True)]


def cross_validate(runs: Sequence[Run], hardware: str | os.PathLike[str] | ResolvedHardware,
                   parameters: str | Iterable[str] | None = None, *,
                   variant: str = DEFAULT_VARIANT) -> CrossValidation:
    """Leave-one-out and leave-one-source-out errors of calibrating ``parameters`` of
    ``hardware`` to the ``runs`` measured on it (module docstring). Costs one fit per run and
    one per source, each of (parameters + 1) x runs evaluations per optimizer step.

    Raises:
        ConfigError: as :func:`archplace.calibration.calibrate`.
    """
    base = hardware if isinstance(hardware, ResolvedHardware) else ResolvedHardware.load(hardware)
    chosen = parse_fit(default_fit(base) if parameters is None else parameters)
    for parameter in chosen:
        parameter.read(base)
    kept, skipped = runs_on(runs, base)
    if not kept:
        raise ConfigError(f"cross-validate: no run was measured on {base.hardware}", fields=("hardware",))
    with tempfile.TemporaryDirectory(prefix="archplace-crossval-") as directory:
        run_set = RunSet(kept, Path(directory), variant)
        indices, failed, before = evaluable(run_set, base)
        skipped.extend(failed)
        if not indices:
            raise ConfigError(f"cross-validate: no run on {base.hardware} can be evaluated")
        errors_before = [float(run_set.measured_s[i] / t - 1.0) for i, t in zip(indices, before, strict=True)]
        in_sample = _predict_held_out(run_set, indices, indices, base, chosen)
        loo: list[float | None] = []
        for i in indices:
            held = _predict_held_out(run_set, [j for j in indices if j != i], [i], base, chosen)
            loo.append(None if held is None else held[0])
        groups = [source_group(run_set.runs[i]) for i in indices]
        loso: dict[int, float | None] = {}
        for group in dict.fromkeys(groups):
            members = [i for i, g in zip(indices, groups, strict=True) if g == group]
            others = [i for i, g in zip(indices, groups, strict=True) if g != group]
            held = _predict_held_out(run_set, others, members, base, chosen)
            for k, i in enumerate(members):
                loso[i] = None if held is None else held[k]
    if in_sample is None:
        raise ConfigError(f"cross-validate: fitting {len(chosen)} parameters needs at least as many "
                          f"runs, got {len(indices)}", fields=("fit",))
    return CrossValidation(base.hardware, tuple(p.name for p in chosen),
                           tuple(run_set.runs[i].case for i in indices), tuple(groups),
                           tuple(errors_before), tuple(in_sample), tuple(loo),
                           tuple(loso[i] for i in indices), tuple(skipped))
