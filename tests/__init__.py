"""The tests, laid out like the code: ``tests/<package>/<module's folder>/test_*.py`` tests that
folder's modules; tests of the repository's own files (docs, Dockerfile, workflows, the install)
sit at this level; the stand-ins of the cluster's APIs are in ``tests/standins/``, the shared
helpers (CRD schemas, fixtures, harnesses) beside this file."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository root
