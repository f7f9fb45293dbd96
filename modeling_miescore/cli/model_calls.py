"""Options and helpers shared by the commands that call large models through the call engine
(:mod:`modeling_miescore.judges.call_engine`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

from ..hub.errors import MIEScoreInputError
from ..judges.chat_client import DEFAULT_MAX_ANSWER_BYTES
from .main import add_device_args, number_arg
from ..judges.call_cache import CallCache
from ..utils.output_paths import ensure_folder, check_distinct_files
from ..judges.chat_backends import JudgeSpec, build_backend
from ..judges.call_engine import UsageLog, CallEngine


def add_call_args(parser: argparse.ArgumentParser, image_defaults: Optional[dict] = None) -> None:
    """Endpoint, local-model, cache, price and progress options (one argument group). ``image_defaults``:
    ``{"image_format", "image_quality", "max_pixels", "source"}`` where a command's protocol fixes how images are
    sent (the editor benchmarks' released scripts; ``source`` says so in the help)."""
    images = {"image_format": "PNG", "image_quality": 90, "max_pixels": 1_048_576, "source": "",
              **(image_defaults or {})}
    why = f" ({images['source']})" if images["source"] else ""
    group = parser.add_argument_group("model calls (OpenAI-compatible endpoints and local transformers models)")
    group.add_argument("--concurrency", type=number_arg(int, minimum=1), default=8,
                       help="requests in flight per endpoint (default 8)")
    group.add_argument("--timeout", type=number_arg(float, minimum=0, exclusive=True), default=120.0,
                       help="seconds one request attempt may take in all: connecting, sending, the headers and "
                            "the whole answer (default 120); a timed-out attempt is retried like a 5xx")
    group.add_argument("--max-answer-bytes", type=number_arg(int, minimum=1), default=DEFAULT_MAX_ANSWER_BYTES,
                       help="the most bytes one answer may take, on the wire and decompressed (default "
                            f"{DEFAULT_MAX_ANSWER_BYTES}, 2 MiB: 2048 tokens x 128 bytes, the longest Qwen token, "
                            "x 6 for JSON escapes); a larger answer fails its item, is not retried and is not cached")
    group.add_argument("--max-retries", type=number_arg(int, minimum=0), default=4,
                       help="retries of 408/409/429/5xx answers, timeouts and connection errors, honouring "
                            "Retry-After (default 4)")
    group.add_argument("--api-key-env", default="OPENAI_API_KEY",
                       help="environment variable holding the API key (default OPENAI_API_KEY; unset: none sent)")
    group.add_argument("--image-format", choices=["PNG", "JPEG", "WEBP"], default=images["image_format"],
                       help=f"how images are encoded in requests (default {images['image_format']}{why}; PNG is "
                            "lossless)")
    group.add_argument("--image-quality", type=number_arg(int, minimum=1, maximum=100),
                       default=images["image_quality"],
                       help=f"JPEG / WEBP quality of the images sent (default {images['image_quality']}{why})")
    group.add_argument("--max-pixels", type=lambda text: number_arg(int, minimum=0)(text) or None,  # 0: full size
                       default=images["max_pixels"],
                       help="images are downscaled to at most this many pixels; 0 = sent at full size (default "
                            f"{images['max_pixels'] or 'full size'}{why})")
    add_device_args(group, when="local models: ")
    group.add_argument("--batch-size", type=number_arg(int, minimum=1), default=4,
                       help="local models: prompts per generate call (default 4)")
    group.add_argument("--cache", metavar="FILE", help="SQLite answer cache (default: beside the output); a "
                       "rerun sends only the requests that have no answer there")
    group.add_argument("--no-cache", action="store_true", help="do not read or write an answer cache")
    group.add_argument("--price", action="append", default=[], metavar="MODEL=IN,OUT",
                       help="USD per 1000 prompt (IN) and completion (OUT) tokens of MODEL, for the cost in the "
                            "usage log; repeat for several models")
    group.add_argument("--no-progress", action="store_true", help="hide progress bars")


def parse_prices(items) -> Dict[str, Tuple[float, float]]:
    """``["gpt-5=1.25,10"]`` -> ``{"gpt-5": (1.25, 10.0)}``; a one-line error for anything else (prices are
    finite and not negative: ``nan``, ``inf`` and ``-1`` are refused)."""
    prices = {}
    for item in items or ():
        model, sep, values = item.rpartition("=")
        parts = values.split(",")
        try:
            if not sep or not model or len(parts) != 2:
                raise ValueError
            pair = (float(parts[0]), float(parts[1]))
            if not all(math.isfinite(p) and p >= 0 for p in pair):
                raise ValueError
        except ValueError:
            raise MIEScoreInputError(f"--price '{item}' is not MODEL=IN,OUT with prices finite numbers >= 0 (USD per "
                                     "1000 prompt and completion tokens, e.g. gpt-5=1.25,10)") from None
        prices[model] = pair
    return prices


def open_cache(args, default: Path):
    """The :class:`~modeling_miescore.judges.call_cache.CallCache` the options name (None with --no-cache)."""
    if args.no_cache:
        return None
    path = Path(args.cache).expanduser() if args.cache else default
    ensure_folder(path.parent, "--cache")  # a missing folder is made and named, as for every output
    return CallCache(path)


def judge_spec(args):
    """The :class:`~modeling_miescore.judges.chat_backends.JudgeSpec` of a command's ``--backend``, ``--model``,
    ``--base-url``; one-line errors for a combination that cannot work."""
    if args.backend == "openai":
        if not args.base_url or not args.base_url.startswith(("http://", "https://")):
            raise MIEScoreInputError("--backend openai needs --base-url http(s)://HOST:PORT/v1")
        return JudgeSpec("openai", args.model, args.base_url, None)
    if args.base_url:
        raise MIEScoreInputError("--base-url is for --backend openai; a transformers model is given by --model PATH")
    return JudgeSpec("transformers", args.model)


def build_judge_backend(spec, args):
    """The backend of a :class:`~modeling_miescore.judges.chat_backends.JudgeSpec` with the command's options."""
    try:
        return build_backend(spec, api_key_env=args.api_key_env, timeout=args.timeout, max_retries=args.max_retries,
                             max_concurrency=args.concurrency, image_format=args.image_format,
                             max_pixels=args.max_pixels, device=args.device, dtype=args.dtype,
                             batch_size=args.batch_size, max_answer_bytes=args.max_answer_bytes,
                             image_quality=args.image_quality)
    except ValueError as err:
        raise MIEScoreInputError(str(err)) from None


class ModelCallRun:
    """The model calls of one command run: the answer cache, one usage log priced by ``--price``, and one call
    engine per distinct judge (a judge named twice shares its connection pool). Leaving the context (also on
    errors and Ctrl-C) appends the run's usage line, prints the summary and closes everything. The cache is opened
    with the first engine, so a run that fails before building one writes neither file. ``files``: the command's
    other files, which the cache and the usage log must not be (``--cache X --output X`` would corrupt both).
    """

    def __init__(self, args, command: str, cache_default: Path, log: Path, extra: Optional[dict] = None,
                 files: Optional[dict] = None):
        cache = None if args.no_cache else (args.cache or cache_default)
        check_distinct_files({"--cache": cache, "the usage log": log, **(files or {})})
        self.args, self.command, self.log, self.cache_default = args, command, Path(log), Path(cache_default)
        self.usage = UsageLog(parse_prices(args.price))
        self.extra = dict(extra or {})
        self.cache = None
        self._engines: Dict[object, object] = {}

    def engine(self, spec):
        """The :class:`~modeling_miescore.judges.call_engine.CallEngine` of a ``JudgeSpec``."""
        if spec not in self._engines:  # the spec itself: its str() masks URL passwords
            backend = build_judge_backend(spec, self.args)
            if not self._engines:
                self.cache = open_cache(self.args, self.cache_default)
            self._engines[spec] = CallEngine(backend, cache=self.cache, usage=self.usage)
        return self._engines[spec]

    def __enter__(self) -> "ModelCallRun":
        return self

    def __exit__(self, *exc_info) -> None:
        if not self._engines:
            return
        record = {"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": self.command, **self.extra,
                  "usage": self.usage.as_dict(),
                  "cache_totals": self.cache.totals() if self.cache is not None else None}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        print(f"model calls: {self.usage.summary_line()} (usage log: '{self.log}')", file=sys.stderr)
        for engine in self._engines.values():
            engine.close()
        if self.cache is not None:
            self.cache.close()
