"""Errors that tell the user what went wrong and what to do about it."""


class UserInputError(ValueError):
    """A parameter, file or request is invalid; the message names it and the fix."""


class RemoteError(RuntimeError):
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
