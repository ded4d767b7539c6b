"""Object-store credentials for KServe's storage initializer, and the check made before any
write that a model in KFP's object store can be fetched.

KFP stores artifacts as ``minio://<bucket>/<key>`` in its object store, over plain HTTP:
SeaweedFS on Kubeflow 1.11 and 26.03 (standalone KFP 2.15, 2.16), whose S3 port both serve as
``seaweedfs.kubeflow:8333`` (:data:`KFP_STORE_ENDPOINT`). 1.11 also keeps the name
``minio-service`` (port 9000), which 26.03 no longer ships; MinIO itself (Kubeflow 1.10,
standalone KFP 2.14) is ``minio-service.kubeflow:9000``. KServe has no ``minio://`` scheme, so
the deploy step serves it as ``s3://<bucket>/<key>`` with a ServiceAccount whose Secret holds:

* the keys ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (the names Kubeflow's
  inferenceservice-config sets; KFP's own ``mlpipeline-minio-artifact`` Secret uses
  ``accesskey``/``secretkey``, so the user creates ours), and a Secret counts as S3 only if it
  holds the secret-key key;
* the annotations ``serving.kserve.io/s3-endpoint`` and, for an endpoint without a scheme,
  ``serving.kserve.io/s3-usehttps: "0"`` — HTTPS is the default otherwise. The data keys
  ``S3_ENDPOINT`` / ``S3_USE_HTTPS`` also work (lower precedence).

The injector reads the predictor's ServiceAccount and tries every Secret it lists.

upstream: docs/upstream.md#kserve, #kubeflow-manifests
"""

from __future__ import annotations

from fmnist_kfp.serving.deploy.kserve_api import KServeApi, retrying

KFP_STORE_SCHEME = "minio://"
ACCESS_KEY = "AWS_ACCESS_KEY_ID"
SECRET_KEY = "AWS_SECRET_ACCESS_KEY"
# Where KServe's storage initializer reaches KFP's SeaweedFS from a profile namespace, on both
# Kubeflow 1.11 and 26.03: the S3 port, the one SeaweedFS's NetworkPolicy admits from profile
# namespaces (seaweedfs-networkpolicy.yaml lines 6-15, both tags). manifests/serving-credentials
# sets it.
KFP_STORE_ENDPOINT = "seaweedfs.kubeflow:8333"
MINIO_ENDPOINT = "minio-service.kubeflow:9000"  # KFP's store where it still runs MinIO
ENDPOINT_ANNOTATION = "serving.kserve.io/s3-endpoint"
USE_HTTPS_ANNOTATION = "serving.kserve.io/s3-usehttps"
VERIFY_SSL_ANNOTATION = "serving.kserve.io/s3-verifyssl"
REGION_ANNOTATION = "serving.kserve.io/s3-region"
ENDPOINT_KEY = "S3_ENDPOINT"
USE_HTTPS_KEY = "S3_USE_HTTPS"
SETUP = ("create it once per namespace: see the README, 'On a Kubeflow cluster' "
         "(kubectl apply -k manifests/serving-credentials, with the access key and secret key "
         "of KFP's object store)")


def in_kfp_store(uri: str) -> bool:
    """Whether a model artifact lives in KFP's own object store."""
    return (uri or "").startswith(KFP_STORE_SCHEME)


def as_s3(uri: str) -> str:
    """KFP's ``minio://bucket/key`` as the ``s3://bucket/key`` KServe fetches."""
    return "s3://" + uri[len(KFP_STORE_SCHEME):] if in_kfp_store(uri) else uri


def credential_problems(api: KServeApi, service_account: str, log) -> list[str]:
    """What keeps KServe's storage initializer from reading KFP's store with
    ``service_account`` in the rollout's namespace; empty when nothing does.

    A Secret the step may not read is assumed fine (logged): KServe reads it, not the step."""
    where = f"namespace {api.namespace}"
    if not service_account:
        return [f"the model is in KFP's object store, but no ServiceAccount was given for "
                f"KServe to read it with (serving.service_account); {SETUP}"]
    account = retrying(api.get_service_account, service_account)
    if account is None:
        return [f"ServiceAccount {service_account!r} does not exist in {where}; KServe's "
                f"storage initializer needs it to read the model from KFP's object store; "
                f"{SETUP}"]
    names = [ref.get("name") for ref in account.get("secrets") or [] if ref.get("name")]
    if not names:
        return [f"ServiceAccount {service_account!r} in {where} lists no Secret (its "
                f"'secrets:'), so KServe finds no S3 credentials; {SETUP}"]
    problems: list[str] = []
    for name in names:
        try:
            secret = retrying(api.get_secret, name)
        except Exception as error:  # e.g. 403: the step may not read Secrets; KServe may
            log(f"[kserve] cannot read Secret {name} to check it ({error}); assuming it holds "
                "the object store's credentials")
            return []
        if secret is None:
            problems.append(f"Secret {name!r} (listed by ServiceAccount {service_account!r}) "
                            f"does not exist in {where}; {SETUP}")
            continue
        problem = _secret_problem(secret, name)
        if problem is None:
            return []
        problems.append(problem)
    return problems


def _secret_problem(secret: dict, name: str) -> str | None:
    # ``data`` is base64 (what the API server returns); ``stringData`` as written (a manifest).
    data = {key: _decoded(value) for key, value in (secret.get("data") or {}).items()}
    data.update(secret.get("stringData") or {})
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    if SECRET_KEY not in data or ACCESS_KEY not in data:
        return (f"Secret {name!r} has no {ACCESS_KEY} and {SECRET_KEY} keys (KFP's own "
                f"mlpipeline-minio-artifact names them accesskey/secretkey, which KServe does "
                f"not read); {SETUP}")
    endpoint = annotations.get(ENDPOINT_ANNOTATION) or data.get(ENDPOINT_KEY)
    if not endpoint:
        return (f"Secret {name!r} has no {ENDPOINT_ANNOTATION} annotation, so KServe would "
                f"fetch from AWS instead of KFP's object store; annotate it with "
                f"{ENDPOINT_ANNOTATION}: {KFP_STORE_ENDPOINT} (SeaweedFS, Kubeflow 1.11 and "
                f"later; {MINIO_ENDPOINT} where KFP runs MinIO) and "
                f"{USE_HTTPS_ANNOTATION}: \"0\"")
    use_https = annotations.get(USE_HTTPS_ANNOTATION) or data.get(USE_HTTPS_KEY)
    if "://" not in endpoint and use_https != "0":
        return (f"Secret {name!r} names endpoint {endpoint} without a scheme and without "
                f"{USE_HTTPS_ANNOTATION}: \"0\", so KServe would use HTTPS, which KFP's object "
                f"store does not speak; add the annotation {USE_HTTPS_ANNOTATION}: \"0\"")
    return None


def _decoded(value: str | None) -> str | None:
    """A Secret's ``data`` value, decoded from base64 (left as it is when it is not)."""
    import base64
    import binascii

    if not value:
        return None
    try:
        return base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return value
