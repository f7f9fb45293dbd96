"""A reward server with a trivial backend, in a process of its own, for tests that measure the server process
(peak memory, file descriptors, stderr):

    python tests/fake_reward_server.py [--nofile N] [--max-pixels T] [--header-timeout S]

Prints its URL on the first line of stdout, then serves until killed. The backend answers each sample with
the sizes of its decoded images (``edited_size``, ``source_sizes``) and does nothing heavy.
"""

from __future__ import annotations

import argparse
import resource
import threading


def _sizes(samples) -> list[dict]:
    return [{"edited_size": list(s.edited.size), "source_sizes": [list(i.size) for i in s.sources], "overall": 50.0}
            for s in samples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nofile", type=int, help="soft RLIMIT_NOFILE of this process")
    parser.add_argument("--max-pixels", type=int, help="the backend's pixel budget per image (decode target)")
    parser.add_argument("--header-timeout", type=float, help="ServerSettings.header_timeout_s")
    args = parser.parse_args()
    if args.nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    from modeling_miescore.serving.backends import CallableBackend
    from modeling_miescore.serving.app import serve_in_background
    from modeling_miescore.serving.settings import ServerSettings

    backend = CallableBackend(_sizes, name="fake")
    backend.max_pixels = args.max_pixels
    settings = ServerSettings() if args.header_timeout is None else ServerSettings(header_timeout_s=args.header_timeout)
    server = serve_in_background(backend, settings).start()
    print(server.url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
