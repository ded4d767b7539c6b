"""TensorFlow imported for a terminal a person reads, without its start-up lines about a GPU the
machine does not have."""

from __future__ import annotations

import contextlib
import os
import re
import sys

# What TensorFlow's C++ runtime writes to stderr as it starts on a machine without an NVIDIA
# GPU, before its logging is set up (so TF_CPP_MIN_LOG_LEVEL does not reach it): the missing GPU,
# said three ways, the CPU instructions the build was not compiled for, and that oneDNN's
# operations are on (as they are by default on x86). Nothing to act on.
_NO_GPU_STARTUP_LINES = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|port\.cc:\d+\] oneDNN custom operations are on"
    r"|cudart_stub\.cc:\d+\] Could not find cuda drivers"
    r"|cuda_platform\.cc:\d+\] failed call to cuInit"
    r"|cpu_feature_guard\.cc:\d+\]|To enable the following instructions: |rebuild TensorFlow with")


@contextlib.contextmanager
def native_stderr_without(noise: re.Pattern | None):
    """Holds back what is written to file descriptor 2 (C++ code writes there, past
    ``sys.stderr``) inside the block, then writes back every line ``noise`` does not match."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as held:
            os.dup2(held.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                held.seek(0)
                for line in held.read().decode(errors="replace").splitlines():
                    if noise is None or not noise.search(line):
                        sys.stderr.write(line + "\n")
                sys.stderr.flush()
    finally:
        os.close(saved)


def import_tensorflow_quietly():
    """Imports TensorFlow and lets it look for GPUs without the start-up lines above; on a
    machine with an NVIDIA device (``/dev/nvidiactl``) every line is kept, since there a failed
    cuInit is worth reading. For a terminal a person reads (``fmnist-kfp serve``, the model
    server, ``fmnist-kfp tensorboard``). Returns the module."""
    with native_stderr_without(None if os.path.exists("/dev/nvidiactl")
                               else _NO_GPU_STARTUP_LINES):
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")  # the CUDA probe, now rather than later
    return tf
