"""Fashion-MNIST on Kubeflow: ingestion, distributed TensorFlow training, Katib tuning, KServe
serving, and the pipeline that runs them. Everything of ours imports through this one root.

- ``fmnist_kfp.pipelines``: the Python API (the pipeline, its arguments, compiling it for an image)
- ``fmnist_kfp.kfp_components``: the components, one folder each
- ``fmnist_kfp.katib`` and ``fmnist_kfp.serving``: the search and serving backends
- the core beside them (``fmnist_kfp.training``, ``fmnist_kfp.settings``, …) and the app
  (``fmnist_kfp.cli``, the ``fmnist-kfp`` command)

In the wheel the repository's ``pipelines/``, ``kfp_components/``, ``katib/`` and ``serving/``
folders are this package's subfolders (hatchling's ``sources`` in pyproject.toml). In a checkout
they stay at the top of the repository, and this package's search path reaches them there, so
``fmnist_kfp.pipelines`` is the same module in both (docs/design.md says why).
"""

from pathlib import Path as _Path

__version__ = "0.2.0"

# The repository's top-level folders that are subpackages of this one.
MAPPED_FOLDERS = ("pipelines", "kfp_components", "katib", "serving")

_here = _Path(__file__).resolve().parent
if not (_here / MAPPED_FOLDERS[0]).is_dir() and (_here.parent / "pyproject.toml").is_file():
    # A checkout (or mutmut's copy of one): the mapped folders are the package's siblings.
    __path__.append(str(_here.parent))  # noqa: F821 - a package's __path__
