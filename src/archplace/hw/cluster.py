"""A cluster of identical accelerators and the links between them."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any

from archplace.base.errors import ConfigError
from archplace.cost.nccl_constants import GENERATIONS


class Topology(enum.StrEnum):
    """Inter-device topology; collective costs follow from it."""

    SWITCHED = "switched"
    RING = "ring"
    TORUS_2D = "torus2d"
    TORUS_3D = "torus3d"


@dataclass(frozen=True, slots=True)
class Cluster:
    """``devices`` accelerators, ``devices_per_node`` per node.

    Bandwidths are per device and per direction, in bytes/s (the datasheet line rate);
    latencies are the per-message start-up cost (the alpha of the alpha-beta model), in
    seconds.  ``intra_node_efficiency`` and ``inter_node_efficiency`` are the fractions of the
    line rate that NCCL-style collectives sustain on each link (nccl-tests "bus bandwidth" over
    the line rate; a preset's ``efficiency`` section gives them with their sources); 1 keeps
    the line rate.  :meth:`link` returns the sustained bandwidth, so every pipeline send and
    gradient reduction of the placement is charged at it.

    ``nics_per_node``: the network adapters of one node, which its GPUs share (None: one per
    device, ``devices_per_node``); one NIC carries ``inter_node_bandwidth x devices_per_node /
    nics_per_node`` (the inter-node bandwidth stays the per-device share of the node's).
    ``nccl_generation``: ``volta``, ``ampere``, ``hopper`` or ``blackwell`` for GPUs that NCCL
    runs the collectives of (:mod:`archplace.cost.nccl`, which then prices the collectives with
    NCCL's own constants and ignores the two efficiencies); None keeps the alpha-beta model
    (TPUs, other accelerators, the search's designs).

    Raises:
        ConfigError: a non-positive field, an efficiency outside (0, 1], devices_per_node >
            devices, or an unknown nccl_generation.
    """

    devices: int
    devices_per_node: int
    intra_node_bandwidth_bytes_per_s: float
    inter_node_bandwidth_bytes_per_s: float
    intra_node_latency_s: float
    inter_node_latency_s: float
    topology: Topology = Topology.SWITCHED
    intra_node_efficiency: float = 1.0
    inter_node_efficiency: float = 1.0
    nics_per_node: int | None = None
    nccl_generation: str | None = None

    def __post_init__(self) -> None:
        for name in ("devices", "devices_per_node", "intra_node_bandwidth_bytes_per_s",
                     "inter_node_bandwidth_bytes_per_s"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"cluster: {name} must be positive, got {value}")
        for name in ("intra_node_latency_s", "inter_node_latency_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"cluster: {name} must be >= 0, got {getattr(self, name)}")
        for name in ("intra_node_efficiency", "inter_node_efficiency"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ConfigError(f"cluster: {name} must be a fraction in (0, 1], got {value}")
        nics = self.nics_per_node
        if nics is not None and (isinstance(nics, bool) or not isinstance(nics, int) or nics < 1):
            raise ConfigError(f"cluster: nics_per_node must be a whole number >= 1, got {nics!r}")
        if self.nccl_generation is not None and self.nccl_generation not in GENERATIONS:
            raise ConfigError(f"cluster: unknown nccl_generation {self.nccl_generation!r}; "
                              f"choose from: {', '.join(GENERATIONS)}")

    @property
    def node_nics(self) -> int:
        """NICs per node: ``nics_per_node``, or one per device when it is None."""
        return self.nics_per_node if self.nics_per_node is not None else self.devices_per_node

    @property
    def nic_bandwidth_bytes_per_s(self) -> float:
        """One NIC's line rate per direction: the node's inter-node bandwidth over its NICs."""
        return self.inter_node_bandwidth_bytes_per_s * self.devices_per_node / self.node_nics

    def link(self, group_span_devices: int) -> tuple[float, float]:
        """(latency_s, bandwidth_bytes_per_s) of the link a group spanning that many
        consecutive device ranks uses: intra-node if it fits in one node.  The bandwidth is the
        sustained one, line rate x the link's efficiency."""
        if group_span_devices <= self.devices_per_node:
            return (self.intra_node_latency_s,
                    self.intra_node_bandwidth_bytes_per_s * self.intra_node_efficiency)
        return (self.inter_node_latency_s,
                self.inter_node_bandwidth_bytes_per_s * self.inter_node_efficiency)

    def fastest_bandwidth_bytes_per_s(self) -> float:
        """The larger sustained bandwidth of the two links (bytes/s): no transfer :meth:`link`
        or :meth:`group_link` prices is faster (floors of communication time use it)."""
        return max(self.intra_node_bandwidth_bytes_per_s * self.intra_node_efficiency,
                   self.inter_node_bandwidth_bytes_per_s * self.inter_node_efficiency)

    def group_link(self, group_size: int, stride: int = 1) -> tuple[float, float]:
        """(latency_s, bandwidth_bytes_per_s) of the link the collectives of a group of
        ``group_size`` ranks ``stride`` apart use, the slowest link any such group has.

        Groups of consecutive ranks (``stride`` 1: TP, and any group laid out fastest) tile the
        ranks in aligned blocks of ``group_size``.  When ``group_size`` does not divide
        ``devices_per_node`` and the cluster has more than one node, some of those blocks
        straddle a node boundary (a 72-GPU NVLink domain cut into TP groups of 16: ranks 64-79
        span two domains), so the inter-node link is returned; otherwise, and for every
        ``stride`` > 1, it is :meth:`link` of the span ``stride * (group_size - 1) + 1``.  With
        8 devices per node and power-of-two groups this equals :meth:`link` of the span.
        """
        node = self.devices_per_node
        if stride == 1 and self.devices > node and 0 < group_size <= node and node % group_size:
            return (self.inter_node_latency_s,
                    self.inter_node_bandwidth_bytes_per_s * self.inter_node_efficiency)
        return self.link(stride * (group_size - 1) + 1)

    def with_devices(self, devices: int) -> Cluster:
        """Same links, another device count."""
        return Cluster(devices, min(self.devices_per_node, devices),
                       self.intra_node_bandwidth_bytes_per_s, self.inter_node_bandwidth_bytes_per_s,
                       self.intra_node_latency_s, self.inter_node_latency_s, self.topology,
                       self.intra_node_efficiency, self.inter_node_efficiency,
                       self.nics_per_node, self.nccl_generation)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (SI units), for JSON."""
        d = asdict(self)
        d["topology"] = self.topology.value
        return d
