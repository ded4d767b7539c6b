"""Reaching the cluster: the kubeconfig or a pod's in-cluster configuration
(:func:`kubernetes_api`), the KFP backend (:func:`check_kfp`), whether the Kubernetes API server
answers at all (:func:`check_api_server`), and the :class:`Cluster` the CLI's flags describe."""

from __future__ import annotations

import os

from fmnist_kfp.errors import RemoteError, UserInputError, connection_problem
from fmnist_kfp.kubernetes.api_errors import own_status
from fmnist_kfp.preflight.common import RETRIES, Cluster, Row, _call
from fmnist_kfp.preflight.scheduling import scheduling_from


def check_kfp(endpoint) -> Row:
    """The KFP backend's version (``kfp_client.check_backend``): at least the minimum."""
    from fmnist_kfp.kfp_client import MIN_BACKEND, check_backend

    minimum = ".".join(map(str, MIN_BACKEND))
    try:
        return Row("KFP backend", True, check_backend(endpoint))
    except RemoteError as error:  # its message says what to check
        return Row("KFP backend", False, str(error))
    except UserInputError as error:
        return Row("KFP backend", False, str(error),
                   f"KFP {minimum} or newer (Kubeflow 1.11), or --kfp-backend-version")


def check_api_server(api_client) -> Row | None:
    """None when the Kubernetes API server answers with these credentials; else the row that
    says why not, in place of every other check (each would only fail the same way)."""
    server = api_client.configuration.host
    what = "Kubernetes API server"
    try:
        _call(api_client, "/version")
    except Exception as error:
        problem = connection_problem(error)
        status = own_status(error)
        if problem:
            return Row(what, False, f"cannot reach {server}: {problem}",
                       "check the kubeconfig's cluster (--kubeconfig, --context): is it up, "
                       "does it need a VPN or a tunnel?")
        if status == 401:
            return Row(what, False, f"{server} refused the kubeconfig's credentials (HTTP 401)",
                       "log in again, or pick another --context")
        if status is None:  # no answer at all: TLS, a proxy, a reset
            return Row(what, False, f"cannot talk to {server}: {type(error).__name__}: {error}",
                       "check the kubeconfig's server address and certificate")
    return None  # it answered (a 403 or 404 on /version still means it is there)


def in_pod(kubeconfig: str = "", context: str = "", environ=None) -> bool:
    """Whether to use the pod's in-cluster configuration: in a pod (``$KUBERNETES_SERVICE_HOST``
    is set) where no kubeconfig was asked for (``--kubeconfig``, ``--context``, ``$KUBECONFIG``)
    and ~/.kube/config does not exist, as in a Kubeflow notebook. The ``kubernetes`` client's
    own ``config.load_config`` prefers a kubeconfig in the same way."""
    environ = os.environ if environ is None else environ
    return bool(environ.get("KUBERNETES_SERVICE_HOST", "").strip()) and not (
        kubeconfig or context or environ.get("KUBECONFIG", "").strip()
        or os.path.exists(os.path.expanduser("~/.kube/config")))


def kubernetes_api(kubeconfig: str = "", context: str = ""):
    """An ApiClient for the cluster, and which configuration it came from: the pod's
    in-cluster one (its ServiceAccount's token and CA: :func:`in_pod`), else the kubeconfig
    (``kubeconfig``, else ``$KUBECONFIG`` or ~/.kube/config)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    if in_pod(kubeconfig, context):
        from kubernetes.config import incluster_config

        try:
            config.load_incluster_config(client_configuration=configuration)
        except Exception as error:
            raise UserInputError(
                f"cannot load this pod's in-cluster configuration ({error}; "
                "$KUBERNETES_SERVICE_HOST says it runs in a pod); mount its ServiceAccount token "
                f"({incluster_config.SERVICE_TOKEN_FILENAME}), or point --kubeconfig at a "
                "kubeconfig for the cluster") from None
        source = ("in-cluster configuration: this pod's ServiceAccount token, "
                  f"{incluster_config.SERVICE_TOKEN_FILENAME}")
    else:
        # $KUBECONFIG read now: the client reads it once, when it is imported.
        kubeconfig = (kubeconfig or os.environ.get("KUBECONFIG", "").strip()
                      or os.path.expanduser("~/.kube/config"))
        try:
            config.load_kube_config(config_file=kubeconfig, context=context or None,
                                    client_configuration=configuration, persist_config=False)
        except Exception as error:
            raise UserInputError(f"cannot load the kubeconfig ({error}); point --kubeconfig or "
                                 "$KUBECONFIG at one for the cluster") from None
        source = f"kubeconfig {_kubeconfig_name(kubeconfig, context)}"
    configuration.retries = RETRIES
    return client.ApiClient(configuration), source


def _kubeconfig_name(kubeconfig: str, context: str) -> str:
    """``<file>, context <name>``: the kubeconfig loaded and its context."""
    from kubernetes.config import kube_config

    if not context:
        try:
            _, active = kube_config.list_kube_config_contexts(config_file=kubeconfig)
            context = (active or {}).get("name", "")
        except Exception:  # it loaded; the name is only for the reader
            context = ""
    return f"{kubeconfig}, context {context}" if context else kubeconfig


def api_client_from(kubeconfig: str = "", context: str = ""):
    """An ApiClient for the cluster (:func:`kubernetes_api`)."""
    return kubernetes_api(kubeconfig, context)[0]


def cluster_from(args) -> Cluster:
    """The :class:`Cluster` the CLI's flags (and the compile-time environment) describe."""
    from fmnist_kfp.settings.platform import PVC_ENV, SECRET_ENV
    from fmnist_kfp.settings.serving import KFP_STORE_SERVICE_ACCOUNT

    multi_user = bool(args.namespace)
    namespace = args.namespace or "kubeflow"
    return Cluster(
        namespace=namespace,
        runner_service_account=args.runner_service_account or (
            "default-editor" if multi_user else "pipeline-runner"),
        pvc=args.pvc or os.environ.get(PVC_ENV, "").strip() or "fmnist-data",
        credentials_secret=(args.credentials_secret
                            or os.environ.get(SECRET_ENV, "").strip()),
        serving_namespace=args.serving_namespace or namespace,
        serving_service_account=args.serving_service_account or KFP_STORE_SERVICE_ACCOUNT,
        multi_user=multi_user,
        scheduling=scheduling_from(getattr(args, "scheduling", "") or ""),
        # The run's kubernetes.operator (--operator).
        operator=getattr(args, "operator", "") or "auto",
    )
