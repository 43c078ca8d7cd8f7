"""The timeline of a pipeline schedule: when each device runs the forward and backward pass of
each micro-batch, and where it idles (the bubbles).

The cost model (:mod:`archplace.placement.pipeline`) prices a pipeline analytically, every
device at the pace of the slowest (a device's pace the mean of its chunks); this module plays
the schedule out op by op, for the report's Gantt chart and to check that pace. Segment c (of s
= pp * v; v chunks per device when interleaved) runs on device c % pp. A forward pass of (c,
micro-batch) starts once the forward of (c - 1, micro-batch) has ended, a backward pass once the
backward of (c + 1, micro-batch) and its own forward have; each device runs its passes in the
order its schedule gives:

* GPipe: every forward pass, then every backward pass, micro-batches in order;
* 1F1B (PipeDream-flush; Narayanan et al. 2021, section 2.2.1): device d runs
  min(pp - d - 1, m) warm-up forwards, then alternates one forward and one backward, then
  drains the remaining backwards;
* interleaved (section 2.2.2): forwards go through the device's chunks in groups of N
  micro-batches (chunk 0 of micro-batches 0..N-1, chunk 1 of the same, ...; the last group takes
  the rest), backwards the same with the chunks in reverse; (pp - d - 1) * 2 + (v - 1) * N
  warm-up forwards, then one forward and one backward alternate (Megatron-Core's order,
  ``get_schedule_table`` in megatron/core/pipeline_parallel/schedules.py @ d98e8a64dd). N is pp
  when pp divides m, else the smallest group size Megatron-Core accepts for m
  (:func:`archplace.placement.timing.micro_batch_group_size`).

With equal stage times F + B per micro-batch (F / v + B / v per chunk), GPipe and 1F1B leave
each device (pp - 1) (F + B) idle, the interleaved schedule (pp - 1) (F + B) / v for every
m >= pp -- the bubbles the cost model charges (``tests/placement/test_interleaved_pace.py``
plays it out for m that pp does not divide).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from archplace.base.errors import ConfigError, InternalError
from archplace.placement.plan import PipelineSchedule
from archplace.placement.result import PlanResult, StageTime
from archplace.placement.timing import micro_batch_group_size

MAX_SHOWN_MICRO_BATCHES_PER_STAGE = 2
"""A plan's timeline shows min(m, max(2 pp, 4)) micro-batches: the warm-up, the steady state and
the drain are all there, and the chart stays readable when m runs into the hundreds."""


@dataclass(frozen=True, slots=True)
class PipelineBlock:
    """One pass of one micro-batch through one segment.

    Attributes:
        device: the pipeline device (stage) running it, 0..pp-1.
        segment: the segment (layer range), 0..pp*v-1; chunk ``segment // pp`` of the device.
        micro_batch: 0..m-1.
        backward: a backward pass (else a forward pass).
        start_s, end_s: seconds from the start of the iteration.
    """

    device: int
    segment: int
    micro_batch: int
    backward: bool
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class PipelineTimeline:
    """Every pass of a pipeline schedule (:func:`simulate_pipeline`).

    Attributes:
        pp: pipeline devices.
        chunks: segments per device (v).
        micro_batches: micro-batches run (m).
        blocks: the passes, by start time (device, then segment, on ties).
    """

    pp: int
    chunks: int
    micro_batches: int
    blocks: tuple[PipelineBlock, ...]

    @property
    def makespan_s(self) -> float:
        """End of the last pass (0 without passes)."""
        return max((b.end_s for b in self.blocks), default=0.0)

    def bubbles(self, device: int) -> list[tuple[float, float]]:
        """The intervals (start s, end s) within [0, makespan] in which ``device`` runs nothing."""
        gaps, now = [], 0.0
        for block in sorted((b for b in self.blocks if b.device == device), key=lambda b: b.start_s):
            if block.start_s > now:
                gaps.append((now, block.start_s))
            now = max(now, block.end_s)
        if self.makespan_s > now:
            gaps.append((now, self.makespan_s))
        return gaps

    def idle_s(self, device: int) -> float:
        """Total length of :meth:`bubbles` of ``device``."""
        return sum(end - start for start, end in self.bubbles(device))


def _order(schedule: PipelineSchedule, device: int, pp: int, chunks: int,
           m: int) -> list[tuple[bool, int, int]]:
    """Passes of ``device`` in the order it runs them: (backward, chunk, micro-batch)."""
    if schedule is PipelineSchedule.GPIPE or (schedule is not PipelineSchedule.INTERLEAVED and chunks > 1):
        forward = [(False, k, mb) for k in range(chunks) for mb in range(m)]
        return forward + [(True, k, mb) for k in reversed(range(chunks)) for mb in range(m)]
    size = micro_batch_group_size(m, pp) if chunks > 1 else pp
    # Megatron-Core's get_schedule_table: groups of N, the last one taking the rest
    groups = [range(g, m if g + size >= m else g + size) for g in range(0, m, size)]
    forward = [(False, k, mb) for group in groups for k in range(chunks) for mb in group]
    backward = [(True, chunks - 1 - k, mb) for group in groups for k in range(chunks) for mb in group]
    total = len(forward)
    if chunks == 1:
        warmup = min(pp - device - 1, total)
    else:
        warmup = min((pp - device - 1) * 2 + (chunks - 1) * size, total)
    order = forward[:warmup]
    for i in range(total - warmup):
        order += [forward[warmup + i], backward[i]]
    return order + backward[total - warmup:]


def simulate_pipeline(forward_s: Sequence[float], backward_s: Sequence[float], *, pp: int,
                      micro_batches: int, schedule: PipelineSchedule) -> PipelineTimeline:
    """Play out a pipeline schedule (module docstring).

    Args:
        forward_s, backward_s: time of one micro-batch's forward and backward pass through each
            segment, seconds; pp * v values each (segment c on device c % pp).
        pp: pipeline devices.
        micro_batches: micro-batches per iteration (m >= 1).
        schedule: GPipe, 1F1B or interleaved (v > 1 segments per device run interleaved; with
            GPipe or 1F1B they run chunk after chunk).

    Raises:
        ConfigError: segment counts that differ or are not a multiple of pp, m < 1, a negative
            time; interleaved chunks with m < pp (Megatron-Core's rule).
        InternalError: the schedule deadlocks (a bug).
    """
    segments = len(forward_s)
    if pp < 1 or micro_batches < 1 or segments != len(backward_s) or segments == 0 or segments % pp:
        raise ConfigError(f"pipeline timeline: {segments} forward and {len(backward_s)} backward times "
                          f"for pp {pp} and {micro_batches} micro-batches")
    if min(*forward_s, *backward_s) < 0:
        raise ConfigError("pipeline timeline: a negative pass time")
    chunks = segments // pp
    if chunks > 1 and schedule is PipelineSchedule.INTERLEAVED and micro_batches < pp:
        raise ConfigError(f"pipeline timeline: the interleaved schedule needs at least pp {pp} "
                          f"micro-batches, got {micro_batches}")
    orders = [_order(schedule, d, pp, chunks, micro_batches) for d in range(pp)]
    done: dict[tuple[bool, int, int], float] = {}  # (backward, segment, micro-batch) -> end
    position, free = [0] * pp, [0.0] * pp
    blocks: list[PipelineBlock] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for d in range(pp):
            while position[d] < len(orders[d]):
                backward, chunk, mb = orders[d][position[d]]
                segment = chunk * pp + d
                if backward:
                    later = [(True, segment + 1, mb)] if segment + 1 < segments else []
                    needs = [(False, segment, mb), *later]
                else:
                    needs = [(False, segment - 1, mb)] if segment > 0 else []
                if any(n not in done for n in needs):
                    break
                start = max([free[d], *(done[n] for n in needs)])
                end = start + (backward_s if backward else forward_s)[segment]
                done[(backward, segment, mb)] = free[d] = end
                blocks.append(PipelineBlock(d, segment, mb, backward, start, end))
                position[d] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise InternalError(f"pipeline timeline: {schedule.value} deadlocks with pp {pp}, {chunks} "
                                f"chunks and {micro_batches} micro-batches")
    blocks.sort(key=lambda b: (b.start_s, b.device, b.segment))
    return PipelineTimeline(pp, chunks, micro_batches, tuple(blocks))


def pass_times_s(time: StageTime) -> tuple[float, float]:
    """(forward s, backward s) of one micro-batch through a segment, summing to its slot
    ``time.total_s``: the forward pass its layers' forward times, the backward their backward
    times with the recomputation and the exposed ZeRO-2/3 traffic; the point-to-point time
    split evenly (a segment sends and receives in both directions).  Without a backward time
    (``backward_s`` 0: a result written before it was recorded) the backward takes two thirds
    of the computation."""
    if time.backward_s > 0:
        forward = max(0.0, time.compute_s - (time.backward_s - time.recompute_s)) + time.p2p_s / 2
    else:
        forward = time.compute_s / 3 + time.p2p_s / 2
    return forward, max(0.0, time.total_s - forward)


def plan_micro_batches(result: PlanResult) -> int:
    """m, the micro-batches per pipeline of ``result``'s iteration: the global batch (samples/s
    times the iteration time) over micro-batch * dp, rounded up, and at least pp for the
    interleaved schedule (as :func:`archplace.placement.timing.micro_batch_count`)."""
    plan = result.plan
    samples = round(result.throughput_samples_per_s * result.iteration_time_s)
    m = max(1, -(-samples // (plan.micro_batch * plan.dp)))
    return max(m, plan.pp) if plan.schedule is PipelineSchedule.INTERLEAVED else m


def plan_timeline(result: PlanResult, micro_batches: int) -> PipelineTimeline:
    """The timeline of ``result``'s plan with ``micro_batches`` micro-batches (its own count,
    :func:`plan_micro_batches`, or fewer to show: :func:`shown_micro_batches`), from its
    segments' per-micro-batch times (:func:`pass_times_s`).

    Raises:
        ConfigError: a result without stage times, a DualPipe plan, or ``micro_batches`` < 1.
    """
    if not result.stage_times:
        raise ConfigError("pipeline timeline: the plan result has no stage times")
    if result.plan.schedule is PipelineSchedule.DUALPIPE:
        raise ConfigError("pipeline timeline: dualpipe's chunk order is played by "
                          "archplace.placement.dualpipe, not drawn here")
    forward, backward = zip(*(pass_times_s(t) for t in result.stage_times), strict=True)
    return simulate_pipeline(forward, backward, pp=result.plan.pp, micro_batches=micro_batches,
                             schedule=result.plan.schedule)


def shown_micro_batches(pp: int, micro_batches: int) -> int:
    """How many micro-batches a chart of the timeline shows (:data:`MAX_SHOWN_MICRO_BATCHES_PER_STAGE`)."""
    return min(micro_batches, max(MAX_SHOWN_MICRO_BATCHES_PER_STAGE * pp, 4))
