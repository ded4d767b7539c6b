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


# Image references as container runtimes parse them: the grammar of
# github.com/distribution/reference v0.6.0 (regexp.go; Parse in reference.go: a name that only
# fails for its capitals is "repository name must be lowercase", at most 255 characters), its
# digest as github.com/opencontainers/go-digest v1.0.0 validates one (lowercase hex of the
# algorithm's length). Go's \w is ASCII.
_ALPHANUMERIC = r"[a-z0-9]+"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:(?:[._]|__|[-]+){_ALPHANUMERIC})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = (rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
           r"(?::[0-9]+)?")
IMAGE_REFERENCE = re.compile(
    rf"^((?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::([\w][\w.-]{0,127}))?"
    r"(?:@([A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?$", re.ASCII)
DIGEST_HEX_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
IMAGE_EXAMPLE = "registry.example.com/team/fmnist-kfp:0.2.0"


def image_reference_problem(image: str) -> str | None:
    """Why a container runtime would refuse ``image`` as an image reference, or None."""
    match = IMAGE_REFERENCE.match(image)
    if match is None:
        if IMAGE_REFERENCE.match(image.lower()):
            return "the repository name must be lowercase"
        if "://" in image:
            return "an image reference has no scheme (drop the 'http://' or 'https://')"
        if image.endswith((":", "@")):
            return f"it ends in {image[-1]!r} with nothing after it"
        head, at, _ = image.rpartition("@")
        if at and IMAGE_REFERENCE.match(head):
            return "its digest is not <algorithm>:<hex digits>, e.g. sha256:<64 hex digits>"
        return "it is not <registry>/<repository>[:<tag>][@<digest>]"
    name, _, digest = match.groups()
    # Parse splits off a first component followed by '/' as the domain; the rest is limited.
    if len(name.split("/", 1)[-1]) > 255:
        return "the repository name is longer than 255 characters"
    if digest:
        algorithm, _, hex_digits = digest.partition(":")
        length = DIGEST_HEX_LENGTHS.get(algorithm)
        if length is None:
            return f"digest algorithm {algorithm!r} is not one of {sorted(DIGEST_HEX_LENGTHS)}"
        if len(hex_digits) != length or hex_digits != hex_digits.lower():
            return f"a {algorithm} digest is {length} lowercase hex digits"
    return None


def has_tag(image: str) -> bool:
    """Whether ``image`` (a valid reference) is pinned: a tag or a digest."""
    match = IMAGE_REFERENCE.match(image)
    return bool(match and (match[2] or match[3]))


def image_problem(image: str, example_tag: str = "0.1.0") -> str | None:
    """The rule every image we are given follows: a reference a container runtime accepts,
    with a tag or a digest (an untagged one would let the pods of one run pull different
    code). What is wrong with ``image``, said after its name (``… has no tag; …``), or None."""
    problem = image_reference_problem(image)
    if problem:
        return f"is not an image reference: {problem}; e.g. {IMAGE_EXAMPLE}"
    if not has_tag(image):
        return f"has no tag; pin one (e.g. {image}:{example_tag}) so every pod runs the same code"
    return None


def image_rule(name: str, value: str) -> str | None:
    """:func:`image_problem` as a setting's rule (an empty value: the default applies)."""
    problem = image_problem(value) if value else None
    return f"{name} {value!r} {problem}" if problem else None
