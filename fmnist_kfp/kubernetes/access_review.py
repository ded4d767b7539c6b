"""The ``SelfSubjectAccessReview`` that asks the API server whether the caller (or the user it
impersonates) may do one thing: what ``preflight`` sends for each permission a step needs.

It is created with a POST to :data:`PATH` and answers in ``status.allowed``
(k8s.io/api authorization/v1 types.go, the same as ``kubectl auth can-i``).
"""

from __future__ import annotations

PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def build_access_review(*, namespace: str, verb: str, group: str, resource: str,
                        subresource: str = ""):
    """The ``V1SelfSubjectAccessReview`` for ``verb`` on ``group/resource[/subresource]`` in
    ``namespace``."""
    from kubernetes import client

    return client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(
            namespace=namespace, verb=verb, group=group, resource=resource,
            subresource=subresource or None)))
