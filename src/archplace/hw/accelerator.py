"""The accelerator template searched by PHAZE and WHAM (docs/concepts.md, Design, space, plan).

A chip is ``tensor_cores`` systolic arrays of ``array_rows x array_cols`` MACs,
``vector_cores`` SIMD cores of ``vector_lanes`` lanes, a global on-chip buffer
shared by the cores, and HBM.  ``dataflow`` says how the arrays run a matmul
(weight stationary or output stationary, :mod:`archplace.cost.gemm`) and
``array_timing`` which cycle model times it (:class:`ArrayTiming`).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, TypeVar

from archplace.base.errors import ConfigError

E = TypeVar("E", bound=enum.StrEnum)


class Dataflow(enum.StrEnum):
    """How a systolic array maps a matmul (docs/model.md, Per-operator cost)."""

    WS = "ws"  # weight stationary: a K x N weight tile stays in the array, inputs stream
    OS = "os"  # output stationary: an M x N output tile stays in the array, both operands stream


class ArrayTiming(enum.StrEnum):
    """Which cycle model times a matmul on a systolic array (:mod:`archplace.cost.gemm`).

    * ``OVERLAPPED`` (default): a fold's weight load and pipeline fill overlap the
      previous fold -- every PE has a shadow weight register.  This is how a
      weight-stationary TPU matrix unit is built: "The matrix unit holds one 64 KiB
      tile of weights plus one for double-buffering (to hide the 256 cycles it takes
      to shift a tile in)" (Jouppi et al., "In-Datacenter Performance Analysis of a
      Tensor Processing Unit", ISCA 2017, sec. 2).  The training MXUs of TPUv2-v4
      (Norrie et al., IEEE Micro 2021; Jouppi et al., ISCA 2023) descend from that
      unit; that they keep the shadow weight tile is an assumption (neither paper
      gives the register-level design), so the default models the published one.
    * ``SCALESIM``: SCALE-Sim's count (Samajdar et al., "A Systematic Methodology
      for Characterizing Scalability of DNN Accelerators using SCALE-Sim", ISPASS
      2020; the ``scalesim`` 2.0.2 package): each fold loads its weights, streams
      its operands and drains its outputs before the next fold starts, with no
      overlap between folds.  The reference simulator of the field; choose it to
      compare with published SCALE-Sim results.
    """

    OVERLAPPED = "overlapped"
    SCALESIM = "scalesim"


def _positive(owner: str, **values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ConfigError(f"{owner}: {name} must be positive, got {value}")


def _whole(owner: str, **values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{owner}: {name} must be a whole number, got {value!r}")


DEFAULT_COLLECTIVE_SMS = 20
"""SMs an overlapped data-parallel collective occupies on a known chip without its own figure:
DeepSeek-V3 Technical Report (arXiv:2412.19437), sec. 3.2.2, dedicates 20 of the H800's 132
SMs to communication overlapped with computation (enough to saturate InfiniBand and NVLink);
DeepEP's README example sets 24 (``Buffer.set_num_sms(24)``, deepseek-ai/DeepEP). NCCL runs
one thread block per channel and searches up to ``MAXCHANNELS / 2`` = 32 ring channels before
duplicating them (NVIDIA/nccl ``src/init.cc``, ``src/graph/connect.cc``, commit
5067397c2676d5aed50042fc39e5c8ee96eb0027), so 20 is within its range; a figure to calibrate."""

FRAMEWORK_OVERLAPS = ("tp_comm_overlap", "pp_comm_overlap", "ep_comm_overlap")
"""The framework's communication-overlap switches a chip's ``efficiency`` section (and a run's
hardware options) may set: optional true/false flags, absent from files when off."""


@dataclass(frozen=True, slots=True)
class KernelEfficiency:
    """What real kernels sustain on a known chip (a preset's ``efficiency`` section).

    Designs of a search space have none: their efficiency is what the cycle model's counts give.
    The formulas that use these figures are in :mod:`archplace.cost.efficiency`.

    Attributes:
        sms: streaming multiprocessors (the wave of a GEMM is ``sms`` output tiles, one
            thread block per SM, as for 256x128 tiles on A100 in NVIDIA's *Matrix
            Multiplication Background User's Guide*, sec. 3.2).
        gemm_tiles: output tiles ``(rows, cols)`` the vendor library uses; a GEMM takes the one
            that wastes least to tile and wave quantization.
        gemm_sustained: fraction of the peak a GEMM sustains once its tiles fill whole waves, in (0, 1].
        hbm: fraction of the datasheet HBM bandwidth that streaming kernels reach, in (0, 1].
        attention_fwd, attention_bwd: fraction of the peak a fused attention operator
            (FlashAttention) reaches on its FLOP, forward and backward, in (0, 1].
        attention_kernel: ``"<family>/<preset>"``, the measured attention table the cost model
            reads instead of ``attention_fwd`` / ``attention_bwd`` (e.g. ``flash2/a100-80gb``,
            :mod:`archplace.cost.attention_tables`); None: those two fractions for every shape.
        collective_sms: SMs a data-parallel collective (NCCL reduce-scatter, all-gather,
            all-reduce) occupies while it overlaps compute, a whole number in [0, sms): one
            per NCCL channel (:mod:`archplace.placement.interference`); default
            :data:`DEFAULT_COLLECTIVE_SMS`; 0 makes overlap free.
        overlap_memory_bound_share: share of the overlapped compute time in memory-bound
            kernels, which lose HBM bandwidth to the collective's traffic, in [0, 1]; default 0
            (the SM share alone; a figure for ``archplace calibrate``).
        kernel_tables: measured kernel tables the chip's GEMMs and streaming kernels are
            costed by (:mod:`archplace.cost.kernel_tables`): names of shipped tables
            (:func:`archplace.cost.measured_tables.shipped_tables`) or paths of table files;
            empty (the default): one fraction per kernel class.
        kernel_floor_s: the least time any kernel takes on the chip, seconds, >= 0 (0: none).
        tp_comm_overlap: the framework hides the tensor-parallel collectives behind the GEMMs
            next to them (Transformer Engine's userbuffers overlap, NeMo's and
            Megatron-Bridge's ``tp_comm_overlap``; :mod:`archplace.placement.tp_overlap`);
            False (the default): they are exposed whole.
        pp_comm_overlap: the framework overlaps the interleaved schedule's pipeline sends and
            receives with the next chunk's computation (Megatron-Core's ``overlap_p2p_comm``,
            on in NeMo's and Megatron-Bridge's interleaved configurations;
            :mod:`archplace.placement.pipeline`); False (the default): they block.
        ep_comm_overlap: the framework hides one micro-batch's expert-parallel all-to-alls
            behind another micro-batch's computation (Megatron-Core's
            ``overlap_moe_expert_parallel_comm``, DeepSeek-V3's DualPipe overlap;
            :mod:`archplace.placement.ep_overlap`); False (the default): they are exposed whole.
        sustained_clock_hz: the SM clock the chip holds under minutes of tensor-core load at its
            board power limit, Hz (0, the default: not declared, no scaling); compute-bound
            kernels measured at another clock are scaled to it (:mod:`archplace.cost.clock`).
        sustained_clock_fp8_hz: the same for FP8 GEMMs, whose denser arithmetic meets the power
            limit at a lower clock, Hz (0, the default: ``sustained_clock_hz``, for FP8 GEMMs too).

    Raises:
        ConfigError: a count that is not a positive whole number, no tile, a fraction outside
            (0, 1], ``collective_sms`` outside [0, sms) or a share outside [0, 1].
    """

    sms: int
    gemm_tiles: tuple[tuple[int, int], ...]
    gemm_sustained: float
    hbm: float
    attention_fwd: float
    attention_bwd: float
    attention_kernel: str | None = None
    collective_sms: int = DEFAULT_COLLECTIVE_SMS
    overlap_memory_bound_share: float = 0.0
    kernel_tables: tuple[str, ...] = ()
    kernel_floor_s: float = 0.0
    sustained_clock_hz: float = 0.0
    sustained_clock_fp8_hz: float = 0.0
    tp_comm_overlap: bool = False
    pp_comm_overlap: bool = False
    ep_comm_overlap: bool = False

    def __post_init__(self) -> None:
        owner = "efficiency"
        kernel = self.attention_kernel
        if kernel is not None and (not isinstance(kernel, str) or kernel.count("/") != 1
                                   or not all(kernel.split("/"))):
            raise ConfigError(f"{owner}: attention_kernel must be FAMILY/PRESET such as flash2/a100-80gb, "
                              f"got {kernel!r}")
        for flag in FRAMEWORK_OVERLAPS:
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"{owner}: {flag} must be true or false, got {getattr(self, flag)!r}")
        tables = self.kernel_tables
        if isinstance(tables, str) or not all(isinstance(t, str) and t for t in tables):
            raise ConfigError(f"{owner}: kernel_tables must be a list of table names or paths, "
                              f"got {tables!r}")
        object.__setattr__(self, "kernel_tables", tuple(tables))
        floor = self.kernel_floor_s
        if isinstance(floor, bool) or not isinstance(floor, int | float) or not (
                math.isfinite(floor) and 0.0 <= floor <= 1e-3):
            raise ConfigError(f"{owner}: kernel_floor_s must be seconds in [0, 1e-3], got {floor!r}")
        object.__setattr__(self, "kernel_floor_s", float(floor))
        for name in ("sustained_clock_hz", "sustained_clock_fp8_hz"):
            sustained = getattr(self, name)
            if isinstance(sustained, bool) or not isinstance(sustained, int | float) or not (
                    math.isfinite(sustained) and (sustained == 0.0 or 5e7 <= sustained <= 1e10)):
                raise ConfigError(f"{owner}: {name} must be 0 (none) or Hz in [5e7, 1e10], "
                                  f"got {sustained!r}")
            object.__setattr__(self, name, float(sustained))
        _whole(owner, sms=self.sms)
        _positive(owner, sms=self.sms)
        tiles = tuple(tuple(t) for t in self.gemm_tiles)
        if not tiles:
            raise ConfigError(f"{owner}: gemm_tiles must name at least one tile")
        for tile in tiles:
            if len(tile) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in tile):
                raise ConfigError(f"{owner}: gemm_tiles: expected (rows, cols) positive whole numbers, "
                                  f"got {tile!r}")
        object.__setattr__(self, "gemm_tiles", tiles)
        for name in ("gemm_sustained", "hbm", "attention_fwd", "attention_bwd"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    math.isfinite(value) and 0.0 < value <= 1.0):
                raise ConfigError(f"{owner}: {name} must be a fraction in (0, 1], got {value!r}")
        _whole(owner, collective_sms=self.collective_sms)
        if not 0 <= self.collective_sms < self.sms:
            raise ConfigError(f"{owner}: collective_sms must be in [0, sms={self.sms}), "
                              f"got {self.collective_sms}")
        share = self.overlap_memory_bound_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not (
                math.isfinite(share) and 0.0 <= share <= 1.0):
            raise ConfigError(f"{owner}: overlap_memory_bound_share must be in [0, 1], got {share!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KernelEfficiency:
        """Inverse of :meth:`to_dict`.

        Raises:
            ConfigError: a missing or unknown field, or a bad value.
        """
        names = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING}
        if not required <= set(data) <= names:
            raise ConfigError(f"efficiency: expected the fields {', '.join(sorted(names))}, "
                              f"got {', '.join(sorted(map(str, data)))}")
        return cls(**data)  # __post_init__ turns the tiles and tables into tuples

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (tiles as lists), for JSON."""
        d = asdict(self)
        d["gemm_tiles"] = [list(t) for t in self.gemm_tiles]
        if self.attention_kernel is None:  # optional: absent, as before it existed
            del d["attention_kernel"]
        for flag in FRAMEWORK_OVERLAPS:  # optional: absent when off
            if not d[flag]:
                del d[flag]
        d["kernel_tables"] = list(self.kernel_tables)
        return d


def enum_member(kind: type[E], value: object, owner: str, name: str) -> E:
    """``value`` as a member of the string enum ``kind`` (a member or its text).

    Raises:
        ConfigError: ``"<owner>: unknown <name> <value>; choose from: <choices>"``.
    """
    if isinstance(value, kind):
        return value
    try:
        return kind(str(value))
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise ConfigError(f"{owner}: unknown {name} {value!r}; choose from: {choices}") from None


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One accelerator design, in SI units.

    Attributes:
        name: label used in tables.
        tensor_cores: number of systolic arrays.
        array_rows, array_cols: MACs per array are ``array_rows * array_cols``; rows run
            along the reduction (K) dimension of a weight-stationary matmul.
        vector_cores: number of vector cores.
        vector_lanes: elements each vector core processes per cycle (for a TPU, lanes x
            sublanes: 128 x 8 = 1024).
        buffer_bytes: global on-chip buffer (SRAM) capacity.
        hbm_bytes: off-chip memory capacity.
        hbm_bandwidth_bytes_per_s: off-chip memory bandwidth.
        clock_hz: core clock.
        bytes_per_element: width of the training data type (2 for bf16/fp16).
        dataflow: ``Dataflow.WS`` (default) or ``Dataflow.OS``; the text ``"ws"``/``"os"``
            is accepted and converted.
        array_timing: ``ArrayTiming.OVERLAPPED`` (default) or ``ArrayTiming.SCALESIM``; the
            text ``"overlapped"``/``"scalesim"`` is accepted and converted.
        efficiency: what real kernels sustain (:class:`KernelEfficiency`, a mapping is
            converted), or None: the cycle model (designs of a search space).
        fp8_speedup: how many times faster the arrays run a GEMM with FP8 operands than with
            bf16 ones (2 on H100: 1,979 dense FP8 TFLOP/s against 989 bf16), >= 1; None: the
            chip has no FP8 tensor cores (:mod:`archplace.cost.precision`).

    Raises:
        ConfigError: a non-positive field, a count that is not a whole number, or an
            unknown dataflow or array timing, an ``fp8_speedup`` below 1 or not finite.
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
    dataflow: Dataflow = Dataflow.WS
    array_timing: ArrayTiming = ArrayTiming.OVERLAPPED
    efficiency: KernelEfficiency | None = None
    fp8_speedup: float | None = None

    def __post_init__(self) -> None:
        owner = f"accelerator {self.name!r}"
        _whole(owner, tensor_cores=self.tensor_cores, array_rows=self.array_rows,
               array_cols=self.array_cols, vector_cores=self.vector_cores,
               vector_lanes=self.vector_lanes, bytes_per_element=self.bytes_per_element)
        _positive(
            owner,
            tensor_cores=self.tensor_cores, array_rows=self.array_rows,
            array_cols=self.array_cols, vector_cores=self.vector_cores,
            vector_lanes=self.vector_lanes, buffer_bytes=self.buffer_bytes,
            hbm_bytes=self.hbm_bytes, hbm_bandwidth_bytes_per_s=self.hbm_bandwidth_bytes_per_s,
            clock_hz=self.clock_hz, bytes_per_element=self.bytes_per_element,
        )
        object.__setattr__(self, "dataflow", enum_member(Dataflow, self.dataflow, owner, "dataflow"))
        object.__setattr__(self, "array_timing",
                           enum_member(ArrayTiming, self.array_timing, owner, "array_timing"))
        if isinstance(self.efficiency, Mapping):
            object.__setattr__(self, "efficiency", KernelEfficiency.from_dict(self.efficiency))
        elif self.efficiency is not None and not isinstance(self.efficiency, KernelEfficiency):
            raise ConfigError(f"{owner}: efficiency must be a KernelEfficiency or None, "
                              f"got {self.efficiency!r}")
        if self.fp8_speedup is not None:
            speedup = self.fp8_speedup
            if isinstance(speedup, bool) or not isinstance(speedup, int | float) or not (
                    math.isfinite(speedup) and speedup >= 1.0):
                raise ConfigError(f"{owner}: fp8_speedup must be a number >= 1 or None, got {speedup!r}")
            object.__setattr__(self, "fp8_speedup", float(speedup))

    @property
    def macs(self) -> int:
        """Multiply-accumulate units on the chip."""
        return self.tensor_cores * self.array_rows * self.array_cols

    @property
    def peak_flop_per_s(self) -> float:
        """Dense peak: 2 FLOP per MAC per cycle on every array."""
        return 2.0 * self.macs * self.clock_hz

    @property
    def vector_elements_per_s(self) -> float:
        """Peak vector throughput: one element per lane per cycle on every vector core."""
        return float(self.vector_cores * self.vector_lanes) * self.clock_hz

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (SI units, the dataflow and array timing as text, the
        efficiency as a dict or None), for JSON."""
        d = asdict(self)
        d["dataflow"] = self.dataflow.value
        d["array_timing"] = self.array_timing.value
        d["efficiency"] = None if self.efficiency is None else self.efficiency.to_dict()
        return d
