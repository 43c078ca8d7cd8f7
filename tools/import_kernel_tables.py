"""Convert published per-shape kernel measurements into archplace's measured-table CSVs.

Each subcommand reads one published file (already on disk, e.g. ``git show COMMIT:PATH >
file`` from a checkout of the source repository) and writes one CSV under
``src/archplace/cost/measured/`` in the tidy schema of its kernel class
(:mod:`archplace.cost.measured_tables`), with a ``#`` header giving the source repository,
path and commit, the GPU, dtype, library, what was measured, the units, and the command that
made the file.  The numbers are the published ones, converted only in units (milliseconds or
elements per nanosecond or FLOP per second into seconds).

Subcommands (run ``python tools/import_kernel_tables.py SUBCOMMAND --help``):

* ``llmcompass-matmul``: LLMCompass ``ae/figure5/ab/real_hardware/matmul_A100.csv``
  (rows ``M, N, K, <ms>ms, <TFLOP/s>Tflops``).
* ``llmcompass-rowwise``: LLMCompass softmax / layernorm CSVs (rows ``M, N, <Gelem/s>``,
  throughput = M*N / latency / 1e9).
* ``llmcompass-gelu``: LLMCompass gelu CSV (rows ``M, <Gelem/s>``, throughput = M / latency /
  1e9).
* ``llmcompass-block``: LLMCompass ``ae/figure5/ijkl/real_hardware/transformer_A100.csv``
  (12 latencies in seconds, one per line, in the order of ``plot_transformer.py``'s
  categories); writes four CSVs (gemm, softmax, layernorm, gelu).
* ``deepgemm-readme``: DeepGEMM's ``README.md`` per-shape TFLOPS tables (H800, FP8): the dense
  table and the contiguous grouped one; seconds = 2*b*m*n*k / (TFLOPS * 1e12).
* ``xla-matmul``: OpenXLA's ``kDefaultMatmulPTable`` text proto (``matmul_interpolator_data.h``);
  one GPU key, one dtype key; FLOP/s per (b, m, n, k) -> seconds = 2*b*m*n*k / value.

Prints the path and row count of each file written.
"""

# ruff: noqa: T201  (a command-line tool reports by printing)

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parents[1] / "src" / "archplace" / "cost" / "measured"

COLUMNS = {
    "gemm": ("label", "batch", "m", "n", "k", "calls", "dtype", "latency_s"),
    "softmax": ("label", "rows", "cols", "dtype", "latency_s"),
    "layernorm": ("label", "rows", "cols", "dtype", "latency_s"),
    "gelu": ("label", "elements", "dtype", "latency_s"),
}

COLUMN_HELP = {
    "gemm": ("label: the source's name for the kernel or '-'; batch, m, n, k: the GEMM "
             "[batch, m, k] x [batch, k, n] in elements; calls: how many such kernels latency_s "
             "covers (their sum); dtype: input dtype; latency_s: measured time in seconds"),
    "softmax": ("label: the source's name or '-'; rows, cols: softmax over the last dim (cols) "
                "of a rows x cols tensor; dtype: tensor dtype; latency_s: measured seconds"),
    "layernorm": ("label: the source's name or '-'; rows, cols: layer norm over the last dim "
                  "(cols) of a rows x cols tensor; dtype: tensor dtype; latency_s: measured seconds"),
    "gelu": ("label: the source's name or '-'; elements: tensor size; dtype: tensor dtype; "
             "latency_s: measured seconds"),
}

LLMCOMPASS = "PrincetonUniversity/LLMCompass"
LLMCOMPASS_TIMING = ("median of wall-clock times (time.time() around one PyTorch call and "
                     "torch.cuda.synchronize(), after 3 warm-up calls), so launch and Python "
                     "overhead are included")


def _command(argv: Sequence[str]) -> str:
    root = str(OUT_DIR.parents[3]) + "/"
    return "python tools/import_kernel_tables.py " + " ".join(shlex.quote(a.replace(root, "")) for a in argv)


def _number(value: float) -> str:
    return format(float(value), ".12g")


def write_table(out: Path, kernel: str, header: dict[str, str], rows: list[tuple[object, ...]]) -> None:
    """Write ``rows`` under a ``# key: value`` header and the kernel's column line."""
    lines = [f"# {key}: {value}" for key, value in header.items()]
    lines.append(f"# columns: {COLUMN_HELP[kernel]}")
    lines.append(",".join(COLUMNS[kernel]))
    for row in rows:
        if len(row) != len(COLUMNS[kernel]):
            raise SystemExit(f"{out}: row {row} does not have the {kernel} columns")
        lines.append(",".join(_number(v) if isinstance(v, float) else str(v) for v in row))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{out}: {len(rows)} rows")


def _fields(path: Path) -> list[list[str]]:
    text = path.read_text(encoding="utf-8")
    return [[f.strip() for f in line.split(",")] for line in text.splitlines() if line.strip()]


def _source(args: argparse.Namespace, kernel: str, gpu: str, preset: str, dtype: str,
            library: str, measured: str, units: str, argv: Sequence[str],
            overhead: tuple[float, str] | None = None) -> dict[str, str]:
    """The header; ``overhead`` (seconds, basis) marks wall-clock rows that carry host overhead
    (``timing: wall-clock``, ``host_overhead_s``: archplace.cost.kernel_tables subtracts it)."""
    header = {"kernel": kernel, "source_repo": args.repo, "source_path": args.path,
              "source_commit": args.commit, "gpu": gpu, "preset": preset, "dtype": dtype,
              "library": library, "measured": measured, "units": units}
    if overhead is None:
        header["timing"] = "kernel"
    else:
        header["timing"] = "wall-clock"
        header["host_overhead_s"] = f"{_number(overhead[0])} ({overhead[1]})"
    header["made_by"] = _command(argv)
    return header


PLATEAU = ("the smallest row's latency: the method's plateau, taken as host and synchronisation "
           "overhead with a negligible kernel")


def _plateau(rows: list[tuple[object, ...]]) -> tuple[float, str]:
    return min(float(str(r[-1])) for r in rows), PLATEAU


#: Host overhead of LLMCompass's run_on_gpu timing per kernel class: the plateau of its
#: micro-benchmark tables (gemm_a100_llmcompass, softmax_..., gelu_... minimum latency), for the
#: GPT-3 block rows that the same method timed.
_BLOCK_OVERHEAD = {
    "gemm": (2.96e-05, "the plateau of gemm_a100_llmcompass.csv, same timing method"),
    "softmax": (1.31130218506e-05, "the plateau of softmax_a100_llmcompass.csv, same timing method"),
    "gelu": (4.68492507935e-05, "the plateau of gelu_a100_llmcompass.csv, same timing method"),
}


def llmcompass_matmul(args: argparse.Namespace, argv: Sequence[str]) -> None:
    rows = []
    for f in _fields(args.file):
        m, n, k = int(f[0]), int(f[1]), int(f[2])
        if not f[3].endswith("ms"):
            raise SystemExit(f"{args.file}: latency {f[3]!r} is not in ms")
        rows.append(("-", 1, m, n, k, 1, "bf16", float(f[3][:-2]) * 1e-3))
    header = _source(args, "gemm", "NVIDIA A100 80GB", "a100-80gb", "bf16",
                     "PyTorch torch.matmul (cuBLAS)",
                     "[M, K] x [K, N] GEMM; software_model/matmul.py Matmul.run_on_gpu allocates "
                     "torch.bfloat16 inputs (the script asks for fp16); " + LLMCOMPASS_TIMING,
                     "published latency in ms (4 decimals) -> seconds (x 1e-3); the TFLOP/s "
                     "column is derived and dropped", argv, _plateau(rows))
    write_table(args.out, "gemm", header, rows)


def llmcompass_rowwise(args: argparse.Namespace, argv: Sequence[str]) -> None:
    rows = []
    for f in _fields(args.file):
        r, c, rate = int(f[0]), int(f[1]), float(f[2])
        rows.append(("-", r, c, "fp16", r * c / (rate * 1e9)))
    call = ("torch.softmax(x, dim=-1)" if args.kind == "softmax"
            else "torch.compile'd torch.layer_norm(x, [cols]) (no weight or bias)")
    header = _source(args, args.kind, "NVIDIA A100 80GB", "a100-80gb", "fp16",
                     f"PyTorch {call}", f"{args.kind} of a [M, N] fp16 tensor over N; "
                     + LLMCOMPASS_TIMING,
                     "published throughput M*N/latency/1e9 (elements per ns) -> latency_s = "
                     "rows*cols / (value * 1e9)", argv, _plateau(rows))
    write_table(args.out, args.kind, header, rows)


def llmcompass_gelu(args: argparse.Namespace, argv: Sequence[str]) -> None:
    rows = []
    for f in _fields(args.file):
        e, rate = int(f[0]), float(f[1])
        rows.append(("-", e, "fp16", e / (rate * 1e9)))
    header = _source(args, "gelu", "NVIDIA A100 80GB", "a100-80gb", "fp16",
                     "PyTorch torch.compile'd torch.nn.functional.gelu(x, approximate='tanh')",
                     "gelu of a 1-D fp16 tensor of M elements; " + LLMCOMPASS_TIMING,
                     "published throughput M/latency/1e9 (elements per ns) -> latency_s = "
                     "elements / (value * 1e9)", argv, _plateau(rows))
    write_table(args.out, "gelu", header, rows)


# plot_transformer.py's categories, in file order; the GPT-3 175B block (d_model 12288, 96 heads,
# batch 8, sequence 2048) under 4-way tensor parallelism: per-GPU shapes from
# software_model/transformer.py TransformerBlockInitComputationTP.
_BLOCK_GEMMS = {  # label: (batch, m, n, k, calls)
    "Q_K_V": (1, 16384, 3072, 12288, 3),
    "Q_mul_K": (192, 2048, 2048, 128, 1),
    "A_mul_V": (192, 2048, 128, 2048, 1),
    "Wo_proj": (1, 16384, 12288, 3072, 1),
    "W1_proj": (1, 16384, 12288, 12288, 1),
    "W2_proj": (1, 16384, 12288, 12288, 1),
}
_BLOCK_ORDER = ("Q_K_V", "Q_mul_K", "A_mul_V", "Wo_proj", "W1_proj", "W2_proj", "Softmax",
                "LayerNorm_MHA", "LayerNorm_FFN", "GeLU", "AllReduce_MHA", "AllReduce_FFN")


def llmcompass_block(args: argparse.Namespace, argv: Sequence[str]) -> None:
    values = [float(f[0]) for f in _fields(args.file)]
    if len(values) != len(_BLOCK_ORDER):
        raise SystemExit(f"{args.file}: {len(values)} values, expected {len(_BLOCK_ORDER)}")
    by_label = dict(zip(_BLOCK_ORDER, values, strict=True))
    what = ("one GPU's kernels of a GPT-3 175B block's prefill (d_model 12288, 96 heads, batch 8, "
            "sequence 2048) under 4-way tensor parallelism, from software_model/transformer.py "
            "TransformerBlockInitComputationTP.run_on_gpu; ")
    units = "published seconds, unchanged"
    prefix = args.out_prefix
    gemm_rows = [(label, *_BLOCK_GEMMS[label][:4], _BLOCK_GEMMS[label][4], "fp16" if b > 1 else "bf16",
                  by_label[label]) for label in _BLOCK_GEMMS for b in (_BLOCK_GEMMS[label][0],)]
    write_table(Path(f"{prefix}_gemm.csv"), "gemm", _source(
        args, "gemm", "NVIDIA A100 80GB", "a100-80gb", "bf16 (batch 1), fp16 (batched)",
        "PyTorch torch.matmul (bf16) and torch.bmm (fp16), cuBLAS",
        what + "Q_K_V is three [16384, 12288] x [12288, 3072] GEMMs (calls 3, the sum); Q_mul_K "
        "and A_mul_V are torch.bmm over 8 x 24 heads; " + LLMCOMPASS_TIMING, units, argv,
        _BLOCK_OVERHEAD["gemm"]),
        gemm_rows)
    write_table(Path(f"{prefix}_softmax.csv"), "softmax", _source(
        args, "softmax", "NVIDIA A100 80GB", "a100-80gb", "fp16", "PyTorch torch.softmax",
        what + "softmax of the [8, 24, 2048, 2048] scores over the last dim; " + LLMCOMPASS_TIMING,
        units, argv, _BLOCK_OVERHEAD["softmax"]),
        [("Softmax", 8 * 24 * 2048, 2048, "fp16", by_label["Softmax"])])
    write_table(Path(f"{prefix}_layernorm.csv"), "layernorm", _source(
        args, "layernorm", "NVIDIA A100 80GB", "a100-80gb", "fp16",
        "PyTorch torch.compile'd torch.layer_norm (no weight or bias)",
        what + "layer norm of [8, 2048, 12288]; one measurement printed for both norms; the "
        "median launch overhead of a 1 x 1 layer norm was subtracted; " + LLMCOMPASS_TIMING,
        units, argv), [(label, 8 * 2048, 12288, "fp16", by_label[label])
                       for label in ("LayerNorm_MHA", "LayerNorm_FFN")])
    write_table(Path(f"{prefix}_gelu.csv"), "gelu", _source(
        args, "gelu", "NVIDIA A100 80GB", "a100-80gb", "fp16",
        "PyTorch torch.compile'd torch.nn.functional.gelu(approximate='tanh')",
        what + "gelu of the [8, 2048, 12288] FFN activation; " + LLMCOMPASS_TIMING, units, argv,
        _BLOCK_OVERHEAD["gelu"]),
        [("GeLU", 8 * 2048 * 12288, "fp16", by_label["GeLU"])])
    print("not imported: AllReduce_MHA and AllReduce_FFN (run_on_gpu does not measure them)")


_ENTRY = re.compile(r"entries\s*\{\s*b:\s*(\d+)\s*m:\s*(\d+)\s*n:\s*(\d+)\s*k:\s*(\d+)\s*"
                    r"((?:flops\s*\{[^}]*\}\s*)+)\}")
_FLOPS = re.compile(r'flops\s*\{\s*key:\s*"([^"]+)"\s*value:\s*(\d+)\s*\}')
_KEY = re.compile(r'entries\s*\{\s*key:\s*"([^"]+)"\s*value\s*\{')


def xla_matmul(args: argparse.Namespace, argv: Sequence[str]) -> None:
    text = args.file.read_text(encoding="utf-8")
    starts = [(m.group(1), m.end()) for m in _KEY.finditer(text)]
    block = None
    for i, (key, start) in enumerate(starts):
        if key == args.key:
            block = text[start:starts[i + 1][1] if i + 1 < len(starts) else len(text)]
    if block is None:
        raise SystemExit(f"{args.file}: no key {args.key!r} (keys: {[k for k, _ in starts]})")
    rows = []
    for e in _ENTRY.finditer(block):
        b, m, n, k = (int(e.group(i)) for i in range(1, 5))
        flops = {key: int(v) for key, v in _FLOPS.findall(e.group(5))}
        if args.dtype_key in flops:
            rows.append(("-", b, m, n, k, 1, args.dtype, 2.0 * b * m * n * k / flops[args.dtype_key]))
    if not rows:
        raise SystemExit(f"{args.file}: no {args.dtype_key!r} entries under {args.key!r}")
    rows.sort(key=lambda r: r[1:5])
    header = _source(args, "gemm", args.gpu, args.preset, args.dtype,
                     "XLA GPU dot (its own choice of cuBLAS or Triton GEMM)",
                     f"kDefaultMatmulPTable key {args.key!r}, flops key {args.dtype_key!r}: "
                     "throughput of an HLO dot [b, m, k] x [b, k, n] (m, n, k in elements), "
                     "kernel time traced by xla/tools/matmul_perf_table_gen (5 profiled runs); "
                     "MatmulInterpolator reads it as runtime = 2*b*m*n*k / value"
                     + (f"; {args.note}" if args.note else ""),
                     "published FLOP/s -> latency_s = 2*b*m*n*k / value; rows sorted by (b, m, n, k)",
                     argv)
    write_table(args.out, "gemm", header, rows)


_DG_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(?:(\d+)\s*\|\s*)?"
                     r"(\d+(?:\.\d+)?)\s*TFLOPS\s*\|")


def deepgemm_readme(args: argparse.Namespace, argv: Sequence[str]) -> None:
    """The README's "Normal GEMMs for dense models" table (``| M | N | K | <T> TFLOPS | ...``) and
    its "Grouped GEMMs ... (contiguous layout)" table (``| groups | M per group | N | K | ...``,
    written as batch = groups); the masked-layout table is not imported (its M per group is an
    upper bound on the rows each group holds)."""
    section = ""
    rows = []
    for line in args.file.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            section = line
            continue
        match = _DG_ROW.match(line.strip())
        if not match:
            continue
        if "Normal GEMMs" in section:
            m, n, k = (int(match.group(i)) for i in range(1, 4))
            b, tflops, label = 1, float(match.group(5)), "dense"
        elif "contiguous layout" in section and match.group(4) is not None:
            b, m, n, k = (int(match.group(i)) for i in range(1, 5))
            tflops, label = float(match.group(5)), "grouped-contiguous"
        else:
            continue
        rows.append((label, b, m, n, k, 1, "fp8", 2.0 * b * m * n * k / (tflops * 1e12)))
    if not rows:
        raise SystemExit(f"{args.file}: no TFLOPS rows under the normal or contiguous grouped GEMM tables")
    header = _source(args, "gemm", "NVIDIA H800 SXM5", "h800-80gb", "fp8",
                     "DeepGEMM FP8 GEMM (e4m3 operands, fine-grained scaling, bf16 output), NVCC 12.8",
                     "the README's per-shape table: [M, K] x [K, N] (grouped: groups x [M, K] x [K, N]) "
                     "FP8 GEMMs on H800 SXM5; kernel time from the profiler (tests/test_core.py "
                     "bench_kineto on the fp8_gemm kernel); shapes of DeepSeek-V3/R1 inference",
                     "published TFLOPS (integers) -> latency_s = 2*batch*m*n*k / (value * 1e12)", argv)
    write_table(args.out, "gemm", header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, out: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name)
        p.add_argument("file", type=Path, help="the published file, on disk")
        p.add_argument("--repo", required=True, help="source repository, owner/name")
        p.add_argument("--path", required=True, help="the file's path in that repository")
        p.add_argument("--commit", required=True, help="the commit the file was read at")
        if out:
            p.add_argument("--out", type=Path, required=True, help="CSV to write")
        return p

    add("llmcompass-matmul")
    add("llmcompass-rowwise").add_argument("--kind", choices=("softmax", "layernorm"), required=True)
    add("llmcompass-gelu")
    add("llmcompass-block", out=False).add_argument(
        "--out-prefix", required=True, help="writes PREFIX_gemm.csv, _softmax, _layernorm, _gelu")
    p = add("xla-matmul")
    p.add_argument("--key", required=True, help="GPU key of the table, e.g. sm_90")
    p.add_argument("--dtype-key", required=True, help='flops key, e.g. "BF16xBF16->BF16"')
    p.add_argument("--dtype", required=True, help="dtype written to the rows, e.g. bf16")
    p.add_argument("--gpu", required=True, help="GPU name for the header")
    p.add_argument("--preset", required=True, help="the matching archplace hardware preset")
    p.add_argument("--note", default="", help="extra provenance for the header")
    add("deepgemm-readme")
    args = parser.parse_args(argv)
    {"deepgemm-readme": deepgemm_readme, "llmcompass-matmul": llmcompass_matmul,
     "llmcompass-rowwise": llmcompass_rowwise, "llmcompass-gelu": llmcompass_gelu,
     "llmcompass-block": llmcompass_block, "xla-matmul": xla_matmul}[args.command](args, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
