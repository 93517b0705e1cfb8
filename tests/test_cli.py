"""The `vlkernels` command: info and the benchmark harness end to end (JSON lines, plot)."""

import json
import subprocess
import sys

import pytest

from vlkernels.cli import main


def test_info_reports_backends(capsys, monkeypatch):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for needle in ("vlkernels", "torch", "triton", "C++ CPU kernels", "CUDA kernels", "Triton on GPU", "faiss", "GPU:"):
        assert needle in out
    # The backend switch as every op reads it, a bad value named rather than a traceback.
    monkeypatch.setenv("VLKERNELS_BACKEND", "torch")
    assert main(["info"]) == 0 and "backend switch    torch" in capsys.readouterr().out
    monkeypatch.setenv("VLKERNELS_BACKEND", "bogus")
    assert main(["info"]) == 0 and "backend switch    invalid: " in capsys.readouterr().out


def test_bench_core_writes_json_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    js, png = tmp_path / "r.jsonl", tmp_path / "r.png"
    assert main(["bench", "core", "--quick", "--json", str(js), "--plot", str(png)]) == 0
    rows = [json.loads(line) for line in js.read_text().splitlines()]
    assert rows and all(r["status"] == "ok" for r in rows)
    row = rows[0]
    for key in ("device_name", "versions", "git_sha", "date", "params", "results"):
        assert key in row
    res = row["results"]["vlkernels"]
    assert res["runs"] >= 3 and res["min_s"] <= res["median_s"] <= res["max_s"]
    assert "speedup_vs_baseline" in res and "gbps" in res
    assert png.stat().st_size > 1000


@pytest.mark.parametrize(
    "argv, match",
    [
        (["selftest", "--quick", "--device", "cpu", "--json", "{d}"], "--json {d} is a directory"),
        (["bench", "boxes", "--quick", "--json", "{d}"], "--json {d} is a directory"),
        (["gpu-profile", "--json", "{d}"], "--json {d} is a directory"),
        (["gpu-profile", "--docs", "{d}/missing.md"], "--docs {d}/missing.md: no such file"),
        # matplotlib refused .txt only after the run, and wrote out.png for "out".
        (["bench", "boxes", "--quick", "--plot", "{d}/out.txt"], "--plot {d}/out.txt: expected a .png, .svg, .pdf"),
        (["bench", "boxes", "--quick", "--plot", "{d}/out"], "--plot {d}/out: expected a .png, .svg, .pdf file"),
    ],
)
def test_output_paths_refused_before_running(tmp_path, capsys, argv, match):
    """An output path that is a directory (or a --docs file that is missing): one error line and exit 2, before any
    work, not a traceback after it."""
    assert main([a.format(d=tmp_path) for a in argv]) == 2
    captured = capsys.readouterr()
    assert match.format(d=tmp_path) in captured.err and "Traceback" not in captured.err


def test_bench_unknown_family_fails(capsys):
    assert main(["bench", "nosuchfamily", "--quick"]) == 2


@pytest.mark.parametrize("args", [["--load", "-1"], ["--load", "x"], ["--load", "1", "--rounds", "0"]])
def test_bench_load_options_reject_bad_counts(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "core", "--quick", *args])
    assert e.value.code == 2 and "expected an integer >=" in capsys.readouterr().err


def test_entry_point_runs():
    r = subprocess.run([sys.executable, "-m", "vlkernels.cli", "info"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_ruff_lint_and_format_clean():
    ruff = pytest.importorskip("ruff")
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    exe = [sys.executable, "-m", "ruff"]
    assert ruff is not None
    lint = subprocess.run([*exe, "check", str(root)], capture_output=True, text=True, cwd=root)
    assert lint.returncode == 0, lint.stdout[-3000:]
    fmt = subprocess.run([*exe, "format", "--check", str(root)], capture_output=True, text=True, cwd=root)
    assert fmt.returncode == 0, fmt.stdout[-3000:]


def test_bench_case_with_missing_anchor_is_skipped_not_failed(monkeypatch):
    from vlkernels.cli import _benchmarks

    harness = _benchmarks()
    harness.discover()

    def needs_missing_anchor(n, device):
        import vlkernels_no_such_anchor  # noqa: F401

    monkeypatch.setitem(harness.REGISTRY, "fake", {})
    harness.register("fake", "needs_anchor", quick={"n": 1})(needs_missing_anchor)
    lines = []
    assert harness.run(["fake"], "cpu", True, None, None, echo=lines.append) == 0
    assert any("skipped: needs vlkernels_no_such_anchor" in line for line in lines)


def test_bench_option_errors_before_running(monkeypatch, capsys, tmp_path):
    """--rounds without --load, a bad VLKERNELS_BACKEND and --plot without matplotlib are refused up front."""
    from vlkernels.cli import main

    assert main(["bench", "core", "--quick", "--rounds", "7"]) == 2
    assert "--rounds sets the rounds of --load" in capsys.readouterr().err
    monkeypatch.setenv("VLKERNELS_BACKEND", "bogus")
    assert main(["bench", "core", "--quick"]) == 2
    assert "VLKERNELS_BACKEND" in capsys.readouterr().err
    monkeypatch.delenv("VLKERNELS_BACKEND")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert main(["bench", "core", "--quick", "--plot", str(tmp_path / "p.png")]) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_version_flag(capsys):
    import vlkernels

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"vlkernels {vlkernels.__version__}"


def test_dir_lists_public_names_only():
    import vlkernels

    names = dir(vlkernels)
    assert {"ClipLoss", "retrieval", "captioning", "boxes", "__version__"} <= set(names)
    assert not {"annotations", "version", "PackageNotFoundError", "_ext"} & set(names)
    assert all(hasattr(vlkernels, n) for n in names)


def test_info_names_the_cuda_state_plainly(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "CUDA kernels" in x)
    assert "no (built without CUDA) (no GPU visible)" not in line
    assert "not built" in line or "built" in line
