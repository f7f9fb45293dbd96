"""The HTTP reward server (``miescore serve``), its client, and reward callables for RL of image editors.

Server, in request order: ``connection_guard`` (header timeout, connection cap, below the app), ``settings``
(limits), ``app`` (Starlette routes, auth, metrics middleware), ``request_parsing`` (pydantic request models),
``image_decoding`` (header checks, pixel budgets, reduced decoding), ``reward_service`` (body limits, decode
threads, waiting, drain), ``batch_scheduler`` (dynamic batching), ``backends`` (MIEScore / SpatialReward /
callable models), ``prometheus_metrics`` (``/metrics``), ``errors`` (the JSON error), ``log_rate_limit``
(repeated log errors), ``background_server`` (a server on a thread).
Clients: ``reward_client`` (``RewardClient``, one replica or several), ``replica_routing`` (which replica scores
which group, which replicas are down), ``image_encoding`` (images as request bytes). The reward callables built on them
are in :mod:`modeling_miescore.rewards.callables`.
"""
