"""The HTTP reward server (``miescore serve``) and its client; the reward callables built on them are in
:mod:`modeling_miescore.rewards.callables`.
"""
