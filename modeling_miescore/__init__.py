"""MIEScore: human-aligned evaluation of multi-source image editing.

Importing the package is cheap: heavy modules (torch, transformers) load on first use of the
names below.
"""

__version__ = "0.1.0"

_LAZY = {
    "MIEScoreConfig": ".configuration_miescore",
    "MIEScoreModel": ".modeling_miescore",
    "overall_score": ".overall",
    "OVERALL_WEIGHTS": ".overall",
    "SpatialRewardConfig": ".configuration_spatialreward",
    "SpatialRewardModel": ".modeling_spatialreward",
    "SpatialRewardAPI": ".judges.spatialreward_api",
    "SpatialRewardFunction": ".serving.editor_rewards",
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
