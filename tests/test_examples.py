"""The examples run as a user would run them, and do what they say."""

import subprocess
import sys
from pathlib import Path

import samflow

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_quickstart_prints_counts_and_draws_the_map(tmp_path):
    png = tmp_path / "map.png"
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), str(png)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    counts = {line.split(":")[0].strip(): int(line.split(":")[1].split()[0]) for line in lines}
    assert sum(counts.values()) == 40 * 24
    # the paper's three regimes all appear on this grid
    assert {"collapse", "sequential", "direct"} <= set(counts)
    assert set(counts) <= set(samflow.FLAG_MEANINGS.split())
    assert png.stat().st_size > 10_000
    assert len((EXAMPLES / "quickstart.py").read_text().splitlines()) <= 35
