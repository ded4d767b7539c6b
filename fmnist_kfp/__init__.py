"""What users run: the ``fmnist-kfp`` command, local runs, and the Kubeflow Pipelines client."""
