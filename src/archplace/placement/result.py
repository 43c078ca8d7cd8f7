"""Value objects of the placement stage's results: per-stage memory and time, and a plan's
score (:class:`PlanResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from archplace.base.errors import ConfigError
from archplace.placement.plan import Plan


@dataclass(frozen=True, slots=True)
class StageMemory:
    """Memory of one device of a pipeline stage (or, interleaved, of one pipeline device with
    all its chunks), in bytes.

    ``weights``, ``gradients`` and ``optimizer`` are the device's shards under its ZeRO stage;
    ``gathered`` is ZeRO-3's window of unsharded parameters and gradient (0 below stage 3).
    """

    stage: int
    weights: float
    gradients: float
    optimizer: float
    activations: float
    working: float
    gathered: float = 0.0

    @property
    def total(self) -> float:
        """Sum of all parts, left to right."""
        return (self.weights + self.gradients + self.optimizer + self.activations + self.working
                + self.gathered)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"stage": self.stage, "weights": self.weights, "gradients": self.gradients,
                "optimizer": self.optimizer, "activations": self.activations,
                "working": self.working, "gathered": self.gathered, "total": self.total}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StageMemory:
        """Inverse of :meth:`to_dict` (``total`` is derived)."""
        return cls(int(data["stage"]), float(data["weights"]), float(data["gradients"]),
                   float(data["optimizer"]), float(data["activations"]), float(data.get("working", 0.0)),
                   float(data.get("gathered", 0.0)))


@dataclass(frozen=True, slots=True)
class StageTime:
    """Time of one pipeline segment (a stage; interleaved: one chunk) per micro-batch, in seconds.

    Attributes:
        compute_s: sum of the forward and backward times of its layers (TP collectives included).
        recompute_s: recomputation in the backward pass (see :mod:`archplace.placement.pipeline`).
        p2p_s: point-to-point time of its boundaries: activation receive + gradient send at
            its input boundary (none for the first segment) plus activation send + gradient
            receive at its output boundary (none for the last).
        tp_comm_s: the part of ``compute_s`` spent in TP collectives.
        backward_s: sum of the backward times of its layers + ``recompute_s``.
        dp_comm_s: DP collectives of every micro-batch left exposed: ZeRO-2/3's after
            prefetching over each pass (:func:`archplace.placement.zero.segment_zero_comm_s`),
            or the gradient reduction of stages 0 and 1 when they reduce every micro-batch
            (``Plan.grad_sync`` micro_batch; :func:`archplace.placement.zero.micro_batch_reduce_s`);
            0 for stages 0 and 1 otherwise.
        dp_comm_total_s: those collectives' whole time, overlapped or not.
        cp_comm_s, ep_comm_s: the parts of ``compute_s`` spent in exposed context-parallel
            (ring attention) and expert all-to-all communication.
        dp_slowed_s: compute time added by hiding those collectives behind the layers
            (:mod:`archplace.placement.interference`); 0 without interference.
        ep_comm_hidden_s, ep_slowed_s: under ``ep_comm_overlap``, the expert all-to-all time
            hidden behind another micro-batch's passes and the computation that adds (included
            in ``compute_s``; :mod:`archplace.placement.ep_overlap`); 0 otherwise.
    """

    compute_s: float
    recompute_s: float
    p2p_s: float
    tp_comm_s: float = 0.0
    backward_s: float = 0.0
    dp_comm_s: float = 0.0
    dp_comm_total_s: float = 0.0
    cp_comm_s: float = 0.0
    ep_comm_s: float = 0.0
    dp_slowed_s: float = 0.0
    ep_comm_hidden_s: float = 0.0
    ep_slowed_s: float = 0.0

    @property
    def total_s(self) -> float:
        """compute + recompute + p2p + exposed per-micro-batch DP traffic + the compute its hidden
        part slowed: the segment's slot in the pipeline schedule."""
        return self.compute_s + self.recompute_s + self.p2p_s + self.dp_comm_s + self.dp_slowed_s

    def to_dict(self) -> dict[str, Any]:
        """JSON form, seconds per micro-batch."""
        return {"compute": self.compute_s, "recompute": self.recompute_s, "p2p": self.p2p_s,
                "tp_comm": self.tp_comm_s, "backward": self.backward_s,
                "dp_comm": self.dp_comm_s, "dp_comm_total": self.dp_comm_total_s,
                "cp_comm": self.cp_comm_s, "ep_comm": self.ep_comm_s, "dp_slowed": self.dp_slowed_s,
                **({"ep_comm_hidden": self.ep_comm_hidden_s, "ep_slowed": self.ep_slowed_s}
                   if self.ep_comm_hidden_s else {}),  # optional: absent without the EP overlap
                "total": self.total_s}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StageTime:
        """Inverse of :meth:`to_dict` (``total`` is derived)."""
        return cls(float(data["compute"]), float(data["recompute"]), float(data["p2p"]),
                   float(data.get("tp_comm", 0.0)), float(data.get("backward", 0.0)),
                   float(data.get("dp_comm", 0.0)), float(data.get("dp_comm_total", 0.0)),
                   float(data.get("cp_comm", 0.0)), float(data.get("ep_comm", 0.0)),
                   float(data.get("dp_slowed", 0.0)), float(data.get("ep_comm_hidden", 0.0)),
                   float(data.get("ep_slowed", 0.0)))


@dataclass(frozen=True, slots=True)
class PlanResult:
    """A plan with its score.

    Attributes:
        plan: the plan.
        iteration_time_s: time of one training iteration (global batch).
        throughput_samples_per_s: global batch / iteration time.
        tokens_per_s: throughput * seq_len.
        mfu: model FLOP utilisation (Korthikanti et al. 2022, section 6.3): model FLOP per
            iteration (recomputation not counted, nor a mixture-of-experts model's padded or
            imbalanced expert rows: its model FLOP are those of balanced routing at capacity
            factor 1) / (iteration time * plan devices * peak FLOP/s).
        breakdown_s: parts of the iteration time, keys of
            :data:`archplace.placement.pipeline.BREAKDOWN_KEYS`; they sum to it exactly.
        hfu: hardware FLOP utilisation (same section): as ``mfu`` with the FLOP the backward
            passes recompute counted too (full: the forward again; selective: the attention
            core) and the experts' padded or imbalanced rows; equal to ``mfu`` without
            recomputation and padding.
        model_flop_per_s_per_device: achieved model FLOP/s of one device, ``mfu`` * peak (model
            FLOP only, as ``mfu``).
        comm_s: per communication kind (``tp``, ``cp``, ``ep``, ``pp``, ``dp``) the seconds per iteration on
            the critical device, ``{"total", "exposed", "hidden", "slowed"}``: all of its time,
            the part not hidden behind computation (what the iteration time contains), the part
            hidden (total - exposed), and the compute time hiding it added (in the iteration
            time as ``breakdown_s["overlap_slowdown"]``).
        memory: per-device memory of every pipeline device (stage).
        stage_times: time per micro-batch of every segment of ``plan.stages`` (a stage, or an
            interleaved chunk), in order; the slowest sets the pipeline's pace.
    """

    plan: Plan
    iteration_time_s: float
    throughput_samples_per_s: float
    tokens_per_s: float
    mfu: float
    breakdown_s: dict[str, float] = field(default_factory=dict)
    memory: tuple[StageMemory, ...] = ()
    stage_times: tuple[StageTime, ...] = ()
    hfu: float = 0.0
    model_flop_per_s_per_device: float = 0.0
    comm_s: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (issue #6 schema, plus ``"stage_times_s"``: per segment of ``plan.stages``,
        seconds per micro-batch)."""
        return {
            "plan": self.plan.to_dict(),
            "iteration_time_s": self.iteration_time_s,
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "model_flop_per_s_per_device": self.model_flop_per_s_per_device,
            "breakdown_s": dict(self.breakdown_s),
            "comm_s": {kind: dict(parts) for kind, parts in self.comm_s.items()},
            "memory_per_device_bytes": [m.to_dict() for m in self.memory],
            "stage_times_s": [{"segment": i, **t.to_dict()} for i, t in enumerate(self.stage_times)],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlanResult:
        """Inverse of :meth:`to_dict`.

        Raises:
            ConfigError: a missing or invalid field.
        """
        try:
            return cls(plan=Plan.from_dict(data["plan"]), iteration_time_s=float(data["iteration_time_s"]),
                       throughput_samples_per_s=float(data["throughput_samples_per_s"]),
                       tokens_per_s=float(data["tokens_per_s"]), mfu=float(data["mfu"]),
                       breakdown_s={k: float(v) for k, v in data["breakdown_s"].items()},
                       memory=tuple(StageMemory.from_dict(m) for m in data["memory_per_device_bytes"]),
                       stage_times=tuple(StageTime.from_dict(t) for t in data.get("stage_times_s", ())),
                       hfu=float(data.get("hfu", 0.0)),
                       model_flop_per_s_per_device=float(data.get("model_flop_per_s_per_device", 0.0)),
                       comm_s={str(kind): {str(k): float(v) for k, v in parts.items()}
                               for kind, parts in data.get("comm_s", {}).items()})
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"invalid plan result: {exc}") from None
