"""The time of one NCCL collective as its kernels run it: channels, chunks, loops and steps.

NCCL's tuner (:mod:`archplace.cost.nccl`) prices an (algorithm, protocol) as
``latency + bytes / bandwidth``.  The kernels move the message differently
(NVIDIA/nccl, commit ``5067397c2676d5aed50042fc39e5c8ee96eb0027``, files and lines below):

Channels at run time (``topoGetAlgoInfo``, ``src/enqueue.cc`` l. 2070-2112).  Ring and tree
start from the communicator's channels ``nc`` (twice the graph's, :func:`comm_channels`; each
carries its share of the graph's bandwidth) and drop one while ``bytes < nc x nt x threshold``;
``nt`` is the protocol's thread count (``tuning.cc`` l. 244-257: Simple 512, or 256 when the
ring graph carries at most ``PCI_BW`` = 12 GB/s, ``topo.h`` l. 25; LL 512; LL128 640,
``device.h`` l. 95-114) and ``threshold`` bytes per thread (``comm.h`` l. 49-51: LL 8, x ranks
for ring, ``tuning.cc`` l. 593; LL128 8; Simple 64).  One collective is spread evenly over
those channels (``enqueue.cc`` l. 606-700, ``trafficPerChannel``).

Chunks (``calcCollChunking``, ``enqueue.cc`` l. 2220-2362).  A step is one of ``NCCL_STEPS``
= 8 slots (``device.h`` l. 26) of the connection's buffer: Simple 4 MiB (``init.cc`` l. 813),
LL 8 lines x 512 threads x 8 steps x 16 B = 512 KiB, half of it data (l. 810, ``chunkSize /=
2``), LL128 120 x 640 x 8 x 8 B = 4.6875 MiB, 15 of every 16 words data (l. 812, 2227).  Ring
Simple moves chunks of ``chunkSteps`` = 4 steps in slices of ``sliceSteps`` = 2
(``collectives.h`` l. 19-26), so 2 MiB chunks of two 1 MiB slices; every other pair moves one
step per chunk.  Tree LL128 halves its chunk for small messages (l. 2286-2294).  Chunks are
whole grains (``device.h`` l. 328: LL 16 B, LL128 1920 B, Simple 512 B).  A ring loop moves
``ranks`` chunks per channel (l. 2343-2350); its last loop spreads what remains over the
ranks (``all_reduce.h`` l. 38); a Simple slice is at least ``stepSize x sliceSteps / 32``
(``prims_simple.h`` l. 184).

Steps.  Ring all-reduce runs ``J = 2(p-1)`` sends per loop (``all_reduce.h`` l. 42-81),
all-gather and reduce-scatter ``p-1``; every rank works from the first step, and step ``j``
of a rank waits for step ``j-1`` of its predecessor.  Simple hands a slice over when all of it
is written (the receiver polls the sender's step counter, ``prims_simple.h`` l. 107), so a
step of ``S`` slices of ``t`` seconds each takes ``max(S t, t + h)``: the next slices overlap
the hand-over latency ``h`` of the first.  LL and LL128 carry a flag in every 8- or 128-byte
line, so the receiver forwards each line as it lands: ``max(c / r, h)`` for a chunk of ``c``
bytes at the channel's rate ``r``.  A loop costs the first step's transfer, ``J - 1`` such
steps and the last receive's hand-over ``h``.  Tree all-reduce (``runTreeSplit``,
``all_reduce.h`` l. 146-225: reduce up and broadcast down at once) is a pipeline of
``2((g-1) + floor(log2 k))`` hops (the tuner's count) through which ``n`` chunks stream: LL
and LL128 pay the hops' latencies once, Simple also one chunk transfer per hop (store and
forward).  NVLS is charged the tuner's time (its source gives no per-step latency).

Rates and latencies are the tuner's own: ``h`` is its per-step latency of the hop's link
(NVLink or network, ``hwLatencies``), the base latency is paid once, and a channel's rate is
the tuner's bandwidth for the pair over the graph's channels.  The tuner's empirical
corrections (``treeCorrectionFactor``, the x1.4 ring "plateau") are left out of the charge:
they stand in for what this model spells out.  The (algorithm, protocol) stays NCCL's choice
(:func:`archplace.cost.nccl.best`): NCCL picks by its tuner, so the pipelined time is charged
for what NCCL runs, not for what would be fastest under this model.

The charge is opt-in (``collective_time_s(..., pipelined=True)``): with NCCL's own latencies
it is faster than the tuner (no ring fill; hand-overs overlap the transfer), so it moves every
measured log of ``tests/data/nccl`` further off (docs/model.md, Collectives, Pipelining).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from archplace.cost.nccl_constants import PCI_BW_GBPS

NCCL_STEPS = 8                         # device.h l. 26
SIMPLE_BUFFER_BYTES = 1 << 22          # init.cc l. 813 (DEFAULT_BUFFSIZE)
LL_BUFFER_BYTES = 8 * 512 * NCCL_STEPS * 16        # init.cc l. 810-811
LL128_BUFFER_BYTES = 120 * 640 * NCCL_STEPS * 8    # init.cc l. 812
RING_SIMPLE_CHUNK_STEPS = NCCL_STEPS // 2          # collectives.h l. 19-26
RING_SIMPLE_SLICE_STEPS = NCCL_STEPS // 4
GRAIN_BYTES = {"LL": 16, "LL128": 32 * 8 // 16 * 15 * 8, "Simple": 512}   # device.h l. 328-333
THREADS = {"LL": 512, "LL128": 640, "Simple": 512}                       # device.h l. 95-114
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}                   # comm.h l. 49-51


@dataclass(frozen=True, slots=True)
class ChannelPlan:
    """How one channel runs a collective.

    Attributes:
        channels: channels at run time (after NCCL's reduction for small messages).
        chunk_bytes: the chunk size of ``calcCollChunking`` (bytes a step moves in a full loop).
        loops: ring loops per channel (1 for tree).
        channel_bytes: the bytes each channel carries (the buffer over ``channels``).
    """

    channels: int
    chunk_bytes: int
    loops: int
    channel_bytes: float


def comm_channels(graph_channels: int, compcap: int, nodes: int, ring_intra_gbps: float) -> int:
    """The communicator's channels (``comm->nChannels``): the graph's doubled
    (``connect.cc`` l. 460), doubled again on Hopper and later across nodes when the ring's
    intra speed passes 45 GB/s and fewer than 16 remain (l. 480-483), at most 64
    (``MAXCHANNELS``).  They share the graph's bandwidth: the tuner counts the graph's."""
    nc = min(2 * graph_channels, 64)
    if compcap >= 90 and nodes > 1 and ring_intra_gbps > 45.0 and nc < 16:
        nc = 2 * nc
    return nc


def run_channels(algorithm: str, protocol: str, nbytes: float, graph_channels: int,
                 ranks: int, ring_gbps: float) -> int:
    """Channels NCCL runs a ring or tree collective of ``nbytes`` on (``enqueue.cc``
    l. 2093-2096), of the communicator's ``graph_channels`` (:func:`comm_channels`);
    ``ring_gbps`` is the ring graph's channels x speed (GB/s)."""
    nt = THREADS[protocol]
    if protocol == "Simple" and algorithm == "ring" and ring_gbps <= PCI_BW_GBPS:
        nt = 256                                   # tuning.cc l. 244-245
    threshold = THREAD_THRESHOLD[protocol] * (ranks if (algorithm, protocol) == ("ring", "LL") else 1)
    nc = graph_channels
    while nc >= 2 and nbytes < nc * nt * threshold:
        nc -= 1
    return nc


def chunk_bytes(algorithm: str, protocol: str, nbytes: float, channels: int, nodes: int,
                ranks: int) -> int:
    """The chunk size of ``calcCollChunking`` (``enqueue.cc`` l. 2222-2227, 2286-2294, 2321)."""
    if protocol == "Simple":
        step = SIMPLE_BUFFER_BYTES // NCCL_STEPS
        chunk = step * (RING_SIMPLE_CHUNK_STEPS if algorithm == "ring" else 1)
    elif protocol == "LL":
        chunk = LL_BUFFER_BYTES // NCCL_STEPS // 2
    else:
        chunk = LL128_BUFFER_BYTES // NCCL_STEPS // 16 * 15
    if algorithm == "tree" and protocol == "LL128":
        ppn = ranks / nodes
        steps = 1 + int(math.log2(nodes)) + 0.1 * ppn
        while nbytes // (channels * chunk) < steps * 64 / ppn and chunk > 131072:
            chunk //= 2
        while nbytes // (channels * chunk) < steps * 16 / ppn and chunk > 32768:
            chunk //= 2
    grain = GRAIN_BYTES[protocol]
    return max(grain, chunk // grain * grain)


def plan(algorithm: str, protocol: str, nbytes: float, graph_channels: int, nodes: int,
         ranks: int, ring_gbps: float) -> ChannelPlan:
    """The :class:`ChannelPlan` of a ring or tree collective (module docstring)."""
    nc = run_channels(algorithm, protocol, nbytes, graph_channels, ranks, ring_gbps)
    chunk = chunk_bytes(algorithm, protocol, nbytes, nc, nodes, ranks)
    per_loop = nc * (ranks if algorithm == "ring" else 1) * chunk
    loops = max(1, math.ceil(nbytes / per_loop)) if algorithm == "ring" else 1
    return ChannelPlan(nc, chunk, loops, nbytes / nc)


def _ring_step_s(protocol: str, step_bytes: float, rate: float, hop_s: float) -> float:
    """One ring step of ``step_bytes`` at ``rate`` B/s after a hand-over of ``hop_s``."""
    whole = step_bytes / rate
    if protocol != "Simple":
        return max(whole, hop_s)
    floor = SIMPLE_BUFFER_BYTES // NCCL_STEPS * RING_SIMPLE_SLICE_STEPS / 32   # prims_simple.h l. 184
    slice_bytes = min(step_bytes, max(step_bytes / (RING_SIMPLE_CHUNK_STEPS // RING_SIMPLE_SLICE_STEPS),
                                      floor))
    return max(whole, slice_bytes / rate + hop_s)


def ring_time_s(protocol: str, p: ChannelPlan, ranks: int, rate_per_channel: float,
                base_s: float, hops_s: list[float]) -> float:
    """Seconds of a ring collective of ``len(hops_s)`` sends per loop (2(p-1) all-reduce, p-1
    else), ``hops_s`` the hand-over latency of each wait (steps 1 to the last, then the last
    receive), channels at ``rate_per_channel`` B/s (module docstring)."""
    total = base_s
    remaining = p.channel_bytes
    for _ in range(p.loops):
        step_bytes = min(float(p.chunk_bytes), remaining / ranks)
        remaining -= step_bytes * ranks
        total += step_bytes / rate_per_channel
        total += sum(_ring_step_s(protocol, step_bytes, rate_per_channel, h) for h in hops_s[1:])
        total += hops_s[-1]
    return total


def tree_time_s(protocol: str, p: ChannelPlan, rate_per_channel: float, base_s: float,
                latency_s: float, hops: int) -> float:
    """Seconds of a tree all-reduce: ``n`` chunks per channel streamed through ``hops`` hops
    whose latencies add to ``latency_s`` (module docstring)."""
    n = max(1, math.ceil(p.channel_bytes / p.chunk_bytes))
    chunk = p.channel_bytes / n
    stream = p.channel_bytes / rate_per_channel
    if protocol == "Simple":
        return base_s + latency_s + (hops - 1) * chunk / rate_per_channel + stream
    return base_s + latency_s + stream
