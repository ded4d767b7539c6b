"""Kubernetes naming and quantity rules the settings check (the API server's own patterns)."""

from __future__ import annotations

import re

# k8s.io/apimachinery/pkg/util/validation: IsDNS1035Label, IsDNS1123Label, IsDNS1123Subdomain.
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
# The pattern Kubernetes CRDs give resource quantities (k8s.io/apimachinery resource.Quantity).
QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def is_dns_1035_label(name: str, max_length: int = 63) -> bool:
    return len(name) <= max_length and bool(DNS_1035_LABEL.match(name))


def is_dns_1123_label(name: str) -> bool:
    return len(name) <= 63 and bool(DNS_1123_LABEL.match(name))


def is_dns_1123_subdomain(name: str) -> bool:
    return len(name) <= 253 and bool(DNS_1123_SUBDOMAIN.match(name))


def namespace_rule(name: str, value: str) -> str | None:
    if value and not is_dns_1123_label(value):
        return (f"namespace {value!r} is not a Kubernetes namespace name (lowercase letters, "
                "digits and '-', at most 63 characters); leave it empty to use the namespace "
                "this step runs in")
    return None


def quantity_rule(name: str, value: str) -> str | None:
    if not QUANTITY.match(str(value)):
        return (f"{name} {value!r} is not a Kubernetes quantity; use e.g. cpu '1' or '500m', "
                "memory '2Gi'")
    return None


def has_tag(image: str) -> bool:
    return ":" in image.rsplit("/", 1)[-1] or "@sha256:" in image


def image_rule(name: str, value: str) -> str | None:
    """An image must carry a tag or a digest: an untagged one would let the pods of one run
    pull different code."""
    if value and not has_tag(value):
        return (f"{name} {value!r} has no tag; pin one (e.g. {value}:0.1.0) so every pod runs "
                "the same code")
    return None
