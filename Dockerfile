# The image every component and every TFJob worker runs. Tag it with the package version
# (fmnist/__init__.py) and compile with FMNIST_COMPONENT_IMAGE=<registry>/fmnist-kfp:<version>.
ARG TF_VERSION=2.21.0
FROM tensorflow/tensorflow:${TF_VERSION}-gpu

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 TF_CPP_MIN_LOG_LEVEL=2
WORKDIR /opt/fmnist

# Dependencies first (from the lock file), so code changes rebuild only the last layer.
COPY pyproject.toml uv.lock README.md ./
RUN pip install uv==0.13.8 \
 && uv export --frozen --no-dev --no-emit-project --no-hashes -o /tmp/requirements.txt \
 && grep -v -E '^(tensorflow==|nvidia-|tensorboard)' /tmp/requirements.txt > /tmp/req.txt \
 && uv pip install --system --no-deps -r /tmp/req.txt

COPY fmnist ./fmnist
COPY kfp_components ./kfp_components
COPY pipelines ./pipelines
COPY katib ./katib
COPY serving ./serving
RUN uv pip install --system --no-deps . && python -c "import fmnist.training.trainer, kfp"

USER 1000
