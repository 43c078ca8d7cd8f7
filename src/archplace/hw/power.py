"""Energy per operation and thermal design power of an accelerator (docs/model.md, Power model).

Dynamic energies, in joules:

* ``MAC_ENERGY_J`` = 0.8 pJ: a bf16 multiply with fp32 accumulation -- a 16-bit
  floating-point multiply (1.1 pJ) plus a 32-bit floating-point add (0.9 pJ) at
  45 nm (M. Horowitz, "Computing's energy problem", ISSCC 2014, energy table),
  times ``TECHNOLOGY_SCALE``.
* ``VECTOR_OP_ENERGY_J`` = 0.36 pJ: one 32-bit floating-point add per lane per
  cycle (Horowitz: 0.9 pJ at 45 nm) times ``TECHNOLOGY_SCALE``.
* ``LOCAL_SRAM_ENERGY_J_PER_BYTE`` = 1 pJ/B: operands fed to an array or a vector
  core come from its core-local buffer; a 64-bit read of a 32 KB SRAM costs 20 pJ
  at 45 nm (Horowitz), i.e. 2.5 pJ/B, times ``TECHNOLOGY_SCALE``.
* ``GLOBAL_SRAM_ENERGY_J_PER_BYTE`` = 5 pJ/B: every byte from or to HBM is written
  into and read out of the global buffer; a 64-bit read of a 1 MB SRAM costs
  100 pJ at 45 nm (Horowitz), i.e. 12.5 pJ/B, times ``TECHNOLOGY_SCALE``.
* ``HBM_ENERGY_J_PER_BYTE`` = 31.2 pJ/B: HBM2 at about 3.9 pJ/bit including its
  I/O (M. O'Connor et al., "Fine-Grained DRAM", MICRO 2017); DRAM energy does not
  follow the logic process, so it is not scaled.
* ``TECHNOLOGY_SCALE`` = 0.4 -- an ASSUMPTION: logic energy fell only about 2.5x
  from 45 nm to 7 nm (Jouppi et al., "Ten Lessons From Three Generations Shaped
  Google's TPUv4i", ISCA 2021, which updates Horowitz's table to 7 nm and stresses
  that logic, SRAM and DRAM improved unequally).  One factor for every preset:
  H100 (4 nm) is therefore priced at 7-nm energies.

Static power: ``STATIC_POWER_W_PER_MM2`` = 0.1 W/mm² of die area (from
:mod:`archplace.hw.area`) -- an ASSUMPTION for leakage and clock tree of a
7-nm accelerator (about 15 % of the TPUv4 TDP below).

TDP (WHAM's power budget) is the power at full activity plus static power: every
MAC busy every cycle; every vector lane busy every cycle; each array reading
``array_rows`` inputs and writing ``array_cols`` results per cycle from and to its
local buffer; HBM streaming at its full bandwidth through the global buffer
(``HBM_PATH_ENERGY_J_PER_BYTE`` per byte).  Check against datasheets (nothing is
calibrated to them): ``tpuv4`` comes to 193 W (Google Cloud TPU v4 docs: 192 W
maximum), ``h100-80gb`` to 668 W (NVIDIA: 700 W), ``a100-80gb`` to 267 W (NVIDIA:
400 W -- a GPU spends much power in register files, caches and control this
template does not have, and its real die is 826 mm², not the 153 mm² of the
template's components, so its static power is low too).
"""

from __future__ import annotations

from archplace.hw.accelerator import Accelerator
from archplace.hw.area import area_mm2

# 45 nm -> 7 nm logic-energy factor (assumption; module docstring).
TECHNOLOGY_SCALE = 0.4

# bf16 multiply (1.1 pJ) + fp32 add (0.9 pJ) at 45 nm (Horowitz, ISSCC 2014), scaled to 7 nm.
MAC_ENERGY_J = (1.1e-12 + 0.9e-12) * TECHNOLOGY_SCALE

# fp32 add (0.9 pJ at 45 nm, Horowitz ISSCC 2014) per lane operation, scaled to 7 nm.
VECTOR_OP_ENERGY_J = 0.9e-12 * TECHNOLOGY_SCALE

# 32 KB SRAM, 64-bit read = 20 pJ at 45 nm (Horowitz, ISSCC 2014) -> per byte, scaled to 7 nm.
LOCAL_SRAM_ENERGY_J_PER_BYTE = 20e-12 / 8.0 * TECHNOLOGY_SCALE

# 1 MB SRAM, 64-bit read = 100 pJ at 45 nm (Horowitz, ISSCC 2014) -> per byte, scaled to 7 nm.
GLOBAL_SRAM_ENERGY_J_PER_BYTE = 100e-12 / 8.0 * TECHNOLOGY_SCALE

# HBM2: ~3.9 pJ/bit including I/O (O'Connor et al., MICRO 2017); not scaled.
HBM_ENERGY_J_PER_BYTE = 3.9e-12 * 8.0

# A byte between HBM and a core: the HBM access, then a write into and a read out of the
# global buffer.
HBM_PATH_ENERGY_J_PER_BYTE = HBM_ENERGY_J_PER_BYTE + 2.0 * GLOBAL_SRAM_ENERGY_J_PER_BYTE

# Leakage and clock tree per mm² of die (assumption; module docstring).
STATIC_POWER_W_PER_MM2 = 0.1


def static_power_w(acc: Accelerator) -> float:
    """Static power of ``acc``: ``STATIC_POWER_W_PER_MM2`` x its die area, watts."""
    return STATIC_POWER_W_PER_MM2 * area_mm2(acc)


def power_breakdown_w(acc: Accelerator) -> dict[str, float]:
    """Power of each component of ``acc`` at full activity, watts (module docstring).

    Returns:
        ``{"tensor", "vector", "local_buffers", "global_buffer", "hbm", "static"}``; the
        values sum to :func:`tdp_w`.
    """
    feed_bytes_per_cycle = acc.tensor_cores * (acc.array_rows + acc.array_cols) * acc.bytes_per_element
    return {
        "tensor": acc.macs * acc.clock_hz * MAC_ENERGY_J,
        "vector": acc.vector_elements_per_s * VECTOR_OP_ENERGY_J,
        "local_buffers": feed_bytes_per_cycle * acc.clock_hz * LOCAL_SRAM_ENERGY_J_PER_BYTE,
        "global_buffer": 2.0 * acc.hbm_bandwidth_bytes_per_s * GLOBAL_SRAM_ENERGY_J_PER_BYTE,
        "hbm": acc.hbm_bandwidth_bytes_per_s * HBM_ENERGY_J_PER_BYTE,
        "static": static_power_w(acc),
    }


def tdp_w(acc: Accelerator) -> float:
    """Thermal design power of ``acc``: dynamic power at full activity + static power, watts.

    Grows with every resource (cores, array size, lanes, buffer, HBM bandwidth, clock).
    """
    return sum(power_breakdown_w(acc).values())
