"""Per-device memory of one pipeline stage.

Model state follows the mixed-precision Adam accounting of Megatron-LM (Narayanan et
al., SC 2021; Megatron-LM's distributed-optimizer notes count the same 18 bytes) and
ZeRO (Rajbhandari et al., SC 2020, section 3.1, "K = 12" optimizer bytes): 18 bytes per
parameter = 2 (bf16 weights) + 4 (fp32 gradients) + 12 (fp32 master weights, Adam first
and second moments, 4 bytes each).

Activations follow the 1F1B schedule (Narayanan et al. 2021, section 2.2.1): stage j
(0-based) of p stages holds at most ``min(p - j, m)`` micro-batches in flight, each
keeping the activations its layers save for the backward pass; with full
recomputation (Korthikanti et al. 2022) a micro-batch keeps only the inputs of the
stage's layers, and one layer at a time is re-materialised during the backward pass.

Sums over the layers of a stage are taken strictly left to right from the stage's
first layer (see :func:`sequential_sum`): the solver computes the same sums with
``numpy.cumsum``, so both sides obtain bit-identical figures and never disagree on
whether a stage fits.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from archplace.errors import ConfigError
from archplace.placement.plan import LayerCost, Recompute, StageMemory

WEIGHT_BYTES_PER_PARAM = 2
"""bf16 copy of the weights used by forward and backward."""

GRADIENT_BYTES_PER_PARAM = 4
"""fp32 gradient accumulation buffer (Megatron-LM keeps gradients in fp32)."""

OPTIMIZER_BYTES_PER_PARAM = 12
"""fp32 master weights + Adam m + Adam v, 4 bytes each."""

MODEL_STATE_BYTES_PER_PARAM = (
    WEIGHT_BYTES_PER_PARAM + GRADIENT_BYTES_PER_PARAM + OPTIMIZER_BYTES_PER_PARAM
)
"""18 bytes per parameter for mixed-precision Adam: ZeRO counts 2 + 2 + 12 with 16-bit
gradients; Megatron-LM accumulates gradients in fp32, hence 2 + 4 + 12."""


def sequential_sum(values: Iterable[float]) -> float:
    """Sum strictly left to right starting from 0.0 (the order ``numpy.cumsum`` uses).

    Python's built-in ``sum`` of floats is compensated from Python 3.12 on, which
    would make figures differ by an ulp from the solver's; this function does not.
    """
    total = 0.0
    for value in values:
        total += value
    return total


def in_flight_micro_batches(stage: int, pp: int, micro_batches: int) -> int:
    """Micro-batches whose activations stage ``stage`` (0-based) of ``pp`` holds at once.

    1F1B (PipeDream-Flush, Narayanan et al. 2021, section 2.2.1): stage j runs
    ``pp - j - 1`` warm-up forward passes and one more before its first backward pass,
    after which every forward is paired with a backward; it cannot start more than the
    ``micro_batches`` that exist, so it holds ``min(pp - j, micro_batches)``.

    Raises:
        ConfigError: ``stage`` outside ``0..pp-1`` or a non-positive count.
    """
    if pp < 1 or micro_batches < 1:
        raise ConfigError(f"pp and micro_batches must be >= 1, got pp={pp}, "
                          f"micro_batches={micro_batches}")
    if not 0 <= stage < pp:
        raise ConfigError(f"stage must be in 0..{pp - 1}, got {stage}")
    return min(pp - stage, micro_batches)


def stage_memory(layers: Sequence[LayerCost], *, stage: int, in_flight: int,
                 recompute: Recompute) -> StageMemory:
    """Memory of one device of a pipeline stage, in bytes.

    Args:
        layers: the stage's layers, in chain order (per TP rank, per micro-batch).
        stage: stage index (only recorded in the result).
        in_flight: micro-batches in flight (see :func:`in_flight_micro_batches`).
        recompute: activation recomputation policy.

    Returns:
        weights = 2 B x params, gradients = 4 B x params, optimizer = 12 B x params;
        activations = in_flight x sum(activation_bytes) without recomputation, or
        in_flight x sum(input_bytes) + max(activation_bytes) with full recomputation
        (the inputs are kept, and the layer being back-propagated is re-materialised
        whole, the largest of the stage in the worst case); working = max(working_bytes).

    Raises:
        ConfigError: no layers, ``in_flight < 1`` or an unsupported recompute policy.
    """
    if not layers:
        raise ConfigError(f"stage {stage} has no layers")
    if in_flight < 1:
        raise ConfigError(f"in_flight must be >= 1, got {in_flight}")
    params = 0
    for layer in layers:
        params += layer.params
    p = float(params)
    weights = WEIGHT_BYTES_PER_PARAM * p
    gradients = GRADIENT_BYTES_PER_PARAM * p
    optimizer = OPTIMIZER_BYTES_PER_PARAM * p
    if recompute is Recompute.NONE:
        activations = in_flight * sequential_sum(layer.activation_bytes for layer in layers)
    elif recompute is Recompute.FULL:
        activations = (in_flight * sequential_sum(layer.input_bytes for layer in layers)
                       + max(layer.activation_bytes for layer in layers))
    else:  # pragma: no cover - a later issue adds selective recomputation
        raise ConfigError(f"recompute {recompute!r} is not supported yet")
    working = max(layer.working_bytes for layer in layers)
    return StageMemory(stage=stage, weights=weights, gradients=gradients, optimizer=optimizer,
                       activations=activations, working=working)
