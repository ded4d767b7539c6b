"""Our label and annotation keys: one domain, each key checked as the API server checks it.

A key is ``<prefix>/<name>``: the prefix a DNS-1123 subdomain of at most 253 characters, the
name at most 63 characters of alphanumerics, ``-``, ``_`` and ``.``, starting and ending with an
alphanumeric (kubernetes/apimachinery v0.34.1 pkg/util/validation/validation.go 41-55, called for
every label key and annotation key by pkg/apis/meta/v1/validation/validation.go 104-121 and, for
custom resources, apiextensions-apiserver v0.34.1 pkg/registry/customresource/validator.go 53).
The API server answers an object with any other key with 422 Invalid, so a key that breaks the
rule must fail here, where it is made, and not on the first create on a cluster.
"""

from __future__ import annotations

import re

DOMAIN = "fmnist.kubeflow.org"
PART_OF = {"app.kubernetes.io/part-of": "fmnist-kfp"}

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def qualified_name_problem(key: str) -> str | None:
    """Why the API server refuses ``key`` as a label or annotation key, or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return f"{key!r} has more than one '/'"
    if prefix and (len(prefix) > 253 or not _DNS_1123_SUBDOMAIN.fullmatch(prefix)):
        return f"the prefix of {key!r} is no DNS-1123 subdomain (lower-case, digits, '-', '.')"
    if not name or len(name) > 63 or not _NAME.fullmatch(name):
        return (f"the name part of {key!r} must be 1-63 alphanumerics, '-', '_' or '.', "
                "beginning and ending with an alphanumeric")
    return None


def key(name: str) -> str:
    """``<DOMAIN>/<name>``, the one way a label or annotation key of ours is made."""
    made = f"{DOMAIN}/{name}"
    problem = qualified_name_problem(made)
    if problem:
        raise ValueError(problem)
    return made


MODEL_TYPE = key("model-type")
