"""Client commands against a local HTTP stand-in of the KFP REST API. These tests check what we
send to Kubeflow Pipelines (runs, uploads, recurring runs, the token); no pipeline runs."""

from __future__ import annotations

import json
import re

import pytest

from fmnist_kfp.cli import main as cli_main
from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kfp_client import cron_expression
from tests import ROOT
from tests.standins.kfp import API, KfpStandIn, pipeline_spec_of
from tests.standins.loopback import JsonRequestHandler, LoopbackServer, reply_bytes

PACKAGE = "compiled/fashion_mnist_pipeline.yaml"


def _json(output: str):
    """Our JSON, after the 'Experiment details: <url>' lines kfp.Client prints."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line[:1] in "{[")
    return json.loads("\n".join(lines[start:]))


@pytest.fixture()
def kfp_api(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no context file of the developer's
    monkeypatch.setenv("KF_PIPELINES_TOKEN", "secret-token-123")
    with KfpStandIn() as standin:
        yield standin


def test_run_creates_a_run_in_the_experiment_with_only_the_given_parameters(kfp_api, capsys):
    code = cli_main(["run", "--host", kfp_api.url, "--experiment", "nightly", "--epochs", "3",
                     "--num-workers", "4", "--gpus-per-worker", "1", "--wait"])
    assert code == 0, capsys.readouterr().err
    output = capsys.readouterr().out
    assert _json(output) == {"run_id": "run-1", "experiment": "nightly",
                                  "state": "SUCCEEDED"}
    assert "secret-token-123" not in output
    created = kfp_api.find("POST", f"{API}/experiments")
    assert created[0]["body"]["display_name"] == "nightly"
    run = kfp_api.find("POST", f"{API}/runs")[0]
    assert run["authorization"] == "Bearer secret-token-123"
    assert run["body"]["experiment_id"] == "exp-1"
    assert run["body"]["runtime_config"]["parameters"] == {
        "epochs": 3, "num_workers": 4, "gpus_per_worker": 1, "backend": "kubernetes"}
    spec = run["body"]["pipeline_spec"]
    spec = spec.get("pipeline_spec", spec)  # the pipeline and its platform config
    assert spec["pipelineInfo"]["name"] == "fashion-mnist-training"
    assert kfp_api.find("GET", f"{API}/runs/run-1")  # waited for the outcome


def test_upload_creates_the_pipeline_then_adds_versions(kfp_api, capsys):
    assert cli_main(["upload", "--host", kfp_api.url, "--name", "fmnist"]) == 0
    first = _json(capsys.readouterr().out)
    assert first["created"] is True and first["pipeline_id"] == "pipeline-1"
    assert kfp_api.find("POST", f"{API}/pipelines/upload")[0]["query"]["name"] == "fmnist"

    assert cli_main(["upload", "--host", kfp_api.url, "--name", "fmnist",
                     "--version", "v0.1.1"]) == 0
    second = _json(capsys.readouterr().out)
    assert second == {"pipeline_id": "pipeline-1", "created": False, "version_id": "version-2"}
    version = kfp_api.find("POST", f"{API}/pipelines/upload_version")[0]
    assert version["query"]["name"] == "v0.1.1" and version["query"]["pipelineid"] == "pipeline-1"
    assert b"fashion-mnist-training" in version["raw"]  # the compiled package itself


def _images(spec: dict) -> set[str]:
    return {executor["container"]["image"]
            for executor in spec["deploymentSpec"]["executors"].values()}


def test_run_upload_and_schedule_send_the_pipeline_compiled_for_the_image(kfp_api, capsys,
                                                                          tmp_path, monkeypatch):
    """Without --package the pipeline is compiled here for --image/--gpu-image, whatever the
    working directory holds."""
    import yaml

    monkeypatch.chdir(tmp_path)  # no compiled/ here
    image, gpu = "registry.example/team/fmnist:7.1", "registry.example/team/fmnist:7.1-cuda"
    images = ["--image", image, "--gpu-image", gpu]
    assert cli_main(["run", "--host", kfp_api.url, *images]) == 0, capsys.readouterr().err
    assert cli_main(["upload", "--host", kfp_api.url, *images]) == 0, capsys.readouterr().err
    assert cli_main(["schedule", "create", "--host", kfp_api.url, "--cron", "0 3 * * *",
                     *images]) == 0, capsys.readouterr().err
    run = kfp_api.find("POST", f"{API}/runs")[0]["body"]["pipeline_spec"]
    recurring = kfp_api.find("POST", f"{API}/recurringruns")[0]["body"]["pipeline_spec"]
    uploaded = next(yaml.safe_load_all(
        kfp_api.find("POST", f"{API}/pipelines/upload")[0]["raw"].split(b"\r\n\r\n", 1)[1]
        .rsplit(b"\r\n--", 1)[0]))
    for spec in (run, recurring, uploaded):
        spec = spec.get("pipeline_spec", spec)
        assert _images(spec) == {image}
    assert gpu.encode() in kfp_api.find("POST", f"{API}/pipelines/upload")[0]["raw"]
    assert not list(tmp_path.iterdir())  # the temporary package is gone


def test_a_package_is_sent_as_it_is(kfp_api, capsys):
    import yaml

    committed = ROOT / PACKAGE
    assert cli_main(["run", "--host", kfp_api.url, "--package", str(committed)]) == 0, \
        capsys.readouterr().err
    sent = kfp_api.find("POST", f"{API}/runs")[0]["body"]["pipeline_spec"]
    sent = sent.get("pipeline_spec", sent)
    assert _images(sent) == _images(next(yaml.safe_load_all(committed.read_text())))


@pytest.fixture()
def multi_user_kfp(monkeypatch, tmp_path):
    """Multi-user KFP (Kubeflow 1.11's 2.15.0, 26.03's 2.16.0): a list without a namespace
    shows only shared pipelines (kfp_standin, pipeline_server.go:401-416)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KF_PIPELINES_TOKEN", "secret-token-123")
    with KfpStandIn(multi_user=True) as standin:
        yield standin


def test_a_private_pipeline_uploaded_twice_gets_a_new_version(multi_user_kfp, capsys):
    """With --namespace the pipeline is created private to that namespace; the second upload
    must find it there (a lookup among shared pipelines misses it, and a second create hits
    the unique (Name, Namespace) index: model/pipeline.go:44,54, HTTP 409)."""
    host = ["--host", multi_user_kfp.url, "--namespace", "team-a"]
    assert cli_main(["upload", *host, "--name", "fmnist"]) == 0, capsys.readouterr().err
    first = _json(capsys.readouterr().out)
    assert first["created"] is True
    assert multi_user_kfp.pipelines[first["pipeline_id"]]["namespace"] == "team-a"

    code = cli_main(["upload", *host, "--name", "fmnist", "--version", "v0.1.1"])
    assert code == 0, capsys.readouterr().err
    second = _json(capsys.readouterr().out)
    assert second["created"] is False and second["pipeline_id"] == first["pipeline_id"]
    version = multi_user_kfp.find("POST", f"{API}/pipelines/upload_version")[0]
    assert version["query"] == {"name": "v0.1.1", "pipelineid": first["pipeline_id"]}
    assert len(multi_user_kfp.find("POST", f"{API}/pipelines/upload")) == 1
    lookups = multi_user_kfp.find("GET", f"{API}/pipelines")
    assert lookups[0]["query"]["namespace"] == "team-a"  # private ones first


def test_a_shared_pipeline_gets_the_new_version_when_the_namespace_has_none(multi_user_kfp,
                                                                            capsys):
    """A pipeline uploaded without a namespace is shared; an upload with --namespace finds it
    when the namespace has no private pipeline of that name, as before."""
    assert cli_main(["upload", "--host", multi_user_kfp.url, "--name", "fmnist"]) == 0
    shared = _json(capsys.readouterr().out)
    assert multi_user_kfp.pipelines[shared["pipeline_id"]]["namespace"] == ""
    assert cli_main(["upload", "--host", multi_user_kfp.url, "--namespace", "team-a",
                     "--name", "fmnist", "--version", "v2"]) == 0
    second = _json(capsys.readouterr().out)
    assert second["created"] is False and second["pipeline_id"] == shared["pipeline_id"]


def test_an_existing_version_name_is_a_clear_error(kfp_api, capsys):
    """Version names are unique per pipeline (model/pipeline_version.go:37,46): a third upload
    with the default version name is refused with HTTP 409, and the message says what to pass."""
    args = ["upload", "--host", kfp_api.url, "--name", "fmnist", "--version", "v1"]
    assert cli_main(args) == 0 and cli_main(args) == 0
    capsys.readouterr()
    assert cli_main(args) == 2
    err = capsys.readouterr().err
    assert "version 'v1' of pipeline 'fmnist' already exists" in err and "--version" in err


def test_the_standin_scopes_pipelines_by_namespace_as_multi_user_kfp_does(multi_user_kfp):
    client = _client(multi_user_kfp)
    private = client.upload_pipeline(str(ROOT / PACKAGE), pipeline_name="p", namespace="team-a")
    assert client.get_pipeline_id("p") is None  # shared only
    found = client.list_pipelines(namespace="team-a", filter=json.dumps({"predicates": [
        {"operation": "EQUALS", "key": "display_name", "stringValue": "p"}]}))
    assert [p.pipeline_id for p in found.pipelines] == [private.pipeline_id]
    from kfp_server_api.exceptions import ApiException

    with pytest.raises(ApiException) as error:
        client.upload_pipeline(str(ROOT / PACKAGE), pipeline_name="p", namespace="team-a")
    assert error.value.status == 409
    client.upload_pipeline(str(ROOT / PACKAGE), pipeline_name="p")  # shared: another namespace


def test_schedule_creates_lists_and_disables_a_recurring_run(kfp_api, capsys):
    assert cli_main(["schedule", "create", "--host", kfp_api.url, "--cron", "0 3 * * *",
                     "--max-concurrency", "2", "--epochs", "8"]) == 0
    created = _json(capsys.readouterr().out)
    assert created == {"recurring_run_id": "recurring-1", "cron": "0 0 3 * * *"}
    body = kfp_api.find("POST", f"{API}/recurringruns")[0]["body"]
    assert body["trigger"]["cron_schedule"]["cron"] == "0 0 3 * * *"
    assert body["max_concurrency"] == "2" or body["max_concurrency"] == 2
    assert body["no_catchup"] is True  # catch-up is off unless asked for
    assert body["runtime_config"]["parameters"]["epochs"] == 8

    assert cli_main(["schedule", "list", "--host", kfp_api.url]) == 0
    listed = _json(capsys.readouterr().out)
    assert listed[0]["id"] == "recurring-1" and listed[0]["cron"] == "0 0 3 * * *"

    assert cli_main(["schedule", "disable", "--host", kfp_api.url, "--id", "recurring-1"]) == 0
    assert kfp_api.find("POST", f"{API}/recurringruns/recurring-1:disable")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["run", "--host", "kubeflow.example.com"], "is not a URL"),
        (["schedule", "create", "--host", "http://127.0.0.1:9", "--cron", "every day"],
         "cron 'every day' is malformed"),
        (["run", "--host", "http://127.0.0.1:9", "--num-workers", "0", "--gpus-per-worker", "1"],
         "GPUs were asked for, but no worker would use them"),
        (["run", "--host", "http://127.0.0.1:9", "--kubernetes", '{"namespce": "a"}'],
         "unknown kubernetes settings ['namespce']"),
    ],
)
def test_bad_input_fails_before_any_request(arguments, message, capsys):
    assert cli_main(arguments) == 2
    assert message in capsys.readouterr().err


def test_cron_accepts_five_or_six_fields():
    assert cron_expression("*/15 * * * *") == "0 */15 * * * *"
    assert cron_expression("0 0 9 ? * 2-6") == "0 0 9 ? * 2-6"
    with pytest.raises(UserInputError):
        cron_expression("0 3 * *")


# --- The Python API: the examples of docs/python-api.md and the README, run against the stand-in

README_HOST = "https://kubeflow.example.com/pipeline"


def _python_api_examples() -> list[str]:
    """The ```python blocks of docs/python-api.md before its first section, in order."""
    page = (ROOT / "docs" / "python-api.md").read_text()
    assert page.startswith("# Python API\n")
    section = page.split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


EXAMPLE_IMAGE = "registry.example.com/ml/fmnist-kfp:0.2.0"


def test_the_python_api_examples_compile_for_the_users_image():
    examples = "\n".join(_python_api_examples())
    assert len(_python_api_examples()) == 4
    assert f'compile_pipeline("fashion-mnist.yaml", image="{EXAMPLE_IMAGE}")' in examples


def test_the_python_api_examples_run_against_the_kfp_api(kfp_api, tmp_path, monkeypatch):
    """Each example of docs/python-api.md runs as written (the host swapped for the
    stand-in, the release's YAML in the working directory), and the stand-in accepts each
    request as the API server would: a run from the pipeline function, a run from the released
    package, a recurring run, each sending only the given parameters, typed as declared. The
    example that shows a refusal raises with the problems it shows."""
    from fmnist_kfp import __version__
    from fmnist_kfp.errors import UserInputError

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FMNIST_COMPONENT_IMAGE", raising=False)
    namespace: dict = {}
    for example in _python_api_examples():
        code = example.replace(README_HOST, kfp_api.url)
        shown = re.findall(r"^#   - (.*)$", example, re.MULTILINE)
        if "# fmnist_kfp.errors.UserInputError" in example:
            with pytest.raises(UserInputError) as refused:
                exec(code, namespace)  # noqa: S102 - the page's own example
            problems = str(refused.value).split("\n  - ")[1:]
            assert len(problems) == len(shown)
            assert all(p.startswith(s) for p, s in zip(problems, shown, strict=True))
        else:
            exec(code, namespace)  # noqa: S102
    assert not [c for c in kfp_api.calls if "rejected" in c], [
        c["rejected"] for c in kfp_api.calls if "rejected" in c]

    from_func, from_package = (c["body"] for c in kfp_api.find("POST", f"{API}/runs"))
    assert from_func["display_name"] == "fashion-mnist-12-epochs"
    assert from_func["runtime_config"]["parameters"] == {
        "epochs": 12, "num_workers": 4, "gpus_per_worker": 1}
    assert from_package["runtime_config"]["parameters"] == {
        "model_types": ["batchnorm"], "epochs": 20, "tune": True,
        "tuning": {"algorithm": "tpe", "max_trials": 12}}
    for body in (from_func, from_package):
        spec = body["pipeline_spec"]["pipeline_spec"]  # with the platform (PVC, Secret) config
        assert spec["pipelineInfo"]["name"] == "fashion-mnist-training"
        assert spec["pipelineInfo"]["displayName"] == f"fashion-mnist-training {__version__}"
        assert body["experiment_id"] == "exp-1"
    images = {e["container"]["image"] for e in from_package["pipeline_spec"]["pipeline_spec"][
        "deploymentSpec"]["executors"].values()}
    assert images == {EXAMPLE_IMAGE}
    # The profile namespace of the client reaches the experiment the runs go into (multi-user
    # KFP scopes experiments, and through them runs, by namespace).
    assert {c["body"].get("namespace") for c in kfp_api.find("POST", f"{API}/experiments")} \
        == {"team-a"}
    [recurring] = [c["body"] for c in kfp_api.find("POST", f"{API}/recurringruns")]
    assert recurring["display_name"] == "fashion-mnist-nightly"
    assert recurring["trigger"]["cron_schedule"]["cron"] == "0 0 3 * * *"
    assert recurring["mode"] == "ENABLE" and recurring["no_catchup"] is True
    assert int(recurring["max_concurrency"]) == 1
    assert recurring["runtime_config"]["parameters"] == {"epochs": 12}
    assert namespace["schedule"].recurring_run_id == "recurring-1"


def test_the_front_pages_python_example_runs_as_written(kfp_api, tmp_path, monkeypatch):
    """The README's "From Python" example, unchanged: ``kfp.Client()`` takes its host from
    ``KF_PIPELINES_ENDPOINT`` (kfp/client/client.py; inside the cluster it is unset and the
    client uses the in-cluster address and token), and the run carries only the given
    argument."""
    from fmnist_kfp import __version__

    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n### From Python\n", 1)[1].split("\n### ", 1)[0]
    [example] = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    image = f"registry.example.com/ml/fmnist-kfp:{__version__}"
    assert f'image="{image}"' in example
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KF_PIPELINES_ENDPOINT", kfp_api.url)
    exec(example, {})  # noqa: S102 - the README's own example
    [run] = [c["body"] for c in kfp_api.find("POST", f"{API}/runs")]
    assert run["runtime_config"]["parameters"] == {"epochs": 12}
    spec = pipeline_spec_of(run["pipeline_spec"])
    assert {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()} == {
        image}
    assert not [c for c in kfp_api.calls if "rejected" in c]


def _client(kfp_api):
    import kfp

    return kfp.Client(host=kfp_api.url)


@pytest.mark.parametrize(("arguments", "message"), [
    ({"epochs": "12"}, "input parameter epochs requires type NUMBER_INTEGER"),
    ({"tune": "yes"}, "input parameter tune requires type BOOLEAN"),
    ({"model_types": "basic"}, "input parameter model_types requires type LIST"),
    ({"epoch": 12}, "parameter(s) provided are not required by pipeline: epoch"),
])
def test_the_standin_rejects_arguments_the_api_server_rejects(kfp_api, arguments, message):
    """Why cluster_arguments types and names the values: the API server refuses a run whose
    parameters are not the pipeline's inputs of the declared types (v2_template.go)."""
    from kfp_server_api.exceptions import ApiException

    with pytest.raises(ApiException) as refused:
        _client(kfp_api).create_run_from_pipeline_package(
            str(ROOT / PACKAGE), arguments=arguments, experiment_name="fashion-mnist")
    assert refused.value.status == 400 and message in refused.value.body


@pytest.mark.parametrize(("overrides", "message"), [
    ({"max_concurrency": 11}, "Max concurrency of a recurring run must be at least 1"),
    ({"cron_expression": "0 3 * *"}, "Schedule cron is not a supported format"),
    ({"job_name": ""}, "The name is empty"),
    ({"enabled": False}, "would be created disabled"),
])
def test_the_standin_rejects_recurring_runs_the_api_server_rejects(kfp_api, overrides,
                                                                    message):
    from kfp_server_api.exceptions import ApiException

    client = _client(kfp_api)
    experiment = client.create_experiment("fashion-mnist")
    request = dict(experiment_id=experiment.experiment_id, job_name="nightly",
                   cron_expression="0 0 3 * * *", max_concurrency=1,
                   pipeline_package_path=str(ROOT / PACKAGE), params={"epochs": 3})
    with pytest.raises(ApiException) as refused:
        client.create_recurring_run(**{**request, **overrides})
    assert refused.value.status == 400 and message in refused.value.body


def test_a_run_of_an_uploaded_version_is_checked_against_that_version(kfp_api):
    """The stand-in keeps what was uploaded, so a run by pipeline and version id is checked
    against that spec's inputs like one that carries its spec."""
    from kfp_server_api.exceptions import ApiException

    client = _client(kfp_api)
    pipeline = client.upload_pipeline(str(ROOT / PACKAGE), pipeline_name="fmnist")
    [version] = client.list_pipeline_versions(pipeline.pipeline_id).pipeline_versions
    experiment = client.create_experiment("fashion-mnist")
    arguments = dict(experiment_id=experiment.experiment_id, job_name="by-version",
                     pipeline_id=pipeline.pipeline_id,
                     version_id=version.pipeline_version_id)
    client.run_pipeline(**arguments, params={"epochs": 3})
    with pytest.raises(ApiException, match="not required by pipeline: epoch"):
        client.run_pipeline(**arguments, params={"epoch": 3})


# -- the KFP backend's version ------------------------------------------------------------------
# kubeflow/pipelines: dsl.Collected resolves from 2.14.0 (commit ed828b5, #11725); healthz
# answers commit_sha, tag_name, multi_user on both paths (2.4.1 main.go L224-234, 2.5.0
# L271-281) and pipeline_store from 2.14.0 (commit ea20731060); released images report
# tag_name "unknown" before 2.16 (fixed by 94841d6c85); through ml-pipeline-ui the fields are
# apiServerTagName and pipelineStore (2.15.0 frontend/server/handlers/healthz.ts L20-29).
HEALTHZ_2_5 = {"commit_sha": "unknown", "tag_name": "unknown", "multi_user": True}
HEALTHZ_2_16 = {"commit_sha": "abc", "tag_name": "2.16.0", "multi_user": True,
                "pipeline_store": "database"}
UI_HEALTHZ_2_15 = {"apiServerCommitHash": "unknown", "apiServerTagName": "unknown",
                   "apiServerMultiUser": True, "multi_user": True, "apiServerReady": True,
                   "buildDate": "", "frontendCommitHash": "", "frontendTagName": "",
                   "pipelineStore": "database"}


def _writes(standin) -> list[dict]:
    return [call for call in standin.calls if call["method"] == "POST"]


@pytest.mark.parametrize("command", [
    ["upload"], ["run", "--wait"], ["schedule", "create", "--cron", "0 3 * * *"]])
def test_a_backend_older_than_2_14_is_refused_before_any_write(command, capsys, monkeypatch,
                                                               tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    with KfpStandIn(healthz=HEALTHZ_2_5) as standin:
        code = cli_main([*command, "--host", standin.url])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "needs KFP 2.14.0 or newer" in err and "Kubeflow 1.10" in err
        assert "--kfp-backend-version" in err
        assert not _writes(standin)
        healthz = [call for call in standin.calls if call["path"].endswith("/healthz")]
        assert healthz and healthz[0]["path"] == f"{API}/healthz"


@pytest.mark.parametrize("healthz", [HEALTHZ_2_16, UI_HEALTHZ_2_15],
                         ids=["tag 2.16.0", "ml-pipeline-ui shape, unknown tag, pipelineStore"])
def test_a_supported_backend_is_accepted(healthz, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    with KfpStandIn(healthz=healthz) as standin:
        assert cli_main(["upload", "--host", standin.url]) == 0, capsys.readouterr().err
        assert standin.find("POST", f"{API}/pipelines/upload")


def test_an_explicit_old_tag_is_refused_and_the_override_is_honoured(capsys, monkeypatch,
                                                                      tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    with KfpStandIn(healthz={**HEALTHZ_2_16, "tag_name": "2.5.0"}) as standin:
        assert cli_main(["upload", "--host", standin.url]) == 2
        assert "is 2.5.0" in capsys.readouterr().err
    with KfpStandIn(healthz=HEALTHZ_2_5) as standin:
        assert cli_main(["upload", "--host", standin.url, "--kfp-backend-version", "2.15.0"]) == 0
        assert standin.find("POST", f"{API}/pipelines/upload")
        assert cli_main(["upload", "--host", standin.url, "--kfp-backend-version", "2.5.0"]) == 2
        assert "is 2.5.0" in capsys.readouterr().err


class LoginPage(LoopbackServer):
    """What a Kubeflow behind Dex answers a client without a session: an HTML login page."""

    def __init__(self):
        class Handler(JsonRequestHandler):
            def do_GET(self):
                reply_bytes(self, b"<html><body>Log in to Kubeflow</body></html>",
                            content_type="text/html")

        self._serve(Handler)


def test_a_healthz_that_is_not_json_says_what_to_check(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    with LoginPage() as page:
        assert cli_main(["upload", "--host", page.url]) == 2
        err = capsys.readouterr().err
        assert "cannot read the Kubeflow Pipelines backend's version" in err
        assert "text/html" in err and "--kfp-backend-version" in err
        # Naming the version does not get past a login page.
        assert cli_main(["upload", "--host", page.url, "--kfp-backend-version", "2.15.0"]) == 2
        err = capsys.readouterr().err
        assert "is not the Kubeflow Pipelines API's healthz" in err and "Traceback" not in err
