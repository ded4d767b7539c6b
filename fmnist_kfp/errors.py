"""Errors that tell the user what went wrong and what to do about it.

Every error of ours derives from :class:`FmnistError`, wherever it is defined (the remote-job
runner's, a rollout's, a step's): the CLI ends on one with ``error: <message>`` and its
``exit_code``, a local run's step with the same line instead of a traceback
(:func:`fmnist_kfp.kfp_components.reports_errors_briefly`). Any other exception is a bug and
keeps its traceback.
"""


class FmnistError(Exception):
    """An error whose message says what went wrong and what to do. ``exit_code``: what the CLI
    exits with, 2 when the input or the environment must change before a run can succeed, 1
    when the work failed."""

    exit_code = 1


class UserInputError(FmnistError, ValueError):
    """A parameter, file or request is invalid; the message names it and the fix."""

    exit_code = 2


class RemoteError(FmnistError, RuntimeError):
    """A service a command talks to (the Kubeflow Pipelines API, the Kubernetes API) cannot
    be reached or refused the request; the message names the service and what to check."""


# Connection failures by the class names the HTTP clients give them (urllib3, requests,
# httpx), so that this module imports none of them.
_CONNECT_TIMEOUTS = {"ConnectTimeoutError", "ConnectTimeout"}


def connection_problem(error: BaseException) -> str | None:
    """Why no connection could be made, when that is what ``error`` (or an error it was raised
    from) says: the host name does not resolve, the connection is refused, there is no route,
    or nothing answered the connection in time. None for anything else, such as an HTTP error
    or a connection reset mid-transfer: the host was reached, and retrying may help."""
    import errno
    import socket

    seen: set[int] = set()
    pending: list[BaseException] = [error]
    proxy = ""
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        name = type(current).__name__
        if name == "ProxyError":
            proxy = "through the proxy ($HTTP_PROXY/$HTTPS_PROXY): "
        if isinstance(current, socket.gaierror) or name == "NameResolutionError":
            return proxy + "its name does not resolve (no DNS, or no network)"
        if isinstance(current, ConnectionRefusedError):
            return proxy + "the connection was refused (nothing listens on that port)"
        if isinstance(current, OSError) and current.errno in (
                errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN):
            return proxy + "there is no route to it (no network)"
        if name in _CONNECT_TIMEOUTS:
            return proxy + "nothing answered the connection in time"
        # The causes: raised from, raised while handling, and the ``reason`` urllib and
        # urllib3 keep (URLError, MaxRetryError), or an error passed as an argument.
        pending += [e for e in (current.__cause__, current.__context__,
                                getattr(current, "reason", None), *current.args)
                    if isinstance(e, BaseException)]
    return None


class DataSourceError(FmnistError, RuntimeError):
    """The dataset could not be obtained or failed verification."""

    exit_code = 2


class TrainingJobError(FmnistError, RuntimeError):
    """A training job (local workers or a TFJob) failed."""

    exit_code = 2


class TrainingJobStopped(TrainingJobError):
    """A training job was stopped on purpose before it finished (early stopping)."""


class TuningError(FmnistError, RuntimeError):
    """A hyperparameter search (a Katib Experiment or the local search) failed."""


class MissingExtraError(UserInputError):
    """A command needs an optional part of the install (an extra) that is not installed; the
    message names the extra and the pip command that adds it."""


class StepFailed(FmnistError, RuntimeError):
    """A step of a local run ended on an error of ours; the message names the step and the
    error's own message, ``kind`` the error's class, and the exit code is the error's."""

    def __init__(self, message: str, kind: str = "", exit_code: int = 1):
        super().__init__(message)
        self.kind = kind
        self.exit_code = exit_code
