"""Many accelerators as NumPy columns, for scoring one operator on all of them at once.

:class:`CoreConfigArray` holds the fields of N accelerators that the cost model
reads, one array of length N per field.  The cost of a matmul depends only on the
tensor-core side of a design (core count, array shape, buffer, HBM bandwidth,
clock, data type, dataflow, array timing) and that of a vector op only on the vector side, so
each side is reduced once to its distinct rows (``np.unique``) and operators are
costed on those; in PHAZE's space 9 477 designs have 728 distinct tensor sides and
104 distinct vector sides.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from archplace.base.errors import ConfigError
from archplace.hw.accelerator import Accelerator, ArrayTiming, Dataflow, KernelEfficiency

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class TensorSide:
    """The distinct tensor-core sides of a :class:`CoreConfigArray` (arrays of length U).

    ``inverse[i]`` is the index of design ``i``'s distinct row (length N).
    """

    tensor_cores: IntArray
    array_rows: IntArray
    array_cols: IntArray
    buffer_bytes: FloatArray
    hbm_bandwidth_bytes_per_s: FloatArray
    clock_hz: FloatArray
    bytes_per_element: IntArray
    output_stationary: NDArray[np.bool_]
    scalesim_timing: NDArray[np.bool_]
    inverse: IntArray

    @property
    def distinct(self) -> int:
        """Number of distinct rows U."""
        return len(self.tensor_cores)


@dataclass(frozen=True, slots=True)
class VectorSide:
    """The distinct vector-core sides of a :class:`CoreConfigArray` (arrays of length U)."""

    vector_cores: IntArray
    vector_lanes: IntArray
    hbm_bandwidth_bytes_per_s: FloatArray
    clock_hz: FloatArray
    inverse: IntArray

    @property
    def distinct(self) -> int:
        """Number of distinct rows U."""
        return len(self.vector_cores)


_TENSOR_FIELDS = ("tensor_cores", "array_rows", "array_cols", "buffer_bytes",
                  "hbm_bandwidth_bytes_per_s", "clock_hz", "bytes_per_element", "output_stationary",
                  "scalesim_timing")
_FLAGS = ("output_stationary", "scalesim_timing")
_VECTOR_FIELDS = ("vector_cores", "vector_lanes", "hbm_bandwidth_bytes_per_s", "clock_hz")


@dataclass(frozen=True)
class CoreConfigArray:
    """Fields of N accelerators as arrays of length N (units as in :class:`Accelerator`).

    Build it with :meth:`from_accelerators`.  Arrays are read-only.  ``efficiencies`` holds each
    design's declared :class:`KernelEfficiency` (None: the cycle model); empty means all None.

    Raises:
        ConfigError: arrays of different lengths, no designs, or a non-positive size.
    """

    tensor_cores: IntArray
    array_rows: IntArray
    array_cols: IntArray
    vector_cores: IntArray
    vector_lanes: IntArray
    buffer_bytes: FloatArray
    hbm_bandwidth_bytes_per_s: FloatArray
    clock_hz: FloatArray
    bytes_per_element: IntArray
    output_stationary: NDArray[np.bool_]
    scalesim_timing: NDArray[np.bool_]
    efficiencies: tuple[KernelEfficiency | None, ...] = ()

    def __post_init__(self) -> None:
        lengths = {len(getattr(self, name)) for name in self._fields()}
        if len(lengths) != 1:
            raise ConfigError(f"core configs: columns of different lengths {sorted(lengths)}")
        if not lengths or lengths == {0}:
            raise ConfigError("core configs: no designs")
        for name in self._fields():
            array = getattr(self, name)
            if name not in _FLAGS and not np.all(array > 0):
                raise ConfigError(f"core configs: {name} must be positive")
            array.setflags(write=False)
        if self.efficiencies and len(self.efficiencies) != len(self.tensor_cores):
            raise ConfigError(f"core configs: {len(self.efficiencies)} efficiencies for "
                              f"{len(self.tensor_cores)} designs")

    @staticmethod
    def _fields() -> tuple[str, ...]:
        return ("tensor_cores", "array_rows", "array_cols", "vector_cores", "vector_lanes",
                "buffer_bytes", "hbm_bandwidth_bytes_per_s", "clock_hz", "bytes_per_element",
                "output_stationary", "scalesim_timing")

    @classmethod
    def from_accelerators(cls, accelerators: Sequence[Accelerator]) -> CoreConfigArray:
        """Columns of ``accelerators``, in their order.

        Raises:
            ConfigError: an empty sequence.
        """
        if not accelerators:
            raise ConfigError("core configs: no designs")

        def ints(name: str) -> IntArray:
            return np.array([getattr(a, name) for a in accelerators], dtype=np.int64)

        def floats(name: str) -> FloatArray:
            return np.array([getattr(a, name) for a in accelerators], dtype=np.float64)

        return cls(
            tensor_cores=ints("tensor_cores"), array_rows=ints("array_rows"),
            array_cols=ints("array_cols"), vector_cores=ints("vector_cores"),
            vector_lanes=ints("vector_lanes"), buffer_bytes=floats("buffer_bytes"),
            hbm_bandwidth_bytes_per_s=floats("hbm_bandwidth_bytes_per_s"),
            clock_hz=floats("clock_hz"), bytes_per_element=ints("bytes_per_element"),
            output_stationary=np.array([a.dataflow is Dataflow.OS for a in accelerators],
                                       dtype=np.bool_),
            scalesim_timing=np.array([a.array_timing is ArrayTiming.SCALESIM for a in accelerators],
                                     dtype=np.bool_),
            efficiencies=(tuple(a.efficiency for a in accelerators)
                          if any(a.efficiency is not None for a in accelerators) else ()),
        )

    def __len__(self) -> int:
        return len(self.tensor_cores)

    @functools.cached_property
    def fingerprint(self) -> str:
        """A digest of every column: equal configs have equal fingerprints (cache keys)."""
        digest = hashlib.blake2b(digest_size=16)
        for name in self._fields():
            digest.update(np.ascontiguousarray(getattr(self, name)).tobytes())
        digest.update(repr(self.efficiencies).encode())
        return digest.hexdigest()

    def _unique(self, fields: tuple[str, ...]) -> tuple[FloatArray, IntArray]:
        table = np.column_stack([getattr(self, f).astype(np.float64) for f in fields])
        unique, inverse = np.unique(table, axis=0, return_inverse=True)
        return unique, inverse.reshape(-1).astype(np.int64)

    @functools.cached_property
    def tensor_side(self) -> TensorSide:
        """Distinct tensor-core sides (what a matmul's cost depends on)."""
        u, inv = self._unique(_TENSOR_FIELDS)
        return TensorSide(
            tensor_cores=u[:, 0].astype(np.int64), array_rows=u[:, 1].astype(np.int64),
            array_cols=u[:, 2].astype(np.int64), buffer_bytes=u[:, 3].copy(),
            hbm_bandwidth_bytes_per_s=u[:, 4].copy(), clock_hz=u[:, 5].copy(),
            bytes_per_element=u[:, 6].astype(np.int64), output_stationary=u[:, 7] > 0.5,
            scalesim_timing=u[:, 8] > 0.5, inverse=inv,
        )

    @functools.cached_property
    def vector_side(self) -> VectorSide:
        """Distinct vector-core sides (what a vector op's cost depends on)."""
        u, inv = self._unique(_VECTOR_FIELDS)
        return VectorSide(
            vector_cores=u[:, 0].astype(np.int64), vector_lanes=u[:, 1].astype(np.int64),
            hbm_bandwidth_bytes_per_s=u[:, 2].copy(), clock_hz=u[:, 3].copy(), inverse=inv,
        )
