"""Overlap that costs: the compute a hidden collective slows down.

A collective that runs while the chip computes is not free. NCCL runs each of a collective's
channels as one CUDA thread block (CTA) on its own streaming multiprocessor (NVIDIA/nccl,
``src/enqueue.cc``: the kernel's grid is ``{nChannels, 1, 1}``, one block per channel; the channel
count comes from the topology search, ``src/graph/search.cc`` and ``src/graph/connect.cc``, at
most ``MAXCHANNELS`` = 64, ``src/include/device.h``; commit
5067397c2676d5aed50042fc39e5c8ee96eb0027), and it moves the message through HBM: in a ring
step a device's HBM receives the peer's chunk, and the kernel reads it and the local chunk to
reduce or forward them (``src/device/prims_simple.h``; ``recvReduceSend`` in
``src/device/reduce_scatter.h``, ``directRecvCopyDirectSend`` in ``src/device/all_gather.h``).
So, while a collective runs beside compute kernels,

* compute-bound kernels run on S - s of the chip's S SMs, at rate (S - s) / S, with s the SMs
  the collective's CTAs occupy (``KernelEfficiency.collective_sms``);
* memory-bound kernels share HBM with the collective's traffic: a collective that carries W
  bytes on a device's links makes about ``HBM_BYTES_PER_WIRE_BYTE`` x W = 3 W bytes of HBM
  traffic there, which takes 3 W / B of the streaming bandwidth B (datasheet x
  ``KernelEfficiency.hbm``) from those kernels.

With a share phi of the overlapped compute time in memory-bound kernels
(``KernelEfficiency.overlap_memory_bound_share``), a collective of c seconds carrying W bytes
takes

    L = (1 - phi) (s / S) c + phi min(c, 3 W / B)                  (:meth:`Interference.lost_s`)

compute-seconds from the compute it overlaps: the fraction f = L / c of its capacity while it
runs (the HBM term counts bytes, not the collective's start-up latency, so a slower link, which
moves the same bytes in more time, never lowers L).

One collective of c seconds overlapping compute of t seconds (alone): the compute advances at
rate 1 - f while the collective runs. If it finishes first (t <= (1 - f) c) the pair takes c;
otherwise the collective ends inside it and the pair takes c + (t - (1 - f) c) = t + L. So
the pair takes max(c, t + L) = t + max(c - t, L), i.e. compute + exposed + slowed with

    exposed = max(0, c - t)          (today's overlap: what sticks out)
    slowed  = max(0, L - exposed)     (:func:`slowed_s`)

Full hiding (c <= t) still costs L; a collective that sticks out by more than L costs nothing
more than its exposed part (the slowed compute hides under it); L = 0 (``collective_sms`` = 0
and phi = 0) gives the free overlap of before exactly, and the pair's time t + max(c - t, L)
never decreases when the collective grows (L is non-decreasing in c and W).
The same formula prices a bucketed gradient reduction (:func:`archplace.placement.zero.bucketed_exposed_s`)
with c its whole time and exposed what is left after the backward pass: an approximation (the
buckets start as gradients become ready, so part of the stream may idle inside the backward
pass; the formula charges L on all of c, an upper bound for that part).

Sources of the defaults (:mod:`archplace.hw.accelerator`, ``DEFAULT_COLLECTIVE_SMS``):
DeepSeek-V3 Technical Report (arXiv:2412.19437), sec. 3.2.2: 20 of the H800's 132 SMs suffice
to saturate InfiniBand and NVLink for their overlapped all-to-all; DeepEP (deepseek-ai/DeepEP
README: the normal kernels' SM count is a setting, ``Buffer.set_num_sms(24)`` in its example).
A chip without an ``efficiency`` section (a search-space design) has no SM count and gets no
interference: its overlap stays free (documented in docs/model.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from archplace.base.errors import ConfigError
from archplace.hw.accelerator import Accelerator

FloatArray = npt.NDArray[np.float64]

HBM_BYTES_PER_WIRE_BYTE = 3.0
"""HBM bytes a ring collective moves on one device per byte its links carry: the peer writes
the incoming chunk into this device's buffer (1), the kernel reads it (1) and reads the local
chunk it reduces with, or writes the chunk it keeps (1) (NVIDIA/nccl ``src/device/prims_simple.h``,
the reduce-scatter's ``recvReduceSend`` and the all-gather's ``directRecvCopyDirectSend`` steps,
commit 5067397c2676d5aed50042fc39e5c8ee96eb0027): 3 is the reduce step's count, an all-gather's
is between 2 and 3 (an upper figure for it, an assumption)."""


@dataclass(frozen=True, slots=True)
class Interference:
    """How much of the compute's capacity a collective running beside it takes.

    Attributes:
        sm_share: s / S, the SMs the collective's channels occupy over the chip's SMs, in [0, 1).
        memory_bound_share: phi, the share of the overlapped compute time spent in memory-bound
            kernels, in [0, 1].
        hbm_bandwidth_bytes_per_s: B, the streaming HBM bandwidth (datasheet x ``efficiency.hbm``),
            > 0 (infinity: no HBM contention).

    Raises:
        ConfigError: a share outside its range or a bandwidth that is not positive.
    """

    sm_share: float = 0.0
    memory_bound_share: float = 0.0
    hbm_bandwidth_bytes_per_s: float = math.inf

    def __post_init__(self) -> None:
        if not (math.isfinite(self.sm_share) and 0.0 <= self.sm_share < 1.0):
            raise ConfigError(f"interference: sm_share must be in [0, 1), got {self.sm_share!r}")
        if not (math.isfinite(self.memory_bound_share) and 0.0 <= self.memory_bound_share <= 1.0):
            raise ConfigError(f"interference: memory_bound_share must be in [0, 1], "
                              f"got {self.memory_bound_share!r}")
        if not self.hbm_bandwidth_bytes_per_s > 0:
            raise ConfigError(f"interference: hbm_bandwidth_bytes_per_s must be positive, "
                              f"got {self.hbm_bandwidth_bytes_per_s!r}")

    @classmethod
    def of(cls, acc: Accelerator) -> Interference:
        """The chip's interference: ``collective_sms / sms`` and its memory-bound share from its
        ``efficiency`` section, HBM at datasheet x ``efficiency.hbm``; none (free overlap) for a
        chip without that section."""
        eff = acc.efficiency
        if eff is None:
            return cls()
        return cls(sm_share=eff.collective_sms / eff.sms,
                   memory_bound_share=eff.overlap_memory_bound_share,
                   hbm_bandwidth_bytes_per_s=acc.hbm_bandwidth_bytes_per_s * eff.hbm)

    @property
    def free(self) -> bool:
        """True when no collective slows the compute (L = 0 for every collective)."""
        return self.sm_share == 0.0 and (self.memory_bound_share == 0.0
                                         or math.isinf(self.hbm_bandwidth_bytes_per_s))

    def wire_rate_bytes_per_s(self, cost: tuple[float, float], ranks: int) -> float:
        """Bytes per second a ring collective over ``ranks`` devices carries on each device's
        links while it transfers: an all-reduce of ``cost`` = (start-up s, s per byte) carries
        2 (n - 1) / n of its bytes per device in per-byte x bytes seconds (a reduce-scatter or an
        all-gather half of both, the same rate). 0 for one rank or a free link."""
        per_byte = cost[1]
        if ranks <= 1 or not per_byte > 0:
            return 0.0
        return 2.0 * (ranks - 1) / ranks / per_byte

    def lost_s(self, total_s: npt.ArrayLike, transfer_s: npt.ArrayLike, cost: tuple[float, float],
               ranks: int) -> FloatArray:
        """L = (1 - phi) (s / S) c + phi min(c, 3 W / B): compute-seconds collectives of
        ``total_s`` = c seconds take from the compute they overlap (module docstring), W = wire
        rate x ``transfer_s`` (their time less the start-up latency) the bytes they carry on one
        device's links, over a group of all-reduce ``cost`` and ``ranks`` devices. Arrays
        broadcast; 0 for one rank."""
        total = np.asarray(total_s, dtype=np.float64)
        if ranks <= 1 or self.free:
            return np.zeros_like(total)
        wire = self.wire_rate_bytes_per_s(cost, ranks) * np.asarray(transfer_s, dtype=np.float64)
        return self.lost_for_wire_s(total, wire)

    def lost_for_wire_s(self, total_s: npt.ArrayLike, wire_bytes: npt.ArrayLike) -> FloatArray:
        """L = (1 - phi) (s / S) c + phi min(c, 3 W / B) for collectives of ``total_s`` = c
        seconds that carry ``wire_bytes`` = W on the device's links (any collective: the
        all-to-alls of :mod:`archplace.placement.ep_overlap` give their bytes directly).
        Arrays broadcast."""
        total = np.asarray(total_s, dtype=np.float64)
        phi = self.memory_bound_share
        lost = (1.0 - phi) * self.sm_share * total
        if phi > 0.0 and not math.isinf(self.hbm_bandwidth_bytes_per_s):
            wire = np.asarray(wire_bytes, dtype=np.float64)
            hbm_s = HBM_BYTES_PER_WIRE_BYTE * wire / self.hbm_bandwidth_bytes_per_s
            lost = lost + phi * np.minimum(total, hbm_s)
        return np.asarray(lost, dtype=np.float64)


NO_INTERFERENCE = Interference()
"""Free overlap (f = 0): the time model before interference, and search-space designs."""


def slowed_s(lost_s: npt.ArrayLike, exposed_s: npt.ArrayLike) -> FloatArray:
    """Compute time added by hiding communication: max(0, L - exposed) (module docstring),
    with ``lost_s`` = L, the compute-seconds the collectives take while they run
    (:meth:`Interference.lost_s`, summed over collectives), and ``exposed_s`` the part of them
    left exposed after the compute. Arrays broadcast; seconds."""
    lost = np.asarray(lost_s, dtype=np.float64)
    exposed = np.asarray(exposed_s, dtype=np.float64)
    return np.maximum(0.0, lost - exposed)
