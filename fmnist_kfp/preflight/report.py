"""The whole check (:func:`preflight`: every area's rows, in the order they print), whether
the cluster is ready (:func:`ready`) and the table the CLI prints (:func:`render`)."""

from __future__ import annotations

from fmnist_kfp.preflight.apis import check_apis
from fmnist_kfp.preflight.common import Cluster, Row
from fmnist_kfp.preflight.connection import check_api_server, check_kfp
from fmnist_kfp.preflight.katib import check_experiment, check_katib_watch
from fmnist_kfp.preflight.network import check_network_policy
from fmnist_kfp.preflight.permissions import check_permissions
from fmnist_kfp.preflight.scheduling import check_scheduling
from fmnist_kfp.preflight.serving import (
    check_istio_policy,
    check_mode,
    check_serving_credentials,
)
from fmnist_kfp.preflight.storage import check_pvc, check_secret
from fmnist_kfp.preflight.training_operator import TFJOB, TRAINJOB, check_training


def preflight(endpoint, api_client, cluster: Cluster, *, check_backend: bool = True
              ) -> list[Row]:
    """Every check's rows, in the order the table prints them; with an API server that does not
    answer, only the row saying why."""
    from kubernetes import client

    from fmnist_kfp.serving.deploy.kserve_api import KServeApi

    rows = [check_kfp(endpoint)] if check_backend else []
    server = check_api_server(api_client)
    if server is not None:
        return [*rows, server]
    training = check_training(api_client, cluster)
    operator_rows, operator = training.rows, training.operator
    rows += operator_rows
    apis = check_apis(api_client)
    rows += apis
    core = client.CoreV1Api(api_client)
    served = {row.check for row in apis if row.ok}
    trial_job = {"tfjob": TFJOB, "trainjob": TRAINJOB}[operator]
    if trial_job in {row.check for row in operator_rows if row.ok} and \
            "Katib Experiment" in served:  # else nothing to watch
        rows.append(check_katib_watch(api_client, core, operator))
        if training.job is not None and not training.job.unbuilt:  # trials like the job
            rows.append(check_experiment(api_client, cluster, operator, training.shape))
    rows += check_scheduling(api_client, cluster, training.job, operator)
    serving = KServeApi(api_client, cluster.serving_namespace)
    rows.append(check_mode(serving))
    rows.append(check_pvc(core, cluster))
    if cluster.credentials_secret:
        rows.append(check_secret(core, cluster))
    rows.append(check_serving_credentials(serving, cluster))
    istio = check_istio_policy(api_client, client.CustomObjectsApi(api_client), cluster)
    if istio is not None:
        rows.append(istio)
    network = check_network_policy(api_client, cluster)
    if network is not None:
        rows.append(network)
    rows += check_permissions(api_client, cluster, operator)
    return rows


def ready(rows: list[Row]) -> bool:
    """Whether no row is a miss (notes do not count)."""
    return all(row.ok is not False for row in rows)


def render(rows: list[Row], width: int = 100) -> str:
    """The table the CLI prints: a line per row (its fix under a miss or note), then the verdict."""
    marks = {True: "ok", False: "MISSING", None: "note"}
    name_width = min(max(len(row.check) for row in rows), 48)
    lines = []
    for row in rows:
        lines.append(f"{marks[row.ok]:<8} {row.check:<{name_width}}  {row.found}")
        if row.fix and row.ok is not True:
            lines.append(f"{'':<8} {'':<{name_width}}  fix: {row.fix}")
    verdict = ("ready for a first run" if ready(rows) else
               f"NOT ready: {sum(row.ok is False for row in rows)} missing")
    return "\n".join(lines + ["", verdict])
