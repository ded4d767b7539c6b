"""``fmnist-kfp``'s command line: every command and its flags (the pipeline's parameters come
from the settings, :func:`fmnist_kfp.settings.schema.add_flags`). The commands themselves, and
``main``, are in :mod:`fmnist_kfp.cli`, which binds each to its name here."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping

from fmnist_kfp import __version__
from fmnist_kfp.settings.data import DataSettings
from fmnist_kfp.settings.jobs import OPERATORS
from fmnist_kfp.settings.pipeline import PipelineParameters
from fmnist_kfp.settings.schema import add_flags

_DEFAULTS = PipelineParameters()  # this machine's, for the flags that repeat one
LOCAL_ROOT = "runs/local"  # where `run --local` keeps its runs
# What runs a command: its parsed arguments in, the exit code out.
Command = Callable[[argparse.Namespace], int]


def _add_pipeline_parameters(parser: argparse.ArgumentParser, *, local: bool) -> None:
    """The parameters as flags, each with the default it gets when left out: the compiled
    pipeline's on Kubeflow (only the flags given are sent) and, for ``local``, this
    machine's."""
    from fmnist_kfp.settings.pipeline import cluster_defaults

    sent = ("Only the flags given are sent to Kubeflow; the rest keep the compiled pipeline's "
            "defaults.")
    if local:
        add_flags(parser, PipelineParameters, title="pipeline parameters",
                  description=sent + " Where they differ from this machine's, the help shows "
                                     "both: 'default 1 with --local, 2 with --host'.",
                  defaults=[("with --local", PipelineParameters()),
                            ("with --host", cluster_defaults())])
    else:
        add_flags(parser, PipelineParameters, title="pipeline parameters", description=sent,
                  defaults=[("", cluster_defaults())])


def _add_endpoint_options(parser: argparse.ArgumentParser, required: bool) -> None:
    """Where the Kubeflow Pipelines API is, and who asks: every command that talks to it."""
    from fmnist_kfp.kfp_client import TOKEN_ENV

    group = parser.add_argument_group("Kubeflow Pipelines endpoint")
    group.add_argument("--host", required=required, default="",
                       help="KFP API endpoint URL, e.g. https://kubeflow.example.com/pipeline")
    group.add_argument("--namespace", default="", help="user namespace (multi-user Kubeflow)")
    group.add_argument("--token-file", default="",
                       help=f"file holding a bearer token (default: ${TOKEN_ENV})")
    group.add_argument("--kfp-backend-version", default="",
                       help="the KFP backend's version, when its healthz cannot tell (releases "
                            "before 2.16 report 'unknown'); at least 2.14.0 is needed")


def _add_image_options(group) -> None:
    """The images to compile the pipeline for (``compile``, and what sends a pipeline)."""
    from fmnist_kfp.settings.platform import GPU_IMAGE_ENV, IMAGE_ENV, RELEASE_IMAGE

    group.add_argument("--image", default=None,
                       help="the image every step runs in, with a tag or digest (default: "
                            f"${IMAGE_ENV}, else the release image {RELEASE_IMAGE})")
    group.add_argument("--gpu-image", default=None,
                       help="the image of TFJob replicas and Katib trials that request GPUs "
                            f"(default: --image's tag with -gpu appended; without --image, "
                            f"${GPU_IMAGE_ENV}, else the release's)")


def _add_package_options(parser: argparse.ArgumentParser, *, cluster_runs: bool = False
                         ) -> None:
    """What is sent: the pipeline compiled here for the images, or a compiled package."""
    group = parser.add_argument_group(
        "the pipeline sent" + (" (--host)" if cluster_runs else ""),
        "Compiled here, for --image and --gpu-image, unless --package names a file "
        "`fmnist-kfp compile` wrote (its images are fixed).")
    _add_image_options(group)
    group.add_argument("--package", default="",
                       help="a compiled pipeline YAML to send instead (not with --image or "
                            "--gpu-image)")


def _add_experiment_option(parser: argparse.ArgumentParser) -> None:
    from fmnist_kfp.kfp_client import DEFAULT_EXPERIMENT

    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="default %(default)s")


def build_parser(functions: Mapping[str, Command]) -> argparse.ArgumentParser:
    """``fmnist-kfp``'s parser: each command's flags, and the function of ``functions`` (by the
    command's name) that runs it, as ``args.func``."""
    from fmnist_kfp.kfp_client import DEFAULT_EXPERIMENT

    parser = argparse.ArgumentParser(
        prog="fmnist-kfp",
        description="Fashion-MNIST on Kubeflow Pipelines: ingest, distributed TensorFlow "
                    "training of three CNNs, model selection.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the pipeline end to end")
    run.add_argument("--local", action="store_true", help="on this machine with kfp.local")
    _add_endpoint_options(run, required=False)
    _add_package_options(run, cluster_runs=True)
    cluster = run.add_argument_group("runs on Kubeflow (--host)")
    cluster.add_argument("--experiment", default=None,
                         help=f"the run's experiment (default {DEFAULT_EXPERIMENT})")
    cluster.add_argument("--run-name", default=None, help="the run's name")
    cluster.add_argument("--wait", action="store_true", help="wait for the outcome")
    local = run.add_argument_group("runs on this machine (--local)")
    local.add_argument("--pipeline-root", default=None,
                       help=f"where the artifacts and the cache go (default {LOCAL_ROOT})")
    local.add_argument("--summary", default=None,
                       help="where to write summary.json; report.html and report.md go beside "
                            "it (default: in the pipeline root)")
    local.add_argument("--no-cache", action="store_true", help="run every step again")
    local.add_argument("--verbose", action="store_true",
                       help="show every step's output here too (it always goes to the run's "
                            "log file, in <pipeline root>/logs/)")
    _add_pipeline_parameters(run, local=True)
    run.set_defaults(func=functions["run"])

    comp = commands.add_parser("compile", help="compile the pipeline and its components to "
                                               "YAML, for the images given")
    comp.add_argument("--output-dir", default="compiled", help="default %(default)s")
    _add_image_options(comp.add_argument_group("images"))
    comp.set_defaults(func=functions["compile"])

    upl = commands.add_parser("upload", help="upload the pipeline (or a new version of it)")
    _add_endpoint_options(upl, required=True)
    _add_package_options(upl)
    upl.add_argument("--name", default="fashion-mnist-training", help="default %(default)s")
    upl.add_argument("--version", default="", help="version name (default: v<package version>)")
    upl.add_argument("--description", default="", help="pipeline or version description")
    upl.set_defaults(func=functions["upload"])

    sch = commands.add_parser("schedule", help="recurring runs: create, list, disable",
                              description="Recurring runs: `schedule create|list|disable "
                                          "--help` shows each one's flags.")
    sch.set_defaults(func=functions["schedule"])
    actions = sch.add_subparsers(dest="action", required=True, metavar="{create,list,disable}")
    create = actions.add_parser("create", help="create a recurring run of the pipeline")
    _add_endpoint_options(create, required=True)
    _add_package_options(create)
    _add_experiment_option(create)
    create.add_argument("--name", default="fashion-mnist-nightly", help="default %(default)s")
    create.add_argument("--cron", required=True,
                        help="'0 3 * * *' (five fields) or six with seconds")
    create.add_argument("--max-concurrency", type=int, default=1, help="default %(default)s")
    create.add_argument("--catchup", action="store_true", help="run missed schedules (off)")
    _add_pipeline_parameters(create, local=False)
    listing = actions.add_parser("list", help="the recurring runs of an experiment")
    _add_endpoint_options(listing, required=True)
    _add_experiment_option(listing)
    disable = actions.add_parser("disable", help="disable a recurring run")
    _add_endpoint_options(disable, required=True)
    disable.add_argument("--id", required=True, help="the recurring run's ID")

    pre = commands.add_parser("preflight", help="check a cluster before a first run (exit 0: "
                                                "ready)")
    _add_endpoint_options(pre, required=True)
    pre.add_argument("--kubeconfig", default="",
                     help="default: $KUBECONFIG or ~/.kube/config; in a pod without either "
                          "(a Kubeflow notebook), the pod's in-cluster configuration")
    pre.add_argument("--context", default="", help="kubeconfig context (default: current)")
    pre.add_argument("--runner-service-account", default="",
                     help="the steps' ServiceAccount (default: default-editor with --namespace, "
                          "else pipeline-runner in kubeflow)")
    pre.add_argument("--pvc", default="", help="shared claim (default: $FMNIST_PVC_NAME or "
                                               "fmnist-data)")
    pre.add_argument("--credentials-secret", default="",
                     help="compile-time credentials Secret (default: "
                          "$FMNIST_CREDENTIALS_SECRET; none when empty)")
    pre.add_argument("--serving-namespace", default="",
                     help="namespace of the InferenceService (default: the pipeline's)")
    pre.add_argument("--serving-service-account", default="",
                     help="ServiceAccount KServe fetches models with (default fmnist-serving)")
    pre.add_argument("--scheduling", default="", metavar="JSON",
                     help="the run's kubernetes.scheduling, e.g. '{\"queue\": \"team-a\", "
                          "\"priority_class\": \"fmnist-high\", \"gang\": \"volcano\"}': "
                          "also check the Kueue queue, priority classes and gang scheduler it "
                          "needs (docs/scheduling.md)")
    pre.add_argument("--operator", default="auto", choices=OPERATORS,
                     help="the run's kubernetes.operator: check what TFJobs (tfjob) or "
                          "TrainJobs (trainjob) need; auto checks the one the train step "
                          "would pick")
    pre.set_defaults(func=functions["preflight"])

    srv = commands.add_parser("serve", help="serve a model on this machine (foreground)")
    srv.add_argument("--model-dir", default="",
                     help="exported model (default: the latest run's selected model)")
    srv.add_argument("--summary", default="runs/local/summary.json",
                     help="the run summary naming the selected model (default %(default)s)")
    srv.add_argument("--model-name", default=_DEFAULTS.model_name, help="default %(default)s")
    srv.add_argument("--host", default="127.0.0.1", help="default %(default)s")
    srv.add_argument("--port", type=int, default=8080, help="default %(default)s")
    srv.add_argument("server_args", nargs="*",
                     help="more fmnist_kfp.serving.model_server.server flags after --, "
                          "e.g. -- --max_batch_size=64")
    srv.set_defaults(func=functions["serve"])

    dep = commands.add_parser("deployment", help="local deployments made by pipeline runs")
    dep.add_argument("action", choices=("status", "stop"))
    dep.add_argument("--name", default=_DEFAULTS.model_name, help="default %(default)s")
    dep.add_argument("--pipeline-root", default=LOCAL_ROOT,
                     help="the pipeline root of the runs that made it: each root keeps its own "
                          "deployments, in <root>/deployments (default %(default)s)")
    dep.set_defaults(func=functions["deployment"])

    tbd = commands.add_parser("tensorboard",
                              help="TensorBoard over the latest local run's training logs")
    tbd.add_argument("--summary", default="runs/local/summary.json",
                     help="the run summary naming the logs (default %(default)s)")
    tbd.add_argument("--logdir", default="", help="serve this directory instead")
    tbd.add_argument("--host", default="127.0.0.1", help="default %(default)s")
    tbd.add_argument("--port", type=int, default=6006, help="default %(default)s")
    tbd.set_defaults(func=functions["tensorboard"])

    lin = commands.add_parser(
        "lineage", help="which data and run produced a model, and what serves it")
    lin.add_argument("path", nargs="?", default="runs/local",
                     help="a model (or other) artifact, a run directory, or the pipeline root "
                          "(its latest run; default %(default)s)")
    lin.add_argument("--json", action="store_true", help="the chain as JSON")
    lin.add_argument("--verify", action="store_true",
                     help="recompute each artifact's digest; exit 1 if one changed")
    lin.set_defaults(func=functions["lineage"])

    ing = commands.add_parser("ingest", help="ingest Fashion-MNIST into a directory")
    ing.add_argument("--data-source", default="", help="as for run")
    ing.add_argument("--output", required=True, help="dataset directory to write")
    ing.add_argument("--validation-examples", type=int,
                     default=DataSettings().validation_examples,
                     help=DataSettings.specs()["validation_examples"].setting.help
                     + " Default %(default)s.")
    ing.set_defaults(func=functions["ingest"])
    return parser
