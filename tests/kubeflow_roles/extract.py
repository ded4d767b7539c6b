"""Regenerates this folder's role files from a kubeflow/manifests git directory:

    python -m tests.kubeflow_roles.extract <kubeflow/manifests .git dir> v1.11.0 26.03

Each file holds, verbatim (re-serialized YAML), the ClusterRoles that Kubeflow's install
aggregates into ``kubeflow-edit`` — the role the profile controller binds to a profile's
``default-editor`` ServiceAccount, which multi-user KFP runs the steps as — taken from the
kustomizations the example install applies. Each document carries its source in an annotation
``fmnist.test/source: <path>@<tag>``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

FILES = (
    "common/kubeflow-roles/base/cluster-roles.yaml",
    "applications/pipeline/upstream/base/installs/multi-user/view-edit-cluster-roles.yaml",
    "applications/training-operator/upstream/overlays/kubeflow/kubeflow-training-roles.yaml",
    "applications/katib/upstream/installs/katib-with-kubeflow/kubeflow-katib-roles.yaml",
    # aggregated-roles.yaml beside it is not in its kustomization; the install applies this:
    "applications/kserve/kserve/kserve_kubeflow.yaml",
    # The Tensorboards web app's roles (tensorboards.tensorboard.kubeflow.org: get, list,
    # create, delete); example/kustomization.yaml applies its overlays/istio, which holds base/.
    "applications/tensorboard/tensorboards-web-app/upstream/base/cluster-role.yaml",
)
LABEL = "rbac.authorization.kubeflow.org/aggregate-to-kubeflow-"


def roles(git_dir: str, tag: str) -> list[dict]:
    found = []
    for path in FILES:
        text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{tag}:{path}"],
                              check=True, capture_output=True, text=True).stdout
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
        out = Path(__file__).with_name(f"{tag}.yaml")
        out.write_text(f"# kubeflow/manifests {tag}: see extract.py\n"
                       + yaml.safe_dump_all(roles(git_dir, tag), sort_keys=False))
        print(out)


if __name__ == "__main__":
    main(sys.argv[1:])
