"""NCCL's own tuning constants, per GPU generation (facts, read from NCCL's source).

Every number here is copied as a value (no code) from NVIDIA/nccl at commit
``5067397c2676d5aed50042fc39e5c8ee96eb0027`` (master, 2026-06-11):

* ``src/graph/tuning.cc``: ``nvlsEfficiency`` (l. 139), ``ncclTunerConstantsDefaults``
  (l. 146-211: ``baseLatencies``, ``hwLatencies``, ``llMaxBws``, ``perChMaxRingLL128Bws``,
  ``perChMaxTreeLL128Bws``, ``perChMaxTreeBws``), ``getNetOverhead`` (l. 228: 1 µs on Intel
  x86 and other CPUs, 2 µs on AMD), ``treeCorrectionFactor`` (l. 614) and the protocol
  factors inside ``ncclTopoTuneModel`` (0.5 for LL, 120/128 for LL128, 0.92 for trees, ...;
  used in :mod:`archplace.cost.nccl`).
* ``src/graph/search.cc``: the search speeds ``speedArrayIntra``/``Inter`` and their ``sm90``
  and ``sm100`` variants (l. 1051-1065), in GB/s per channel.
* ``src/graph/topo.h``: ``SM80_NVLINK_BW`` 20.0, ``SM90_NVLINK_BW`` 20.6, ``SM100_NVLINK_BW``
  40.1 GB/s (l. 19-24), what NCCL counts per NVLink per direction.
* ``src/graph/topo.cc`` l. 657: a PCIe link of ``width`` lanes at ``speed`` (in 100 Mb/s per
  lane: 120 for 16 GT/s Gen4, 240 for 32 GT/s Gen5) carries ``width * speed / 80`` GB/s:
  24 GB/s for Gen4 x16, 48 GB/s for Gen5 x16.
* ``src/init.cc`` l. 1177: ring graphs search up to ``MAXCHANNELS / 2`` = 32 channels
  (``MAXCHANNELS`` 64, ``src/include/device.h`` l. 91).

Units are NCCL's: latencies in microseconds, bandwidths in GB/s (1e9 bytes/s).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

NCCL_COMMIT = "5067397c2676d5aed50042fc39e5c8ee96eb0027"

ALGORITHMS = ("tree", "ring", "nvls")
PROTOCOLS = ("LL", "LL128", "Simple")

# ncclTunerConstantsDefaults.baseLatencies (tuning.cc l. 150-153), µs, per (algorithm, protocol).
BASE_LATENCY_US = MappingProxyType({
    "tree": (6.8, 14.0, 8.4),
    "ring": (6.6, 14.0, 8.4),
    "nvls": (0.0, 0.0, 0.0),
})

# ncclTunerConstantsDefaults.hwLatencies (tuning.cc l. 156-175), µs per step, per link class
# (NVLINK, NET) and (algorithm, protocol).  NVLS has only Simple.
HW_LATENCY_US = MappingProxyType({
    "nvlink": MappingProxyType({"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4),
                                "nvls": (0.0, 0.0, 25.0)}),
    "net": MappingProxyType({"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0),
                             "nvls": (0.0, 0.0, 18.0)}),
})

# getNetOverhead (tuning.cc l. 228): per inter-node ring step, µs (x86 Intel and non-x86: 1.0);
# tripled for Simple (l. 407).
NET_OVERHEAD_US = 1.0

# treeCorrectionFactor (tuning.cc l. 614-618): tree all-reduce bandwidth factor per protocol for
# messages of 64 B x 2^i, i = 0..23 (i = floor(log2(bytes / 64))); 1 beyond the table.
TREE_CORRECTION = MappingProxyType({
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
           1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
              .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
               .8, .9, .9, .9),
})

MAX_RING_CHANNELS = 32  # init.cc l. 1177: MAXCHANNELS / 2
PCI_BW_GBPS = 12.0      # topo.h l. 25: PCI_BW (Gen3 x16), NCCL's threshold for fewer Simple threads
MAX_NVLS_ARITY = 32     # device.h: NCCL_MAX_NVLS_ARITY

_SPEEDS_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
_SPEEDS_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0,
                 3.0, 2.4, 1.2, 0.24, 0.12)
_SM90_INTRA = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
_SM90_INTER = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4,
               1.2, 0.24, 0.12)
_SM100_INTRA = (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)
_SM100_INTER = (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0,
                12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)


@dataclass(frozen=True, slots=True)
class NcclGeneration:
    """NCCL's constants for one GPU generation (compute-capability index of ``tuning.cc``).

    Attributes:
        name: ``volta``, ``ampere``, ``hopper`` or ``blackwell``.
        compcap: the lowest compute capability of the generation (70, 80, 90, 100).
        nvlink_gbps: what NCCL counts per NVLink per direction (``SMxx_NVLINK_BW``), GB/s.
        nvlink_line_gbps: the NVLink generation's line rate per link and direction, GB/s
            (NVLink 2-4: 25; NVLink 5: 50), to count a GPU's links from its NVLink bandwidth.
        pcie_gbps: NCCL's bandwidth of the GPU's x16 PCIe link (topo.cc l. 657), the path to its
            NIC, GB/s.
        speeds_intra, speeds_inter: the search speeds of ``search.cc`` for single- and
            multi-node graphs, GB/s per channel, fastest first.
        ll_max_gbps: ``llMaxBws[compcap][n]`` single node (n = 0) and, for multi-node, the
            ``llMaxBws`` row NCCL takes for an Intel CPU (row 0: 39.0, 39.0, 20.4; the row
            depends on the host CPU there, not on the GPU), per node-count index n = 0 (1
            node), 1 (2 nodes), 2 (more).
        ring_ll128_gbps, tree_ll128_gbps, tree_gbps: ``perChMaxRingLL128Bws``,
            ``perChMaxTreeLL128Bws``, ``perChMaxTreeBws`` for this generation, per node-count
            index.
        nvls_efficiency: ``nvlsEfficiency`` (0 where NVLink SHARP does not exist).
    """

    name: str
    compcap: int
    nvlink_gbps: float
    nvlink_line_gbps: float
    pcie_gbps: float
    speeds_intra: tuple[float, ...]
    speeds_inter: tuple[float, ...]
    ll_max_gbps: tuple[float, float, float]
    ring_ll128_gbps: tuple[float, float, float]
    tree_ll128_gbps: tuple[float, float, float]
    tree_gbps: tuple[float, float, float]
    nvls_efficiency: float


GENERATIONS = MappingProxyType({
    # Volta: SM70_NVLINK_BW 20.0; V100 SXM2 has PCIe Gen3 x16 (PCI_BW 12.0, topo.h l. 25).
    "volta": NcclGeneration("volta", 70, 20.0, 25.0, 12.0, _SPEEDS_INTRA, _SPEEDS_INTER,
                            (39.0, 39.0, 20.4), (20.0, 20.0, 20.0), (20.0, 20.0, 20.0),
                            (26.5, 18.5, 10.0), 0.0),
    # Ampere: SM80_NVLINK_BW 20.0; A100 SXM4 has PCIe Gen4 x16 (A100 datasheet): 16 x 120 / 80.
    "ampere": NcclGeneration("ampere", 80, 20.0, 25.0, 24.0, _SPEEDS_INTRA, _SPEEDS_INTER,
                             (87.7, 39.0, 20.4), (20.0, 20.0, 20.0), (20.0, 20.0, 20.0),
                             (24.0, 23.6, 17.8), 0.0),
    # Hopper: SM90_NVLINK_BW 20.6; H100 SXM5 has PCIe Gen5 x16 (H100 datasheet): 16 x 240 / 80.
    "hopper": NcclGeneration("hopper", 90, 20.6, 25.0, 48.0, _SM90_INTRA, _SM90_INTER,
                             (141.0, 39.0, 20.4), (36.7, 36.7, 36.7), (36.7, 36.7, 29.0),
                             (38.7, 41.4, 36.0), 0.85),
    # Blackwell: SM100_NVLINK_BW 40.1, NVLink 5 at 50 GB/s per link and direction; the NIC path
    # is taken as PCIe Gen5 x16 (the ConnectX-7 NICs of DGX B200 are Gen5 devices).
    "blackwell": NcclGeneration("blackwell", 100, 40.1, 50.0, 48.0, _SM100_INTRA, _SM100_INTER,
                                (282.0, 39.0, 20.4), (40.0, 40.0, 40.0), (55.6, 31.67, 20.0),
                                (70.0, 42.8, 24.0), 0.74),
})
"""The generations NCCL tunes for, by name (``Cluster.nccl_generation``)."""
