"""The hardware file ``archplace calibrate`` writes.

It is the calibrated hardware's own file (a bundled preset or the user's YAML) with each fitted
value replaced, its ``source`` saying where it came from, and a ``calibration`` section that
records the fit (:meth:`Calibration.to_dict`: date, runs, parameters with bounds and start
values, residuals per run before and after). Every command reads it with ``--hardware FILE``;
the ``calibration`` section is a record only, no loader reads it.
"""

from __future__ import annotations

from typing import Any

import yaml

from archplace.calibration.calibrate import Calibration
from archplace.calibration.parameters import PARAMETERS
from archplace.hw import _config

_KIND = "hardware preset"
_CASES_SHOWN = 12
"""Case names listed in a fitted value's source line before it says "and N more"."""


def fitted_source(calibration: Calibration) -> str:
    """The ``source`` of a fitted value: tool, date, the runs (file and cases) and the start."""
    cases = [r.case for r in calibration.residuals]
    shown = ", ".join(cases[:_CASES_SHOWN])
    if len(cases) > _CASES_SHOWN:
        shown += f" and {len(cases) - _CASES_SHOWN} more"
    where = f" of {calibration.runs_file}" if calibration.runs_file else ""
    return (f"calibrated by archplace calibrate on {calibration.date} to {len(cases)} runs{where} "
            f"(cases {shown}), starting from {calibration.base}; see the calibration section")


def calibrated_mapping(calibration: Calibration) -> dict[str, Any]:
    """The calibrated hardware file as plain data (see the module docstring).

    Raises:
        ConfigError: the base hardware file can no longer be read.
    """
    data = _config.read_mapping(_config.resolve(calibration.base, "presets", _KIND))
    source = fitted_source(calibration)
    for fitted in calibration.parameters:
        section = data.setdefault(PARAMETERS[fitted.name].section, {})
        section[fitted.name] = {"value": fitted.value, "source": source}
    original, _ = _config.unwrap(data.get("source", ""), "source")
    data["source"] = (f"{original}; " if original else "") + (
        f"{', '.join(calibration.values)} calibrated by archplace calibrate on {calibration.date}")
    data["calibration"] = calibration.to_dict()
    return data


def calibrated_yaml(calibration: Calibration) -> str:
    """:func:`calibrated_mapping` as YAML text, with a header comment (floats written exactly,
    so the file reproduces the fitted predictions)."""
    header = (f"# {calibration.hardware.accelerator.name}, calibrated by archplace calibrate on "
              f"{calibration.date} from {calibration.base}.\n"
              "# The fitted values are in the efficiency section (their source says so); the\n"
              "# calibration section records the runs, bounds, start values and residuals.\n")
    return header + yaml.safe_dump(calibrated_mapping(calibration), sort_keys=False,
                                   allow_unicode=True, width=100)
