"""Fashion-MNIST on Kubeflow: ingestion, distributed TensorFlow training, selection and serving."""

__version__ = "0.2.0"
