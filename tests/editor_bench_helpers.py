"""Shared pieces of the editor-benchmark tests: converted fixture datasets, edited images whose colour names the
answer a scripted judge gives, and that judge's answer functions (for :class:`local_http.RoutedChatServer`).

An edit of code ``c`` is a solid image whose red channel is ``10 * c`` (the other channels say nothing): the scripted
judge reads the code back from the last image of a request (the edited one; resizing a solid image keeps its
colour) and answers from a table, so concurrent requests get deterministic answers."""

from __future__ import annotations

import json
from pathlib import Path

from local_http import chat_completion, request_images, request_text

from modeling_miescore.data.converters import get_converter
from modeling_miescore.testing import raw_benchmarks as rb


def converted(name: str, folder: Path, **options) -> tuple[Path, list[dict]]:
    """A converted fixture (``gedit-bench`` or ``imgedit-bench``): ``(dataset folder, planted rows)``."""
    raw = folder / f"raw-{name}"
    if name == "gedit-bench":
        truth = rb.make_raw_gedit_bench(raw, **options)
        get_converter(name)(raw, folder / name, progress=False).build()
    else:
        truth = rb.make_raw_imgedit_bench(raw, images="Benchmark", **options)
        get_converter(name)(raw, folder / name, progress=False, images="Benchmark").build()
    return folder / name, truth


def edit_image(path: Path, code: int, size=(64, 56)) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (10 * code, 90, 160)).save(path)
    return path


def gedit_args(gedit, out, url, *extra, bootstrap: int = 0) -> list:
    """``miescore benchmark gedit`` arguments for a fixture ``gedit`` (``{"dataset", "edits"}``) judged by the
    scripted OpenAI-compatible server at ``url``."""
    return ["benchmark", "gedit", "--dataset", str(gedit["dataset"]), "--edits", str(gedit["edits"]), "--out",
            str(out), "--backend", "openai", "--base-url", url, "--model", "gpt-4.1", "--no-progress",
            "--bootstrap", str(bootstrap), *extra]


def read_report(out: Path) -> dict:
    """``OUT/report.json`` of a benchmark or comparison run."""
    return json.loads((Path(out) / "report.json").read_text())


def code_of(body) -> int:
    """The code of the edited image of a request (its last image; rounded: GEdit's images travel as JPEG)."""
    return round(request_images(body)[-1].convert("RGB").getpixel((0, 0))[0] / 10)


def is_imgedit(body) -> bool:
    """An ImgEdit request (a rubric of ``Name: <1-5>`` lines) rather than a GEdit one (whose prompts ask for a
    JSON ``"score"`` list): both send their text first, then the images."""
    return '"score"' not in request_text(body)


def is_sc(body) -> bool:
    """GEdit: the SC request shows two images (source, edited), the PQ request one."""
    return len(request_images(body)) == 2


def gedit_answer(sc: list, pq: list, tokens=(500, 20)) -> tuple:
    """``(sc answer, pq answer)`` bodies in VIEScore's JSON format."""
    return (chat_completion(json.dumps({"score": sc, "reasoning": "sc"}), *tokens),
            chat_completion(json.dumps({"score": pq, "reasoning": "pq"}), *tokens))


def gedit_server_answer(table: dict):
    """An answer function: ``table[code] = (sc scores, pq scores)``."""
    def answer(body, repeat):
        sc, pq = gedit_answer(*table[code_of(body)])
        return 200, sc if is_sc(body) else pq, None, 0

    return answer


def imgedit_answer(scores, names=("Instruction Adherence", "Editing Quality", "Detail Preservation")) -> dict:
    lines = ["Brief reasoning: scripted."] + [f"{n}: {s}" for n, s in zip(names, scores)]
    return chat_completion("\n".join(lines), 700, 30)


# Two editors ("base", "tuned") on small selections of both benchmarks, for the comparison tests. GEdit EN rows:
# background_change 0, 1; subject-add 0, 1, (SC, PQ) per code; ImgEdit rows add 0, 1; remove 0, 1, three criteria
# per code. The base run's edits have codes 0-3, the tuned run's 4-7.
GEDIT_RUNS = {0: ([6, 6], [6, 6]), 1: ([4, 4], [9, 9]), 2: ([8, 8], [2, 2]), 3: ([5, 5], [5, 5]),
              4: ([8, 8], [8, 8]), 5: ([4, 4], [4, 4]), 6: ([8, 8], [8, 8]), 7: ([6, 6], [6, 6])}
IMGEDIT_RUNS = {0: (3, 3, 3), 1: (2, 2, 2), 2: (4, 4, 4), 3: (1, 1, 1), 4: (4, 4, 4), 5: (1, 1, 1), 6: (5, 5, 5),
                7: (3, 3, 3)}


def make_editor_runs(folder: Path) -> tuple[dict, Path]:
    """The four report folders ``{(benchmark, run): folder}`` of ``miescore benchmark gedit`` / ``imgedit`` for the
    two editors, judged by a scripted judge."""
    from local_http import RoutedChatServer

    from modeling_miescore.cli.main import main

    gedit, gedit_truth = converted("gedit-bench", folder, tasks={"background_change": 2, "subject-add": 2},
                                   languages=("en",))
    imgedit, imgedit_truth = converted("imgedit-bench", folder, types=("add", "remove"), per_type=2)
    out = {}

    def answer(body, repeat):
        if is_imgedit(body):
            return 200, imgedit_answer(IMGEDIT_RUNS[code_of(body)]), None, 0
        return gedit_server_answer(GEDIT_RUNS)(body, repeat)

    with RoutedChatServer(answer) as server:
        for name, offset in (("base", 0), ("tuned", 4)):
            for kind, dataset, truth in (("gedit", gedit, gedit_truth), ("imgedit", imgedit, imgedit_truth)):
                edits = folder / f"{kind}-{name}"
                for code, t in enumerate(truth):
                    edit_image(edits / f"{t['key']}.png", code + offset)
                out[(kind, name)] = folder / f"report-{kind}-{name}"
                assert main(["benchmark", kind, "--dataset", str(dataset), "--edits", str(edits), "--out",
                             str(out[(kind, name)]), "--backend", "openai", "--base-url", server.url, "--model", "m",
                             "--no-progress", "--bootstrap", "0", "--no-plots"]) == 0
    return out, folder



def _clamp(value: float, low: int, high: int) -> int:
    return max(low, min(high, round(value)))



def looking_scores(kind: str, edit, source=None) -> list:
    """What a judge that looks at the images answers: ``kind`` ``"sc"`` (GEdit's SC request: source, edit;
    ``[editing success, over-editing]``) or ``"pq"`` (the edit alone; ``[naturalness, artifacts]``), both 0-10,
    or ``"imgedit"`` (ImgEdit's three criteria, 1-5). A redder edit (``testing.editor_rewards.redness``, what the
    tiny CPU recipe trains for) succeeds better; an edit whose brightness moved from the source's is over-edited;
    mid-grey looks natural. For edits made by a real (tiny) editor, whose colours nobody planted."""
    import numpy as np

    from modeling_miescore.testing.editor_rewards import redness

    def brightness(image) -> float:
        return float(np.asarray(image.convert("L"), dtype=np.float64).mean()) / 255

    red, bright = redness(edit), brightness(edit)
    if kind == "imgedit":
        return [_clamp(3 + 10 * red, 1, 5), _clamp(1 + 4 * bright, 1, 5), 4]
    if kind == "sc":
        return [_clamp(5 + 25 * red, 0, 10), _clamp(10 - 20 * abs(bright - brightness(source)), 0, 10)]
    return [_clamp(10 - 20 * abs(bright - 0.5), 0, 10), 8]


def looking_judge(body, repeat):
    """:func:`looking_scores` of a request's images (the edit is the last) as a
    :class:`local_http.RoutedChatServer` answer function."""
    images = [image.convert("RGB") for image in request_images(body)]
    if is_imgedit(body):
        return 200, imgedit_answer(looking_scores("imgedit", images[-1])), None, 0
    kind = "sc" if is_sc(body) else "pq"
    answer = json.dumps({"score": looking_scores(kind, images[-1], images[0]), "reasoning": kind})
    return 200, chat_completion(answer, 500, 20), None, 0
