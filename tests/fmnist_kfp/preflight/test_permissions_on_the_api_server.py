"""The permissions the steps use, judged by the real authorizer: kube-apiserver v1.34.1's RBAC
(tests/cluster.py) answering the SubjectAccessReviews preflight asks as the pipeline's
ServiceAccount, with the Role of ``manifests/standalone-rbac`` applied as a user applies it, or
Kubeflow's own roles as a profile gets them (aggregated into ``kubeflow-edit`` by the
controller manager's ClusterRole aggregation controller, as on a cluster)."""

from __future__ import annotations

import time

import pytest

from fmnist_kfp.preflight.common import Cluster
from fmnist_kfp.preflight.permissions import check_permissions
from tests.kubeflow_roles import kubeflow_profile

# The aggregation controller fills kubeflow-edit's rules a moment after the roles are written.
SETTLE_SECONDS = 30


def _cluster(namespace: str, account: str, multi_user: bool) -> Cluster:
    return Cluster(namespace=namespace, runner_service_account=account, pvc="fmnist-data",
                   credentials_secret="", serving_namespace=namespace,
                   serving_service_account="", multi_user=multi_user)


def _denied(real_cluster, cluster: Cluster, operator: str) -> list[str]:
    rows = check_permissions(real_cluster.api_client, cluster, operator)
    assert rows and all(row.ok is not None for row in rows), rows  # asked as the account
    return [row.check for row in rows if not row.ok]


@pytest.mark.parametrize("operator", ["tfjob", "trainjob"])
def test_the_standalone_role_grants_every_permission_the_steps_use(real_cluster, operator):
    real_cluster.grant_pipeline_runner("kubeflow")
    assert _denied(real_cluster, _cluster("kubeflow", "pipeline-runner", False), operator) == []


def test_a_rule_missing_from_the_role_is_a_denied_permission(real_cluster):
    """The check above can fail: the Role without its TrainJob rules denies what the TrainJob
    path needs, and only that."""
    def without_trainjobs(role):
        role["rules"] = [r for r in role["rules"] if "trainjobs" not in r["resources"]]
        return role

    real_cluster.grant_pipeline_runner("rbac-probe", without_trainjobs)
    denied = _denied(real_cluster, _cluster("rbac-probe", "pipeline-runner", False), "trainjob")
    assert denied == ["pipeline-runner may create trainjobs.trainer.kubeflow.org",
                      "pipeline-runner may get trainjobs.trainer.kubeflow.org",
                      "pipeline-runner may delete trainjobs.trainer.kubeflow.org"]
    assert _denied(real_cluster, _cluster("rbac-probe", "pipeline-runner", False),
                   "tfjob") == []


@pytest.mark.parametrize(("kubeflow", "operator"), [
    ("v1.11.0", "tfjob"), ("v1.11.0", "trainjob"), ("26.03", "tfjob"), ("26.03", "trainjob")])
def test_a_profiles_default_editor_gets_every_permission_from_kubeflow_edit(
        real_cluster, kubeflow, operator):
    """Multi-user Kubeflow needs no Role of ours: the profile's default-editor is bound to
    kubeflow-edit, which aggregates the roles each component installs (tests/kubeflow_roles/,
    as kubeflow/manifests ships them at the tag; the Training Operator's where installed)."""
    namespace = f"profile-{kubeflow.replace('.', '-')}-{operator}"
    real_cluster.ensure_namespace(namespace)

    class Store:  # kubeflow_profile's writer, on the real API server
        @staticmethod
        def put(obj):
            real_cluster.apply(obj)

    kubeflow_profile(Store, namespace, kubeflow, training_operator=operator == "tfjob")
    real_cluster.wait_until_granted(namespace, "default-editor")
    cluster = _cluster(namespace, "default-editor", True)
    deadline = time.monotonic() + SETTLE_SECONDS
    while (denied := _denied(real_cluster, cluster, operator)) and time.monotonic() < deadline:
        time.sleep(0.5)  # aggregation may still be adding a component's rules
    assert denied == []
