"""vLLM plugin (entry point ``vllm.general_plugins``): registers ``MIEScoreForImageScoring``, the architecture of a
MIEScore checkpoint exported by ``miescore export-vllm``."""

ARCHITECTURE = "MIEScoreForImageScoring"


def register() -> None:
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, "miescore_vllm.model:MIEScoreForImageScoring")
