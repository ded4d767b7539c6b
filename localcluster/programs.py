"""The upstream programs the local cluster runs, and the Go module in this folder that pins each.

A module's go.mod requires the upstream module at the version we support (its ``tool`` lines
name the programs), so `go build <package>` inside the folder builds exactly that version with
the dependency versions go.sum records. Nothing upstream is copied here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KUBERNETES_VERSION = "v1.34.1"  # Kubeflow 26.03 supports Kubernetes 1.34
ETCD_VERSION = "v3.6.4"  # the etcd that Kubernetes v1.34.1's go.mod requires


def _version_ldflags(version: str) -> str:
    """What Kubernetes' own build stamps (hack/lib/version.sh): without it the API server
    reports v0.0.0, which clients that gate features on the server's version misread."""
    major, minor = version.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.gitVersion={version}", f"-X {package}.gitMajor={major}",
                  f"-X {package}.gitMinor={minor}", f"-X {package}.gitTreeState=clean"]
    return " ".join(flags)


@dataclass(frozen=True)
class GoModule:
    """A folder here with a go.mod, and the programs (name -> package) built from it."""

    name: str
    folder: str
    packages: dict[str, str] = field(default_factory=dict)
    ldflags: str = "-s -w"


CONTROL_PLANE = GoModule(
    name=f"kubernetes-{KUBERNETES_VERSION}",
    folder=".",
    packages={
        "etcd": "go.etcd.io/etcd/server/v3",
        "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
        "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
        "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    },
    ldflags=_version_ldflags(KUBERNETES_VERSION),
)

# The node's Service proxy, from the same module in a folder of its own (its extra pins would
# otherwise change the control plane's go.sum, and with it every cached control plane build).
KUBE_PROXY = GoModule(
    name=f"kube-proxy-{KUBERNETES_VERSION}",
    folder=f"kube-proxy-{KUBERNETES_VERSION}",
    packages={"kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy"},
    ldflags=_version_ldflags(KUBERNETES_VERSION),
)


# The training operators, each its own module with the dependency versions its own release
# requires, apart from the control plane's and from each other: Training Operator v1.9.2 builds
# on controller-runtime v0.19, Trainer v2.2.0 on v0.23, JobSet v0.11 on v0.22, and one go.mod
# would force one version on all (JobSet v0.11 does not compile against v0.23).
JOBSET_0_10 = GoModule("jobset-v0.10.1", "jobset-v0.10.1", {"jobset": "sigs.k8s.io/jobset"})
JOBSET_0_11 = GoModule("jobset-v0.11.0", "jobset-v0.11.0", {"jobset": "sigs.k8s.io/jobset"})
_TRAINER = {"trainer-controller-manager":
            "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"}
TRAINER_2_1 = GoModule("trainer-v2.1.0", "trainer-v2.1.0", _TRAINER)
TRAINER_2_2 = GoModule("trainer-v2.2.0", "trainer-v2.2.0", _TRAINER)
TRAINING_OPERATOR = GoModule(
    "training-operator-v1.9.2", "training-operator-v1.9.2",
    {"training-operator": "github.com/kubeflow/training-operator/cmd/training-operator.v1"})
# Kueue v0.19.2, the newest the module proxy serves: go 1.26, k8s.io v0.36 and
# controller-runtime v0.24, a client two minors past the API server (Kueue's CI runs such skew).
KUEUE = GoModule("kueue-v0.19.2", "kueue-v0.19.2", {"kueue": "sigs.k8s.io/kueue/cmd/kueue"})
# Katib v0.19.0 (Kubeflow 26.03): its controller, db-manager and StdOut/File metrics collector,
# and the Go suggestion service (cmaes); k8s.io v0.34, controller-runtime v0.22. Its Python
# services run from the same module's source (localcluster/katib_services.py).
KATIB = GoModule("katib-v0.19.0", "katib-v0.19.0", {
    "katib-controller": "github.com/kubeflow/katib/cmd/katib-controller/v1beta1",
    "katib-db-manager": "github.com/kubeflow/katib/cmd/db-manager/v1beta1",
    "file-metrics-collector":
        "github.com/kubeflow/katib/cmd/metricscollector/v1beta1/file-metricscollector",
    "suggestion-goptuna": "github.com/kubeflow/katib/cmd/suggestion/goptuna/v1beta1"})
# KServe v0.15.2 (Standard mode, RawDeployment): its controller manager; k8s.io v0.32,
# controller-runtime v0.19, knative.dev/serving v0.44 (types only: Serverless mode needs Knative).
_KSERVE = {"kserve-controller": "github.com/kserve/kserve/cmd/manager"}
KSERVE_0_15 = GoModule("kserve-v0.15.2", "kserve-v0.15.2", _KSERVE)
# KServe v0.16.0 (Kubeflow 26.03): k8s.io v0.33, controller-runtime v0.19.7 (its go.mod's
# replace, repeated in ours: KEDA's API types need v0.19).
KSERVE_0_16 = GoModule("kserve-v0.16.0", "kserve-v0.16.0", _KSERVE)
# kustomize renders the operators' own install manifests from their modules, as `kubectl apply
# -k` does (kubectl v1.34 embeds kustomize v5.7.1).
KUSTOMIZE = GoModule("kustomize-v5.7.1", "kustomize-v5.7.1",
                     {"kustomize": "sigs.k8s.io/kustomize/kustomize/v5"})
# What `python -m localcluster build` (and so `make test`) builds: what the tests run.
MODULES = (CONTROL_PLANE, KUBE_PROXY, KUSTOMIZE, JOBSET_0_10, TRAINER_2_1, JOBSET_0_11, TRAINER_2_2,
           TRAINING_OPERATOR, KUEUE, KATIB, KSERVE_0_15, KSERVE_0_16)
