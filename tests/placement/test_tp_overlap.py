"""TP collectives hidden behind the GEMMs next to them (archplace.placement.tp_overlap): hand
examples, invariants, and the option from the API and the CLI to the iteration time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archplace.base.errors import ConfigError
from archplace.cli import main
from archplace.front import api
from archplace.hw.presets import load_accelerator
from archplace.placement.tp_overlap import UB_PIPELINE_SPLITS, overlapped_tp
from archplace.workload.graph import Operator, OpGraph, OpKind, Phase

KINDS = {"mm": (OpKind.MATMUL, "aten.mm.default"), "add": (OpKind.ELEMENTWISE, "aten.add.Tensor"),
         "ag": (OpKind.COLLECTIVE, "all_gather"), "rs": (OpKind.COLLECTIVE, "reduce_scatter")}


def _graph(*ops: tuple[str, tuple[int, ...]]) -> OpGraph:
    out = []
    for i, (kind, preds) in enumerate(ops):
        op_kind, target = KINDS[kind]
        out.append(Operator(id=i, name=f"{kind}{i}", target=target, kind=op_kind, phase=Phase.FWD,
                            batch=1, m=8, k=8, n=8, elements=64, flop=1.0, bytes_read=1.0,
                            bytes_written=1.0, preds=preds, group=2 if op_kind is OpKind.COLLECTIVE else 1))
    return OpGraph(tuple(out))


# all-gather -> matmul (3 s) -> add -> matmul (2 s) -> reduce-scatter (2 s)
CHAIN = _graph(("ag", ()), ("mm", (0,)), ("add", (1,)), ("mm", (2,)), ("rs", (3,)))
CHAIN_S = [1.0, 3.0, 0.5, 2.0, 2.0]


def test_forward_chain_by_hand() -> None:
    # the all-gather (1 s) hides under its 3 s GEMM and takes no SM (copy engines); the
    # reduce-scatter (2 s) under the 2 s GEMM it drains, less its last split (2 / 4 = 0.5 s
    # exposed); it takes 0.15 x 2 = 0.3 s of the GEMM's SMs, under the exposed 0.5 s
    out = overlapped_tp(CHAIN, CHAIN_S, tp_ops=[0, 4], backward=False, sm_share=0.15)
    assert (out.total_s, out.exposed_s, out.slowed_s) == (3.0, 2.0 / UB_PIPELINE_SPLITS, 0.0)


def test_backward_bulk_overlap_by_hand() -> None:
    # no pipelined split in the backward pass: nothing exposed, the 0.3 s of SMs slow the GEMM
    out = overlapped_tp(CHAIN, CHAIN_S, tp_ops=[0, 4], backward=True, sm_share=0.15)
    assert out.total_s == 3.0 and out.exposed_s == 0.0 and out.slowed_s == pytest.approx(0.3)


def test_a_collective_longer_than_its_gemms_sticks_out() -> None:
    # all-gather of 5 s feeding a 3 s GEMM: 2 s exposed
    out = overlapped_tp(CHAIN, [5.0, *CHAIN_S[1:]], tp_ops=[0], backward=True, sm_share=0.15)
    assert (out.total_s, out.exposed_s, out.slowed_s) == (5.0, 2.0, 0.0)


def test_partners_are_found_through_element_wise_operators() -> None:
    # two dgrad matmuls (1.5 s each) summed by an add, then the reduce-scatter (2.5 s): 3 s of
    # GEMMs hide it (backward: no split left exposed)
    graph = _graph(("mm", ()), ("mm", ()), ("add", (0, 1)), ("rs", (2,)))
    out = overlapped_tp(graph, [1.5, 1.5, 0.1, 2.5], tp_ops=[3], backward=True, sm_share=0.0)
    assert (out.exposed_s, out.slowed_s) == (0.0, 0.0)
    alone = _graph(("add", ()), ("rs", (0,)))  # no GEMM next to it: exposed whole
    assert overlapped_tp(alone, [0.1, 2.5], tp_ops=[1], backward=True, sm_share=0.2).exposed_s == 2.5


@settings(max_examples=200, deadline=None)
@given(times=st.lists(st.floats(0.0, 10.0), min_size=5, max_size=5), share=st.floats(0.0, 0.9),
       backward=st.booleans())
def test_overlap_never_costs_more_than_running_serially(times: list[float], share: float,
                                                         backward: bool) -> None:
    out = overlapped_tp(CHAIN, times, tp_ops=[0, 4], backward=backward, sm_share=share)
    assert out.total_s == times[0] + times[4]
    assert 0.0 <= out.exposed_s <= out.total_s
    assert out.slowed_s >= 0.0 and out.exposed_s + out.slowed_s <= out.total_s + 1e-12


TP_RUN = dict(model="llama3-8b", hardware="h100-80gb", devices=8, global_batch=16, tp=4, pp=1, dp=2,
              micro_batch=1, seq_len=2048, sp=True, zero_stage=1)


def test_overlap_hides_most_tp_communication_of_a_traced_model() -> None:
    off = api.evaluate(**TP_RUN)
    on = api.evaluate(**TP_RUN, tp_comm_overlap=True)
    assert off.breakdown_s["tp_comm"] > 0
    assert on.breakdown_s["tp_comm"] < 0.5 * off.breakdown_s["tp_comm"]
    assert on.iteration_time_s < off.iteration_time_s
    # what is hidden is not free: the iteration saves less than the TP time it hides
    hidden = off.breakdown_s["tp_comm"] - on.breakdown_s["tp_comm"]
    assert off.iteration_time_s - on.iteration_time_s < hidden
    explicit_off = api.evaluate(**TP_RUN, tp_comm_overlap=False)
    assert explicit_off.iteration_time_s == off.iteration_time_s


def test_overlap_on_a_chip_without_an_efficiency_section_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^tp_comm_overlap: tpuv4 has no efficiency section"):
        api.evaluate(**{**TP_RUN, "hardware": "tpuv4"}, tp_comm_overlap=True)


def test_the_cli_flag_reaches_the_plan(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "config.json"
    model.write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 256, "n_head": 4,
                                 "n_positions": 256, "vocab_size": 2048}))
    argv = ["evaluate", "--model", str(model), "--hardware", "h100-80gb", "--devices", "4",
            "--global-batch", "8", "--tp", "4", "--pp", "1", "--dp", "1", "--micro-batch", "1", "--sp",
            "--json"]
    times = {}
    for flag in ("--no-tp-comm-overlap", "--tp-comm-overlap"):
        with pytest.raises(SystemExit) as exc:
            main([*argv, flag])
        assert exc.value.code in (0, None)
        out = json.loads(capsys.readouterr().out)
        assert out["tp_comm_overlap"] is (flag == "--tp-comm-overlap")
        times[flag] = out["breakdown_s"]["tp_comm"]
    assert times["--tp-comm-overlap"] < times["--no-tp-comm-overlap"]


def test_a_hardware_file_may_turn_it_on(tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "src/archplace/hw/presets/h100-80gb.yaml").read_text()
    path = tmp_path / "mine.yaml"
    path.write_text(text + "  tp_comm_overlap: {value: true, source: \"ub_tp_comm_overlap true\"}\n")
    eff = load_accelerator(str(path)).efficiency
    assert eff is not None and eff.tp_comm_overlap is True
    assert type(eff).from_dict(eff.to_dict()) == eff and eff.to_dict()["tp_comm_overlap"] is True
    off = load_accelerator("h100-80gb").efficiency
    assert off is not None and not off.tp_comm_overlap and "tp_comm_overlap" not in off.to_dict()
    on = api.evaluate(**{**TP_RUN, "hardware": str(path)})
    assert on.iteration_time_s == api.evaluate(**TP_RUN, tp_comm_overlap=True).iteration_time_s
    path.write_text(text + '  tp_comm_overlap: {value: "yes", source: "x"}\n')
    with pytest.raises(ConfigError, match="tp_comm_overlap must be true or false"):
        load_accelerator(str(path))


def test_the_pp_overlap_flag_reaches_an_interleaved_plan(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """``--pp-comm-overlap`` on an interleaved plan: its pipeline sends hide under the chunks'
    compute (pp_comm falls, the iteration does not grow); refused on a chip without an
    efficiency section."""
    model = tmp_path / "config.json"
    model.write_text(json.dumps({"model_type": "gpt2", "n_layer": 8, "n_embd": 256, "n_head": 4,
                                 "n_positions": 256, "vocab_size": 2048}))
    argv = ["evaluate", "--model", str(model), "--hardware", "h100-80gb", "--devices", "16",
            "--global-batch", "32", "--tp", "1", "--pp", "2", "--dp", "8", "--micro-batch", "1",
            "--schedule", "interleaved", "--chunks", "2", "--json"]
    out = {}
    for flag in ("--no-pp-comm-overlap", "--pp-comm-overlap"):
        with pytest.raises(SystemExit) as exc:
            main([*argv, flag])
        assert exc.value.code in (0, None)
        out[flag] = json.loads(capsys.readouterr().out)
        assert out[flag]["pp_comm_overlap"] is (flag == "--pp-comm-overlap")
    on, off = out["--pp-comm-overlap"], out["--no-pp-comm-overlap"]
    assert on["breakdown_s"]["pp_comm"] < off["breakdown_s"]["pp_comm"]
    assert on["iteration_time_s"] <= off["iteration_time_s"]
    with pytest.raises(ConfigError, match=r"^pp_comm_overlap: tpuv4 has no efficiency section"):
        api.evaluate(**{**TP_RUN, "hardware": "tpuv4"}, pp_comm_overlap=True)
