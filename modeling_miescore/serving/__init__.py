"""The HTTP reward server (``miescore serve``) and its client.

Server: ``settings`` (limits), ``app`` (Starlette routes, auth, connection guard, a server on a thread),
``request_parsing`` (request models, image decoding within pixel budgets, ``RequestError``), ``reward_service``
(body limits, decoding, dynamic batching, drain), ``backends`` (MIEScore / SpatialReward / callable models),
``monitoring`` (``/metrics``, rate-limited logs). Client: ``reward_client`` (``RewardClient``, one replica or
several, its errors, replica routing, image encoding). The reward callables built on them are in
:mod:`modeling_miescore.rewards.callables`.
"""
