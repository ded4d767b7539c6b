"""TensorFlow's start-up lines about a missing GPU are held back; every other line written to
the process's stderr, by C++ code (file descriptor 2) or Python, comes through in order."""

from __future__ import annotations

import subprocess
import sys

from fmnist_kfp.training.quiet_start import _NO_GPU_STARTUP_LINES

# Lines TensorFlow 2.21 wrote on this machine (no GPU), from a local run's log.
STARTUP = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795775821.733968    7079 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.",
    "E0000 00:00:1795777630.568027    4760 cuda_platform.cc:52] failed call to cuInit: "
    "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
    "I0000 00:00:1795775821.800067    7079 cpu_feature_guard.cc:227] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow "
    "with the appropriate compiler flags.",
]
KEPT = ["E0000 00:00:1.0 1 saved_model_loader.cc:1] could not load the model",
        "an error of ours"]


def test_the_startup_lines_are_noise_and_real_errors_are_not():
    assert all(_NO_GPU_STARTUP_LINES.search(line) for line in STARTUP)
    assert not any(_NO_GPU_STARTUP_LINES.search(line) for line in KEPT)


def test_what_is_written_to_the_descriptor_comes_back_without_the_noise():
    lines = [STARTUP[0], KEPT[0], STARTUP[1], KEPT[1]]
    script = (
        "import os, sys\n"
        "from fmnist_kfp.training.quiet_start import _NO_GPU_STARTUP_LINES, "
        "native_stderr_without\n"
        "with native_stderr_without(_NO_GPU_STARTUP_LINES):\n"
        f"    os.write(2, {chr(10).join(lines[:3]) + chr(10)!r}.encode())\n"
        f"    print({lines[3]!r}, file=sys.stderr)\n"
        "print('after', file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stderr.splitlines() == [KEPT[0], KEPT[1], "after"]
