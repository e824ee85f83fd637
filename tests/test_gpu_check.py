"""benchmarks/gpu_check.py, dry run: every case at toy sizes on the CPU, one dtype."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is not installed with the package
    sys.path.insert(0, str(ROOT))

from benchmarks import gpu_check  # noqa: E402


def test_dry_run_prints_the_table(tmp_path, capsys):
    out = tmp_path / "gpu.md"
    assert gpu_check.main(["--cpu", "--dtype", "float32", "--out", str(out)]) == 0
    text = out.read_text()
    assert text in capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    cases = [row.split(" | ")[0].lstrip("| ") for row in rows[1:]]
    assert cases == ["discrete l2 L=2 d=4", "flow l2 L=2 d=4 tau=5", "CNN l2-SAM step b=8"]
    assert "0 failed points" in rows[1] and "0 solver failures" in rows[2]
    rates = [float(re.search(r"\| ([0-9.e+-]+) (cs/s|traj/s|steps/s) \|", r)[1]) for r in rows[1:]]
    assert all(rate > 0 for rate in rates)


def test_refuses_to_run_without_an_accelerator(capsys):
    assert gpu_check.main([]) == 1  # the test suite runs on the CPU
    assert "no accelerator" in capsys.readouterr().err
