"""The shared ReadWriteMany claim and the compile-time credentials Secret (when one is
named)."""

from __future__ import annotations

from fmnist_kfp.kubernetes.api_errors import own_status, status_line
from fmnist_kfp.preflight.common import SETUP, Cluster, Row


def check_pvc(core, cluster: Cluster) -> Row:
    """The shared claim: it exists, is ReadWriteMany and (for ok) Bound."""
    fix = (f"kubectl apply -k {SETUP}pvc -n {cluster.namespace} (a ReadWriteMany claim named "
           f"as FMNIST_PVC_NAME at compile time)")
    what = f"PVC {cluster.namespace}/{cluster.pvc}"
    try:
        claim = core.read_namespaced_persistent_volume_claim(cluster.pvc, cluster.namespace,
                                                              _request_timeout=30)
    except Exception as error:
        if own_status(error) == 404:
            return Row(what, False, "missing", fix)
        return Row(what, None, f"cannot read it ({status_line(error)})")
    modes = list(claim.spec.access_modes or [])
    if "ReadWriteMany" not in modes:
        return Row(what, False, f"access modes {modes}: the step and every TFJob worker mount it "
                                "at once", fix + "; its storage class must offer ReadWriteMany")
    phase = claim.status.phase if claim.status else None
    return Row(what, True if phase == "Bound" else None, f"ReadWriteMany, {phase}")


def check_secret(core, cluster: Cluster) -> Row:
    """The compile-time credentials Secret, with both AWS keys."""
    what = f"credentials Secret {cluster.namespace}/{cluster.credentials_secret}"
    fix = ("create it with the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (it was named "
           "with FMNIST_CREDENTIALS_SECRET at compile time)")
    try:
        secret = core.read_namespaced_secret(cluster.credentials_secret, cluster.namespace,
                                             _request_timeout=30)
    except Exception as error:
        if own_status(error) == 404:
            return Row(what, False, "missing: the ingest and train pods would not start "
                                    "(CreateContainerConfigError)", fix)
        return Row(what, None, f"cannot read it ({status_line(error)})")
    keys = set((secret.data or {}).keys())
    wanted = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    if not wanted <= keys:
        return Row(what, False, f"keys {sorted(keys)}", fix)
    return Row(what, True, "has AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
