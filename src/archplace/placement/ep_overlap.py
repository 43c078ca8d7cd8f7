"""Expert-parallel all-to-alls hidden behind another micro-batch's computation (``ep_comm_overlap``).

Within one micro-batch a mixture-of-experts layer cannot hide its all-to-alls: the experts wait
for the dispatch and the next layer for the combine. Two micro-batches can: Megatron-Core's
combined 1F1B schedule (``overlap_moe_expert_parallel_comm``;
``megatron/core/pipeline_parallel/combined_1f1b.py`` in NVIDIA/Megatron-LM @
d98e8a64ddf34856e74b24714e3bedb2f5a39553: "EP A2A in forward step is hidden by the
attention/mlp computation in the backward step, and vice versa") runs the forward pass of one
micro-batch with the backward pass of another, layer by layer, the all-to-alls on their own
stream; DeepSeek-V3's DualPipe pairs chunks the same way (DeepSeek-V3 Technical Report,
arXiv:2412.19437, sec. 3.2.1, Fig. 4: attention, dispatch, MLP and combine of the two passes
interleaved, "both all-to-all and PP communication can be fully hidden").

archplace prices a layer's forward and backward pass run as such a pair. With F and B the
passes' times alone (their all-to-alls exposed), c = a_F + a_B their all-to-alls and t = F + B
- c their computation, the pair takes

    t + exposed + slowed,   exposed = max(0, c - t),   slowed = max(0, L - exposed)

the formula of :mod:`archplace.placement.interference` for communication of c seconds beside t
seconds of computation: L = (1 - phi) (s / S) c + phi min(c, 3 W / B_hbm)
(:meth:`~archplace.placement.interference.Interference.lost_for_wire_s`) the compute-seconds
the all-to-alls take (the chip's ``collective_sms`` of its S SMs: DeepSeek-V3 reserves 20 of the
H800's 132 SMs for them, report sec. 3.2.2), W the bytes they carry on the device's links. The
pair's saving over the two passes alone is s = c - exposed - slowed >= 0; its exposed and
slowed parts are split between the forward and the backward pass in proportion to a_F : a_B
(an attribution for the breakdown; their sum is what the schedule pays). This is the layer's
aggregate: the four phases of the pair (attention and MLP of one pass beside the dispatch or
combine of the other) are not timed one by one, so a pair whose dispatch outlasts the MLP it
overlaps while the combine hides with room to spare is priced as hiding both (an
approximation that favours the overlap; exact when each all-to-all fits under its partner).

Only the steady state pairs passes. Megatron-Core runs one more warm-up forward with the overlap
(``get_pp_rank_microbatches`` in ``schedules.py``: "we schedule one extra micro-batch forward
step before the 1f1b stages"), so device 0 runs W0 = min(v m, 2 (p - 1) + (v - 1) N + 1)
warm-up forwards and as many cool-down backwards unpaired (p pipeline devices, v chunks, m
micro-batches, N the micro-batch group: :func:`unpaired_slots`). The iteration is then

    (v m + p - 1) T_ov + W0 s_b

with T_ov the paced chunk-slot time of the paired passes and s_b the per-chunk-slot saving of
the bottleneck device (:mod:`archplace.placement.pipeline`): for p = 1 (Megatron-Core's
``combined_1f1b_schedule_for_no_pipelining``: the first forward and the last backward run
alone) it is m T_ov + s, m - 1 paired steps and one unpaired forward and backward. For 1F1B
over p > 1 devices (Megatron-Core asserts a virtual pipeline when p > 1 with the overlap; other
frameworks' schedules) W0 = p; GPipe runs every forward before any backward and pairs
nothing. Full recomputation is refused with the overlap, as Megatron-Core refuses it
(``TransformerConfig``: "disable full recomputation when enabling
overlap_moe_expert_parallel_comm"); the plan search leaves it out. The plan search ranks
candidates by the paired time alone (a lower bound: the W0 s_b term is left out), and returns
each plan's full figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from archplace.base.errors import ConfigError
from archplace.placement.choices import PipelineSchedule, Recompute
from archplace.placement.layer_cost import LayerCost

FULL_RECOMPUTE_REFUSAL = ("ep_comm_overlap does not run with full recomputation (Megatron-Core's "
                          "TransformerConfig asserts it: 'disable full recomputation when enabling "
                          "overlap_moe_expert_parallel_comm'); use recompute none or selective")
"""Why a plan with full recomputation and the EP overlap is refused."""


def paired(layers: Sequence[LayerCost]) -> bool:
    """Whether ``layers`` were costed under ``ep_comm_overlap`` with all-to-alls to hide."""
    return any(layer.ep_comm_hidden_s > 0 for layer in layers)


def check_recompute(layers: Sequence[LayerCost], recompute: Recompute) -> None:
    """Refuse full recomputation of layers costed under the EP overlap.

    Raises:
        ConfigError: :data:`FULL_RECOMPUTE_REFUSAL`.
    """
    if recompute is Recompute.FULL and paired(layers):
        raise ConfigError(FULL_RECOMPUTE_REFUSAL, fields=("recompute",))


@dataclass(frozen=True, slots=True)
class PairedPasses:
    """A layer's forward and backward pass run beside another micro-batch's (module docstring).

    Attributes:
        fwd_s, bwd_s: the passes' times in the pair, seconds (their sum is the pair's).
        ep_fwd_s, ep_bwd_s: the exposed part of their all-to-alls, seconds.
        hidden_s: all-to-all time hidden behind the other pass, seconds.
        slowed_s: computation added by the SMs and HBM traffic the hidden all-to-alls take.
    """

    fwd_s: float
    bwd_s: float
    ep_fwd_s: float
    ep_bwd_s: float
    hidden_s: float
    slowed_s: float

    @property
    def saving_s(self) -> float:
        """What pairing saves over the two passes alone: hidden - slowed, seconds (>= 0)."""
        return self.hidden_s - self.slowed_s


def paired_passes(fwd_s: float, bwd_s: float, ep_fwd_s: float, ep_bwd_s: float,
                  lost: float) -> PairedPasses:
    """The pair of a layer's passes of ``fwd_s`` and ``bwd_s`` seconds alone, of which ``ep_fwd_s``
    and ``ep_bwd_s`` are exposed all-to-alls, with ``lost`` = L compute-seconds taken by the
    hidden ones (module docstring). Without all-to-alls the passes are returned as they are."""
    comm = ep_fwd_s + ep_bwd_s
    if comm <= 0.0:
        return PairedPasses(fwd_s, bwd_s, ep_fwd_s, ep_bwd_s, 0.0, 0.0)
    compute = max(0.0, fwd_s + bwd_s - comm)
    exposed = max(0.0, comm - compute)
    slowed = max(0.0, lost - exposed)
    share = ep_fwd_s / comm
    exposed_fwd = exposed * share
    exposed_bwd = exposed - exposed_fwd
    return PairedPasses(
        fwd_s=fwd_s - ep_fwd_s + exposed_fwd + slowed * share,
        bwd_s=bwd_s - ep_bwd_s + exposed_bwd + slowed * (1.0 - share),
        ep_fwd_s=exposed_fwd, ep_bwd_s=exposed_bwd, hidden_s=comm - exposed, slowed_s=slowed)


def unpaired_slots(schedule: PipelineSchedule, pp: int, chunks: int, micro_batches: int,
                   group: int) -> int:
    """W0, the chunk slots device 0 runs unpaired (its warm-up forwards and as many cool-down
    backwards) under the overlap (module docstring): min(v m, 2 (p - 1) + (v - 1) N + 1)
    interleaved, 1 without pipelining, min(m, p) for 1F1B over p > 1 devices; GPipe pairs
    nothing (every forward pass before any backward pass): v m + p - 1, which gives every slot
    back its saving. ``group`` is N, the interleaved schedule's micro-batch group."""
    if schedule is PipelineSchedule.GPIPE:
        return chunks * micro_batches + pp - 1
    if pp == 1:
        return 1
    if schedule is PipelineSchedule.INTERLEAVED:
        return min(chunks * micro_batches, 2 * (pp - 1) + (chunks - 1) * group + 1)
    return min(micro_batches, pp)
