"""The APIs the pipeline creates objects of, beside the training operator's
(:mod:`fmnist_kfp.preflight.training_operator`), with their served versions, from API discovery
(``/apis/<group>/<version>``, readable by every authenticated user)."""

from __future__ import annotations

from fmnist_kfp.kubernetes.api_errors import own_status
from fmnist_kfp.preflight.common import Row, _call

# (group, version, plural, what, fix)
APIS = (
    ("kubeflow.org", "v1beta1", "experiments", "Katib Experiment",
     "install Katib (applications/katib in kubeflow/manifests); only needed with --tune"),
    ("kubeflow.org", "v1beta1", "trials", "Katib Trial",
     "install Katib (applications/katib in kubeflow/manifests); only needed with --tune"),
    ("serving.kserve.io", "v1beta1", "inferenceservices", "KServe InferenceService",
     "install KServe 0.14 or newer (applications/kserve in kubeflow/manifests)"),
    ("serving.kserve.io", "v1alpha1", "servingruntimes", "KServe ServingRuntime",
     "install KServe 0.14 or newer (applications/kserve in kubeflow/manifests)"),
)


def check_apis(api_client) -> list[Row]:
    """One row per API of :data:`APIS`: served (ok), not served (a miss, with its fix), or
    unknown."""
    rows = []
    for group, version, plural, what, fix in APIS:
        try:
            listing = _call(api_client, f"/apis/{group}/{version}")
            served = plural in {resource.get("name") for resource in
                                (listing or {}).get("resources") or []}
        except Exception as error:
            if own_status(error) != 404:
                rows.append(Row(what, None, f"cannot ask the API server: {error}"))
                continue
            served = False
        if served:
            rows.append(Row(what, True, f"{plural}.{group}, served at {version}"))
        else:
            rows.append(Row(what, False, f"{plural}.{group}/{version} is not served", fix))
    return rows
