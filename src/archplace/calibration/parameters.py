"""The parameters ``archplace calibrate`` may fit: one :class:`Parameter` per entry of
:data:`PARAMETERS`.

Each is a physically meaningful figure of a known chip's ``efficiency`` section (a fraction of a
datasheet rate that real kernels or collectives sustain), with bounds that keep it physical and a
way to read it from and write it into a :class:`~archplace.front.specs.resolved.ResolvedHardware`
(``dataclasses.replace`` of the chip's :class:`~archplace.hw.accelerator.KernelEfficiency`
or of the cluster links). Adding a calibratable parameter is one entry of :data:`PARAMETERS`:
:func:`kernel_field` (any figure of the chip's efficiency, e.g. a per-kernel floor in seconds),
:func:`kernel_fraction` and :func:`link_fraction` build them; a figure held elsewhere needs its
own ``read``/``write`` pair.

The bounds are not measurements: the upper bound 1 of every fraction is physical (no kernel
exceeds the peak it is a fraction of, no collective the line rate); the lower bounds are
assumptions, far below every published figure the presets cite (``presets/*.yaml``), so that a
fit that runs into one says the model lacks a mechanism rather than that the chip is that slow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from archplace.base.errors import ConfigError
from archplace.front.specs.resolved import ResolvedHardware
from archplace.hw.accelerator import KernelEfficiency
from archplace.hw.cluster import Cluster


@dataclass(frozen=True)
class Parameter:
    """One calibratable figure.

    Attributes:
        name: the name ``--fit`` takes, and the field of the hardware file's ``section``.
        meaning: what the figure is, physically (for docs and messages).
        low, high: bounds of the fit, ``low < high``, in the figure's unit.
        bounds_reason: why the bounds are where they are.
        read: the value on a resolved hardware. Raises ConfigError when the hardware lacks it.
        write: a copy of a resolved hardware with the value changed.
        section: the hardware file section that holds the field (``efficiency``).
        unit: the unit of the value (``""``: a fraction).
    """

    name: str
    meaning: str
    low: float
    high: float
    bounds_reason: str
    read: Callable[[ResolvedHardware], float]
    write: Callable[[ResolvedHardware, float], ResolvedHardware]
    section: str = "efficiency"
    unit: str = ""

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ValueError(f"parameter {self.name}: low {self.low} must be below high {self.high}")


def _efficiency(hardware: ResolvedHardware, name: str) -> KernelEfficiency:
    efficiency = hardware.accelerator.efficiency
    if efficiency is None:
        raise ConfigError(f"{hardware.hardware}: no efficiency section, so no {name} to calibrate: "
                          "calibrate fits the kernel efficiencies of a known chip's preset")
    return efficiency


def kernel_field(name: str, meaning: str, low: float, high: float, bounds_reason: str,
                 field: str | None = None, unit: str = "") -> Parameter:
    """A field of the chip's :class:`KernelEfficiency` (``field``, default ``name``; written as
    ``name`` in the file's ``efficiency`` section), fitted within ``[low, high]`` (in ``unit``,
    SI; ``""`` for a fraction)."""
    attribute = field or name

    def read(hardware: ResolvedHardware) -> float:
        return float(getattr(_efficiency(hardware, name), attribute))

    def write(hardware: ResolvedHardware, value: float) -> ResolvedHardware:
        changes: dict[str, Any] = {attribute: float(value)}
        efficiency = replace(_efficiency(hardware, name), **changes)
        return replace(hardware, chip=replace(hardware.accelerator, efficiency=efficiency))

    return Parameter(name, meaning, low, high, bounds_reason, read, write, unit=unit)


def kernel_fraction(name: str, meaning: str, low: float, bounds_reason: str,
                    field: str | None = None) -> Parameter:
    """:func:`kernel_field` of a fraction of a peak rate, fitted within ``[low, 1]``."""
    return kernel_field(name, meaning, low, 1.0, bounds_reason, field)


def _network(hardware: ResolvedHardware, name: str) -> Cluster:
    if hardware.network is None:
        raise ConfigError(f"{hardware.hardware}: no cluster section, so no {name} to calibrate")
    return hardware.network


def link_fraction(name: str, meaning: str, low: float, bounds_reason: str, field: str) -> Parameter:
    """A field ``field`` of the :class:`Cluster` links (written as ``name`` in the file's
    ``efficiency`` section), fitted within ``[low, 1]``."""

    def read(hardware: ResolvedHardware) -> float:
        _efficiency(hardware, name)  # a chip without kernel figures has no link figures either
        return float(getattr(_network(hardware, name), field))

    def write(hardware: ResolvedHardware, value: float) -> ResolvedHardware:
        changes: dict[str, Any] = {field: float(value)}
        return replace(hardware, network=replace(_network(hardware, name), **changes))

    return Parameter(name, meaning, low, 1.0, bounds_reason, read, write)


def _sustained_clock() -> Parameter:
    """The chip's sustained clock (``efficiency.sustained_clock``, :mod:`archplace.cost.clock`);
    a chip that declares none runs its kernels at the clock they were measured at, which is read
    as its ``clock`` (the start of a fit)."""
    base = kernel_field(
        "sustained_clock", "SM clock held under minutes of tensor-core load at the board's power "
        "limit; compute-bound kernels measured at another clock are scaled by that clock over "
        "this one (archplace.cost.clock), hertz", 0.8e9, 2.1e9,
        "0.8 GHz (assumption): below the A100's 1.095 GHz base clock, the lowest clock a preset's "
        "chip holds under load; 2.1 GHz: above every preset's boost clock (H100/H800 1.98 GHz)",
        field="sustained_clock_hz", unit="Hz")

    def read(hardware: ResolvedHardware) -> float:
        return base.read(hardware) or float(hardware.accelerator.clock_hz)

    return replace(base, read=read)


_PEAK = "1: no kernel sustains more than the chip's peak"
_LINE = "1: no collective beats the line rate"
_ATTENTION_LOW = (f"{_PEAK}; 0.1 (assumption): under a third of the lowest preset figure "
                  "(FlashAttention-2 on H100, 0.339)")

PARAMETERS: Mapping[str, Parameter] = MappingProxyType({p.name: p for p in (
    kernel_fraction(
        "gemm_sustained", "fraction of the dense peak a large GEMM sustains once its tiles fill "
        "whole waves", 0.2,
        f"{_PEAK}; 0.2 (assumption): a quarter of the lowest preset figure (b200-192gb, 0.78)"),
    kernel_fraction(
        "hbm", "fraction of the datasheet HBM bandwidth that streaming (element-wise, norm, "
        "softmax, optimizer) kernels reach", 0.2,
        "1: the datasheet rate is the pins' rate; 0.2 (assumption) is well below any streaming "
        "kernel's fraction published for the presets' chips"),
    kernel_fraction(
        "attention_fwd", "fraction of the peak a fused attention kernel (FlashAttention) reaches "
        "on its FLOP, forward pass", 0.1,
        _ATTENTION_LOW),
    kernel_fraction(
        "attention_bwd", "fraction of the peak a fused attention kernel reaches on its FLOP, "
        "backward pass", 0.1,
        _ATTENTION_LOW),
    link_fraction(
        "intra_node_collective", "fraction of the intra-node (NVLink) line rate that collectives "
        "sustain (bus bandwidth / line rate)", 0.1,
        f"{_LINE}; 0.1 (assumption): a tenth of the line rate", field="intra_node_efficiency"),
    link_fraction(
        "inter_node_collective", "fraction of the inter-node (network) line rate that collectives "
        "sustain (bus bandwidth / line rate)", 0.1,
        f"{_LINE}; 0.1 (assumption): a tenth of the line rate", field="inter_node_efficiency"),
    kernel_field(
        "overlap_memory_bound_share", "share of the compute overlapped by a hidden data-parallel "
        "collective that runs in memory-bound kernels, which lose HBM bandwidth to the "
        "collective's traffic (archplace.placement.interference)", 0.0, 1.0,
        "0 and 1: a share of a time interval (0: only the SMs the collective takes are lost)"),
    kernel_field(
        "kernel_floor", "least time any kernel takes on the chip (launch and the smallest "
        "kernel's fixed cost, archplace.cost.measured_gemm), seconds", 0.0, 50e-6,
        "0: no floor; 50 us (assumption): ten times the smallest traced kernel of OpenXLA's H100 "
        "table (5.2 us), far above a launch", field="kernel_floor_s", unit="s"),
    _sustained_clock(),
)})
"""Every calibratable parameter by name."""

DEFAULT_FIT = ("gemm_sustained", "hbm")
"""What ``archplace calibrate`` fits unless told, on a chip costed by one fraction per kernel
class: the two kernel figures every training run exercises (GEMMs and streaming kernels) and
that decide most of its time."""

TABLE_FIT = ("sustained_clock", "kernel_floor")
"""What ``archplace calibrate`` fits unless told, on a chip costed by measured kernel tables
(``efficiency.kernel_tables``), whose GEMM and streaming times come from the tables rather than
from ``gemm_sustained`` and ``hbm``: the clock its compute-bound kernels hold in a long run and
the least time of a kernel."""


def default_fit(hardware: ResolvedHardware) -> tuple[str, ...]:
    """The parameters ``archplace calibrate`` fits on ``hardware`` unless told:
    :data:`TABLE_FIT` on a chip with measured kernel tables, :data:`DEFAULT_FIT` otherwise."""
    efficiency = hardware.accelerator.efficiency
    return TABLE_FIT if efficiency is not None and efficiency.kernel_tables else DEFAULT_FIT


def parameters_named(names: Iterable[str]) -> tuple[Parameter, ...]:
    """The registry entries of ``names`` (each once, in order; blanks ignored).

    Raises:
        ConfigError: none named, or an unknown name (the choices listed).
    """
    chosen: dict[str, Parameter] = {}
    for raw in names:
        name = str(raw).strip()
        if not name:
            continue
        if name not in PARAMETERS:
            raise ConfigError(f"fit: unknown parameter {name!r}; choose from: {', '.join(PARAMETERS)}",
                              fields=("fit",))
        chosen.setdefault(name, PARAMETERS[name])
    if not chosen:
        raise ConfigError(f"fit: name at least one parameter; choose from: {', '.join(PARAMETERS)}",
                          fields=("fit",))
    return tuple(chosen.values())


def parse_fit(text: str | Iterable[str]) -> tuple[Parameter, ...]:
    """``"gemm_sustained,hbm"`` (or a list of names) as registry entries
    (:func:`parameters_named`).

    Raises:
        ConfigError: as :func:`parameters_named`.
    """
    names = text.split(",") if isinstance(text, str) else text
    return parameters_named(names)
