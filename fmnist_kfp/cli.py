"""``fmnist-kfp``: run the Fashion-MNIST pipeline locally, compile it, ingest data.

The commands (``cmd_<name>``, each checking what it was given before any heavy import) and
``main``; the parser and its flags are in :mod:`fmnist_kfp.cli_parser`."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import warnings

from fmnist_kfp import __version__, cli_parser
from fmnist_kfp.cli_parser import LOCAL_ROOT
from fmnist_kfp.errors import FmnistError, UserInputError
from fmnist_kfp.extras import require
from fmnist_kfp.settings.pipeline import PipelineParameters
from fmnist_kfp.settings.platform import use_tensorflow_env
from fmnist_kfp.settings.schema import given_values
from fmnist_kfp.settings.serving import DeploySettings


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
    if args.local and args.host:
        raise UserInputError("--local and --host: give one, --local to run on this machine or "
                             "--host URL to run on Kubeflow")
    if not args.local and not args.host:
        raise UserInputError("say where to run: --local (this machine) or --host URL (Kubeflow)")
    if args.host:
        if args.backend not in (None, "kubernetes"):
            raise UserInputError(f"--backend {args.backend}: a run on Kubeflow (--host) uses the "
                                 "kubernetes backend (its jobs and its served model are the "
                                 "cluster's); leave --backend out, or use --local")
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
        raise UserInputError(f"--backend {args.backend}: --local runs use the local backend; "
                             "leave --backend out, or use --host URL for a cluster")
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
            *(f"  {name:10s} validation accuracy {m['validation_accuracy']:.4f} (the exported "
              f"model, scored by selection), trained in {m['train_seconds']:.0f} s"
              for name, m in summary["models"].items()),
            f"Model:   {summary['best_model_path']}",
            f"Report:  {summary['report_path']}",
            f"         {summary['report_markdown_path']}",
            *(f"Tuning:  {path}" for path in summary.get("tuning_reports", {}).values()),
            _serving_line(summary),
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
    outcome: dict | list[dict]
    if args.action == "create":
        # A malformed cron or concurrency fails before any call.
        recurrence = cluster.Recurrence(args.cron, args.max_concurrency, args.catchup)
        outcome = cluster.schedule(
            endpoint, args.name, recurrence, _cluster_arguments(args), package=args.package,
            image=args.image, gpu_image=args.gpu_image, experiment=args.experiment,
        )
    elif args.action == "list":
        outcome = cluster.list_schedules(endpoint, args.experiment)
    else:
        cluster.disable_schedule(endpoint, args.id)
        outcome = {"disabled": args.id}
    print(json.dumps(outcome, indent=2))
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    from fmnist_kfp.settings.platform import component_image, gpu_image
    from fmnist_kfp.validation import writable_directory

    component_image(args.image)  # both refused before anything is made, as compiling would
    gpu_image(args.gpu_image, args.image)
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


def _serving_line(summary: dict) -> str:
    """What is served, why, and what its accuracy over HTTP is measured on: a sample of the
    test split (``prediction_images``), not the whole split the test accuracy above is."""
    deployment = summary["deployment"]
    blessing = deployment.get("blessing") or {}
    images = (summary.get("parameters") or {}).get("prediction_images")
    sample = (f" on a sample of {images:,} test images (the test accuracy above: the whole "
              "test split)" if images else "")
    root = summary.get("pipeline_root")
    whose = (f" --pipeline-root {root}"
             if root and os.path.abspath(root) != os.path.abspath(LOCAL_ROOT) else "")
    from fmnist_kfp.serving.deploy.client import query_examples

    curl, python = query_examples(deployment["url"], deployment["model_name"])
    return (f"Serving: {deployment['url']} ({deployment['action']}: {blessing.get('reason')}); "
            f"served accuracy {deployment['served_accuracy']:.4f} over HTTP{sample}\n"
            f"         ask it about a photo: {curl}\n"
            f"                           or: {python}\n"
            f"         stop it with: fmnist-kfp deployment stop --name "
            f"{deployment['model_name']}{whose}")


def _batch_line(batch: dict) -> str:
    accuracy = f", accuracy {batch['accuracy']:.4f}" if batch.get("accuracy") is not None else ""
    return (f"Batch:   {batch['rows']:,} rows scored ({batch['errors']} error rows){accuracy}, "
            f"{batch['images_per_second']:.0f} images/s: {batch['path']}")


def _run_command() -> str:
    """The command that runs the pipeline here, for messages: ``make run`` in the project's
    checkout (its Makefile and package in this directory), else the installed CLI's (a pip
    user's project has no Makefile of ours)."""
    checkout = os.path.isfile("Makefile") and os.path.isdir("fmnist_kfp") and \
        os.path.isdir("kfp_components")
    return "make run" if checkout else "fmnist-kfp run --local"


def _latest_model_dir(summary_path: str) -> str:
    try:
        with open(summary_path) as handle:
            return json.load(handle)["best_model_path"]
    except (OSError, KeyError, json.JSONDecodeError):
        raise UserInputError(
            f"no selected model: {summary_path} is missing or has no best_model_path; run the "
            f"pipeline first ({_run_command()}) or pass --model-dir"
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
                             f"first ({_run_command()})")
    _check_listen(args.host, args.port)
    # Not "serving" yet: the server says "listening on …" once it does.
    print(f"loading {model_dir} as {args.model_name} …", flush=True)
    # No SavedModel there, or one that cannot be read: the predictor's UserInputError says
    # what to pass.
    serve_main([f"--model_dir={model_dir}", f"--model_name={args.model_name}",
                f"--host={args.host}", f"--http_port={args.port}", *args.server_args])
    return 0


def cmd_deployment(args: argparse.Namespace) -> int:
    """Local deployments started by pipeline runs: where they are, and stopping them."""
    require("serving", "fmnist-kfp deployment")
    from fmnist_kfp.serving.deploy.local_deployer import (
        deployments_of,
        running_server,
        stop_server,
    )

    DeploySettings(model_name=args.name).validate()  # a name, never a path
    with deployments_of(args.pipeline_root) as kept:
        if args.action == "stop":
            stopped = stop_server(args.name)
            print(f"stopped {args.name}" if stopped else
                  f"no local deployment called {args.name} (deployments here: {kept})")
            return 0
        server = running_server(args.name)
    if server is None:
        print(f"no local deployment called {args.name} is running (deployments here: {kept})")
        return 1
    print(json.dumps({"name": server.name, "url": server.url, "pid": server.pid,
                      "test_accuracy": server.test_accuracy, "log": server.log_file}, indent=2))
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    """The chain from a model (or a run's served model) back to the dataset."""
    from fmnist_kfp.lineage_report import chain, format_chain, resolve, verification_line, verify

    index, start = resolve(args.path)
    nodes = chain(index, start)
    print(json.dumps(nodes, indent=2) if args.json else format_chain(nodes))
    if args.verify:
        changed = verify(nodes)
        for uri in changed:
            print(f"changed since it was recorded: {uri}", file=sys.stderr)
        if not changed:
            # On stderr: `lineage --verify --json` stays JSON on stdout.
            print(verification_line(nodes), file=sys.stderr)
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
            f"first ({_run_command()}) or pass --logdir")
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


# Each command's name on the command line, and the function that runs it.
COMMANDS: dict[str, cli_parser.Command] = {
    "run": cmd_run,
    "compile": cmd_compile,
    "upload": cmd_upload,
    "schedule": cmd_schedule,
    "preflight": cmd_preflight,
    "serve": cmd_serve,
    "deployment": cmd_deployment,
    "tensorboard": cmd_tensorboard,
    "lineage": cmd_lineage,
    "ingest": cmd_ingest,
}


def build_parser() -> argparse.ArgumentParser:
    """The ``fmnist-kfp`` parser (:mod:`fmnist_kfp.cli_parser`), its commands bound to
    :data:`COMMANDS`."""
    return cli_parser.build_parser(COMMANDS)


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
    # A refused connection is reported once, as our error or preflight's row: not also as
    # urllib3's "Retrying (Retry(total=0, …))" warning beside it.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
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
    except BrokenPipeError:
        # The reader left (`fmnist-kfp lineage --json | head -1`): no traceback, and none at
        # exit either, when Python flushes stdout into the closed pipe (the recipe of the
        # signal module's documentation, "Note on SIGPIPE").
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a command ended by SIGPIPE (128 + 13)


if __name__ == "__main__":
    sys.exit(main())
