"""The iteration time of a DualPipe plan (:mod:`archplace.placement.dualpipe`) from its stages'
per-micro-batch times.

Each of the P stages (segments) has, per micro-batch (:class:`~archplace.placement.result.StageTime`):

* F, its layers' forward time, and B, their backward time with the recomputation and the
  exposed ZeRO-2/3 collectives of the segment;
* W, the weight-gradient part of B, taken as B - F less the recomputation (clamped to [0, B]):
  the input-gradient half of a backward pass costs what the forward pass does, the assumption
  under which DualPipe's README bubble (P/2 - 1)(F&B + B - 3W) holds exactly for F&B = F + B
  (``tests/placement/test_dualpipe.py``); an assumption, as the layer costs do not split the
  backward's GEMMs into input and weight gradients;
* s, what pairing a forward with another micro-batch's backward saves: the segment's hidden
  all-to-alls less the computation hiding them slows, under ``ep_comm_overlap``
  (:mod:`archplace.placement.ep_overlap`, whose layer times are the paired ones); 0 without it,
  so pairs then hide nothing. A chunk run alone takes its paired time plus s / 2 (the saving
  split evenly between the two passes); a pair of a forward of stage a and a backward of stage
  b takes F_a + B_b at the paired rate.

The pipeline's point-to-point transfers are hidden (DualPipe overlaps them with the chunks'
computation, DeepSeek-V3 Technical Report sec. 3.2.1): ``pp_comm`` is 0 and their time is
reported as hidden. The two copies of every stage (on ranks j and P - 1 - j) sum their
gradients; that exchange is not priced (an assumption), and every rank's DP tail covers both
its stages' parameters.

The makespan is :func:`~archplace.placement.dualpipe.simulate_dualpipe`'s. In the breakdown,
with b the rank busiest over the iteration, compute, recompute, tp_comm, cp_comm and ep_comm
are b's stages' figures times m / 2 (each stage runs m / 2 micro-batches on b), ep_comm adds
the saving its unpaired chunks lose, the bubble is the makespan less b's busy time, and the DP
tail and optimizer step are the largest device's, as for the other schedules.
"""

from __future__ import annotations

from collections.abc import Sequence

from archplace.placement.dualpipe import simulate_dualpipe
from archplace.placement.memory import sequential_sum
from archplace.placement.result import StageTime

Figures = tuple[dict[str, float], dict[str, tuple[float, float, float]]]


def chunk_times(time: StageTime) -> tuple[float, float, float, float]:
    """(F, B, W, s) of one stage per micro-batch, seconds (module docstring): F and B at the
    paired rate."""
    backward = time.backward_s - time.recompute_s
    forward = max(0.0, time.compute_s - backward)
    full_backward = time.backward_s + time.dp_comm_s + time.dp_slowed_s
    weight = min(max(0.0, backward - forward), full_backward)
    return forward, full_backward, weight, max(0.0, time.ep_comm_hidden_s - time.ep_slowed_s)


def dualpipe_figures(times: Sequence[StageTime], micro_batches: int,
                     tail: tuple[float, float, float, float]) -> Figures:
    """The breakdown (``pipeline.BREAKDOWN_KEYS``) and the (total, exposed, slowed)
    communication per kind of a DualPipe plan of ``len(times)`` stages and ``micro_batches``
    micro-batches, with ``tail`` the largest device's (exposed DP, optimizer step, whole DP,
    slowed) seconds (module docstring).

    Raises:
        ConfigError: what :func:`~archplace.placement.dualpipe.check_dualpipe` refuses.
    """
    pp = len(times)
    parts = [chunk_times(time) for time in times]
    forward = [f + s / 2 for f, _, _, s in parts]
    backward = [b + s / 2 for _, b, _, s in parts]
    weight = [w for _, _, w, _ in parts]  # at most the backward (chunk_times), so at most b + s / 2
    timeline = simulate_dualpipe(forward, backward, weight, micro_batches=micro_batches,
                                 paired_s=lambda a, b: parts[a][0] + parts[b][1])
    busy = max(timeline.busy_s)
    rank = timeline.busy_s.index(busy)
    own = (times[rank], times[pp - 1 - rank])
    half = micro_batches / 2

    def summed(name: str) -> float:
        return half * sequential_sum(getattr(time, name) for time in own)

    paired_busy = summed("compute_s") + summed("recompute_s") + summed("dp_comm_s") + summed("dp_slowed_s")
    unpaired = max(0.0, busy - paired_busy)  # the saving the rank's unpaired chunks lose
    breakdown = {
        "compute": max(0.0, summed("compute_s") - summed("tp_comm_s") - summed("cp_comm_s")
                       - summed("ep_comm_s") - summed("ep_slowed_s")),
        "bubble": max(0.0, timeline.makespan_s - busy),
        "recompute": summed("recompute_s"),
        "tp_comm": summed("tp_comm_s"),
        "cp_comm": summed("cp_comm_s"),
        "ep_comm": summed("ep_comm_s") + unpaired,
        "pp_comm": 0.0,
        "dp_comm": summed("dp_comm_s") + tail[0],
        "overlap_slowdown": summed("dp_slowed_s") + summed("ep_slowed_s") + tail[3],
        "optimizer": tail[1],
    }
    comm = {
        "tp": (breakdown["tp_comm"], breakdown["tp_comm"], 0.0),
        "cp": (breakdown["cp_comm"], breakdown["cp_comm"], 0.0),
        "ep": (summed("ep_comm_s") + summed("ep_comm_hidden_s"), breakdown["ep_comm"], summed("ep_slowed_s")),
        "pp": (summed("p2p_s"), 0.0, 0.0),
        "dp": (summed("dp_comm_total_s") + tail[2], breakdown["dp_comm"], summed("dp_slowed_s") + tail[3]),
    }
    return breakdown, comm
