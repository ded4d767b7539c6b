"""The TrainJob launcher's tests run on real Kubeflow Trainer and JobSet:
test_trainjob_launcher_on_the_cluster.py (scripted pods), test_trainjob_on_the_cluster.py
(training for real), test_faults_on_the_cluster.py (API faults through the fault proxy). None
is left on the Trainer v2 stand-in (tests/standins/trainer_v2.py).

What stays here is the launcher as a stand-in test builds it, which tests/test_standin_flows.py
imports for its train flow under the stand-ins' fault mode: fake time, every wait bounded by a
deadline in fake seconds."""

from __future__ import annotations

import io

from fmnist_kfp.kubernetes.trainjob import OVERRIDES
from fmnist_kfp.launcher.trainjob_launcher import TrainJobLauncher
from fmnist_kfp.settings.jobs import KubernetesSettings

DEADLINE = 600.0  # fake seconds


def _launcher(standin, shape: str = OVERRIDES, scheduling: dict | None = None,
              **kwargs) -> TrainJobLauncher:
    """A launcher calling ``standin`` (a ``TrainerStandIn``) on fake time."""
    from tests.standins.kubernetes import FakeTime

    settings = KubernetesSettings(image="ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0",
                                  namespace="kubeflow", pvc_name="fmnist-pvc",
                                  scheduling=scheduling or {})
    time = FakeTime()
    values = dict(api_client=standin.api_client(), shape=shape, poll_seconds=5,
                  timeout_seconds=DEADLINE, out=io.StringIO(), request_timeout_seconds=2,
                  clock=time, sleep=time.sleep)
    values.update(kwargs)
    return TrainJobLauncher(settings, **values)
