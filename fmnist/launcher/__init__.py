"""Training launchers: one interface, a backend per place the workers run."""

from fmnist.launcher.base import (
    BACKENDS,
    TrainingJobResult,
    TrainingJobSpec,
    TrainingLauncher,
    get_launcher,
)

__all__ = ["BACKENDS", "TrainingJobResult", "TrainingJobSpec", "TrainingLauncher", "get_launcher"]
