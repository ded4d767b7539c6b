"""Regenerates this folder's role files from a kubeflow/manifests git directory:

    python -m tests.kubeflow_roles.extract <kubeflow/manifests .git dir> v1.11.0 26.03

It writes two files per tag. ``<tag>.yaml`` holds, verbatim (re-serialized YAML), the
ClusterRoles that Kubeflow's install aggregates into ``kubeflow-edit`` — the role the profile
controller binds to a profile's ``default-editor`` ServiceAccount, which multi-user KFP runs the
steps as — taken from the kustomizations the example install applies. Each document carries its
source in an annotation ``fmnist.test/source: <path>@<tag>``.

A tag gets those of :data:`FILES` that its own example install applies: the files
``example/kustomization.yaml`` reaches at that tag through ``resources`` (and ``components``),
kustomization by kustomization (:func:`applied`). So the Training Operator v1's roles are not
in it: at both tags its overlay is commented out (kubeflow/manifests v1.11.0
example/kustomization.yaml L93-94, 26.03 L90-91: ``# - ../applications/training-operator/
upstream/overlays/kubeflow``), and Kubeflow Trainer v2's are in both: the example applies
``../applications/trainer/overlays`` (v1.11.0 L95-96, 26.03 L92-93), whose kustomization.yaml
L5-6 applies ``../upstream/overlays/kubeflow-platform``, whose kustomization.yaml L4-7 applies
``kubeflow-trainer-roles.yaml`` (the same at both tags; its overlays/manager sets Trainer's image
to v2.1.0, L16-18). That file's ``kubeflow-trainer-view-cluster-runtimes`` (read on
clustertrainingruntimes, L69-81) is aggregated into nothing: its ClusterRoleBinding (L83-94)
grants it to the group ``system:authenticated``, so it is not here.

``training-operator-<tag>.yaml`` holds, the same way, those the Training Operator v1's overlay
applies (:data:`TRAINING_OPERATOR`, reached from it as the example's are from ``example``):
what a user gets who installs it as docs/first-run.md step 1 does (``kubectl apply --server-side
-k github.com/kubeflow/manifests/applications/training-operator/upstream/overlays/kubeflow?ref=
<tag>``). Its kustomization.yaml L4-6 applies ``../../base`` (the CRDs, the operator and its own
RBAC: nothing aggregated into ``kubeflow-edit``) and ``kubeflow-training-roles.yaml``:
``kubeflow-training-edit`` (L14-67: mpijobs, tfjobs, pytorchjobs, xgboostjobs, paddlejobs,
jaxjobs create/delete/get/list/patch/update/watch, their /status get; persistentvolumeclaims;
events read), ``-view`` and ``-admin`` (the same at both tags).
"""

from __future__ import annotations

import posixpath
import subprocess
import sys
from pathlib import Path

import yaml

FILES = (
    "common/kubeflow-roles/base/cluster-roles.yaml",
    "applications/pipeline/upstream/base/installs/multi-user/view-edit-cluster-roles.yaml",
    # Training Operator v1 (TFJobs): applied by neither tag's example install, but by its own
    # overlay (see above: training-operator-<tag>.yaml).
    "applications/training-operator/upstream/overlays/kubeflow/kubeflow-training-roles.yaml",
    # Kubeflow Trainer v2 (TrainJobs): kubeflow-trainer-edit, -view, -admin.
    "applications/trainer/upstream/overlays/kubeflow-platform/kubeflow-trainer-roles.yaml",
    "applications/katib/upstream/installs/katib-with-kubeflow/kubeflow-katib-roles.yaml",
    # aggregated-roles.yaml beside it is not in its kustomization; the install applies this:
    "applications/kserve/kserve/kserve_kubeflow.yaml",
    # The Tensorboards web app's roles (tensorboards.tensorboard.kubeflow.org: get, list,
    # create, delete); example/kustomization.yaml applies its overlays/istio, which holds base/.
    "applications/tensorboard/tensorboards-web-app/upstream/base/cluster-role.yaml",
)
# The kustomization docs/first-run.md step 1 applies on its own, for TFJobs.
TRAINING_OPERATOR = "applications/training-operator/upstream/overlays/kubeflow"
LABEL = "rbac.authorization.kubeflow.org/aggregate-to-kubeflow-"
KUSTOMIZATIONS = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, *args],
                          check=True, capture_output=True, text=True).stdout


def applied(git_dir: str, tag: str, root: str = "example") -> set[str]:
    """The files of ``tag`` that its kustomization ``root`` reaches: each kustomization's
    ``resources``, ``bases`` and ``components`` in turn, a directory by its kustomization file;
    remote ones (URLs: JobSet, Argo) hold none of Kubeflow's roles and are not followed."""
    paths = set(_git(git_dir, "ls-tree", "-r", "--name-only", tag).splitlines())
    todo, seen, files = [root], set(), set()
    while todo:
        directory = todo.pop()
        if directory in seen:
            continue
        seen.add(directory)
        kustomization = next(f"{directory}/{name}" for name in KUSTOMIZATIONS
                             if f"{directory}/{name}" in paths)
        spec = yaml.safe_load(_git(git_dir, "show", f"{tag}:{kustomization}")) or {}
        for entry in [*spec.get("resources", ()), *spec.get("bases", ()),
                      *spec.get("components", ())]:
            if "://" in entry or entry.startswith("github.com/"):
                continue
            path = posixpath.normpath(posixpath.join(directory, entry))
            (files.add if path in paths else todo.append)(path)
    return files


def roles(git_dir: str, tag: str, root: str = "example") -> list[dict]:
    """The ClusterRoles aggregated into ``kubeflow-edit`` (and those three) in the files of
    :data:`FILES` that ``root`` applies at ``tag``."""
    found = []
    install = applied(git_dir, tag, root)
    for path in (path for path in FILES if path in install):
        text = _git(git_dir, "show", f"{tag}:{path}")
        for document in yaml.safe_load_all(text):
            if not document or document.get("kind") != "ClusterRole":
                continue
            metadata = document["metadata"]
            labels = metadata.get("labels") or {}
            if metadata["name"] in ("kubeflow-admin", "kubeflow-edit", "kubeflow-view") or any(
                    key.startswith(LABEL) for key in labels):
                metadata.setdefault("annotations", {})["fmnist.test/source"] = f"{path}@{tag}"
                found.append(document)
    return found


def main(argv: list[str]) -> None:
    git_dir, *tags = argv
    for tag in tags:
        for name, root in ((tag, "example"), (f"training-operator-{tag}", TRAINING_OPERATOR)):
            found = roles(git_dir, tag, root)
            if not found:
                raise SystemExit(f"{root}@{tag}: no roles found")
            out = Path(__file__).with_name(f"{name}.yaml")
            where = "" if root == "example" else f" {root}"
            out.write_text(f"# kubeflow/manifests {tag}{where}: see extract.py\n"
                           + yaml.safe_dump_all(found, sort_keys=False))
            print(out)


if __name__ == "__main__":
    main(sys.argv[1:])
