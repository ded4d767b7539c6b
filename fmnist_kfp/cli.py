"""``fmnist-kfp``: run the Fashion-MNIST pipeline locally, compile it, ingest data."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import warnings

from fmnist_kfp import __version__
from fmnist_kfp.errors import FmnistError, UserInputError
from fmnist_kfp.extras import require
from fmnist_kfp.settings.data import DataSettings
from fmnist_kfp.settings.jobs import OPERATORS
from fmnist_kfp.settings.pipeline import PipelineParameters
from fmnist_kfp.settings.platform import use_tensorflow_env
from fmnist_kfp.settings.schema import add_flags, given_values
from fmnist_kfp.settings.serving import DeploySettings

_D = PipelineParameters()
LOCAL_ROOT = "runs/local"  # where `run --local` keeps its runs


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


def _check_listen(host: str, port: int) -> None:
    """Fails with the fix, before anything heavy is imported, when this machine cannot listen
    on ``host:port``: not a port, a host name that is not this machine's, a port in use."""
    if not 0 <= port <= 65535:
        raise UserInputError(f"--port {port} is not a TCP port; give one from 1 to 65535 (or "
                             "0: any free port)")
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as error:
        raise UserInputError(f"--host {host!r} does not resolve ({error}); give an address of "
                             "this machine, e.g. 127.0.0.1 or 0.0.0.0") from None
    with socket.socket(family, kind) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            raise UserInputError(f"cannot listen on {host}:{port}: {error.strerror or error}; "
                                 "pick another --port (or --host), or stop what uses it") from None


def _parameters(args: argparse.Namespace, **overrides) -> PipelineParameters:
    """The pipeline parameters: what was given on the command line over the defaults."""
    return PipelineParameters(**{**given_values(args, PipelineParameters), **overrides})


def _endpoint(args: argparse.Namespace):
    from fmnist_kfp.kfp_client import Endpoint

    return Endpoint(host=args.host, namespace=args.namespace, token_file=args.token_file,
                    backend_version=args.kfp_backend_version).validate()


def _cluster_arguments(args: argparse.Namespace) -> dict:
    """The parameters given on the command line (the rest keep the compiled defaults), with
    the backend stated, checked over the compiled Kubeflow defaults as the Python API checks
    them."""
    from fmnist_kfp.pipelines.arguments import cluster_arguments

    given = given_values(args, PipelineParameters)
    given.setdefault("backend", "kubernetes")
    return cluster_arguments(**given)


def _refuse(args: argparse.Namespace, why: str, *names: str) -> None:
    """Refuses the flags among ``names`` that were given (not None, empty or false)."""
    given = ["--" + name.replace("_", "-") for name in names if getattr(args, name)]
    if given:
        raise UserInputError(f"{', '.join(given)}: {why}")


def cmd_run(args: argparse.Namespace) -> int:
    if args.local == bool(args.host):
        raise UserInputError("say where to run: --local (this machine) or --host URL (Kubeflow)")
    if args.host:
        from fmnist_kfp.kfp_client import DEFAULT_EXPERIMENT, submit_run

        _refuse(args, "only for runs on this machine (--local); a run on Kubeflow keeps its "
                      "artifacts in the pipeline root of its KFP deployment", "pipeline_root",
                "summary", "no_cache", "verbose")
        outcome = submit_run(_endpoint(args), _cluster_arguments(args), package=args.package,
                             image=args.image, gpu_image=args.gpu_image,
                             experiment=args.experiment or DEFAULT_EXPERIMENT,
                             run_name=args.run_name, wait=args.wait)
        print(json.dumps(outcome, indent=2))
        return 0
    _refuse(args, "only for runs on Kubeflow (--host); --local runs every step on this "
                  "machine", "package", "image", "gpu_image", "experiment", "run_name", "wait")
    if args.backend not in (None, "local"):
        raise UserInputError("--local runs use the local backend; use --host for a cluster")
    require("all", "fmnist-kfp run --local")  # every step runs here: ingest to serving
    from fmnist_kfp.local_run import run_local

    summary = run_local(
        _parameters(args, backend="local"),
        pipeline_root=args.pipeline_root or LOCAL_ROOT,
        summary_path=args.summary,
        enable_caching=not args.no_cache,
        verbose=args.verbose,
    )
    cached = ", ".join(summary["cache_hits"]) or "none"
    print(
        "\n".join([
            "",
            f"Best model: {summary['best_model_type']} — test accuracy "
            f"{summary['best_test_accuracy']:.4f} (chosen on validation accuracy "
            f"{summary['best_validation_accuracy']:.4f})",
            *(f"  {name:10s} validation accuracy {m['validation_accuracy']:.4f}, trained in "
              f"{m['train_seconds']:.0f} s" for name, m in summary["models"].items()),
            f"Model:   {summary['best_model_path']}",
            f"Report:  {summary['report_path']}",
            f"         {summary['report_markdown_path']}",
            *(f"Tuning:  {path}" for path in summary.get("tuning_reports", {}).values()),
            _serving_line(summary["deployment"]),
            _batch_line(summary["batch_prediction"]),
            f"Summary: {summary['summary_path']}",
            f"Log:     {summary['log_path']}",
            f"Took {summary['total_seconds']:.1f} s; steps from cache: {cached}",
        ])
    )
    return 0


def cmd_upload(args: argparse.Namespace) -> int:
    from fmnist_kfp.kfp_client import upload

    outcome = upload(_endpoint(args), args.name, version=args.version or f"v{__version__}",
                     package=args.package, image=args.image, gpu_image=args.gpu_image,
                     description=args.description)
    print(json.dumps(outcome, indent=2))
    return 0


def cmd_preflight(args: argparse.Namespace) -> int:
    """Checks the cluster before a first run; exit 0 when ready, 1 when something is missing."""
    from fmnist_kfp import preflight

    endpoint = _endpoint(args)
    api_client, source = preflight.kubernetes_api(args.kubeconfig, args.context)
    print(f"Kubernetes API server {api_client.configuration.host} ({source})")
    rows = preflight.preflight(endpoint, api_client, preflight.cluster_from(args))
    print(preflight.render(rows))
    if preflight.ready(rows):
        return 0
    missing = [row for row in rows if row.ok is False]
    print(f"error: not ready, {len(missing)} missing (each with its fix above); first "
          f"{missing[0].check}: {missing[0].found}", file=sys.stderr)
    return 1


def cmd_schedule(args: argparse.Namespace) -> int:
    from fmnist_kfp import kfp_client as cluster

    endpoint = _endpoint(args)
    if args.action == "create":
        cluster.cron_expression(args.cron)  # a malformed cron fails before any call
        outcome = cluster.schedule(
            endpoint, args.name, args.cron, _cluster_arguments(args), package=args.package,
            image=args.image, gpu_image=args.gpu_image, experiment=args.experiment,
            max_concurrency=args.max_concurrency, catchup=args.catchup,
        )
    elif args.action == "list":
        outcome = cluster.list_schedules(endpoint, args.experiment)
    else:
        cluster.disable_schedule(endpoint, args.id)
        outcome = {"disabled": args.id}
    print(json.dumps(outcome, indent=2))
    return 0


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


def cmd_compile(args: argparse.Namespace) -> int:
    from fmnist_kfp.validation import writable_directory

    writable_directory(args.output_dir, "--output-dir")
    from fmnist_kfp.pipelines.compile import compile_all

    try:
        written = compile_all(args.output_dir, image=args.image, gpu_image=args.gpu_image)
    except OSError as error:
        raise UserInputError(f"cannot write the compiled files into {args.output_dir!r}: "
                             f"{error}") from None
    for path in written:
        print(f"wrote {path}")
    return 0


def _check_ingest(args: argparse.Namespace) -> None:
    """A local data directory and the output, checked before TensorFlow is imported (half a
    minute)."""
    from fmnist_kfp.dataset.sources import resolve_source
    from fmnist_kfp.kfp_components.ingest.checks import data_problems
    from fmnist_kfp.validation import writable_directory

    problems = data_problems(resolve_source(args.data_source))
    if problems:
        raise UserInputError("; ".join(problems))
    writable_directory(args.output, "--output")


def cmd_ingest(args: argparse.Namespace) -> int:
    require("training", "fmnist-kfp ingest")
    from fmnist_kfp.dataset.ingest import ingest

    _check_ingest(args)
    metadata = ingest(args.data_source, args.output,
                      validation_examples=args.validation_examples)
    print(json.dumps({k: metadata[k] for k in ("source", "verification", "sha256")}, indent=2))
    return 0


def _serving_line(deployment: dict) -> str:
    blessing = deployment.get("blessing") or {}
    return (f"Serving: {deployment['url']} ({deployment['action']}: {blessing.get('reason')}); "
            f"served accuracy {deployment['served_accuracy']:.4f} over HTTP\n"
            f"         stop it with: fmnist-kfp deployment stop --name {deployment['model_name']}")


def _batch_line(batch: dict) -> str:
    accuracy = f", accuracy {batch['accuracy']:.4f}" if batch.get("accuracy") is not None else ""
    return (f"Batch:   {batch['rows']:,} rows scored ({batch['errors']} error rows){accuracy}, "
            f"{batch['images_per_second']:.0f} images/s: {batch['path']}")


def _latest_model_dir(summary_path: str) -> str:
    try:
        with open(summary_path) as handle:
            return json.load(handle)["best_model_path"]
    except (OSError, KeyError, json.JSONDecodeError):
        raise UserInputError(
            f"no selected model: {summary_path} is missing or has no best_model_path; run the "
            "pipeline first (make run) or pass --model-dir"
        ) from None


def cmd_serve(args: argparse.Namespace) -> int:
    """Serves a model in the foreground with KServe's ModelServer (Ctrl-C stops it)."""
    require("serving", "fmnist-kfp serve")
    from fmnist_kfp.serving.model_server.server import main as serve_main

    model_dir = args.model_dir or _latest_model_dir(args.summary)
    # Checked before the server imports TensorFlow and loads the model.
    if "://" not in model_dir and not os.path.isdir(model_dir):
        raise UserInputError(f"model directory {model_dir!r} does not exist; pass --model-dir "
                             "(a directory the training step exported) or run the pipeline "
                             "first (make run)")
    _check_listen(args.host, args.port)
    print(f"serving {model_dir} as {args.model_name} on http://{args.host}:{args.port}")
    try:
        serve_main([f"--model_dir={model_dir}", f"--model_name={args.model_name}",
                    f"--host={args.host}", f"--http_port={args.port}", *args.server_args])
    except FileNotFoundError as error:  # no SavedModel there: the message says what to pass
        raise UserInputError(str(error)) from None
    return 0


def cmd_deployment(args: argparse.Namespace) -> int:
    """Local deployments started by pipeline runs: where they are, and stopping them."""
    require("serving", "fmnist-kfp deployment")
    from fmnist_kfp.serving.deploy.local_deployer import running_server, stop_server

    DeploySettings(model_name=args.name).validate()  # a name, never a path
    if args.action == "stop":
        stopped = stop_server(args.name)
        print(f"stopped {args.name}" if stopped else f"no local deployment called {args.name}")
        return 0
    server = running_server(args.name)
    if server is None:
        print(f"no local deployment called {args.name} is running")
        return 1
    print(json.dumps({"name": server.name, "url": server.url, "pid": server.pid,
                      "test_accuracy": server.test_accuracy, "log": server.log_file}, indent=2))
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    """The chain from a model (or a run's served model) back to the dataset."""
    from fmnist_kfp.lineage_report import chain, format_chain, resolve, verify

    index, start = resolve(args.path)
    nodes = chain(index, start)
    print(json.dumps(nodes, indent=2) if args.json else format_chain(nodes))
    if args.verify:
        changed = verify(nodes)
        for uri in changed:
            print(f"changed since it was recorded: {uri}", file=sys.stderr)
        return 1 if changed else 0
    return 0


def _tensorboard_logs(summary_path: str) -> dict[str, str]:
    try:
        with open(summary_path) as handle:
            logs = json.load(handle).get("tensorboard") or {}
    except (OSError, json.JSONDecodeError, AttributeError):
        logs = {}
    if not logs:
        raise UserInputError(
            f"no TensorBoard logs: {summary_path} is missing or names none; run the pipeline "
            "first (make run) or pass --logdir")
    gone = [path for path in logs.values() if "://" not in path and not os.path.isdir(path)]
    if gone:
        raise UserInputError(f"the TensorBoard logs {summary_path} names are gone "
                             f"({', '.join(gone)}); run the pipeline again or pass --logdir")
    return logs


def cmd_tensorboard(args: argparse.Namespace) -> int:
    """TensorBoard on 127.0.0.1 over the latest local run's training logs (foreground)."""
    require("training", "fmnist-kfp tensorboard")
    if args.logdir:
        if "://" not in args.logdir and not os.path.isdir(args.logdir):
            raise UserInputError(f"--logdir {args.logdir!r} does not exist; pass a directory "
                                 "of TensorBoard event files")
        spec = ["--logdir", args.logdir]
    else:
        logs = _tensorboard_logs(args.summary)
        spec = ["--logdir_spec", ",".join(f"{name}:{path}" for name, path in logs.items())]
    _check_listen(args.host, args.port)
    from tensorboard import program

    from fmnist_kfp.training.quiet_start import import_tensorflow_quietly

    import_tensorflow_quietly()  # TensorBoard imports it: without its lines about a missing GPU

    board = program.TensorBoard()
    board.configure(argv=["tensorboard", *spec, "--host", args.host, "--port", str(args.port)])
    print(f"TensorBoard on http://{args.host}:{args.port}/ over {' '.join(spec[1:])}",
          flush=True)
    return 0 if board.main() == 0 else 1  # it printed why


def build_parser() -> argparse.ArgumentParser:
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
    run.set_defaults(func=cmd_run)

    comp = commands.add_parser("compile", help="compile the pipeline and its components to "
                                               "YAML, for the images given")
    comp.add_argument("--output-dir", default="compiled", help="default %(default)s")
    _add_image_options(comp.add_argument_group("images"))
    comp.set_defaults(func=cmd_compile)

    upl = commands.add_parser("upload", help="upload the pipeline (or a new version of it)")
    _add_endpoint_options(upl, required=True)
    _add_package_options(upl)
    upl.add_argument("--name", default="fashion-mnist-training", help="default %(default)s")
    upl.add_argument("--version", default="", help="version name (default: v<package version>)")
    upl.add_argument("--description", default="", help="pipeline or version description")
    upl.set_defaults(func=cmd_upload)

    sch = commands.add_parser("schedule", help="recurring runs: create, list, disable",
                              description="Recurring runs: `schedule create|list|disable "
                                          "--help` shows each one's flags.")
    sch.set_defaults(func=cmd_schedule)
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
    pre.set_defaults(func=cmd_preflight)

    srv = commands.add_parser("serve", help="serve a model on this machine (foreground)")
    srv.add_argument("--model-dir", default="",
                     help="exported model (default: the latest run's selected model)")
    srv.add_argument("--summary", default="runs/local/summary.json",
                     help="the run summary naming the selected model (default %(default)s)")
    srv.add_argument("--model-name", default=_D.model_name, help="default %(default)s")
    srv.add_argument("--host", default="127.0.0.1", help="default %(default)s")
    srv.add_argument("--port", type=int, default=8080, help="default %(default)s")
    srv.add_argument("server_args", nargs="*",
                     help="more fmnist_kfp.serving.model_server.server flags after --, "
                          "e.g. -- --max_batch_size=64")
    srv.set_defaults(func=cmd_serve)

    dep = commands.add_parser("deployment", help="local deployments made by pipeline runs")
    dep.add_argument("action", choices=("status", "stop"))
    dep.add_argument("--name", default=_D.model_name, help="default %(default)s")
    dep.set_defaults(func=cmd_deployment)

    tbd = commands.add_parser("tensorboard",
                              help="TensorBoard over the latest local run's training logs")
    tbd.add_argument("--summary", default="runs/local/summary.json",
                     help="the run summary naming the logs (default %(default)s)")
    tbd.add_argument("--logdir", default="", help="serve this directory instead")
    tbd.add_argument("--host", default="127.0.0.1", help="default %(default)s")
    tbd.add_argument("--port", type=int, default=6006, help="default %(default)s")
    tbd.set_defaults(func=cmd_tensorboard)

    lin = commands.add_parser(
        "lineage", help="which data and run produced a model, and what serves it")
    lin.add_argument("path", nargs="?", default="runs/local",
                     help="a model (or other) artifact, a run directory, or the pipeline root "
                          "(its latest run; default %(default)s)")
    lin.add_argument("--json", action="store_true", help="the chain as JSON")
    lin.add_argument("--verify", action="store_true",
                     help="recompute each artifact's digest; exit 1 if one changed")
    lin.set_defaults(func=cmd_lineage)

    ing = commands.add_parser("ingest", help="ingest Fashion-MNIST into a directory")
    ing.add_argument("--data-source", default="", help="as for run")
    ing.add_argument("--output", required=True, help="dataset directory to write")
    ing.add_argument("--validation-examples", type=int,
                     default=DataSettings().validation_examples,
                     help=DataSettings.specs()["validation_examples"].setting.help
                     + " Default %(default)s.")
    ing.set_defaults(func=cmd_ingest)
    return parser


def _our_warnings_as_lines(show):
    """``warnings.showwarning`` that shows our warnings (fmnist_kfp's categories) as
    ``warning: <message>``, as errors are shown, and others as ``show`` does."""
    def show_warning(message, category, filename, lineno, file=None, line=None):
        if category.__module__.split(".")[0] == "fmnist_kfp":
            print(f"warning: {message}", file=file or sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)
    return show_warning


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    use_tensorflow_env()  # for the steps, trainers and servers it starts, before any imports TF
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    with warnings.catch_warnings():
        warnings.showwarning = _our_warnings_as_lines(warnings.showwarning)
        return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:
    try:
        return args.func(args)
    except FmnistError as err:  # ours: the message says what to do
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except RuntimeError as err:  # kfp.local reports a failed step this way
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
