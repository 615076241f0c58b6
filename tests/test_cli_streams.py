"""The CLI's own output cannot end it in a traceback: a full device, a terminal without UTF-8 (issue 28)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RUN = [sys.executable, "-m", "madmax", "simulate", "-m", "llama-3-8b", "-s", "dgx-h100", "--num-gpus", "8",
       "--global-batch", "64"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_a_full_device_is_one_sentence():
    with open("/dev/full", "w") as full:
        done = subprocess.run(RUN, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: the output could not be written (No space left on device)"


def test_an_ascii_terminal_gets_the_result_with_question_marks():
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    done = subprocess.run(RUN, capture_output=True, text=True, timeout=300, env=env, errors="replace")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "iteration time" in done.stdout
