"""What the front-door tests of the parallel dimensions (tests/test_cp_ep_front.py,
tests/test_etp_front.py) share: a 2-layer GPT-2 config, a one-design space, the cluster and
fixed-plan options, and the check that a command is refused in one line."""

from __future__ import annotations

import json

import pytest

from cli_helpers import run

GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 128,
       "vocab_size": 1024}
CLUSTER = ["--hardware", "a100-80gb", "--devices", "8", "--global-batch", "8"]
FIXED = ["--tp", "1", "--pp", "1", "--dp", "8", "--micro-batch", "1"]
SPACE = ("base: tpuv4\ntensor_cores: [2]\narray_dim: [128]\nvector_cores: [2]\nbuffer: [32 MiB]\n"
         "hbm: [32 GiB]\narea_min_fraction: 0.0\n")


def gpt_config_file(factory: pytest.TempPathFactory) -> str:
    """The path of a new config.json of :data:`GPT`."""
    path = factory.mktemp("gpt") / "config.json"
    path.write_text(json.dumps(GPT))
    return str(path)


def one_design_space_file(factory: pytest.TempPathFactory) -> str:
    """The path of a new space YAML of :data:`SPACE` (one design on the tpuv4 base)."""
    path = factory.mktemp("space") / "space.yaml"
    path.write_text(SPACE)
    return str(path)


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of ``archplace ARGV`` (exit status 2), without its prefix."""
    code, _, err = run(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("archplace: error: "), err
    return lines[0].removeprefix("archplace: error: ")
