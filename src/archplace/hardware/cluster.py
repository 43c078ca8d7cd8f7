"""A cluster of identical accelerators and the links between them."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any

from archplace.errors import ConfigError


class Topology(enum.StrEnum):
    """Inter-device topology; collective costs follow from it."""

    SWITCHED = "switched"
    RING = "ring"
    TORUS_2D = "torus2d"
    TORUS_3D = "torus3d"


@dataclass(frozen=True, slots=True)
class Cluster:
    """``devices`` accelerators, ``devices_per_node`` per node.

    Bandwidths are per device and per direction, in bytes/s; latencies are the
    per-message start-up cost (the alpha of the alpha-beta model), in seconds.

    Raises:
        ConfigError: a non-positive field, or devices_per_node > devices.
    """

    devices: int
    devices_per_node: int
    intra_node_bandwidth_bytes_per_s: float
    inter_node_bandwidth_bytes_per_s: float
    intra_node_latency_s: float
    inter_node_latency_s: float
    topology: Topology = Topology.SWITCHED

    def __post_init__(self) -> None:
        for name in ("devices", "devices_per_node", "intra_node_bandwidth_bytes_per_s",
                     "inter_node_bandwidth_bytes_per_s"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"cluster: {name} must be positive, got {value}")
        for name in ("intra_node_latency_s", "inter_node_latency_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"cluster: {name} must be >= 0, got {getattr(self, name)}")

    def link(self, group_span_devices: int) -> tuple[float, float]:
        """(latency_s, bandwidth_bytes_per_s) of the link a group spanning that many
        consecutive device ranks uses: intra-node if it fits in one node."""
        if group_span_devices <= self.devices_per_node:
            return self.intra_node_latency_s, self.intra_node_bandwidth_bytes_per_s
        return self.inter_node_latency_s, self.inter_node_bandwidth_bytes_per_s

    def with_devices(self, devices: int) -> Cluster:
        """Same links, another device count."""
        return Cluster(devices, min(self.devices_per_node, devices),
                       self.intra_node_bandwidth_bytes_per_s, self.inter_node_bandwidth_bytes_per_s,
                       self.intra_node_latency_s, self.inter_node_latency_s, self.topology)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (SI units), for JSON."""
        d = asdict(self)
        d["topology"] = self.topology.value
        return d
