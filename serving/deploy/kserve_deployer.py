"""Deploy a model to KServe: create, or bless and roll out a verified candidate.

:func:`deploy_with_kserve` drives one InferenceService. It first finds the deployment mode
(the InferenceService's own, else ``serving.deployment_mode``, else the cluster's default in
KServe's inferenceservice-config, else Serverless: see ``kserve_status``), checks before any
write what KServe would refuse (the scaling settings for that mode, a model in KFP's object
store without credentials), then hands over to the mode's rollout:

* Serverless (``rollout_serverless``): a canary on the InferenceService itself
  (``canaryTrafficPercent``), verified through its ``latest`` tag, promoted or rolled back;
* Standard (``rollout_standard``): a candidate InferenceService verified at its own address,
  then the main one rolled over with ``maxUnavailable: 0``.

Both verify at cluster-local addresses (pipeline pods have no route to the ingress domain) and
return a :class:`~fmnist_kfp.serving.deploy.rollout_result.RolloutResult` (``action``,
``blessing``, ``url``, ``external_url``, ``canary_url``, ``verification``, ``namespace``,
``name``, ``mode``, ``runtime``, ``storage_uri``, ``service_account``,
``canary_traffic_percent``, ``reason``), ``url`` being the cluster-local address the predict
step calls. ``action`` is one of ``created``, ``unchanged``, ``rejected``, ``promoted``,
``rolled_back`` (Serverless: the previous predictor re-applied, so a new revision of the
previous model takes all traffic and the rejected revision, with no traffic and no tag, scales to
zero; Standard: the previous model written back) and ``candidate_failed`` (Standard: the
candidate failed and was deleted, and the main InferenceService was never touched).
"""

from __future__ import annotations

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.inference_service import scale_problems
from fmnist_kfp.kubernetes.inference_service_status import (
    KSERVE_CONFIG_NAMESPACES,
    KSERVE_CONFIGMAP,
    DeploymentMode,
    canonical_mode,
    default_mode_from_config,
    mode_for_new,
    mode_of,
)
from fmnist_kfp.serving.deploy.credentials import credential_problems
from fmnist_kfp.serving.deploy.kserve_api import (
    KServeApi,
    KServeRolloutError,
    ReadinessTimeout,
    retrying,
)
from fmnist_kfp.serving.deploy.rollout_base import Acceptance, Candidate, Log, Rollout
from fmnist_kfp.serving.deploy.rollout_result import RolloutResult
from fmnist_kfp.serving.deploy.rollout_serverless import ServerlessRollout
from fmnist_kfp.serving.deploy.rollout_standard import StandardRollout
from fmnist_kfp.settings.serving import KServeSettings

__all__ = ["KServeRolloutError", "ReadinessTimeout", "deploy_with_kserve", "detect_mode",
           "prepare_rollout"]


def deploy_with_kserve(settings: KServeSettings, candidate: Candidate, acceptance: Acceptance,
                       *, client=None, poll_seconds: float = 5.0,
                       log: Log = print) -> RolloutResult:
    """Serves ``candidate`` (its accuracy: the test split's) on KServe, as ``acceptance``
    accepts it.

    ``acceptance.verify(url, model_name)`` sends real test images to ``url`` (a base URL) and
    returns a :class:`~fmnist_kfp.serving.deploy.verification.Comparison` or a mapping with at
    least ``{"ok": bool, "accuracy": float}``; a model passes when ``ok`` and its accuracy is at
    least ``expected_accuracy - tolerance`` (default the candidate's). ``client`` is a
    ``kserve.KServeClient`` (None: one from the in-cluster or kubeconfig credentials).
    ``candidate.needs_credentials``: the model is in KFP's object store, so KServe needs the
    ServiceAccount's S3 Secret; a missing one fails before any write.
    """
    rollout, current = prepare_rollout(settings, candidate, acceptance, client=client,
                                       poll_seconds=poll_seconds, log=log)
    return rollout.deploy(current)


def prepare_rollout(settings: KServeSettings, candidate: Candidate, acceptance: Acceptance, *,
                    client=None, poll_seconds: float = 5.0, log: Log = print,
                    mixin: type | None = None) -> tuple[Rollout, dict | None]:
    """The rollout of the mode the InferenceService is in, and the InferenceService as read
    (None when absent); what KServe would refuse is refused first (the candidate and its
    acceptance checked themselves as they were made). ``mixin``: a class laid over the mode's
    rollout (an early promotion's claim and guard)."""
    settings.validate()
    if client is None:
        from kserve import KServeClient

        client = KServeClient()
    api = KServeApi(client.api_instance.api_client, settings.target_namespace)
    current = retrying(api.get, settings.name)
    mode = detect_mode(api, current, settings.deployment_mode, log)
    problems = scale_problems(settings, mode)
    if candidate.needs_credentials:
        problems += credential_problems(api, settings.service_account, log)
    if problems:
        raise UserInputError(f"cannot deploy {candidate.storage_uri} to "
                             f"{api.where(settings.name)} ({mode.mode} mode): "
                             + "; ".join(problems))
    kind: type[Rollout] = ServerlessRollout if mode.serverless else StandardRollout
    if mixin is not None:
        kind = type(f"{mixin.__name__}{kind.__name__}", (mixin, kind), {})
    rollout = kind(settings, api, mode, candidate, acceptance, poll_seconds, log)
    return rollout, current


def cluster_default_mode(api: KServeApi, log: Log) -> str | None:
    """``defaultDeploymentMode`` from KServe's inferenceservice-config, when readable (a
    profile's default-editor may not read the ``kubeflow`` namespace)."""
    for namespace in KSERVE_CONFIG_NAMESPACES:
        try:
            config = retrying(api.get_config_map, KSERVE_CONFIGMAP, namespace)
        except KServeRolloutError as error:
            log(f"[kserve] cannot read {namespace}/{KSERVE_CONFIGMAP} ({error})")
            continue
        if config is not None:
            return default_mode_from_config(config.get("data"))
    return None


def detect_mode(api: KServeApi, current: dict | None, setting: str, log: Log) -> DeploymentMode:
    """The mode to deploy in; an existing InferenceService's mode cannot change (KServe's
    webhook refuses it: ``validateDeploymentMode``, v0.15.2 L447-457)."""
    default = cluster_default_mode(api, log)
    if current is None:
        mode = mode_for_new(setting, default)
    else:
        mode = mode_of(current, default)
        if setting and canonical_mode(setting) != mode.mode:
            raise UserInputError(
                f"{api.where(current['metadata']['name'])} runs in {mode.mode} mode "
                f"({mode.source}) and KServe cannot change an InferenceService's mode; leave "
                "serving.deployment_mode empty, or delete the InferenceService first")
    log(f"[kserve] deployment mode: {mode.mode} ({mode.source})")
    return mode
