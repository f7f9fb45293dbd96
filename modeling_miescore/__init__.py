"""MIEScore: human-aligned evaluation of multi-source image editing.

The Hub files, copied into every saved checkpoint, are in ``hub/``; everything else lives in the other
subpackages (cli, scoring, data, evaluation, training, serving, judges, space, testing, utils).
Importing the package is cheap: heavy modules (torch, transformers) load on first use of the
names below.
"""

__version__ = "0.1.0"

_LAZY = {
    "MIEScoreConfig": ".hub.configuration_miescore",
    "MIEScoreModel": ".hub.modeling_miescore",
    "overall_score": ".hub.miescore_overall",
    "OVERALL_WEIGHTS": ".hub.miescore_overall",
    "SpatialRewardConfig": ".hub.configuration_spatialreward",
    "SpatialRewardModel": ".hub.modeling_spatialreward",
    "SpatialRewardResult": ".hub.spatialreward_judgement",
    "SpatialRewardAPI": ".judges.spatialreward_api",
    "SpatialRewardFunction": ".rewards.callables",
    "load_scorer": ".scoring.loading",
    "load_spatialreward": ".scoring.loading",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name], __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'modeling_miescore' has no attribute {name!r}")
