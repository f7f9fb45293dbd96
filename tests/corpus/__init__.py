"""The bad-input and bad-endpoint corpora (every case: :mod:`.cases`) and the test suite's device fixture
(:mod:`.virtual_device`); ``tests/`` is on ``sys.path``, so they import as ``corpus.<module>``."""
