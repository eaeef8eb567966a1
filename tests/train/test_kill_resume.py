"""kill -9 at three seeded points of a tiny training run (one at a random time, one inside a
checkpoint's file writes, one at a rename of a directory swap): each resumes to the same metrics
and bit-identical weights as an uninterrupted run. bench/studies/kill_resume.py runs the 20-point version."""
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "studies" / "kill_resume.py"


def test_three_kill_points_resume_to_the_uninterrupted_run(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH), "--points", "3", "--seed", "1", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "3/3 identical to the uninterrupted run", done.stdout
    assert sum(" killed, " in line for line in lines) == 3, done.stdout  # every point really was a kill
