"""The accelerator template searched by PHAZE and WHAM (DESIGN.md, Hardware).

A chip is ``tensor_cores`` systolic arrays of ``array_rows x array_cols`` MACs,
``vector_cores`` SIMD cores of ``vector_lanes`` lanes, a global on-chip buffer
shared by the cores, and HBM.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from archplace.errors import ConfigError


def _positive(owner: str, **values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ConfigError(f"{owner}: {name} must be positive, got {value}")


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One accelerator design, in SI units.

    Attributes:
        name: label used in tables.
        tensor_cores: number of systolic arrays.
        array_rows, array_cols: MACs per array are ``array_rows * array_cols``.
        vector_cores: number of vector cores.
        vector_lanes: lanes (elements per cycle) of each vector core.
        buffer_bytes: global on-chip buffer (SRAM) capacity.
        hbm_bytes: off-chip memory capacity.
        hbm_bandwidth_bytes_per_s: off-chip memory bandwidth.
        clock_hz: core clock.
        bytes_per_element: width of the training data type (2 for bf16/fp16).

    Raises:
        ConfigError: a non-positive field.
    """

    name: str
    tensor_cores: int
    array_rows: int
    array_cols: int
    vector_cores: int
    vector_lanes: int
    buffer_bytes: float
    hbm_bytes: float
    hbm_bandwidth_bytes_per_s: float
    clock_hz: float
    bytes_per_element: int = 2

    def __post_init__(self) -> None:
        _positive(
            f"accelerator {self.name!r}",
            tensor_cores=self.tensor_cores, array_rows=self.array_rows,
            array_cols=self.array_cols, vector_cores=self.vector_cores,
            vector_lanes=self.vector_lanes, buffer_bytes=self.buffer_bytes,
            hbm_bytes=self.hbm_bytes, hbm_bandwidth_bytes_per_s=self.hbm_bandwidth_bytes_per_s,
            clock_hz=self.clock_hz, bytes_per_element=self.bytes_per_element,
        )

    @property
    def macs(self) -> int:
        """Multiply-accumulate units on the chip."""
        return self.tensor_cores * self.array_rows * self.array_cols

    @property
    def peak_flop_per_s(self) -> float:
        """Dense peak: 2 FLOP per MAC per cycle on every array."""
        return 2.0 * self.macs * self.clock_hz

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (SI units), for JSON."""
        return asdict(self)
