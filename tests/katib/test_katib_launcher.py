"""The Katib launcher through the real Kubernetes client against the API stand-in
(tests/standins/katib.py): scripted Experiment statuses for the launcher's logic (faults,
progress lines, stalled trials; searches that really run: tests/katib/test_katib_on_the_cluster.py,
on Katib itself). Time is fake: every wait is bounded by a deadline in fake seconds, so a
regression fails fast instead of hanging until pytest's timeout."""

from __future__ import annotations

import io
import json
import queue
import signal
import subprocess
from pathlib import Path

import pytest

from fmnist_kfp.errors import TuningError, UserInputError
from fmnist_kfp.katib.experiment_launcher import KatibExperimentLauncher
from fmnist_kfp.katib.results import EARLY_STOPPED, FAILED, SUCCEEDED
from fmnist_kfp.kubernetes.experiment import ExperimentSettings
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.tuning.search_space import SearchSpace
from tests.crd_schemas import validate_strict
from tests.katib_schemas import validate_katib
from tests.launcher_harness import drain, read_until, spawn_script
from tests.standins.katib import KatibStandIn, state, trial
from tests.standins.kubernetes import FakeTime

DATA_DIR = "/mnt/fmnist/dataset"
EXPERIMENT = "/apis/kubeflow.org/v1beta1/namespaces/team-a/experiments/fmnist-tune"
BEST = trial("fmnist-tune-b7k2x9q1",
             {"learning_rate": "0.0012", "batch_size": "64", "filters": "32",
              "dropout_rate": "0.35"},
             {"val_accuracy": 0.9123, "val_loss": 0.2501, "accuracy": 0.93, "loss": 0.2})
FIRST = trial("fmnist-tune-a1c4m8z2",
              {"learning_rate": "0.0003", "batch_size": "128", "filters": "16",
               "dropout_rate": "0.5"},
              {"val_accuracy": 0.8811, "val_loss": 0.33, "accuracy": 0.89, "loss": 0.31})
STOPPED = trial("fmnist-tune-c9d3p5w7",
                {"learning_rate": "0.0001", "batch_size": "256", "filters": "16",
                 "dropout_rate": "0.55"},
                {"val_accuracy": 0.71, "val_loss": 0.8, "accuracy": 0.7, "loss": 0.82},
                condition=EARLY_STOPPED)
BROKEN = trial("fmnist-tune-d2e8r4t6",
               {"learning_rate": "0.003", "batch_size": "32", "filters": "64",
                "dropout_rate": "0.1"},
               {"val_accuracy": "unavailable"}, condition=FAILED)
PROGRESS = [
    state("Created"),
    state("Running", running=3),
    state("Running", running=3),  # unchanged: no second line
    state("Running", succeeded=1, running=2, best=FIRST),
    state("Running", succeeded=2, running=1, early_stopped=1, best=BEST),
    state("Succeeded", succeeded=2, failed=1, early_stopped=1, best=BEST),
]


def _settings(tmp_path: Path, **overrides) -> ExperimentSettings:
    kubernetes = KubernetesSettings(image="ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0",
                                    namespace="team-a", pvc_name="fmnist-pvc")
    values = dict(name="fmnist-tune", kubernetes=kubernetes, model_type="dropout",
                  max_trial_count=4, parallel_trial_count=3,
                  output_dir=str(tmp_path / "trials"))
    values.update(overrides)
    return ExperimentSettings(**values)


def _space(algorithm: str = "tpe") -> SearchSpace:
    return SearchSpace.default(algorithm, "dropout")


POLL = 15.0
DEADLINE = 3600.0  # fake seconds


def _launcher(standin: KatibStandIn, **kwargs) -> KatibExperimentLauncher:
    time = FakeTime()
    values = dict(poll_seconds=POLL, timeout_seconds=DEADLINE, out=io.StringIO(),
                  request_timeout_seconds=2, clock=time, sleep=time.sleep)
    values.update(kwargs)
    return KatibExperimentLauncher(standin.katib_client(), **values)


def _history(settings: ExperimentSettings, trial_name: str, epochs: list[int]) -> None:
    """What a trial's chief appends to its work directory, one line per epoch."""
    directory = Path(settings.trials_root) / trial_name
    directory.mkdir(parents=True)
    lines = [json.dumps({"epoch": e, "val_accuracy": 0.8 + e / 100}) for e in epochs]
    (directory / "history.jsonl").write_text("\n".join(lines) + "\n")


def test_creates_one_valid_experiment_and_returns_the_typed_best_trial(tmp_path):
    settings = _settings(tmp_path)
    trials = [FIRST, BEST, STOPPED, BROKEN]
    with KatibStandIn(PROGRESS, trials) as standin:
        launcher = _launcher(standin)
        result = launcher.run(settings, _space(), DATA_DIR)

    posts = standin.posts()
    assert len(posts) == 1
    validate_katib(posts[0])
    validate_strict(posts[0]["spec"]["trialTemplate"]["trialSpec"],
                    "tfjob.kubeflow.org_v1.yaml", "v1")
    assert posts[0]["metadata"] == {"name": "fmnist-tune", "namespace": "team-a",
                                    "labels": {"app.kubernetes.io/part-of": "fmnist-kfp"}}
    assert ("DELETE", EXPERIMENT) not in standin.methods()
    trial_lists = [path for method, path, _ in standin.calls if "/trials" in path]
    assert trial_lists == ["/apis/kubeflow.org/v1beta1/namespaces/team-a/trials"
                           "?labelSelector=katib.kubeflow.org%2Fexperiment%3Dfmnist-tune"]

    assert result.backend == "kubernetes" and result.experiment == "fmnist-tune"
    assert (result.algorithm, result.objective_metric, result.objective_type) == (
        "tpe", "val_accuracy", "maximize")
    assert result.best_trial == "fmnist-tune-b7k2x9q1"
    assert result.best_objective == pytest.approx(0.9123)
    assert result.best_parameters == {"learning_rate": 0.0012, "batch_size": 64, "filters": 32,
                                      "dropout_rate": 0.35}  # trialName dropped
    assert type(result.best_parameters["learning_rate"]) is float
    assert type(result.best_parameters["batch_size"]) is int
    assert result.early_stopping is False
    assert result.seconds == 5 * POLL  # six reads, five polls apart (fake time)
    assert result.base_config["model_type"] == "dropout"
    assert "validation_examples" not in result.base_config  # the dataset's split
    final = result.training_config(epochs=20)  # ready to train with
    assert (final.learning_rate, final.batch_size, final.epochs) == (0.0012, 64, 20)

    by_name = {t.name: t for t in result.trials}
    assert len(result.trials) == 4
    best = by_name["fmnist-tune-b7k2x9q1"]
    assert best.status == SUCCEEDED and best.objective == pytest.approx(0.9123)
    assert best.metrics == {"val_loss": 0.2501, "accuracy": 0.93, "loss": 0.2}
    assert best.parameters["filters"] == 32 and best.seconds == 330.0
    assert by_name["fmnist-tune-c9d3p5w7"].status == EARLY_STOPPED
    broken = by_name["fmnist-tune-d2e8r4t6"]
    assert (broken.status, broken.objective, broken.metrics) == (FAILED, None, {})
    assert result.count(SUCCEEDED) == 2 and result.total_epochs == 0  # no history on disk

    lines = launcher.out.getvalue().splitlines()
    assert lines[0] == ("created Katib Experiment team-a/fmnist-tune (tpe, 4 trials, 3 at a "
                        "time, objective val_accuracy)")
    progress = [line for line in lines if line.startswith("Katib Experiment team-a/")]
    assert len(progress) == 5, lines  # one line per change
    assert progress[1] == ("Katib Experiment team-a/fmnist-tune: Running: 0 succeeded, "
                           "3 running, 0 failed, 0 early-stopped of 4 trials")
    assert progress[3] == (
        "Katib Experiment team-a/fmnist-tune: Running: 2 succeeded, 1 running, 0 failed, "
        "1 early-stopped of 4 trials; best val_accuracy=0.9123 in fmnist-tune-b7k2x9q1 "
        "(learning_rate=0.0012, batch_size=64, filters=32, dropout_rate=0.35)"
    )
    assert progress[4].startswith("Katib Experiment team-a/fmnist-tune: Succeeded: 2 succeeded")


def test_trial_epochs_come_from_each_trials_history(tmp_path):
    settings = _settings(tmp_path)
    _history(settings, "fmnist-tune-b7k2x9q1", [1, 2, 3, 4, 5, 6])
    _history(settings, "fmnist-tune-c9d3p5w7", [1, 2, 3, 3])  # epoch 3 re-run after a restart
    with KatibStandIn(PROGRESS[-1:], [FIRST, BEST, STOPPED]) as standin:
        result = _launcher(standin).run(settings, _space(), DATA_DIR)
    epochs = {t.name: t.epochs for t in result.trials}
    assert epochs == {"fmnist-tune-a1c4m8z2": 0, "fmnist-tune-b7k2x9q1": 6,
                      "fmnist-tune-c9d3p5w7": 3}
    assert result.total_epochs == 9


def test_a_retried_launcher_reattaches_instead_of_creating_a_second_experiment(tmp_path):
    with KatibStandIn([state("Running", running=3), PROGRESS[-1]], [BEST]) as standin:
        standin.add_experiment("fmnist-tune", maxTrialCount=4)  # created by the first try
        launcher = _launcher(standin)
        result = launcher.run(_settings(tmp_path), _space(), DATA_DIR)
    assert len(standin.posts()) == 1  # answered 409 AlreadyExists
    assert standin.experiments[("team-a", "fmnist-tune")]["spec"] == {"maxTrialCount": 4}
    assert "re-attaching to the existing Katib Experiment team-a/fmnist-tune" in \
        launcher.out.getvalue()
    assert result.best_trial == "fmnist-tune-b7k2x9q1"


def test_a_failed_experiment_fails_the_step_with_katibs_reason(tmp_path):
    states = [state("Running", succeeded=1, running=2, best=FIRST),
              state("Failed", succeeded=1, failed=3, best=FIRST)]
    with KatibStandIn(states, [FIRST, BROKEN]) as standin:
        launcher = _launcher(standin)
        with pytest.raises(TuningError) as failure:
            launcher.run(_settings(tmp_path), _space(), DATA_DIR)
    message = str(failure.value)
    assert "Katib Experiment team-a/fmnist-tune failed" in message
    # status_util.go v0.19.0: the reason is ExperimentFailed (there is no MaxFailed... one).
    assert "ExperimentFailed: Experiment has failed because max failed count has reached" \
        in message
    assert "3 failed" in message
    # Nothing is reported as a result; the failed Experiment is deleted, so that a retry of the
    # step searches afresh instead of re-attaching to the failure.
    assert not any("/trials" in path for _, path in standin.methods())
    assert ("DELETE", EXPERIMENT) in standin.methods() and standin.experiments == {}
    assert "deleting the failed Katib Experiment" in launcher.out.getvalue()


def test_success_without_an_optimal_trial_is_a_failure_not_a_result(tmp_path):
    with KatibStandIn([state("Succeeded", failed=1)], [BROKEN]) as standin:
        with pytest.raises(TuningError, match="without an optimal trial"):
            _launcher(standin).run(_settings(tmp_path), _space(), DATA_DIR)


def test_the_step_deadline_deletes_the_experiment(tmp_path):
    with KatibStandIn([state("Running", running=3)]) as standin:
        launcher = _launcher(standin, timeout_seconds=100)
        with pytest.raises(TimeoutError, match="within the step's 100 s"):
            launcher.run(_settings(tmp_path), _space(), DATA_DIR)
    assert ("DELETE", EXPERIMENT) in standin.methods()
    assert standin.experiments == {}
    assert "deleted Katib Experiment team-a/fmnist-tune" in launcher.out.getvalue()


_CHILD = """
import sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from fmnist_kfp.katib.experiment_launcher import KatibExperimentLauncher
from tests.standins.katib import katib_client_for
from tests.katib.test_katib_launcher import DATA_DIR, _settings, _space
launcher = KatibExperimentLauncher(katib_client_for({url!r}), poll_seconds=0.05,
                                   timeout_seconds=120)
print("launching", flush=True)
launcher.run(_settings(Path({tmp!r})), _space(), DATA_DIR)
"""


def _launch_child(standin, tmp_path) -> tuple[subprocess.Popen, queue.Queue]:
    return spawn_script(_CHILD, url=standin.url, tmp=str(tmp_path))



@pytest.mark.process
def test_sigterm_while_waiting_deletes_the_experiment(tmp_path):
    """A terminated pipeline run sends SIGTERM to the launcher pod: the Experiment goes too."""
    seen: list[str] = []
    with KatibStandIn([state("Running", running=3)]) as standin:
        process, lines = _launch_child(standin, tmp_path)
        try:
            assert read_until(lines, "Running:", seen), "\n".join(seen)
            process.send_signal(signal.SIGTERM)
            drain(process, lines, seen)
        finally:
            process.kill()
    output = "\n".join(seen)
    assert process.returncode == 128 + signal.SIGTERM, output
    assert ("DELETE", EXPERIMENT) in standin.methods()
    assert "deleted Katib Experiment team-a/fmnist-tune" in output


@pytest.mark.process
def test_sigterm_while_the_create_call_is_in_flight_deletes_the_experiment(tmp_path):
    """The stand-in holds the create until the signal has been handled (at 1cd2394 the handler
    came after create returned: the Experiment was left running)."""
    seen: list[str] = []
    with KatibStandIn([state("Running", running=3)]) as standin:
        gate = standin.gate("POST", "experiments")
        process, lines = _launch_child(standin, tmp_path)
        try:
            assert gate.arrived.wait(60), "the create call never arrived"
            process.send_signal(signal.SIGTERM)
            read_until(lines, "SIGTERM while creating", seen)  # handled, or the child died
            gate.release()
            drain(process, lines, seen)
        finally:
            process.kill()
    output = "\n".join(seen)
    assert process.returncode == 128 + signal.SIGTERM, output
    assert ("DELETE", EXPERIMENT) in standin.methods(), output
    assert standin.experiments == {}


@pytest.mark.parametrize("fault", [500, 503, "timeout", "reset"])
def test_a_transient_api_error_mid_run_leaves_the_experiment_and_the_step_succeeds(
        tmp_path, fault):
    with KatibStandIn(PROGRESS, [FIRST, BEST]) as standin:
        standin.timeout_hold_seconds = 0.6
        launcher = _launcher(standin, request_timeout_seconds=0.5)
        original = standin.on_get

        def after_two_reads(handler):
            if sum(m == "GET" for m, _ in standin.methods()) == 3:
                standin.inject("GET", "experiments", fault)
            original(handler)

        standin.on_get = after_two_reads
        standin.inject("GET", "trials", 503)  # and once listing the trials at the end
        result = launcher.run(_settings(tmp_path), _space(), DATA_DIR)
    assert result.best_trial == "fmnist-tune-b7k2x9q1"
    assert not any(m == "DELETE" for m, _ in standin.methods())
    assert launcher.out.getvalue().count("failed transiently") >= 2


def test_an_experiment_deleted_behind_our_back_is_an_error_naming_it(tmp_path):
    with KatibStandIn([state("Running", running=3)]) as standin:
        launcher = _launcher(standin)
        original = standin.on_get

        def vanish(handler):
            if sum(m == "GET" for m, _ in standin.methods()) == 3:
                standin.experiments.clear()
            original(handler)

        standin.on_get = vanish
        with pytest.raises(TuningError, match="Katib Experiment team-a/fmnist-tune vanished"):
            launcher.run(_settings(tmp_path), _space(), DATA_DIR)
    assert not any(m == "DELETE" for m, _ in standin.methods())


def test_a_wrong_api_version_or_kind_is_refused_at_once(tmp_path, monkeypatch):
    """What the API server answers (tests/standins/kubernetes.py cites it): a body apiVersion other
    than the path's is 400, a misspelt kind 422; the step fails with it."""
    import fmnist_kfp.katib.experiment_launcher as module

    build = module.build_checked_experiment
    for field, value, answer in (("api_version", "kubeflow.org/v1", "HTTP 400 Bad Request"),
                                 ("kind", "Experimnet", "HTTP 422 Unprocessable Entity")):
        def wrong(*args, field=field, value=value):
            experiment = build(*args)
            setattr(experiment, field, value)
            return experiment

        monkeypatch.setattr(module, "build_checked_experiment", wrong)
        with KatibStandIn() as standin:
            with pytest.raises(TuningError, match=answer):
                _launcher(standin).run(_settings(tmp_path), _space(), DATA_DIR)
            assert standin.experiments == {}


def test_katibs_webhook_refusal_is_a_400_naming_the_rule(tmp_path):
    """The namespace must be labelled for metrics-collector injection (validation_webhook.go
    v0.19.0 lines 74-97): a 400 from the webhook, reported as it is."""
    with KatibStandIn(namespaces=("other",)) as standin:
        with pytest.raises(TuningError, match='HTTP 400 Bad Request: admission webhook '
                                              '"validator.experiment.katib.kubeflow.org" denied '
                                              'the request: Cannot create the Experiment'):
            _launcher(standin).run(_settings(tmp_path), _space(), DATA_DIR)


def test_the_previous_sigterm_handler_is_restored(tmp_path):
    def handler(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with KatibStandIn([PROGRESS[-1]], [BEST]) as standin:
            _launcher(standin).run(_settings(tmp_path), _space(), DATA_DIR)
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_failed_trial_budget_means_more_than_that_many_failed(tmp_path):
    """Katib fails once failed >= maxFailedTrialCount (status_util.go v0.19.0 line 205); our
    budget fails once more than it failed, as the local search does."""
    with KatibStandIn([PROGRESS[-1]], [BEST]) as standin:
        _launcher(standin).run(_settings(tmp_path, max_failed_trial_count=2), _space(),
                               DATA_DIR)
    assert standin.posts()[0]["spec"]["maxFailedTrialCount"] == 3


@pytest.mark.parametrize(("overrides", "problem"), [
    ({"max_trial_count": 2, "parallel_trial_count": 3},
     "max_trial_count (2) is below parallel_trial_count (3)"),
    ({"algorithm": "simulated-annealing"}, "unknown algorithm 'simulated-annealing'"),
    ({"objective_metric": "f1"}, "does not report objective metric 'f1'"),
])
def test_bad_input_fails_before_anything_reaches_the_api(tmp_path, overrides, problem):
    with KatibStandIn() as standin:
        with pytest.raises(UserInputError, match=problem.replace("(", r"\(").replace(")", r"\)")):
            _launcher(standin).run(_settings(tmp_path, **overrides), _space(), DATA_DIR)
    assert standin.calls == []


def test_bad_input_fails_before_a_client_is_even_made(tmp_path):
    """Without a client, the launcher makes one from the kube-config; bad input comes first."""
    launcher = KatibExperimentLauncher(out=io.StringIO())
    with pytest.raises(UserInputError, match="data_dir is empty"):
        launcher.run(_settings(tmp_path), _space(), "")
    assert launcher._client is None


def test_the_standins_objects_are_shaped_like_katibs():
    for condition in ("Created", "Running", "Succeeded", "Failed"):
        validate_katib(state(condition, succeeded=1, best=BEST), "v1beta1.ExperimentStatus")
    for item in (FIRST, BEST, STOPPED, BROKEN, trial("t", {"filters": "16"},
                                                     condition="Running")):
        validate_katib(item, ".v1beta1.Trial")
    from kubeflow_katib_api.models import V1beta1Trial  # what KatibApi.list_trials answers

    parsed = V1beta1Trial.from_dict(BEST)
    assert parsed.status.observation.metrics[0].latest == "0.9123"


def test_the_tuning_step_stages_the_dataset_and_runs_its_experiment(synthetic_dataset, tmp_path,
                                                                    monkeypatch):
    """The kubernetes path of the pipeline's tuning step: the dataset is staged on the shared
    volume, the Experiment (named from the step's output location, so a retry re-attaches)
    searches with the step's settings on the staged copy, and the best values come back
    typed."""
    from fmnist_kfp.kfp_components.tune.step import experiment_name, tune_step
    from fmnist_kfp.settings.training import TrainingConfig

    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)  # not in a compiled pipeline's pod
    output_dir = str(tmp_path / "artifacts" / "search")
    name = experiment_name("dropout", output_dir)
    best = trial(f"{name}-b7k2x9q1", {"learning_rate": "0.0012", "batch_size": "64",
                                      "filters": "32", "dropout_rate": "0.35"},
                 {"val_accuracy": 0.9123}, experiment=name)
    mount = tmp_path / "volume"
    tuning = {"algorithm": "random", "max_trials": 4, "parallel_trials": 2, "epochs": 3,
              "early_stopping": False}
    with KatibStandIn([state("Succeeded", succeeded=1, best=best)], [best]) as standin:
        result = tune_step(
            model_type="dropout", base=TrainingConfig(batch_size=128), tuning=tuning,
            data_dir=str(synthetic_dataset), output_dir=output_dir, backend="kubernetes",
            kubernetes={"namespace": "team-a", "pvc_name": "fmnist-pvc",
                        "mount_path": str(mount)},
            image="ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0", launcher=_launcher(standin))
    [posted] = standin.posts()
    validate_katib(posted)
    assert posted["metadata"]["name"] == name and len(name) <= 40
    spec = posted["spec"]
    assert (spec["maxTrialCount"], spec["parallelTrialCount"]) == (4, 2)
    assert spec["algorithm"]["algorithmName"] == "random" and "earlyStopping" not in spec
    [staged] = list((mount / "datasets").iterdir())
    assert (staged / "metadata.json").exists()
    command = spec["trialTemplate"]["trialSpec"]["spec"]["tfReplicaSpecs"]["Worker"][
        "template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--data-dir") + 1] == str(staged)
    assert command[command.index("--epochs") + 1] == "3"
    assert command[command.index("--work-dir") + 1].startswith(f"{mount}/katib/{name}/")
    assert result.best_parameters == {"learning_rate": 0.0012, "batch_size": 64,
                                      "filters": 32, "dropout_rate": 0.35}


def test_the_metric_strategy_picks_each_trials_value(tmp_path):
    """Katib's observation has latest, min and max per metric; the settings' strategy picks."""
    def observed(name: str, latest: str, best: str, condition: str = SUCCEEDED) -> dict:
        made = trial(name, {"learning_rate": "0.001", "batch_size": "64", "filters": "32",
                            "dropout_rate": "0.3"}, condition=condition)
        made["status"]["observation"] = {"metrics": [
            {"name": "val_accuracy", "latest": latest, "min": "0.5", "max": best},
            {"name": "val_loss", "latest": "0.4", "min": "0.3", "max": "0.9"}]}
        return made

    first, second = observed("fmnist-tune-aaaa1111", "0.80", "0.85"), observed(
        "fmnist-tune-bbbb2222", "0.82", "0.83")
    for strategy, best_name, best_value in (("max", "fmnist-tune-aaaa1111", 0.85),
                                            ("latest", "fmnist-tune-bbbb2222", 0.82)):
        optimal = first if best_name == first["metadata"]["name"] else second
        with KatibStandIn([state("Succeeded", succeeded=2, best=optimal)],
                          [first, second]) as standin:
            result = _launcher(standin).run(
                _settings(tmp_path, metric_strategy=strategy, additional_metrics=("val_loss",)),
                _space(), DATA_DIR)
        assert (result.best_trial, result.best_objective) == (best_name, best_value)
        by_name = {t.name: t for t in result.trials}
        assert by_name["fmnist-tune-aaaa1111"].objective == (0.85 if strategy == "max" else 0.80)
        assert by_name["fmnist-tune-aaaa1111"].metrics == {
            "val_loss": 0.9 if strategy == "max" else 0.4}


@pytest.mark.parametrize("condition", ["Succeeded", "Failed", "EarlyStopped",
                                       "MetricsUnavailable", "Running", "Created"])
def test_each_trials_state_is_read_from_its_conditions(tmp_path, condition):
    """Trial conditions are cumulative (trials/v1beta1/util.go v0.19.0 lines 124-155): a
    finished trial is [Created, Running=False, <outcome>]; the state is the one that holds."""
    item = trial("fmnist-tune-cccc3333", {"filters": "16"}, {"val_accuracy": 0.7},
                 condition=condition)
    with KatibStandIn([state("Succeeded", succeeded=1, best=BEST)], [BEST, item]) as standin:
        result = _launcher(standin).run(_settings(tmp_path), _space(), DATA_DIR)
    record = {t.name: t for t in result.trials}["fmnist-tune-cccc3333"]
    assert record.status == condition
    assert record.seconds == (330.0 if condition not in ("Running", "Created") else 0.0)


def test_unavailable_metrics_are_no_values(tmp_path):
    item = trial("fmnist-tune-dddd4444", {"filters": "16"}, condition="MetricsUnavailable")
    item["status"]["observation"] = {"metrics": [
        {"name": "val_accuracy", "latest": "unavailable", "min": "unavailable",
         "max": "unavailable"}]}
    with KatibStandIn([state("Succeeded", succeeded=1, best=BEST)], [BEST, item]) as standin:
        result = _launcher(standin).run(_settings(tmp_path), _space(), DATA_DIR)
    record = {t.name: t for t in result.trials}["fmnist-tune-dddd4444"]
    assert (record.objective, record.metrics) == (None, {})


# ---------------------------------------------------------------------------------------------
# Trials that never progress (katib/stalls.py), and the step's default deadline

STUCK = "fmnist-tune-e1f2g3h4"
TRAINING = "fmnist-tune-j5k6l7m8"
RESTART = "kubectl rollout restart deployment/katib-controller -n kubeflow"


def _tfjob(name: str, *conditions: str) -> dict:
    """A trial's TFJob as the training operator stores it (conditions cumulative, Running set
    to False once it ends: kubeflow/trainer v1.9.2 pkg/util/status.go lines 100-150)."""
    listed = [{"type": kind, "status": "True", "reason": f"TFJob{kind}", "message": ""}
              for kind in conditions]
    if {"Succeeded", "Failed"} & set(conditions):
        listed = [{**c, "status": "False"} if c["type"] == "Running" else c for c in listed]
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": name, "namespace": "team-a"}, "status": {"conditions": listed}}


class _Timed(io.StringIO):
    """The launcher's output with the fake time each line was written at."""

    def __init__(self, clock):
        super().__init__()
        self.clock = clock
        self.at: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        if text.strip():
            self.at.append((self.clock(), text.strip()))
        return super().write(text)


def _stuck_run(tmp_path, tfjobs: dict, timeout: float, **state_lists):
    time = FakeTime()
    out = _Timed(time)
    with KatibStandIn([state("Created"), state("Running", running=2, **state_lists)],
                      tfjobs=tfjobs) as standin:
        launcher = KatibExperimentLauncher(standin.katib_client(), poll_seconds=POLL,
                                           timeout_seconds=timeout, out=out,
                                           request_timeout_seconds=2, clock=time,
                                           sleep=time.sleep)
        with pytest.raises(TimeoutError) as deadline:
            launcher.run(_settings(tmp_path), _space(), DATA_DIR)
    return standin, out, str(deadline.value)


def test_a_trial_whose_tfjob_ended_unnoticed_is_named_with_the_watch_fix(tmp_path):
    """katib-controller started before the TFJob CRD skips the TFJob watch (kubeflow/katib
    v0.19.0 pkg/controller.v1beta1/trial/trial_controller.go lines 103-127): the trial stays
    Running after its TFJob finished. The launcher says so, with the fix, once the trial has
    been running for the stall window (600 s) and its TFJob has been seen finished for a
    minute; a trial whose TFJob runs is not named. Before this, the step waited silently."""
    tfjobs = {STUCK: _tfjob(STUCK, "Created", "Running", "Succeeded"),
              TRAINING: _tfjob(TRAINING, "Created", "Running")}
    standin, out, message = _stuck_run(tmp_path, tfjobs, 1500,
                                       running_trials=(STUCK, TRAINING))
    found = [(at, line) for at, line in out.at if "is not progressing" in line]
    assert len(found) == 1, out.getvalue()
    at, line = found[0]
    assert line.startswith(f"trial {STUCK} is not progressing: its TFJob team-a/{STUCK} "
                           "succeeded, but Katib still counts the trial as running")
    assert "katib-controller is not watching TFJobs" in line and RESTART in line
    first_listed = 15.0  # the second read lists the trials
    assert first_listed + 600 + 60 <= at < first_listed + 600 + 60 + 2 * POLL
    # The deadline's failure names the stuck trial and the fix; the Experiment is deleted.
    assert f"within the step's 1500 s; trials that never progressed: {STUCK} (" in message
    assert RESTART in message and TRAINING not in message
    assert ("DELETE", EXPERIMENT) in standin.methods()
    assert ("GET", f"/apis/kubeflow.org/v1/namespaces/team-a/tfjobs/{TRAINING}") in \
        standin.methods()  # examined, found training, not named


def test_nothing_is_named_before_the_stall_window(tmp_path):
    tfjobs = {STUCK: _tfjob(STUCK, "Created", "Running", "Failed")}
    standin, out, message = _stuck_run(tmp_path, tfjobs, 600, running_trials=(STUCK,))
    assert "is not progressing" not in out.getvalue()
    assert "never progressed" not in message
    assert not any("/tfjobs/" in path for _, path in standin.methods())


@pytest.mark.parametrize(("tfjobs", "listed", "expected"), [
    ({}, "pending_trials", "pending for 10 min, and its TFJob team-a/{name} was never created: "
                           "katib-controller could not create it. Is Training Operator v1 "
                           "installed (kubectl get crd tfjobs.kubeflow.org)?"),
    ({STUCK: _tfjob(STUCK, "Created")}, "running_trials",
     "running for 10 min, and its TFJob team-a/{name} never started running (Created): its "
     "pods are likely Pending (kubectl describe pods -n team-a -l "
     "training.kubeflow.org/job-name={name} says why"),
    ({STUCK: _tfjob(STUCK, "Created", "Running", "Failed")}, "running_trials",
     "its TFJob team-a/{name} failed, but Katib still counts the trial as running 1 min later. "
     "katib-controller is not watching TFJobs"),
])
def test_each_way_a_trial_stalls_is_named_with_its_likely_cause(tmp_path, tfjobs, listed,
                                                                expected):
    _, out, message = _stuck_run(tmp_path, tfjobs, 1500, **{listed: (STUCK,)})
    lines = [line for line in out.getvalue().splitlines() if "is not progressing" in line]
    assert lines == [f"trial {STUCK} is not progressing: " + lines[0].split(": ", 1)[1]]
    assert expected.format(name=STUCK) in lines[0]
    assert f"trials that never progressed: {STUCK} (" in message


def test_a_tfjob_that_cannot_be_read_is_a_finding_not_a_failure(tmp_path):
    """The TFJob is read for the diagnosis only: a 403 there neither fails the step nor
    leaves it (it waits on, to its deadline)."""
    time = FakeTime()
    with KatibStandIn([state("Running", running=1, running_trials=(STUCK,))]) as standin:
        standin.inject("GET", "tfjobs", *[403] * 200)
        launcher = _launcher(standin, timeout_seconds=1500, clock=time, sleep=time.sleep)
        with pytest.raises(TimeoutError, match=f"never progressed: {STUCK} "):
            launcher.run(_settings(tmp_path), _space(), DATA_DIR)
    out = launcher.out.getvalue()
    assert out.count("is not progressing") == 1
    assert "could not be read (HTTP 403 Forbidden: injected HTTP 403). If it has finished, " \
           "katib-controller is not watching TFJobs" in out


def test_trials_of_a_katib_controller_without_the_tfjob_watch_are_named(tmp_path):
    """Every trial whose TFJob ran to the end while Katib, without the watch, keeps it
    Running is named at the deadline, with the fix."""
    tfjobs = {name: _tfjob(name, "Created", "Running", "Succeeded") for name in (STUCK, TRAINING)}
    _, out, message = _stuck_run(tmp_path, tfjobs, 1500, running_trials=(STUCK, TRAINING))
    printed = out.getvalue()
    assert "Running: 0 succeeded, 2 running" in printed
    stuck = sorted(line.split()[1] for line in printed.splitlines()
                   if "is not progressing" in line)
    assert stuck == sorted((STUCK, TRAINING)), printed
    assert all(RESTART in line for line in printed.splitlines() if "is not progressing" in line)
    assert message.endswith(
        f"; trials that never progressed: {', '.join(stuck)} (their TFJobs finished, "
        "but Katib still counts them as running: katib-controller is most likely not watching "
        f"TFJobs (Training Operator v1 installed after Katib); fix: {RESTART})")


@pytest.mark.parametrize("resource", ["experiments", "trials"])
@pytest.mark.parametrize("status", [401, 403, 410])
def test_an_auth_or_gone_answer_mid_search_leaves_the_experiment(tmp_path, resource, status):
    """A 401/403 (the step's token, its RBAC) or 410 reading the Experiment or listing its
    trials leaves the search running for a retried step to re-attach to (Kubernetes API
    conventions, "HTTP Status codes": kubernetes/community api-conventions.md lines 1514-1530
    and 1562-1566 at 24e7d8f); until the fix the Experiment was deleted."""
    with KatibStandIn(PROGRESS, [FIRST, BEST]) as standin:
        if resource == "experiments":
            original = standin.on_get

            def after_two_reads(handler):
                if sum(m == "GET" for m, _ in standin.methods()) == 3:
                    standin.inject("GET", "experiments", status)
                original(handler)

            standin.on_get = after_two_reads
        else:
            standin.inject("GET", "trials", status)  # listed once the Experiment succeeded
        launcher = _launcher(standin)
        with pytest.raises(TuningError) as failure:
            launcher.run(_settings(tmp_path), _space(), DATA_DIR)
        assert ("team-a", "fmnist-tune") in standin.experiments
    assert not any(m == "DELETE" for m, _ in standin.methods())
    message = str(failure.value)
    assert f"reading Katib Experiment team-a/fmnist-tune was refused (HTTP {status} " in message
    assert message.endswith("The job is left as it is, still running and not deleted, and a "
                            "retry of this step re-attaches to it")


def test_the_tuning_steps_deadline_is_a_trials_time_per_round(monkeypatch):
    """Before, a search without kubernetes.active_deadline_seconds had no deadline at all, so
    trials Katib never saw finish held the run for hours. Now: tuning.trial_minutes (60) per
    round of parallel trials, plus 10 minutes; active_deadline_seconds replaces a trial's
    time; 0 and no active_deadline_seconds: none."""
    from fmnist_kfp.kfp_components.tune.step import experiment_settings
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.settings.tuning import TuningSettings

    def deadline(tuning: dict, **kubernetes) -> float:
        settings, _ = experiment_settings("fmnist-tune", "dropout", TrainingConfig(), tuning)
        settings.kubernetes = KubernetesSettings(image="img:1", namespace="team-a",
                                                 pvc_name="fmnist-pvc", **kubernetes)
        return settings.deadline_seconds()

    assert TuningSettings().trial_minutes == 60
    assert deadline({}) == 6 * 3600 + 600  # 12 trials, 2 at a time: 6 rounds
    assert deadline({"max_trials": 5, "parallel_trials": 2, "trial_minutes": 20}) == \
        3 * 1200 + 600
    assert deadline({}, active_deadline_seconds=900) == 6 * 900 + 600
    assert deadline({"trial_minutes": 0}) == 0.0
    assert deadline({"trial_minutes": 0}, active_deadline_seconds=900) == 6 * 900 + 600
    assert TuningSettings(trial_minutes=-1).problems() == [
        "trial_minutes must be 0 or more, got -1"]


def test_the_tuning_step_gives_its_launcher_that_deadline(synthetic_dataset, tmp_path,
                                                          monkeypatch):
    from fmnist_kfp.kfp_components.tune import step
    from fmnist_kfp.settings.training import TrainingConfig

    made: dict = {}

    class Launcher:
        def __init__(self, **kwargs):
            made.update(kwargs)

        def experiment(self, settings, space, data):
            made["checked"] = settings.name
            return "experiment"

        def run(self, settings, space, data, experiment):
            made["ran"] = settings.name, experiment
            return "result"

    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    monkeypatch.setattr("fmnist_kfp.katib.experiment_launcher.KatibExperimentLauncher", Launcher)
    result = step.tune_step(
        model_type="dropout", base=TrainingConfig(), tuning={"max_trials": 4,
                                                             "parallel_trials": 2},
        data_dir=str(synthetic_dataset), output_dir=str(tmp_path / "out"),
        backend="kubernetes", kubernetes={"namespace": "team-a", "pvc_name": "fmnist-pvc",
                                          "mount_path": str(tmp_path / "volume")},
        image="ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0")
    assert result == "result" and made["timeout_seconds"] == 2 * 3600 + 600
