"""DeepSeek's DualPipe schedule, played out chunk by chunk.

DualPipe (DeepSeek-V3 Technical Report, arXiv:2412.19437, sec. 3.2.1; deepseek-ai/DualPipe @
3da1bbea53606543d7f5f232338fc58096db30e3, ``dualpipe/dualpipe.py``) feeds micro-batches from both
ends of a pipeline of P ranks (P even). The model is cut into P stages; rank r holds stage r for
the micro-batches that enter at rank 0 (the forward direction) and stage P - 1 - r for those
that enter at rank P - 1 (the reverse direction): two stages per rank, so every rank keeps two
stages' parameters ("2x", the repository's README) and every micro-batch meets every rank once.
The m micro-batches (m even, m >= 2 P: the ``step`` method's assertion) split evenly between the
directions.

Each rank runs its chunks in the order of ``DualPipe.step`` (half_rank h = min(r, P - 1 - r),
H = P / 2; phase 0 is the forward direction on ranks r < H and the reverse one on the others):

1. 2 (H - h - 1) forward chunks of phase 0;
2. h + 1 times a forward chunk of phase 0, then one of phase 1;
3. H - h - 1 times: a backward chunk of phase 1 without its weight gradients (zero bubble), that
   chunk's weight gradients, a forward chunk of phase 1;
4. m / 2 - P + h + 1 times: a forward chunk of phase 0 overlapped with a backward chunk of
   phase 1, then a forward chunk of phase 1 overlapped with a backward chunk of phase 0 (on the
   middle ranks the first pair runs one after the other, "to further reduce bubble size");
5. H - h - 1 times: a backward chunk of phase 1, then a forward of phase 1 overlapped with a
   backward of phase 0;
6. h + 1 times a backward chunk of phase 1 and one of phase 0, the later ones deferring their
   weight gradients (from the middle of the step on, the order the source gives);
7. H - h - 1 times: one deferred weight-gradient chunk, then a backward chunk of phase 0 that
   defers its own;
8. the h + 1 weight-gradient chunks left.

A forward chunk waits for the same micro-batch's forward on the previous rank of its direction,
a backward chunk for its own forward and for the backward on the next rank of its direction;
point-to-point transfers are not timed (they overlap, sec. 3.2.1). An overlapped pair starts
when both of its chunks may and takes the pair's time F&B (:func:`simulate_dualpipe`'s
``paired_s``); a weight-gradient chunk runs the weight gradients the rank deferred first
(``WeightGradStore``'s queue in the source), whatever stage they belong to. With equal stages,
nothing hidden (F&B = F + B) and W = B - F, the makespan is m (F + B) plus the README's bubble
(P/2 - 1)(F&B + B - 3W); ``tests/placement/test_dualpipe.py`` checks it, and a timeline worked
by hand.

In flight: a rank keeps a micro-batch's activations of a stage from its forward chunk to its
backward chunk (the weight-gradient chunk's inputs are small next to them and are not counted);
:func:`in_flight_peak` counts, in the rank's own order, the peak of the activations of forward
chunks run and not yet back-propagated, both directions at the same instant (the README's "PP + 1"
micro-batches on the end ranks).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from archplace.base.errors import ConfigError, InternalError

FORWARD, BACKWARD, WEIGHT, PAIR = "F", "B", "W", "FB"


@dataclass(frozen=True, slots=True)
class Chunk:
    """One step of a rank's DualPipe order.

    Attributes:
        kind: ``F`` (forward), ``B`` (backward, with its weight gradients unless ``deferred``),
            ``W`` (the weight gradients a deferred backward left) or ``FB`` (a forward of
            ``phase`` overlapped with a backward of the other phase).
        phase: 0 or 1 (the rank's phase, module docstring); for ``FB`` the forward's; for ``W`` the
            step's label only (the queue of deferred weight gradients decides the stage).
        deferred: a backward whose weight gradients run later as a ``W`` chunk.
    """

    kind: str
    phase: int
    deferred: bool = False


def check_dualpipe(pp: int, micro_batches: int) -> None:
    """Refuse what DualPipe's ``step`` refuses: an odd or too small P, an odd m or m < 2 P.

    Raises:
        ConfigError: naming the rule and the numbers.
    """
    if pp < 2 or pp % 2:
        raise ConfigError(f"dualpipe needs an even pp >= 2, got pp={pp}", fields=("pp",))
    if micro_batches % 2 or micro_batches < 2 * pp:
        raise ConfigError(f"dualpipe needs an even number of micro-batches >= 2 pp = {2 * pp}, got "
                          f"{micro_batches} (DualPipe.step's assertion)", fields=("global_batch",))


def rank_order(rank: int, pp: int, micro_batches: int) -> list[Chunk]:
    """The chunks ``rank`` runs, in order (module docstring, steps 1-8)."""
    half = pp // 2
    h = min(rank, pp - 1 - rank)
    middle = h == half - 1
    order: list[Chunk] = [Chunk(FORWARD, 0)] * (2 * (half - h - 1))
    for _ in range(h + 1):
        order += [Chunk(FORWARD, 0), Chunk(FORWARD, 1)]
    for _ in range(half - h - 1):
        order += [Chunk(BACKWARD, 1, deferred=True), Chunk(WEIGHT, 1), Chunk(FORWARD, 1)]
    for i in range(micro_batches // 2 - pp + h + 1):
        if i == 0 and middle:
            order += [Chunk(FORWARD, 0), Chunk(BACKWARD, 1)]
        else:
            order.append(Chunk(PAIR, 0))
        order.append(Chunk(PAIR, 1))
    for _ in range(half - h - 1):
        order += [Chunk(BACKWARD, 1), Chunk(PAIR, 1)]
    deferred = False
    for i in range(h + 1):
        if i == (h + 1) // 2 and h % 2 == 1:
            deferred = True
        order.append(Chunk(BACKWARD, 1, deferred=deferred))
        if i == (h + 1) // 2 and h % 2 == 0:
            deferred = True
        order.append(Chunk(BACKWARD, 0, deferred=deferred))
    for _ in range(half - h - 1):
        order += [Chunk(WEIGHT, 0), Chunk(BACKWARD, 0, deferred=True)]
    order += [Chunk(WEIGHT, 0)] * (h + 1)
    return order


def _direction(rank: int, pp: int, phase: int) -> int:
    """0 (forward direction) or 1 (reverse) of ``phase`` on ``rank``."""
    return phase if rank < pp // 2 else 1 - phase


def stage_of(rank: int, pp: int, direction: int) -> int:
    """The model stage ``rank`` runs for micro-batches of ``direction``: r forward, P - 1 - r
    reverse."""
    return rank if direction == 0 else pp - 1 - rank


@dataclass(frozen=True, slots=True)
class DualPipeTimeline:
    """The makespan of a DualPipe iteration and each rank's busy time, seconds."""

    makespan_s: float
    busy_s: tuple[float, ...]


def simulate_dualpipe(forward_s: Sequence[float], backward_s: Sequence[float],
                      weight_s: Sequence[float], *, micro_batches: int,
                      paired_s: Callable[[int, int], float] | None = None) -> DualPipeTimeline:
    """Play out DualPipe (module docstring).

    Args:
        forward_s, backward_s: one micro-batch's forward and full backward (weight gradients
            included) time through each of the P stages, seconds.
        weight_s: the weight-gradient part of each stage's backward, seconds (<= backward).
        micro_batches: m, both directions together.
        paired_s: time of a forward of stage a overlapped with a backward of stage b,
            ``paired_s(a, b)``; default ``forward_s[a] + backward_s[b]`` (no overlap gain).

    Raises:
        ConfigError: what :func:`check_dualpipe` refuses, lengths that differ, a weight part
            larger than its backward.
        InternalError: the order deadlocks (a bug).
    """
    pp = len(forward_s)
    if len(backward_s) != pp or len(weight_s) != pp:
        raise ConfigError("dualpipe: forward, backward and weight times need one value per stage")
    if any(not 0.0 <= w <= b for w, b in zip(weight_s, backward_s, strict=True)):
        raise ConfigError("dualpipe: a weight-gradient time is negative or above its backward time")
    check_dualpipe(pp, micro_batches)
    pair = paired_s or (lambda a, b: forward_s[a] + backward_s[b])
    orders = [rank_order(r, pp, micro_batches) for r in range(pp)]
    # done[(kind, direction, stage, micro-batch)] = end time
    done: dict[tuple[str, int, int, int], float] = {}
    position, free = [0] * pp, [0.0] * pp
    count = [[[0, 0], [0, 0]] for _ in range(pp)]  # per rank, direction: [forwards, backwards] issued
    busy = [0.0] * pp
    deferred: list[deque[int]] = [deque() for _ in range(pp)]  # stages whose weight gradients wait
    remaining = sum(len(o) for o in orders)

    def needs(rank: int, kind: str, direction: int, mb: int) -> list[tuple[str, int, int, int]]:
        stage = stage_of(rank, pp, direction)
        if kind == FORWARD:
            return [(FORWARD, direction, stage - 1, mb)] if stage > 0 else []
        later = [(BACKWARD, direction, stage + 1, mb)] if stage < pp - 1 else []
        return [(FORWARD, direction, stage, mb), *later]

    while remaining:
        progressed = False
        for r in range(pp):
            while position[r] < len(orders[r]):
                chunk = orders[r][position[r]]
                if chunk.kind == WEIGHT:  # the oldest deferred backward's, on this rank
                    duration = weight_s[deferred[r].popleft()]
                    start = free[r]
                    parts: list[tuple[str, int, int]] = []
                else:
                    if chunk.kind == PAIR:
                        parts = [(FORWARD, _direction(r, pp, chunk.phase), 0),
                                 (BACKWARD, _direction(r, pp, 1 - chunk.phase), 1)]
                    else:
                        slot = 0 if chunk.kind == FORWARD else 1
                        parts = [(chunk.kind, _direction(r, pp, chunk.phase), slot)]
                    keys = [(kind, d, count[r][d][slot]) for kind, d, slot in parts]
                    deps = [n for kind, d, mb in keys for n in needs(r, kind, d, mb)]
                    if any(n not in done for n in deps):
                        break
                    start = max([free[r], *(done[n] for n in deps)])
                    if chunk.kind == PAIR:
                        duration = pair(stage_of(r, pp, keys[0][1]), stage_of(r, pp, keys[1][1]))
                    else:
                        stage = stage_of(r, pp, keys[0][1])
                        if chunk.kind == FORWARD:
                            duration = forward_s[stage]
                        else:
                            duration = backward_s[stage] - (weight_s[stage] if chunk.deferred else 0.0)
                            if chunk.deferred:
                                deferred[r].append(stage)
                end = start + duration
                for kind, d, slot in parts:
                    done[(kind, d, stage_of(r, pp, d), count[r][d][slot])] = end
                    count[r][d][slot] += 1
                free[r] = end
                busy[r] += duration
                position[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise InternalError(f"dualpipe: the order deadlocks with pp {pp} and {micro_batches} "
                                "micro-batches")
    return DualPipeTimeline(max(free), tuple(busy))


def in_flight_peak(rank: int, pp: int, micro_batches: int, saved: tuple[float, float] = (1.0, 1.0)) -> float:
    """The most activation bytes ``rank`` holds at once, in its own order (module docstring):
    ``saved`` = (bytes one micro-batch keeps in the rank's forward-direction stage, in its
    reverse-direction stage); (1, 1) counts micro-batches. A paired chunk's forward keeps its
    activations before its backward frees the other's (their peak is counted)."""
    live = [0, 0]
    peak = 0.0

    def held() -> float:
        return live[0] * saved[0] + live[1] * saved[1]

    for chunk in rank_order(rank, pp, micro_batches):
        if chunk.kind in (FORWARD, PAIR):
            live[_direction(rank, pp, chunk.phase)] += 1
            peak = max(peak, held())
        if chunk.kind in (BACKWARD, PAIR):
            live[_direction(rank, pp, chunk.phase if chunk.kind == BACKWARD else 1 - chunk.phase)] -= 1
    return peak
