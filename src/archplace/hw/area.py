"""Die area of an accelerator design, in mm² (docs/model.md, Area model).

PHAZE's area model (Wang et al., ICML 2024), reproduced exactly.  PHAZE prices a design
with Accelergy: every tensor core and every vector core is a grid of processing elements
(PEs) with a core-local buffer, and the chip has one global buffer::

    area = tensor_cores * (R * C * TENSOR_PE_AREA + core_buffer_area(R * C))
         + vector_cores * (lanes * VECTOR_PE_AREA + core_buffer_area(lanes))
         + global_buffer_area(buffer_bytes)

with ``R x C`` the array (``array_rows x array_cols``) and ``lanes`` the vector lanes.
HBM sits in its own stacks next to the die, so its capacity adds no die area.

Where each term comes from (github.com/msr-fiddle/phaze; the files named below, read at
commit fed7cde unless said otherwise):

* A PE is one 32-bit integer MAC, 3,632 µm² at 45 nm
  (``Estimator/arch_configs/area_files/tablePluginData/intmac.csv``), and a register file
  of 0.104 µm² per word (``.../tablePluginData/regfile.csv``): 16 words in a tensor-core PE
  and 6 in a vector-core PE -- PHAZE's ``L1_Buffer_TC`` = 32 B and ``L1_Buffer_VC`` = 12 B
  of 2-byte words (``Estimator/utils/estimator_wrapper.py``,
  ``create_core_config_for_estimation``).  PHAZE's architecture files are at 22 nm
  (``Estimator/arch_configs/GEMM/arch/arch.yaml``); the 45 nm table entries reach it
  multiplied by ``TECHNOLOGY_AREA_SCALE`` = 0.2091667, the factor that PHAZE's published
  areas (``Estimator/arch_configs/cores.json``) imply for both PE kinds.
* Each core has a core-local ("L2") buffer of 16 B per PE, at least 1 KiB: ``L2_Buffer`` =
  2^(log2 width + log2 depth - 6) KiB, floored at 1024 B, in the same function; a vector
  core is a ``lanes x 1`` core.  Its area is CACTI's at 22 nm, which the Accelergy tables
  do not list (``SRAM.csv`` is a placeholder): the values at 1 KiB .. 1 MiB in
  ``CORE_BUFFER_TABLE_UM2`` are recovered from ``cores.json``, whose 29,360 areas are
  exactly a sum of per-PE, per-core and global-buffer terms.
* The global buffer's area, at 2 .. 128 MiB (``GLOBAL_BUFFER_TABLE_UM2``), is recovered
  the same way.  PHAZE prices it once per chip: the tensor and vector cores share it
  (``Estimator/architecture.py``, ``generate_area_of_acc``, read at commit c10bf7f).

With these tables the formula gives every area of ``cores.json`` to within 1e-9
(``tests/hw/test_area.py`` checks every entry when the file is at hand).  Sizes
between table points are interpolated linearly; a core buffer above 1 MiB and a global
buffer above 128 MiB extend the last segment, and a global buffer below 2 MiB is
proportional to its capacity.  PHAZE's reference design (8 tensor cores of 128x128, 2
vector cores of 128 lanes, 128 MiB) comes to 278.83 mm², the 278.8 mm² of its paper.

This is PHAZE's accounting of the compute die, not a real die: a real TPUv4 or A100 die
also holds HBM PHYs, chip-to-chip links, host interfaces and (for GPUs) caches and
schedulers this template does not have.
"""

from __future__ import annotations

import bisect
import functools

from archplace.hw.accelerator import Accelerator

# 45 nm -> 22 nm area factor of PHAZE's Accelergy runs (implied by cores.json; docstring).
TECHNOLOGY_AREA_SCALE = 0.2091666666666667

# intmac.csv: one 32-bit MAC with 2 pipeline stages, µm² at 45 nm.
MAC_AREA_45NM_UM2 = 3632.0

# regfile.csv: a 32-bit-wide register file, µm² per word at 45 nm (13.312 µm² for 128 words).
REGFILE_WORD_AREA_45NM_UM2 = 0.104

# Register-file words per PE: L1_Buffer_TC = 32 B and L1_Buffer_VC = 12 B of 2-byte words.
TENSOR_PE_REGISTER_WORDS = 16
VECTOR_PE_REGISTER_WORDS = 6

# One PE (MAC + its register file) of a tensor core and of a vector core, µm² at 22 nm.
TENSOR_PE_AREA_UM2 = TECHNOLOGY_AREA_SCALE * (
    MAC_AREA_45NM_UM2 + TENSOR_PE_REGISTER_WORDS * REGFILE_WORD_AREA_45NM_UM2)
VECTOR_PE_AREA_UM2 = TECHNOLOGY_AREA_SCALE * (
    MAC_AREA_45NM_UM2 + VECTOR_PE_REGISTER_WORDS * REGFILE_WORD_AREA_45NM_UM2)

# Core-local buffer: 16 bytes per PE, at least 1 KiB (PHAZE's L2_Buffer).
CORE_BUFFER_BYTES_PER_PE = 16
CORE_BUFFER_MIN_BYTES = 1024

_KIB_BYTES = 2.0**10
_MIB_BYTES = 2.0**20

# Core-buffer area (CACTI, 22 nm) at 1, 2, 4, ..., 1024 KiB, µm², recovered from cores.json.
CORE_BUFFER_TABLE_KIB = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0)
CORE_BUFFER_TABLE_UM2 = (6133.98, 8248.43, 12610.5, 22139.9, 38583.0, 63338.4, 115579.0,
                         204764.0, 446565.0, 897890.0, 1634130.0)

# Global-buffer area (CACTI, 22 nm) at 2, 4, ..., 128 MiB, µm², recovered from cores.json.
GLOBAL_BUFFER_TABLE_MIB = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
GLOBAL_BUFFER_TABLE_UM2 = (3338220.0, 6078640.0, 11952400.0, 23745200.0, 46750900.0, 88605700.0,
                           175423000.0)

_UM2_PER_MM2 = 1e6


def _interpolate(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    """Piecewise linear through ``(xs, ys)`` for ``x >= xs[0]``, the last segment extended."""
    i = min(bisect.bisect_right(xs, x) - 1, len(xs) - 2)
    return ys[i] + (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]) * (x - xs[i])


def core_buffer_bytes(pes: int) -> int:
    """Capacity of the core-local buffer of a core of ``pes`` PEs: 16 B per PE, at least 1 KiB."""
    return max(CORE_BUFFER_MIN_BYTES, CORE_BUFFER_BYTES_PER_PE * pes)


@functools.lru_cache(maxsize=1024)
def core_buffer_area_mm2(pes: int) -> float:
    """Area of the core-local buffer of a core of ``pes`` PEs, mm² (table in the docstring).

    Raises:
        ValueError: fewer than one PE.
    """
    if pes < 1:
        raise ValueError(f"a core needs at least one PE, got {pes}")
    kib = core_buffer_bytes(pes) / _KIB_BYTES
    return _interpolate(CORE_BUFFER_TABLE_KIB, CORE_BUFFER_TABLE_UM2, kib) / _UM2_PER_MM2


@functools.lru_cache(maxsize=1024)
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
    first = GLOBAL_BUFFER_TABLE_MIB[0]
    if mib <= first:
        return GLOBAL_BUFFER_TABLE_UM2[0] * mib / first / _UM2_PER_MM2
    return _interpolate(GLOBAL_BUFFER_TABLE_MIB, GLOBAL_BUFFER_TABLE_UM2, mib) / _UM2_PER_MM2


def breakdown_of_mm2(tensor_cores: int, array_rows: int, array_cols: int, vector_cores: int,
                     vector_lanes: int, buffer_bytes: float) -> dict[str, float]:
    """Die area of each component of a design given by its sizes, in mm².

    Returns:
        ``{"tensor", "vector", "core_buffers", "buffer"}``: the PEs of the tensor cores, the PEs
        of the vector cores, the core-local buffers of all cores and the global buffer; the
        values sum to :func:`area_of_mm2`.

    Raises:
        ValueError: a count below one or a negative buffer.
    """
    if min(tensor_cores, array_rows, array_cols, vector_cores, vector_lanes) < 1:
        raise ValueError("core counts, array sides and vector lanes must be at least 1")
    pes = array_rows * array_cols
    return {
        "tensor": tensor_cores * pes * TENSOR_PE_AREA_UM2 / _UM2_PER_MM2,
        "vector": vector_cores * vector_lanes * VECTOR_PE_AREA_UM2 / _UM2_PER_MM2,
        "core_buffers": (tensor_cores * core_buffer_area_mm2(pes)
                         + vector_cores * core_buffer_area_mm2(vector_lanes)),
        "buffer": sram_area_mm2(buffer_bytes),
    }


def area_of_mm2(tensor_cores: int, array_rows: int, array_cols: int, vector_cores: int,
                vector_lanes: int, buffer_bytes: float) -> float:
    """Die area of a design given by its sizes, in mm² (formula in the module docstring).

    Raises:
        ValueError: as :func:`breakdown_of_mm2`.
    """
    return sum(breakdown_of_mm2(tensor_cores, array_rows, array_cols, vector_cores, vector_lanes,
                                buffer_bytes).values())


def area_breakdown_mm2(acc: Accelerator) -> dict[str, float]:
    """Die area of each component of ``acc``, in mm².

    Returns:
        ``{"tensor", "vector", "core_buffers", "buffer"}`` (:func:`breakdown_of_mm2`); the
        values sum to :func:`area_mm2`.  HBM is off-die.
    """
    return breakdown_of_mm2(acc.tensor_cores, acc.array_rows, acc.array_cols, acc.vector_cores,
                            acc.vector_lanes, acc.buffer_bytes)


def area_mm2(acc: Accelerator) -> float:
    """Die area of ``acc`` in mm² (formula and sources in the module docstring).

    The :class:`Accelerator` has already checked that every size is positive, so
    this cannot fail.
    """
    return sum(area_breakdown_mm2(acc).values())
