"""A hardware spec whose chip and links are already loaded: :class:`ResolvedHardware`.

``api.evaluate(..., hardware=ResolvedHardware.load("a100-80gb"))`` runs exactly as
``hardware="a100-80gb"`` does, without reading the file again; a changed copy
(``dataclasses.replace`` of its ``chip`` or ``links``) evaluates a chip that exists in no file.
``archplace calibrate`` evaluates each candidate set of efficiencies this way (writing a YAML
file per candidate would cost a file write and a parse per evaluation).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from archplace.base import limits
from archplace.base.errors import ConfigError, MissingSectionError
from archplace.front.specs.run import HardwareSpec
from archplace.hw.accelerator import Accelerator
from archplace.hw.cluster import Cluster
from archplace.hw.presets import load_accelerator, load_cluster


@dataclass(frozen=True)
class ResolvedHardware(HardwareSpec):
    """A :class:`~archplace.front.specs.HardwareSpec` carrying its loaded chip and links.

    Attributes:
        hardware: the preset name or file it was loaded from (for messages and tables).
        cluster: always None (the links are ``links_of``'s).
        chip: the accelerator, with its kernel efficiencies.
        network: the links with the collective efficiencies, ``devices_per_node`` as the file
            gives it (not capped by a device count), or None: the file has no ``cluster``
            section (a chip alone).

    Raises:
        ConfigError: ``chip`` is not an :class:`Accelerator`, ``network`` not a :class:`Cluster`.
    """

    OWNER: ClassVar[str] = "resolved hardware"
    chip: Accelerator | None = None
    network: Cluster | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.chip, Accelerator):
            raise ConfigError(f"resolved hardware {self.hardware!r}: chip must be an Accelerator, "
                              f"got {type(self.chip).__name__}")
        if self.network is not None and not isinstance(self.network, Cluster):
            raise ConfigError(f"resolved hardware {self.hardware!r}: network must be a Cluster or "
                              f"None, got {type(self.network).__name__}")

    @classmethod
    def load(cls, name_or_path: str | os.PathLike[str], cluster: str | None = None) -> ResolvedHardware:
        """The chip of a preset or hardware file and the links of ``cluster`` (default: its own).

        Raises:
            ConfigError: as :func:`~archplace.hw.presets.load_accelerator` and
                :func:`~archplace.hw.presets.load_cluster`.
        """
        name = os.fspath(name_or_path)
        chip = load_accelerator(name)
        try:
            # the most devices there may be: devices_per_node stays the file's
            network: Cluster | None = load_cluster(cluster or name, limits.MAX_DEVICES)
        except MissingSectionError as exc:
            if exc.section != "cluster":
                raise
            network = None
        return cls(hardware=name, chip=chip, network=network)

    @property
    def accelerator(self) -> Accelerator:
        """The chip (never None once built)."""
        assert self.chip is not None  # checked in __post_init__
        return self.chip

    def links_of(self, devices: int) -> Cluster:
        """``devices`` chips joined by these links (``devices_per_node`` capped at ``devices``;
        every other field, efficiencies included, kept).

        Raises:
            MissingSectionError: the hardware has no ``cluster`` section.
            ConfigError: ``devices`` is not a whole number in 1..2**20.
        """
        limits.whole("devices", devices, 1, limits.MAX_DEVICES)
        if self.network is None:
            raise MissingSectionError(f"{self.hardware}: no cluster section: the chip has no links",
                                      section="cluster")
        return replace(self.network, devices=devices,
                       devices_per_node=min(self.network.devices_per_node, devices))

    def to_dict(self) -> dict[str, Any]:
        """The spec's JSON form: the name it was loaded from (the objects are not JSON)."""
        return {"hardware": self.hardware, "cluster": None}
