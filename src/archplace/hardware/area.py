"""Die area of an accelerator design, in mm² (docs/model.md, Area model).

Component model::

    area_mm2 = MAC_AREA_MM2         * tensor_cores * array_rows * array_cols
             + VECTOR_LANE_AREA_MM2 * vector_cores * vector_lanes
             + CORE_AREA_MM2        * (tensor_cores + vector_cores)
             + sram_area_mm2(buffer_bytes)
             + UNCORE_AREA_MM2

HBM sits in its own stacks next to the die, so its capacity adds no die area.

Source and calibration.  PHAZE (Wang et al., ICML 2024) priced every design of its
space with Accelergy/CACTI tables and published the result: the file
``Estimator/arch_configs/cores.json`` of its repository (github.com/msr-fiddle/phaze)
lists the area of each of its ~28 000 designs.  The constants here are a
least-squares fit of the model above to 39 designs sampled from that table
(1 to 4096 tensor and vector cores, arrays 2x2 to 256x256, buffers 2 to
128 MiB); the fit reproduces every sampled design within 2.4 %:

* ``MAC_AREA_MM2`` = 786.8 µm²: a 16-bit MAC with its pipeline registers and its
  share of the core-local buffer (PHAZE gives each core 16 B of local SRAM per
  MAC; without that buffer a MAC is about 770 µm²).  The
  fit alone gives 780 µm²; 786.8 µm² makes PHAZE's reference design -- 8 tensor
  cores of 128x128, 2 vector cores of 128 lanes, 128 MiB -- come to the
  278.8 mm² its paper reports (278.81 mm² here).
* ``VECTOR_LANE_AREA_MM2`` = 770 µm²: PHAZE builds a vector lane from the same
  processing element as a MAC (fit: 768 µm²).
* ``CORE_AREA_MM2`` = 5.8e-3 mm² per core (tensor or vector): control and the
  minimum 1 KiB local buffer every PHAZE core has; it is what makes designs of
  thousands of small cores as large as PHAZE's table says (8192 cores: 47.5 mm²).
* ``sram_area_mm2``: global-buffer SRAM, piecewise linear in capacity through
  PHAZE's values at 2, 4, ..., 128 MiB (1.36 to 1.45 mm² per MiB, the CACTI bank
  organisation changing with size),
  proportional below 2 MiB and extended at the last slope above 128 MiB.
* ``UNCORE_AREA_MM2`` = 0.61 mm²: the size-independent rest of PHAZE's table (the
  intercept of its buffer column at 2 and 4 MiB).

This is PHAZE's accounting of the compute die, not a real die: a real TPUv4 or
A100 die also holds HBM PHYs, chip-to-chip links, host interfaces and (for GPUs)
caches and schedulers this template does not have.
"""

from __future__ import annotations

import bisect

from archplace.hardware.accelerator import Accelerator

# 16-bit MAC with registers and 16 B of core-local SRAM: fit to PHAZE's area table (docstring).
MAC_AREA_MM2 = 786.8e-6

# One vector lane: fit to PHAZE's area table (same processing element as a MAC).
VECTOR_LANE_AREA_MM2 = 770e-6

# Per tensor or vector core: control and its minimum local buffer; fit to PHAZE's area table.
CORE_AREA_MM2 = 5.8e-3

# Size-independent rest of PHAZE's area table (intercept of its buffer column).
UNCORE_AREA_MM2 = 0.61

# Bytes in one MiB.
_MIB_BYTES = 2.0**20

# Global-buffer SRAM area at 2, 4, ..., 128 MiB, mm² (PHAZE's area table minus the
# smallest design's cores and the uncore; see the module docstring).
SRAM_TABLE_MIB = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
SRAM_TABLE_MM2 = (2.729, 5.469, 11.343, 23.136, 46.141, 87.996, 174.814)

# Slopes (mm² per MiB) of the segments of the SRAM table.
_SRAM_SLOPES = tuple(
    (SRAM_TABLE_MM2[i + 1] - SRAM_TABLE_MM2[i]) / (SRAM_TABLE_MIB[i + 1] - SRAM_TABLE_MIB[i])
    for i in range(len(SRAM_TABLE_MIB) - 1)
)


def sram_area_mm2(capacity_bytes: float) -> float:
    """Area of ``capacity_bytes`` of global-buffer SRAM, mm² (table in the module docstring).

    Piecewise linear through PHAZE's values at 2..128 MiB, proportional to capacity below
    2 MiB and extended with the slope of the last segment above 128 MiB.  Strictly
    increasing; 0 for 0 bytes.

    Raises:
        ValueError: a negative capacity.
    """
    if capacity_bytes < 0:
        raise ValueError(f"SRAM capacity must be >= 0, got {capacity_bytes}")
    mib = capacity_bytes / _MIB_BYTES
    first = SRAM_TABLE_MIB[0]
    if mib <= first:
        return SRAM_TABLE_MM2[0] * mib / first
    i = min(bisect.bisect_right(SRAM_TABLE_MIB, mib) - 1, len(_SRAM_SLOPES) - 1)
    return SRAM_TABLE_MM2[i] + _SRAM_SLOPES[i] * (mib - SRAM_TABLE_MIB[i])


def area_breakdown_mm2(acc: Accelerator) -> dict[str, float]:
    """Die area of each component of ``acc``, in mm².

    Returns:
        ``{"tensor", "vector", "cores", "buffer", "uncore"}``: the MACs, the vector
        lanes, the per-core overhead of all cores, the global buffer and the fixed
        uncore; the values sum to :func:`area_mm2`.  HBM is off-die.
    """
    return {
        "tensor": MAC_AREA_MM2 * acc.macs,
        "vector": VECTOR_LANE_AREA_MM2 * acc.vector_cores * acc.vector_lanes,
        "cores": CORE_AREA_MM2 * (acc.tensor_cores + acc.vector_cores),
        "buffer": sram_area_mm2(acc.buffer_bytes),
        "uncore": UNCORE_AREA_MM2,
    }


def area_mm2(acc: Accelerator) -> float:
    """Die area of ``acc`` in mm² (formula and sources in the module docstring).

    The :class:`Accelerator` has already checked that every size is positive, so
    this cannot fail.
    """
    return sum(area_breakdown_mm2(acc).values())
