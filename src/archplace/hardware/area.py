"""Die area of an accelerator design, in mm² (DESIGN.md, Hardware: area and power).

First-fidelity component model::

    area_mm2 = MAC_AREA_MM2            * tensor_cores * array_rows * array_cols
             + VECTOR_LANE_AREA_MM2    * vector_cores * vector_lanes
             + SRAM_AREA_MM2_PER_MIB   * buffer_bytes / 2**20
             + UNCORE_AREA_MM2

Off-chip memory (HBM) sits in its own stacks next to the die, so its capacity
adds no die area.

Sources and calibration:

* ``MAC_AREA_MM2`` and ``SRAM_AREA_MM2_PER_MIB`` are the per-component figures
  PHAZE (Wang et al., ICML 2024) derived with Accelergy: about 770 µm² per
  16-bit MAC including its pipeline registers, and about 1.37 mm² per MiB of
  global-buffer SRAM.
* ``VECTOR_LANE_AREA_MM2`` and ``UNCORE_AREA_MM2`` are *calibrated*, not
  measured.  A vector lane (a 16-bit floating-point ALU with its register file
  and support for transcendental functions) is taken as four MACs' worth of
  area (4 x 770 µm² = 3080 µm²).  The fixed uncore (control, on-chip network,
  DMA and I/O glue) is then the remainder that makes PHAZE's reference design
  -- 8 tensor cores of 128x128, 2 vector cores of 128 lanes, a 128 MiB
  buffer -- come to PHAZE's reported 278.8 mm²:
  278.8 - 100.92544 (MACs) - 175.36 (SRAM) - 0.78848 (lanes) = 1.72608,
  rounded to 1.726 mm².  The reference design therefore comes to 278.79992 mm².
"""

from __future__ import annotations

from archplace.hardware.accelerator import Accelerator

# 16-bit MAC including its registers: ~770 µm² (PHAZE, ICML 2024, derived with Accelergy).
MAC_AREA_MM2 = 770e-6

# Global-buffer SRAM: ~1.37 mm² per MiB (PHAZE, ICML 2024, derived with Accelergy).
SRAM_AREA_MM2_PER_MIB = 1.37

# One vector lane: calibrated as 4 MACs' worth of area (see the module docstring).
VECTOR_LANE_AREA_MM2 = 4 * MAC_AREA_MM2

# Fixed uncore: calibrated so PHAZE's reference design comes to 278.8 mm² (module docstring).
UNCORE_AREA_MM2 = 1.726

# Bytes in one MiB, the unit of SRAM_AREA_MM2_PER_MIB.
_MIB_BYTES = 2.0**20


def area_breakdown_mm2(acc: Accelerator) -> dict[str, float]:
    """Die area of each component of ``acc``, in mm².

    Returns:
        ``{"tensor": ..., "vector": ..., "buffer": ..., "uncore": ...}``; the values sum
        to :func:`area_mm2`.  HBM capacity is not a component (it is off-die).
    """
    return {
        "tensor": MAC_AREA_MM2 * acc.macs,
        "vector": VECTOR_LANE_AREA_MM2 * acc.vector_cores * acc.vector_lanes,
        "buffer": SRAM_AREA_MM2_PER_MIB * acc.buffer_bytes / _MIB_BYTES,
        "uncore": UNCORE_AREA_MM2,
    }


def area_mm2(acc: Accelerator) -> float:
    """Die area of ``acc`` in mm² (formula and sources in the module docstring).

    The :class:`Accelerator` has already checked that every size is positive, so
    this cannot fail.
    """
    parts = area_breakdown_mm2(acc)
    return parts["tensor"] + parts["vector"] + parts["buffer"] + parts["uncore"]
