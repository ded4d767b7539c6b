# The images every step and every pod the steps create run, built from uv.lock:
#
#   docker build --target cpu -t ghcr.io/fmnist-kfp/fmnist-kfp:<version> .      every step, and
#       the TFJob replicas, Katib trials, batch-prediction Job and predictor without GPUs
#   docker build --target gpu -t ghcr.io/fmnist-kfp/fmnist-kfp:<version>-gpu .  TFJob replicas
#       and trials with gpus_per_worker > 0 (TensorFlow's CUDA wheels, ~2.8 GB more)
#
# Compile against them with FMNIST_COMPONENT_IMAGE and FMNIST_GPU_IMAGE (the latter defaults to
# the former's tag + "-gpu"). The release workflow (.github/workflows/release.yml) builds both
# on a v* tag and compiles the release against their digests.
#
# Stages: `wheel` builds the project's wheel; `venv-cpu`/`venv-gpu` install the locked
# dependencies (uv export --frozen: exact versions and hashes) and the wheel into /opt/venv;
# `runtime` is the slim base with a non-root user, and `gpu`/`cpu` copy one venv into it. No
# compiler, uv or pip is left in the final images.

# Exact tags: the builder's and the runtime's interpreter must be the same (the venv links to
# it). Pin the digest too where your registry policy wants it.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.13.8

FROM ${UV_IMAGE} AS uv

FROM ${PYTHON_IMAGE} AS builder
COPY --from=uv /uv /usr/local/bin/uv
ENV UV_LINK_MODE=copy UV_COMPILE_BYTECODE=1 UV_PYTHON_DOWNLOADS=never UV_NO_CACHE=1
WORKDIR /src
# What the build reads beside the packages: the README (the wheel's description) and the
# LICENSE (its license file), pyproject.toml's; tests/test_image.py holds this list to it.
COPY pyproject.toml uv.lock README.md LICENSE ./

FROM builder AS wheel
# The wheel's packages: pyproject.toml [tool.hatch.build.targets.wheel] (tests/test_image.py).
COPY fmnist_kfp ./fmnist_kfp
COPY kfp_components ./kfp_components
COPY pipelines ./pipelines
COPY katib ./katib
COPY serving ./serving
RUN uv build --wheel --out-dir /dist .

FROM builder AS venv-cpu
RUN uv export --frozen --no-dev --no-emit-project --extra all -o requirements.txt \
 && uv venv /opt/venv --python /usr/local/bin/python3 \
 && uv pip install --python /opt/venv/bin/python --no-deps --require-hashes -r requirements.txt
COPY --from=wheel /dist /dist
RUN uv pip install --python /opt/venv/bin/python --no-deps /dist/*.whl \
 && /opt/venv/bin/python -c "import fmnist_kfp.training.trainer, kfp, kfp.kubernetes"

FROM builder AS venv-gpu
RUN uv export --frozen --no-dev --no-emit-project --extra all --extra gpu -o requirements.txt \
 && uv venv /opt/venv --python /usr/local/bin/python3 \
 && uv pip install --python /opt/venv/bin/python --no-deps --require-hashes -r requirements.txt
COPY --from=wheel /dist /dist
RUN uv pip install --python /opt/venv/bin/python --no-deps /dist/*.whl \
 && /opt/venv/bin/python -c "import fmnist_kfp.training.trainer, kfp, kfp.kubernetes"

FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.0.0+unknown
ARG REVISION=unknown
LABEL org.opencontainers.image.source="https://github.com/fmnist-kfp/fmnist-kfp" \
      org.opencontainers.image.title="fmnist-kfp" \
      org.opencontainers.image.description="Fashion-MNIST on Kubeflow: the pipeline's steps, TFJob replicas, Katib trials and predictor" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# KFP runs `python3 -m kfp.dsl.executor_main`, the TFJobs `python -m ...`: the venv's, first
# on the PATH. HOME and the workdir belong to group 0 and are group-writable, so an arbitrary
# UID in group 0 (OpenShift's restricted SCC) can write where user 1000 can.
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/home/fmnist \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TF_CPP_MIN_LOG_LEVEL=2 \
    TF_USE_LEGACY_KERAS=1 \
    FMNIST_IMAGE_VERSION="${VERSION}" \
    FMNIST_IMAGE_REVISION="${REVISION}"
RUN python -m pip uninstall --yes --quiet pip setuptools wheel \
 && useradd --uid 1000 --gid 0 --home-dir /home/fmnist --create-home --shell /usr/sbin/nologin fmnist \
 && mkdir -p /workspace \
 && chgrp -R 0 /home/fmnist /workspace \
 && chmod -R g=u /home/fmnist /workspace
WORKDIR /workspace
USER 1000:0

FROM runtime AS gpu
COPY --from=venv-gpu /opt/venv /opt/venv

# The default target (last): `docker build .` builds the CPU image.
FROM runtime AS cpu
COPY --from=venv-cpu /opt/venv /opt/venv
