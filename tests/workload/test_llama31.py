"""Llama 3.1 at its pre-training sequence (8,192 tokens): graph, estimate and plan run."""

from __future__ import annotations

import json

import pytest

from cli_helpers import run


@pytest.mark.slow
def test_llama31_8b_graph_estimate_plan_at_8192(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["graph", "--model", "llama3.1-8b", "--seq-len", "8192", "--json"], capsys)
    assert code == 0, err
    graph = json.loads(out)
    assert graph["seq_len"] == 8192 and graph["total"]["params"] == 8_030_261_248
    code, out, err = run(["estimate", "--model", "llama3.1-8b", "--hardware", "h100-80gb",
                          "--seq-len", "8192", "--json"], capsys)
    assert code == 0, err
    code, out, err = run(["plan", "--model", "llama3.1-8b", "--hardware", "h100-80gb", "--devices", "8",
                          "--global-batch", "16", "--seq-len", "8192", "--micro-batch", "1",
                          "--tp", "2", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)
