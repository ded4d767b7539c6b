"""Errors that tell the user what went wrong and what to do about it."""


class UserInputError(ValueError):
    """A parameter, file or request is invalid; the message names it and the fix."""


class DataSourceError(RuntimeError):
    """The dataset could not be obtained or failed verification."""


class TrainingJobError(RuntimeError):
    """A training job (local workers or a TFJob) failed."""


class TrainingJobStopped(TrainingJobError):
    """A training job was stopped on purpose before it finished (early stopping)."""


class TuningError(RuntimeError):
    """A hyperparameter search (a Katib Experiment or the local search) failed."""


class MissingExtraError(UserInputError):
    """A command needs an optional part of the install (an extra) that is not installed; the
    message names the extra and the pip command that adds it."""
