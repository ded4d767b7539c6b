"""Which training operator the cluster offers and which one the run's ``kubernetes.operator``
picks (:func:`check_training_operator`): the Training Operator v1's TFJob
(``kubeflow.org/v1``), Kubeflow Trainer v2's TrainJob (``trainer.kubeflow.org/v1alpha1``), or
both, decided by the one rule the train step uses
(:func:`fmnist_kfp.kubernetes.training_operators.choose_operator`). Where TrainJobs run the
training, what they need besides: the JobSet API Trainer creates one of per TrainJob
(``jobset.x-k8s.io/v1alpha2``) and our ClusterTrainingRuntime ``fmnist-tensorflow``
(``kubectl apply -k manifests/trainer-runtime``), which Trainer's webhook refuses a TrainJob
without (kubeflow/trainer v2.1.0 pkg/runtime/core/clustertrainingruntime.go lines 84-93).

Then the training job itself (:func:`check_training_job`): the TFJob or TrainJob the train step
builds (``build_tfjob``, ``build_trainjob``) from the run's settings, sent as a server-side dry
run, so that the served CRD, its webhooks (the training operator's, Trainer's) and Kueue's judge
what a run would create, and a builder change the server would refuse shows here. Trainer's
webhook also says whether our runtime exists where it cannot be read (the steps'
ServiceAccount, in a pod: no Role grants a cluster-scoped read).

upstream: docs/upstream.md#kubeflow-manifests
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.api_errors import refusal_message, status_line
from fmnist_kfp.kubernetes.training_operators import (
    TFJOB_API,
    TRAINER_INSTALL,
    TRAINJOB_API,
    choose_operator,
    trainjob_api,
)
from fmnist_kfp.kubernetes.trainjob import GROUP as TRAINER_GROUP
from fmnist_kfp.kubernetes.trainjob import (
    OVERRIDES,
    PATCHES,
    RUNTIME_APPLY,
    RUNTIME_NAME,
    RUNTIME_PLURAL,
)
from fmnist_kfp.kubernetes.trainjob import PLURAL as TRAINJOB_PLURAL
from fmnist_kfp.kubernetes.trainjob import VERSION as TRAINER_VERSION
from fmnist_kfp.preflight.common import (
    Cluster,
    Row,
    _dry_run,
    _dry_run_outcome,
    _read,
    _serves,
    probe_name,
    run_job_spec,
    run_settings,
)

TFJOB = "TFJob (Training Operator v1)"
TRAINJOB = "TrainJob (Trainer v2)"
TFJOB_INSTALL = (
    "install Training Operator v1: Kubeflow 1.11's example install ships Trainer v2 (no "
    "TFJob); apply kubeflow/manifests applications/training-operator/upstream/overlays/kubeflow"
    " (kubectl apply --server-side -k \"github.com/kubeflow/manifests/applications/"
    "training-operator/upstream/overlays/kubeflow?ref=v1.11.0\"), then, with Katib already "
    "installed, restart katib-controller so that it watches TFJobs (kubectl rollout restart "
    "deployment/katib-controller -n kubeflow)")
# JobSet as Trainer installs it (kubeflow/trainer manifests/third-party/jobset/
# kustomization.yaml line 5: JobSet v0.10.1 at Trainer v2.1.0, v0.11.0 at v2.2.0); v1alpha2 is
# the version both serve (jobset v0.10.1 api/jobset/v1alpha2/jobset_types.go).
JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
JOBSET_INSTALL = ("install JobSet as Kubeflow Trainer's manifests do (kubeflow/trainer "
                  "manifests/third-party/jobset: JobSet v0.10.1 for Trainer 2.1.0, v0.11.0 for "
                  "2.2.0); Trainer v2 turns every TrainJob into a JobSet")
RUNTIME_FIX = (f"{RUNTIME_APPLY} (cluster-admin, once per cluster: a ClusterTrainingRuntime is "
               "cluster-scoped)")
# Trainer's webhook refusing a TrainJob whose ClusterTrainingRuntime does not exist (kubeflow/
# trainer v2.1.0 pkg/runtime/core/clustertrainingruntime.go lines 84-93, the same at v2.2.0).
RUNTIME_REFUSED = "specified clusterTrainingRuntime must be created before the TrainJob"
# The training job's collection, by operator: (kind, API path under the namespace).
JOB_APIS = {"tfjob": ("TFJob", "/apis/kubeflow.org/v1/namespaces/{namespace}/tfjobs"),
            "trainjob": ("TrainJob", f"/apis/{TRAINER_GROUP}/{TRAINER_VERSION}/namespaces/"
                                     f"{{namespace}}/{TRAINJOB_PLURAL}")}
TRAINING_EXTRA = "pip install 'fmnist-kfp[training]'"


@dataclass
class Offered:
    """What the API server said: each ``None`` where it could not be asked. A
    :class:`fmnist_kfp.kubernetes.training_operators.Discovery` of these answers, so that the
    choice is the train step's own rule."""

    tfjobs: bool | None
    trainjobs: bool | None
    runtime: bool | None = None
    runtime_problem: object = None  # why the runtime could not be read
    fields: set[str] | None = None

    def serves(self, group_version: str, plural: str) -> bool:
        """What discovery said of ``plural`` at ``group_version`` (unknown: not served)."""
        if (group_version, plural) == TFJOB_API:
            return bool(self.tfjobs)
        if (group_version, plural) == TRAINJOB_API:
            return bool(self.trainjobs)
        return False

    def runtime_exists(self, name: str) -> bool | None:
        """Whether the runtime exists; None when it could not be read."""
        return self.runtime

    def trainjob_fields(self) -> set[str] | None:
        """The served TrainJob's ``spec`` fields; None when the schema could not be read."""
        return self.fields


def offered(api_client) -> Offered:
    """Asks the API server which of the two operators it serves and, where Trainer v2 is
    served, whether our runtime exists and which TrainJob shape it takes."""
    found = Offered(tfjobs=_serves(api_client, "kubeflow.org", "v1", "tfjobs"),
                    trainjobs=_serves(api_client, TRAINER_GROUP, TRAINER_VERSION,
                                      TRAINJOB_PLURAL))
    if found.trainjobs:
        runtime, problem = _read(api_client, f"/apis/{TRAINER_GROUP}/{TRAINER_VERSION}/"
                                             f"{RUNTIME_PLURAL}/{RUNTIME_NAME}")
        found.runtime = problem is None if problem in (None, "missing") else None
        found.runtime_problem = problem
        from fmnist_kfp.kubernetes.training_operators import ClusterDiscovery

        try:
            found.fields = ClusterDiscovery(api_client).trainjob_fields()
        except Exception:  # the shape is only reported; Trainer 2.1's is assumed
            found.fields = None
    return found


def operator_in_use(cluster: Cluster, found: Offered) -> tuple[str, str]:
    """``(operator, problem)``: the operator the run would use (``tfjob`` or ``trainjob``),
    and, when it could not start, why (``choose_operator``'s words; "" when it could). With
    nothing usable, the one the fix is about: ``trainjob`` where Trainer v2 is served or was
    asked for, else ``tfjob``."""
    try:
        return choose_operator(cluster.operator, found), ""
    except UserInputError as error:
        if cluster.operator == "trainjob" or (cluster.operator == "auto" and found.trainjobs):
            return "trainjob", str(error)
        return "tfjob", str(error)


@dataclass
class Training:
    """What :func:`check_training` found: its rows, the operator in use, the shape of a
    TrainJob's pod settings, and the training job's dry run (:class:`DryRun`; None where it was
    not tried)."""

    rows: list[Row]
    operator: str
    shape: str = ""
    job: DryRun | None = None


@dataclass
class DryRun:
    """A server-side dry run of an object a step builds: the ``answer`` (the object as it would
    be stored) or the ``error`` the server refused it with, or ``unbuilt``: why it could not be
    built here (the row says)."""

    kind: str
    manifest: dict = field(default_factory=dict)
    answer: dict | None = None
    error: Exception | None = None
    unbuilt: str = ""


def check_training_operator(api_client, cluster: Cluster) -> tuple[list[Row], str]:
    """The rows of the training operator and the operator in use (for the permissions and
    Katib's watch): :func:`check_training`'s."""
    training = check_training(api_client, cluster)
    return training.rows, training.operator


def check_training(api_client, cluster: Cluster) -> Training:
    """The TFJob API; where Trainer v2 is served or asked for, the TrainJob API; which operator
    ``kubernetes.operator`` picks; for TrainJobs, JobSet and the runtime; and the training job
    the train step builds, as a server-side dry run (:func:`check_training_job`)."""
    found = offered(api_client)
    operator, problem = operator_in_use(cluster, found)
    rows = [_tfjob_row(cluster, found, operator)]
    if found.trainjobs or cluster.operator == "trainjob":
        rows.append(_trainjob_row(found))
    if not problem:
        rows.append(Row("training operator", None, _choice(cluster, found, operator)))
    shape = trainjob_api(found) if operator == "trainjob" and found.trainjobs else ""
    training = Training(rows, operator, shape)
    if operator == "trainjob" and found.trainjobs:
        rows.append(_jobset_row(api_client))
        runtime_row = _runtime_row(found)
        rows.append(runtime_row)
        if found.runtime is not False:  # a missing runtime is the row above's, alone
            training.job = dry_run_training_job(api_client, cluster, operator, shape)
            job_row = _training_job_row(cluster, training.job)
            said_by_runtime_row = False
            if found.runtime is None and job_row.ok is not None:
                rows[-1] = _runtime_row_from_webhook(training.job, runtime_row, found)
                said_by_runtime_row = _runtime_refusal(training.job)
            if not said_by_runtime_row:
                rows.append(job_row)
    elif operator == "tfjob" and found.tfjobs:
        training.job = dry_run_training_job(api_client, cluster, operator, "")
        rows.append(_training_job_row(cluster, training.job))
    return training


def dry_run_training_job(api_client, cluster: Cluster, operator: str, shape: str) -> DryRun:
    """The training job the train step builds from the run's settings (its ``ClusterJob``,
    checked as it is made, then ``build_tfjob``; for ``trainjob`` ``build_trainjob`` in the
    cluster's ``shape``, without ``gang``, which the scheduling rows refuse for TrainJobs),
    sent as a server-side dry run in the run's namespace, as the caller (the steps'
    ServiceAccount's permission is a row of its own)."""
    kind, path = JOB_APIS[operator]
    try:
        from fmnist_kfp.kubernetes.training_operators import ClusterJob

        settings = run_settings(cluster, gang=operator != "trainjob")
        spec = run_job_spec(probe_name(), settings)
        manifest = ClusterJob(spec, settings, operator, shape or OVERRIDES).manifest()
    except ModuleNotFoundError as error:  # a base install: the builders' SDKs are extras
        return DryRun(kind, unbuilt=f"not checked: building the {kind} needs {error.name}, "
                                    f"of the training extra ({TRAINING_EXTRA})")
    except UserInputError as error:
        return DryRun(kind, unbuilt=str(error), error=error)
    try:
        answer = _dry_run(api_client, path.format(namespace=cluster.namespace), manifest)
    except Exception as error:
        return DryRun(kind, manifest, error=error)
    return DryRun(kind, manifest, answer=answer or {})


def _training_job_row(cluster: Cluster, job: DryRun) -> Row:
    """The row of the training job's dry run."""
    what = f"{job.kind} the train step creates"
    if job.unbuilt and job.error is None:
        return Row(what, None, job.unbuilt, f"{TRAINING_EXTRA}, then run preflight again")
    if job.unbuilt:  # our own checks refuse the run's settings
        return Row(what, False, f"the train step refuses it: {job.unbuilt}",
                   "change the run's kubernetes settings as the message says")
    if job.error is not None:
        outcome = _dry_run_outcome(job.error)
        if outcome == "forbidden":
            return Row(what, None, f"could not check: you may not create {job.kind}s in "
                                   f"{cluster.namespace} ({refusal_message(job.error)}); the "
                                   "steps' ServiceAccount's permission is checked below")
        if outcome == "unknown":
            return Row(what, None, f"could not check: its server-side dry run failed "
                                   f"({refusal_message(job.error)})",
                       "if a webhook could not be called, no such job can be created: check the "
                       "operator's (and Kueue's) controller pods; else run preflight again")
        return Row(what, False, f"the cluster refuses it (server-side dry run: "
                                f"{refusal_message(job.error)})", _job_fix(job))
    return Row(what, True, f"accepted by a server-side dry run in {cluster.namespace} (its "
                           "schema and admission webhooks; nothing stored)")


def _job_fix(job: DryRun) -> str:
    """The fix of a training job the server refuses."""
    if job.kind == "TrainJob":
        return ("check that Trainer runs a release fmnist-kfp supports (2.1 or 2.2, with JobSet; "
                f"docs/cluster.md) and the runtime is manifests/trainer-runtime's ({RUNTIME_APPLY}"
                "); else report the message above as an fmnist-kfp bug")
    return ("check that the Training Operator v1 runs a release fmnist-kfp supports (v1.9; "
            "docs/cluster.md) and its webhook and any Kueue webhook are up; else report the "
            "message above as an fmnist-kfp bug")


def _runtime_refusal(job: DryRun) -> bool:
    """Whether Trainer's webhook refused the TrainJob for a missing runtime."""
    from fmnist_kfp.kubernetes.api_errors import read_body

    return job.error is not None and not job.unbuilt and RUNTIME_REFUSED in read_body(
        getattr(job.error, "body", None)).field("message")


def _runtime_row_from_webhook(job: DryRun, unread: Row, found: Offered) -> Row:
    """The runtime's row where it could not be read, from the TrainJob's dry run: Trainer's
    webhook reads it (as Trainer) for every TrainJob that names it."""
    what = unread.check
    if job.error is not None and _runtime_refusal(job):
        return Row(what, False, "missing: Trainer's webhook refused the run's TrainJob naming "
                                f"it (server-side dry run: {refusal_message(job.error)}), so "
                                "training and TrainJob trials cannot start", RUNTIME_FIX)
    if job.answer is not None:
        return Row(what, True, "exists: Trainer's webhook accepted a TrainJob naming it "
                               "(server-side dry run; you cannot read it: "
                               f"{_unread(found)})")
    return unread


def _tfjob_row(cluster: Cluster, found: Offered, operator: str) -> Row:
    """The TFJob API's row: a miss only where TFJobs are the operator in use."""
    if found.tfjobs is None:
        return Row(TFJOB, None, "cannot ask the API server whether tfjobs.kubeflow.org is "
                                "served")
    if found.tfjobs:
        return Row(TFJOB, True, "tfjobs.kubeflow.org, served at v1")
    if operator == "trainjob" and cluster.operator != "tfjob":
        return Row(TFJOB, None, "tfjobs.kubeflow.org/v1 is not served: TrainJobs (Trainer v2) "
                                "run the training")
    fix = TFJOB_INSTALL
    if cluster.operator == "auto":
        fix += (f"; or, with Kubeflow Trainer v2 (Kubeflow 26.03's example install), "
                f"{RUNTIME_APPLY} and kubernetes.operator auto or trainjob")
    return Row(TFJOB, False, "tfjobs.kubeflow.org/v1 is not served", fix)


def _trainjob_row(found: Offered) -> Row:
    """The TrainJob API's row, with the shape of its pod settings (the Trainer release)."""
    if found.trainjobs is None:
        return Row(TRAINJOB, None, "cannot ask the API server whether "
                                   f"{TRAINJOB_PLURAL}.{TRAINER_GROUP} is served")
    if not found.trainjobs:
        return Row(TRAINJOB, False, f"{TRAINJOB_PLURAL}.{TRAINER_GROUP}/{TRAINER_VERSION} is not "
                                    "served, and kubernetes.operator is trainjob",
                   f"{TRAINER_INSTALL}, then {RUNTIME_APPLY}; or use kubernetes.operator tfjob "
                   "with the Training Operator v1")
    shape = ("Trainer 2.2 or later: runtimePatches" if PATCHES == trainjob_api(found)
             else "Trainer 2.1: podTemplateOverrides")
    return Row(TRAINJOB, True, f"{TRAINJOB_PLURAL}.{TRAINER_GROUP}, served at {TRAINER_VERSION} "
                               f"({shape})")


def _choice(cluster: Cluster, found: Offered, operator: str) -> str:
    """What ``kubernetes.operator`` picks here, and why."""
    names = {"tfjob": "TFJobs (Training Operator v1)", "trainjob": "TrainJobs (Trainer v2)"}
    if cluster.operator != "auto":
        return f"kubernetes.operator {cluster.operator}: {names[operator]}"
    if found.tfjobs and found.trainjobs:
        return ("both served: kubernetes.operator auto picks TFJobs (Training Operator v1); "
                "kubernetes.operator trainjob picks TrainJobs (Trainer v2)")
    return f"kubernetes.operator auto picks {names[operator]}, the only one served"


def _jobset_row(api_client) -> Row:
    """The JobSet API's row: Trainer makes one JobSet per TrainJob."""
    what = "JobSet"
    served = _serves(api_client, JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL)
    if served is None:
        return Row(what, None, f"cannot ask the API server whether {JOBSET_PLURAL}."
                               f"{JOBSET_GROUP} is served")
    if not served:
        return Row(what, False, f"{JOBSET_PLURAL}.{JOBSET_GROUP}/{JOBSET_VERSION} is not served: "
                                "Trainer cannot start a TrainJob's pods", JOBSET_INSTALL)
    return Row(what, True, f"{JOBSET_PLURAL}.{JOBSET_GROUP}, served at {JOBSET_VERSION}")


def _unread(found: Offered) -> str:
    """Why the runtime could not be read: its read's error, in a few words."""
    problem = found.runtime_problem
    return status_line(problem) if isinstance(problem, BaseException) else str(problem)


def _runtime_row(found: Offered) -> Row:
    """Our ClusterTrainingRuntime's row (read as you: no Role grants a cluster-scoped read)."""
    what = f"ClusterTrainingRuntime {RUNTIME_NAME}"
    if found.runtime is None:
        return Row(what, None, f"cannot read it ({_unread(found)}); Trainer's "
                               "webhook refuses every TrainJob of the run without it",
                   f"if missing: {RUNTIME_FIX}")
    if not found.runtime:
        return Row(what, False, "missing: Trainer's webhook refuses every TrainJob naming it, "
                                "so training and TrainJob trials cannot start", RUNTIME_FIX)
    return Row(what, True, "exists (manifests/trainer-runtime)")
