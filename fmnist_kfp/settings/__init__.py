"""Every setting, defined once (see :mod:`fmnist_kfp.settings.schema`): one group per concern —
data, training, jobs and the cluster, tuning, serving — combined into the pipeline's
parameters, plus the compile-time platform."""
