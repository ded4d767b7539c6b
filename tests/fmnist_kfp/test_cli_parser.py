"""``fmnist-kfp``'s command line: every command runs its own function, the pipeline's
parameters are flags, unset unless given, and a command that talks to Kubeflow needs
its endpoint."""

from __future__ import annotations

import pytest

from fmnist_kfp.cli_parser import build_parser

COMMANDS = ("run", "compile", "upload", "schedule", "preflight", "serve", "deployment",
            "tensorboard", "lineage", "ingest")


def _parser():
    return build_parser({name: (lambda args, name=name: name) for name in COMMANDS})


def test_each_command_runs_its_own_function():
    args = _parser().parse_args(["compile", "--output-dir", "out"])
    assert args.func(args) == "compile" and args.output_dir == "out"


def test_only_the_parameters_given_are_set():
    args = _parser().parse_args(["run", "--local", "--epochs", "3"])
    assert args.local and args.func(args) == "run"
    # As typed, for the settings to check; the rest None, so that a run sends only these.
    assert args.epochs == "3" and args.num_workers is None


def test_upload_needs_the_endpoint(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["upload"])
    assert "--host" in capsys.readouterr().err
