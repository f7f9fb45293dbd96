"""Every command block of README.md and docs/ runs in a test, as written, on tiny artifacts -- or says why not.

How to add a command block
--------------------------
Put one HTML comment (GitHub does not render it) on the line right before the opening fence of every ``bash``,
``sh``, ``shell``, ``console`` or ``python`` block:

    <!-- doc-test: NAME -->      a runner below, registered with ``@runs("NAME")``, runs the block as written
    <!-- doc-skip: REASON -->    the block needs what no test machine has (real weights, GPUs, an endpoint, the
                                 network): REASON says what, in a few words

A runner receives the block (``DocBlock``: its text, page and line) and a fresh working folder, writes the files
the block names there (``scene.jpg``, ``edits.jsonl``, a raw release, ...), runs the block with
``run_block(...)`` and checks what it produced. Placeholders that stand for a model are replaced by tiny
checkpoints first (``PLACEHOLDERS``: ``CKPT``, ``SR_CKPT``, ``path/or/repo-of-a-miescore-checkpoint``, ...), so a
block that names them runs as written on a tiny random model; everything else in the block is run unchanged.
Several blocks may share one runner (``demo`` and a page's copy of it) when they hold the same commands.

Cost: ``run_block`` runs each ``miescore ...`` line in this process (``modeling_miescore.cli.main.main``, the line
split as bash splits it) and ``python`` blocks with ``exec``, so a block costs what its commands cost, without a
fresh interpreter; the session's tiny checkpoints (conftest) are shared. A block that takes longer than a few
seconds (training, a server, several processes) registers with ``@runs("NAME", slow=True)``: the ``slow`` suite
runs it as written through ``bash`` and the default suite gives it the cheap check every block gets
(``check_commands``: each ``miescore`` line names a real command and real options, each ``python FILE`` / ``--config
FILE`` exists, each ``python -c`` compiles).

The checks that fail: a command block without a marker, a ``doc-test`` naming no runner, a runner that no block
uses, a ``doc-skip`` without a reason, and a block whose commands fail.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from doc_pages import ROOT, DocBlock, doc_pages, fenced_blocks

COMMAND_FENCES = {"bash", "sh", "shell", "console", "python", "py"}
SHELL_FENCES = COMMAND_FENCES - {"python", "py"}


@dataclass(frozen=True)
class Runner:
    name: str
    run: Callable
    slow: bool


RUNNERS: dict[str, Runner] = {}


def runs(name: str, slow: bool = False):
    """Register the runner of the blocks marked ``<!-- doc-test: NAME -->``: ``fn(block, work, request)``."""

    def register(fn):
        RUNNERS[name] = Runner(name, fn, slow)
        return fn

    return register


def all_blocks() -> list[DocBlock]:
    return [block for page in doc_pages() for block in fenced_blocks(page) if block.info in COMMAND_FENCES]


# ---------------------------------------------------------------------------------------------------------------
# substitution and running
# ---------------------------------------------------------------------------------------------------------------


def placeholders(request) -> dict[str, str]:
    """What the model placeholders of the docs stand for in a test: the session's tiny checkpoints."""
    miescore = str(request.getfixturevalue("tiny_miescore_path"))
    table = {"path/or/repo-of-a-miescore-checkpoint": miescore, "CKPT": miescore}
    if any(name in request.node.callspec.params["block"].text for name in ("SR_CKPT", "spatialreward-checkpoint")):
        spatialreward = str(request.getfixturevalue("tiny_spatialreward_path"))
        table = {"path/or/repo-of-a-spatialreward-checkpoint": spatialreward, "SR_CKPT": spatialreward, **table}
    return table


def substitute(text: str, table: dict[str, str]) -> str:
    """``text`` with every placeholder of ``table`` (a whole word) replaced, the longest first."""
    for name in sorted(table, key=len, reverse=True):
        text = re.sub(rf"(?<![\w/]){re.escape(name)}(?![\w/])", table[name], text)
    return text


def shell_commands(text: str) -> list[list[str]]:
    """The commands of a shell block as bash splits them: continuation lines joined, comments dropped."""
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            commands.append(words)
    return commands


def without_env_prefix(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """``VAR=value ... command args`` -> ({VAR: value}, [command, args])."""
    env = {}
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        name, value = words[0].split("=", 1)
        env[name] = value
        words = words[1:]
    return env, words


def run_block(block: DocBlock, work: Path, request, capsys, statuses=(0,)) -> list[str]:
    """Run ``block`` (placeholders replaced) in ``work``; returns what each command printed (stdout).

    Shell blocks: every command must be a ``miescore`` line, run in this process, and exit with one of
    ``statuses``. Python blocks run with ``exec`` in a fresh namespace.
    """
    text = substitute(block.text, placeholders(request))
    monkeypatch = request.getfixturevalue("monkeypatch")
    monkeypatch.chdir(work)
    if block.info in ("python", "py"):
        exec(compile(text, f"<{block.where}>", "exec"), {"__name__": "__main__"})
        return [capsys.readouterr().out]
    from modeling_miescore.cli.main import main

    outputs = []
    for words in shell_commands(text):
        env, words = without_env_prefix(words)
        assert words[0] == "miescore", f"{block.where}: '{words[0]}' runs only in the slow suite (slow=True)"
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        status = main(words[1:])
        captured = capsys.readouterr()
        assert status in statuses, f"{block.where}: {shlex.join(words)} exited {status}:\n{captured.err[-3000:]}"
        outputs.append(captured.out)
    return outputs


def run_in_bash(block: DocBlock, work: Path, request, timeout: float = 1200,
                root: Path = ROOT) -> subprocess.CompletedProcess:
    """Run ``block`` (placeholders replaced) as written through ``bash -e`` in ``work``; it must exit 0.

    The docs' commands run from the repository root (``python trainers/...``): ``work`` gets links to the
    checkout's ``trainers/`` and ``dataset_scripts/``, so what a block writes (``runs/``) stays in ``work``;
    ``root``: the checkout whose package runs (a :func:`fresh_checkout`)."""
    for folder in ("trainers", "dataset_scripts"):
        if not (work / folder).exists():
            (work / folder).symlink_to(root / folder, target_is_directory=True)
    text = substitute(block.text, placeholders(request))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=work, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, (f"{block.where} exited {done.returncode}:\n{done.stdout[-2000:]}\n"
                                  f"{done.stderr[-4000:]}")
    return done


def fresh_checkout(folder: Path) -> Path:
    """The working tree's files that git tracks or would track (``git ls-files``: nothing ignored, no build output,
    no ``miescore-tiny/`` or ``runs/`` left by an earlier run) copied into ``folder``: a fresh clone of this tree."""
    import shutil

    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, folder / name)
    return folder


# ---------------------------------------------------------------------------------------------------------------
# the cheap check every shell block gets: commands, options and files exist
# ---------------------------------------------------------------------------------------------------------------


def command_parsers() -> dict[tuple[str, ...], object]:
    """``{("benchmark", "mie-bench"): parser, ...}``: every ``miescore`` (sub)command's parser, options added."""
    import argparse

    from modeling_miescore.cli.main import build_parser

    found = {}

    def walk(parser, path):
        parser.format_help()  # adds options deferred until a command is used (serve's settings)
        found[path] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, (*path, name))

    walk(build_parser(), ())
    return found


def miescore_problems(words: list[str], parsers) -> list[str]:
    """What is wrong with one ``miescore ...`` line (``words`` after ``miescore``): an unknown command, or an
    option its command lacks."""
    path = ()
    for word in words:
        if (*path, word) not in parsers:
            break
        path = (*path, word)
    has_subcommands = any(len(p) == len(path) + 1 and p[:len(path)] == path for p in parsers)
    if has_subcommands:
        shown = " ".join([*path, *words[len(path):len(path) + 1]])
        return [f"'miescore {shown}' is no command"]
    known = parsers[path]._option_string_actions
    options = [w.split("=", 1)[0] for w in words if re.match(r"^--?[A-Za-z]", w)]
    return [f"miescore {' '.join(path)} has no option {o}" for o in options if o not in known]


def check_commands(block: DocBlock, parsers) -> list[str]:
    """Problems with the commands of a shell block, found without running them."""
    problems = []
    for words in shell_commands(block.text):
        _, words = without_env_prefix(words)
        if words[:2] == ["accelerate", "launch"] or words[0] == "torchrun":
            if "-m" in words and words[words.index("-m") + 1] == "modeling_miescore.cli":
                words = ["miescore", *words[words.index("-m") + 2:]]
            else:
                words = ["python", *[w for w in words if w.endswith(".py")][:1],
                         *words[next((i for i, w in enumerate(words) if w.endswith(".py")), len(words)) + 1:]]
        if words[0] == "miescore":
            problems += miescore_problems(words[1:], parsers)
        elif words[0] == "python" and len(words) > 1:
            if words[1] == "-c":
                try:
                    compile(words[2], "<python -c>", "exec")
                except SyntaxError as err:
                    problems.append(f"python -c does not compile: {err}")
            elif words[1] == "-m":
                pass  # pytest and friends
            elif not (ROOT / words[1]).is_file():
                problems.append(f"no script {words[1]}")
            if "--config" in words and not (ROOT / words[words.index("--config") + 1]).is_file():
                problems.append(f"no config {words[words.index('--config') + 1]}")
    return [f"{block.where}: {p}" for p in problems]


# ---------------------------------------------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------------------------------------------


def test_every_command_block_is_marked():
    problems = []
    for block in all_blocks():
        if block.marker is None:
            problems.append(f"{block.where}: no '<!-- doc-test: NAME -->' or '<!-- doc-skip: REASON -->' before it")
        elif block.marker[0] == "doc-test" and block.marker[1] not in RUNNERS:
            problems.append(f"{block.where}: no runner '{block.marker[1]}' in tests/test_doc_blocks.py")
        elif block.marker[0] == "doc-skip" and len(block.marker[1].split()) < 3:
            problems.append(f"{block.where}: say what the block needs (doc-skip: REASON)")
    assert not problems, "\n".join(problems)


def test_every_runner_runs_a_block():
    used = {block.marker[1] for block in all_blocks() if block.marker and block.marker[0] == "doc-test"}
    assert not set(RUNNERS) - used, f"runners that no block uses: {sorted(set(RUNNERS) - used)}"


def test_an_unmarked_block_and_an_unknown_option_are_found(tmp_path, monkeypatch):
    page = tmp_path / "README.md"
    page.write_text("# x\n\n```bash\nmiescore score --model M --no-such-option\n```\n\n<!-- doc-skip: needs GPUs"
                    " and weights -->\n```bash\nmiescore benchmrk mie-bench\n```\n")
    monkeypatch.setattr("doc_pages.ROOT", tmp_path)
    blocks = fenced_blocks(page)
    assert [b.marker for b in blocks] == [None, ("doc-skip", "needs GPUs and weights")]
    parsers = command_parsers()
    assert check_commands(blocks[0], parsers) == ["README.md:3: miescore score has no option --no-such-option"]
    assert check_commands(blocks[1], parsers) == ["README.md:8: 'miescore benchmrk' is no command"]


def pytest_generate_tests(metafunc):
    """The block parameters, listed at collection time (the runners below are registered by then)."""
    if "block" not in metafunc.fixturenames:
        return
    if metafunc.function is test_the_commands_of_every_shell_block_exist:
        blocks = [b for b in all_blocks() if b.info in SHELL_FENCES and b.marker != ("doc-test", "cli-synopsis")]
        metafunc.parametrize("block", blocks, ids=[b.where for b in blocks])
    else:
        slow = metafunc.function is test_slow_doc_block_runs
        blocks = {}  # a block shown on two pages (the README's and its page's) runs once
        for b in all_blocks():
            if b.marker and b.marker[0] == "doc-test" and b.marker[1] in RUNNERS and RUNNERS[b.marker[1]].slow is slow:
                blocks.setdefault((b.marker[1], b.text), b)
        metafunc.parametrize("block", list(blocks.values()), ids=[f"{b.marker[1]}@{b.where}" for b in blocks.values()])


@pytest.fixture(scope="module")
def parsers():
    return command_parsers()


def test_the_commands_of_every_shell_block_exist(block, parsers):
    assert not check_commands(block, parsers), check_commands(block, parsers)


def test_doc_block_runs(block, tmp_path, request, capsys):
    RUNNERS[block.marker[1]].run(block, tmp_path, request, capsys)


@pytest.mark.slow
def test_slow_doc_block_runs(block, tmp_path, request, capsys):
    RUNNERS[block.marker[1]].run(block, tmp_path, request, capsys)


# ---------------------------------------------------------------------------------------------------------------
# runners: what each block needs in its working folder, and what it must produce
# ---------------------------------------------------------------------------------------------------------------


def write_cat_edit(work: Path) -> None:
    """``scene.jpg``, ``cat.png`` and ``edited.png``: the bundled cat-on-the-table edit (real photos)."""
    from modeling_miescore.data.example_edits import example_edits

    edit = example_edits(max_side=96)[0]
    edit["sources"][0].save(work / "scene.jpg")
    edit["sources"][1].save(work / "cat.png")
    edit["edited"].save(work / "edited.png")


def write_raw_mie_bench(folder: Path) -> Path:
    from modeling_miescore.testing import make_raw_mie_bench

    make_raw_mie_bench(folder, n_instances=5, n_models=3, seed=0, image_size=32, n_subjects=6,
                       raters_per_edit=6, n_unreliable=0)
    return folder


SCORE_NAMES = ("visual_quality", "instruction_following", "attribute_preservation", "overall")


@runs("demo")
def run_demo(block, work, request, capsys):
    (out,) = run_block(block, work, request, capsys)
    assert "cat" in out and "these numbers mean nothing" in out, out


@runs("score-one-edit")
def run_score_one_edit(block, work, request, capsys):
    write_cat_edit(work)
    (out,) = run_block(block, work, request, capsys)
    assert all(name in out for name in SCORE_NAMES), out


@runs("score-batch")
def run_score_batch(block, work, request, capsys):
    write_cat_edit(work)
    edit = {"sources": ["scene.jpg", "cat.png"], "edited": "edited.png", "instruction": "Put the cat on the table."}
    lines = [json.dumps({"id": f"e{k}", **edit}) for k in range(3)]
    (work / "edits.jsonl").write_text("\n".join(lines) + "\n")
    run_block(block, work, request, capsys)
    preds = [json.loads(line) for line in (work / "preds.jsonl").read_text().splitlines()]
    assert [p["id"] for p in preds] == ["e0", "e1", "e2"] and all(set(SCORE_NAMES) <= set(p) for p in preds)


@runs("score-batch-processes", slow=True)
def run_score_batch_processes(block, work, request, capsys):
    write_cat_edit(work)
    edit = {"sources": ["scene.jpg", "cat.png"], "edited": "edited.png", "instruction": "Put the cat on the table."}
    (work / "edits.jsonl").write_text("".join(json.dumps({"id": f"e{k}", **edit}) + "\n" for k in range(4)))
    run_in_bash(block, work, request)
    assert sorted(json.loads(line)["id"] for line in (work / "preds.jsonl").read_text().splitlines()) == \
        ["e0", "e1", "e2", "e3"]


@runs("python-quickstart")
def run_python_quickstart(block, work, request, capsys):
    write_cat_edit(work)
    run_block(block, work, request, capsys)


@runs("python-pipeline")
def run_python_pipeline(block, work, request, capsys):
    write_cat_edit(work)
    run_block(block, work, request, capsys)


@runs("python-spatialreward")
def run_python_spatialreward(block, work, request, capsys):
    write_cat_edit(work)
    run_block(block, work, request, capsys)


@runs("tokens")
def run_tokens(block, work, request, capsys):
    (out,) = run_block(block, work, request, capsys)
    assert "vs training" in out, out


@runs("doctor", slow=True)
def run_doctor(block, work, request, capsys):
    """A tiny random checkpoint is sane but its scores do not react as a trained one's: warnings (exit 1)."""
    (out,) = run_block(block, work, request, capsys, statuses=(0, 1))
    assert "fresh_process" in out and "0 error" in out, out


@runs("build-mie-bench")
def run_build_mie_bench(block, work, request, capsys):
    write_raw_mie_bench(work / "mie-raw")
    run_block(block, work, request, capsys)
    assert (work / "MIE-Bench" / "README.md").is_file() and list((work / "MIE-Bench" / "data").glob("test-*.parquet"))


@runs("benchmark-mie-bench")
def run_benchmark_mie_bench(block, work, request, capsys):
    from modeling_miescore.data.builders.mie_bench import build_mie_bench

    build_mie_bench(write_raw_mie_bench(work / "mie-raw"), work / "MIE-Bench", progress=False)
    run_block(block, work, request, capsys)
    assert "# MIE-Bench evaluation report" in (work / "report" / "report.md").read_text()
    assert (work / "report" / "report.html").is_file() and (work / "report" / "predictions.jsonl").is_file()


@runs("cli-synopsis")
def run_cli_synopsis(block, work, request, capsys):
    """The reference is a synopsis, not a run: it must name every command, and each line's options must exist.

    A line names its command by words (``benchmark mie-bench``), alternatives (``synthesize|candidates``) or a
    placeholder for every subcommand (``convert-benchmark NAME``); sibling commands named in its comment (``# or
    mer-bench``) count too. Options before the comment belong to the line's own commands, options in the comment
    to one of the commands the line names."""
    parsers = command_parsers()
    problems, named = [], set()
    for line in block.text.splitlines():
        code, _, comment = line.partition("  #")
        words = code.split()
        if not words or words[0] != "miescore":
            continue
        paths = {()}
        for word in words[1:]:
            if word.isupper():  # NAME: every subcommand
                grown = {p for p in parsers if len(p) and p[:-1] in paths}
            else:
                grown = {(*p, w) for p in paths for w in word.split("|") if (*p, w) in parsers}
            if not grown:
                break
            paths = grown
        siblings = {(*p[:-1], w) for p in paths for w in re.findall(r"[a-z][\w-]*", comment)
                    if p and (*p[:-1], w) in parsers}
        named |= paths | siblings
        for option in re.findall(r"(?<![\w-])--[a-z][\w-]*", code):
            problems += [f"miescore {' '.join(p)} has no option {option}" for p in paths
                         if option not in parsers[p]._option_string_actions]
        for option in re.findall(r"(?<![\w-])--[a-z][\w-]*", comment):
            if not any(option in parsers[p]._option_string_actions for p in paths | siblings):
                problems.append(f"no command of '{code.strip()}' has the option {option}")
    leaves = {path for path in parsers if path and not any(p[:-1] == path for p in parsers)}
    missing = sorted(" ".join(p) for p in leaves - named)
    assert not problems and not missing, (problems, f"commands the reference does not name: {missing}")


def test_the_synopsis_check_finds_a_missing_command_and_a_wrong_option(request, capsys):
    (block,) = [b for b in all_blocks() if b.marker == ("doc-test", "cli-synopsis")]
    without_doctor = DocBlock(block.page, block.line, block.info,
                              "".join(line + "\n" for line in block.text.splitlines() if "miescore doctor" not in line),
                              block.marker)
    with pytest.raises(AssertionError, match="does not name: \\['doctor'\\]"):
        run_cli_synopsis(without_doctor, None, request, capsys)
    wrong = DocBlock(block.page, block.line, block.info, block.text.replace("--max-batch", "--max-batches"),
                     block.marker)
    with pytest.raises(AssertionError, match="miescore serve has no option --max-batches"):
        run_cli_synopsis(wrong, None, request, capsys)


@runs("python-api")
def run_python_api(block, work, request, capsys):
    """Default suite: each ``from M import a, b`` names a module of the package that defines a and b."""
    problems = []
    for node in ast.walk(ast.parse(block.text)):
        if isinstance(node, ast.ImportFrom):
            module = ROOT / node.module.replace(".", "/")
            source = module.with_suffix(".py") if module.with_suffix(".py").is_file() else module / "__init__.py"
            if not source.is_file():
                problems.append(f"no module {node.module}")
                continue
            defined = module_names(source)
            problems += [f"{node.module} defines no {a.name}" for a in node.names if a.name not in defined]
    assert not problems, problems


@pytest.mark.slow
def test_the_python_api_block_imports():
    """Slow suite: the import block of docs/python_api.md, run in a fresh interpreter."""
    (block,) = [b for b in all_blocks() if b.marker == ("doc-test", "python-api")]
    done = subprocess.run([sys.executable, "-c", block.text], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]


def module_names(source: Path) -> set[str]:
    """Names bound at the top level of ``source``, and the string keys a lazy ``__getattr__`` module serves."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    if "__getattr__" in names:
        names.update(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))
    return names


# slow runners: run through bash as written


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@runs("serve", slow=True)
def run_serve(block, work, request, capsys):
    """Starts the server as written (on a free port instead of 8000, which another test may hold) and asks it for
    ``/health``."""
    port = free_port()
    text = substitute(block.text, placeholders(request)).replace("--port 8000", f"--port {port}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(["bash", "-c", f"exec {text.strip()}"], cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert server.poll() is None, server.communicate()[1][-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                    assert json.loads(answer.read())["status"] == "ok"
                    break
            except OSError:
                assert time.monotonic() < deadline, "the server did not answer /health"
                time.sleep(0.5)
    finally:
        server.terminate()
        server.communicate(timeout=60)


@runs("editor-rl-tiny", slow=True)
def run_editor_rl_tiny(block, work, request, capsys):
    run_in_bash(block, work, request)
    metrics = (work / "runs/flow-grpo-tiny/metrics.jsonl").read_text().splitlines()  # under the working folder
    assert len(metrics) == 30, len(metrics)


@runs("editor-rl-hacking", slow=True)
def run_editor_rl_hacking(block, work, request, capsys):
    """The tiny recipe against an opposite gold: the alarm stops it, the curves picture and the best are there."""
    run_in_bash(block, work, request)
    out = work / "runs/flow-grpo-tiny-gold"
    run = json.loads((out / "run.json").read_text())
    assert run["hacking_alarms"] and run["stopped"]["step"] < 30 and (out / "eval_curves.png").is_file()
    assert run["best_model"]["metric"] == "eval/gold"


@runs("editor-rl-tiny-edit", slow=True)
def run_editor_rl_tiny_edit(block, work, request, capsys):
    """The editor-RL story as written, in a fresh checkout (the tracked files only: nothing built before): train,
    edit with the run, score the edits, the editor benchmarks offline, the comparison; no option copied."""
    checkout = fresh_checkout(work / "checkout")
    done = run_in_bash(block, checkout, request, timeout=2400, root=checkout)
    print(done.stdout[-3000:], done.stderr[-6000:], sep="\n")  # the walk's commands and outputs, for the record
    assert len((checkout / "runs/flow-grpo-tiny/metrics.jsonl").read_text().splitlines()) == 30
    assert len((checkout / "preds.jsonl").read_text().splitlines()) == 4
    comparison = json.loads((checkout / "cmp/report.json").read_text())
    assert comparison["runs"] == ["base", "tuned"] and comparison["by"] == "miescore"
    for kind in ("gedit", "imgedit"):
        delta = comparison["table3"]["tuned"][kind]["delta"]
        assert delta["n_paired"] == {"gedit": 6, "imgedit": 6}[kind] and delta["value"] is not None
    assert all("RANDOM WEIGHTS" in (checkout / folder / "report.md").read_text()
               for folder in ("bench/reports/comparison", "cmp"))  # a comparison of labelled runs says so too


@runs("editors-demo", slow=True)
def run_editors_demo(block, work, request, capsys):
    """The offline editor benchmarks: every report labelled random weights, the comparison's three views."""
    done = run_in_bash(block, work, request)
    comparison = json.loads((work / "bench-demo/reports/comparison/report.json").read_text())
    assert comparison["runs"] == ["base: first sample", "base: selected", "base: judge's best of N"]
    assert all("RANDOM WEIGHTS" in (work / "bench-demo/reports" / name / "report.md").read_text()
               for name in ("gedit-base", "imgedit-base", "comparison"))
    assert "Warning" not in done.stderr and "Traceback" not in done.stderr


@runs("train-miescore-tiny", slow=True)
def run_train_miescore_tiny(block, work, request, capsys):
    run_in_bash(block, work, request)
    assert (work / "runs/tiny/train/export/merged/config.json").is_file()


@runs("train-spatialreward-tiny", slow=True)
def run_train_spatialreward_tiny(block, work, request, capsys):
    run_in_bash(block, work, request)
    assert (work / "runs/tiny/sft").is_dir() and (work / "runs/tiny/grpo").is_dir()
