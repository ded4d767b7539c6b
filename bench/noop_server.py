"""The serving benchmark's baselines: the model server with no model behind it.

    python -m bench.noop_server --noop model|bare [the model server's flags]

``model``: requests are parsed, checked and decoded and responses formatted as the predictor
does, and a constant is answered instead of calling a model (:class:`NoOpModel`): the floor of
our protocol code. ``bare``: not even the request is looked at (:class:`BareNoOpModel`):
KServe's own floor. Both run on the predictor's server
(:func:`fmnist_kfp.serving.model_server.server.start`) with its flags; ``--model_dir`` is
ignored. ``bench/serving.py`` measures the predictor against them.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
from kserve.protocol.infer_type import InferRequest

from fmnist_kfp.serving.model_server.predictor import ProtocolModel
from fmnist_kfp.serving.model_server.protocol import ParsedRequest, Predictions
from fmnist_kfp.serving.model_server.server import build_parser, checked_limits, start


class NoOpModel(ProtocolModel):
    """The same server with the model call replaced by a constant answer: requests are parsed,
    checked and decoded and responses formatted as usual. The benchmark's floor."""

    def load(self) -> bool:
        self.ready = True
        return self.ready

    async def predict(self, request: ParsedRequest, headers=None):
        count = len(request)
        probabilities = np.full((count, 10), 0.1, np.float32)
        return request, Predictions(probabilities, np.zeros(count, np.int32),
                                    ["T-shirt/top"] * count)


class BareNoOpModel(NoOpModel):
    """KServe's floor: not even the request is looked at."""

    async def preprocess(self, payload, headers=None) -> ParsedRequest:
        if isinstance(payload, InferRequest):
            count = int(payload.inputs[0].shape[0]) if payload.inputs else 1
            return ParsedRequest("v2", [None] * count, payload.id or "")
        instances = payload.get("instances", []) if isinstance(payload, dict) else []
        return ParsedRequest("v1", [None] * max(len(instances), 1))


BASELINES = {"model": NoOpModel, "bare": BareNoOpModel}


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = build_parser()
    parser.description = __doc__.split("\n")[0]
    parser.add_argument("--noop", choices=tuple(BASELINES), required=True,
                        help="'model' parses and decodes requests and answers a constant, "
                             "'bare' ignores the request too")
    args, _ = parser.parse_known_args(argv)
    warnings.filterwarnings("ignore", message="ORJSONResponse is deprecated")
    limits = checked_limits(args)
    model = BASELINES[args.noop](args.model_name, max_instances=args.max_instances,
                                 image_limits=limits, uncertain_margin=args.uncertain_margin)
    start(model, args, report_progress=False)


if __name__ == "__main__":
    # Through the importable module, so that worker processes unpickle its classes by name.
    from bench.noop_server import main as module_main

    module_main()
