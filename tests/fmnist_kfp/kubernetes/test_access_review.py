"""The SelfSubjectAccessReview preflight sends per permission, as the API server receives it
(k8s.io/api authorization/v1: ``spec.resourceAttributes``, no empty subresource)."""

from __future__ import annotations

from fmnist_kfp.kubernetes.access_review import PATH, build_access_review
from fmnist_kfp.kubernetes.manifest import to_manifest


def test_the_review_asks_for_one_verb_on_one_resource_in_the_namespace():
    review = to_manifest(build_access_review(namespace="kubeflow-user", verb="create",
                                             group="kubeflow.org", resource="tfjobs"))
    assert review["spec"] == {"resourceAttributes": {
        "namespace": "kubeflow-user", "verb": "create", "group": "kubeflow.org",
        "resource": "tfjobs"}}
    logs = to_manifest(build_access_review(namespace="kubeflow-user", verb="get", group="",
                                           resource="pods", subresource="log"))
    assert logs["spec"]["resourceAttributes"]["subresource"] == "log"
    assert PATH == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
