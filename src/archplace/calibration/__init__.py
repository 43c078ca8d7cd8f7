"""Calibrating a known chip's efficiency parameters to measured training runs
(``archplace calibrate``), and the out-of-sample error of doing so (:func:`cross_validate`)."""

from __future__ import annotations

from archplace.calibration.calibrate import Calibration, calibrate, calibrate_file, read_runs
from archplace.calibration.crossval import CrossValidation, cross_validate
from archplace.calibration.output import calibrated_yaml
from archplace.calibration.parameters import DEFAULT_FIT, PARAMETERS, Parameter

__all__ = ["DEFAULT_FIT", "PARAMETERS", "Calibration", "CrossValidation", "Parameter", "calibrate",
           "calibrate_file", "calibrated_yaml", "cross_validate", "read_runs"]
