"""The reward server's settings are declared once (``serving/settings.py``): every field is a ``miescore serve``
option and a ``MIESCORE_SERVE_*`` variable, its bounds are enforced from the declaration in Python, on the command
line and in the environment, and a field added to the declaration reaches the real ``serve`` command."""

from __future__ import annotations

import annotated_types
import pytest
from pydantic import Field

from modeling_miescore.cli.main import build_parser, main
from modeling_miescore.serving import settings as settings_module
from modeling_miescore.serving.settings import ServerSettings
from modeling_miescore.utils.declared_settings import (
    SettingsError,
    env_name,
    option_name,
    settings_from_options,
)

FIELDS = ServerSettings.model_fields
SECRET = "api_key"


@pytest.fixture(autouse=True)
def _no_server_variables(monkeypatch):
    import os

    for name in [n for n in os.environ if n.startswith(ServerSettings.ENV_PREFIX)]:
        monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def parser():
    return build_parser()


@pytest.fixture
def serve_args(parser):
    return lambda *argv: parser.parse_args(["serve", "--model", "m", *argv])


def _other_value(name: str) -> str:
    """A valid value of setting ``name`` other than its default, as text."""
    default = FIELDS[name].default
    if isinstance(default, bool):
        return "true"
    if isinstance(default, int):
        return str(default - 1 if default > 1 else default + 1)
    return str(default / 2)


def _past_bound(name: str) -> str | None:
    """A value just outside the declared bound of ``name`` (None: the field declares none)."""
    for bound in FIELDS[name].metadata:
        if isinstance(bound, annotated_types.Le):
            return str(bound.le + 1)
        if isinstance(bound, annotated_types.Gt):
            return str(bound.gt)
        if isinstance(bound, annotated_types.Ge):
            return str(bound.ge - 1)
    return None


def test_every_setting_is_an_option_and_a_variable_and_the_option_wins(parser, serve_args, capsys):
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--help"])
    help_text = capsys.readouterr().out
    for name in FIELDS:
        assert f"--{option_name(name)}{'-env' if name == SECRET else ''} " in help_text, name

    plain = [n for n in FIELDS if n != SECRET]
    environ = {env_name(ServerSettings, n): _other_value(n) for n in plain} | {"MIESCORE_SERVE_API_KEY": "k1"}
    from_env = settings_from_options(ServerSettings, serve_args(), environ=environ)
    for name in plain:
        assert getattr(from_env, name) != FIELDS[name].default, name
        assert getattr(from_env, name) == ServerSettings(**{name: _other_value(name)}).__dict__[name]
    assert from_env.api_key == "k1"

    argv = [a for n in plain if not isinstance(FIELDS[n].default, bool)
            for a in (f"--{option_name(n)}", str(FIELDS[n].default))]
    given = settings_from_options(ServerSettings, serve_args(*argv, "--api-key-env", "MY_KEY"),
                                  environ={**environ, "MY_KEY": "k2"})
    assert given == ServerSettings(public_metrics=True, api_key="k2")  # each option beat its variable
    assert settings_from_options(ServerSettings, serve_args(), environ={}) == ServerSettings()


def test_every_numeric_setting_is_bounded_and_the_bound_is_enforced_everywhere(serve_args, capsys):
    numeric = [n for n, f in FIELDS.items() if f.annotation in (int, float)]
    assert len(numeric) == 19
    for name in numeric:
        bad = _past_bound(name)
        assert bad is not None, f"{name} declares no bound"
        with pytest.raises(ValueError, match=rf"ServerSettings\.{name} must be .*got {bad}"):
            ServerSettings(**{name: FIELDS[name].annotation(bad)})
        flag = "--" + option_name(name)
        with pytest.raises(SettingsError, match=rf"^{flag} must be .*got {bad} \(") as error:
            settings_from_options(ServerSettings, serve_args(flag, bad), environ={})
        assert FIELDS[name].description in str(error.value)  # the message says what the setting is
        with pytest.raises(SettingsError, match=rf"^{env_name(ServerSettings, name)} must be "):
            settings_from_options(ServerSettings, serve_args(), environ={env_name(ServerSettings, name): bad})
    # the command: one line, exit status 2, nothing loaded
    assert main(["serve", "--model", "m", "--max-instruction-chars", "4097", "--max-wait-ms", "-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("miescore serve: error: --max-wait-ms must be >= 0, got -1") and "\n" not in err, err
    assert "; --max-instruction-chars must be <= 4096, got 4097 (longest instruction, in characters; at most the " \
           "model's limit" in err
    with pytest.raises(ValueError, match="model's limit"):
        ServerSettings(max_instruction_chars=FIELDS["max_instruction_chars"].default + 1)
    with pytest.raises(SettingsError, match="--max-batch: input should be a valid integer, unable to parse string "
                                            "as an integer; got x"):
        settings_from_options(ServerSettings, serve_args("--max-batch", "x"), environ={})
    with pytest.raises(ValueError, match="api_key: string should have at least 1 character; got [(]hidden[)]"):
        ServerSettings(api_key="")
    with pytest.raises(ValueError, match="max_bacth is not a setting; the settings are: max_batch, "):
        ServerSettings(max_bacth=3)


def test_the_api_key_never_comes_from_the_command_line_and_is_never_shown(serve_args, capsys):
    # "--api-key KEY" is no option (options are matched exactly, never by prefix), and the refusal does not echo KEY
    with pytest.raises(SystemExit) as stopped:
        serve_args("--api-key", "s3cret")
    assert stopped.value.code == 2
    refusal = capsys.readouterr().err
    assert "--api-key" in refusal and "did you mean --api-key-env" in refusal and "s3cret" not in refusal
    with pytest.raises(SystemExit):
        serve_args("--api-key=s3cret")
    assert "s3cret" not in capsys.readouterr().err
    with pytest.raises(SettingsError, match="--api-key-env s3cret: that environment variable is unset"):
        settings_from_options(ServerSettings, serve_args("--api-key-env", "s3cret"), environ={})
    settings = settings_from_options(ServerSettings, serve_args("--api-key-env", "K"), environ={"K": "s3cret"})
    assert settings.api_key == "s3cret" and "s3cret" not in repr(settings)
    # an empty variable counts as unset: no key
    assert settings_from_options(ServerSettings, serve_args(), environ={"MIESCORE_SERVE_API_KEY": ""}).api_key is None


class _Captured(Exception):
    pass


def test_a_field_added_to_the_declaration_reaches_miescore_serve(monkeypatch, capsys):
    """The walk "add a server setting": one field in the declaration, nothing else edited."""

    class WithKnob(ServerSettings):
        prefetch_groups: int = Field(3, gt=0, le=8, description="groups decoded ahead of the model")

    monkeypatch.setattr(settings_module, "ServerSettings", WithKnob)
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "--prefetch-groups PREFETCH_GROUPS" in capsys.readouterr().out
    assert main(["serve", "--model", "m", "--prefetch-groups", "9"]) == 2
    assert "--prefetch-groups must be <= 8, got 9 (groups decoded ahead" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"WithKnob\.prefetch_groups must be > 0"):
        WithKnob(prefetch_groups=0)

    # a good value reaches the settings the real command serves with (the model load and app are stand-ins)
    from modeling_miescore.serving import app, backends

    def capture(backend, settings):
        raise _Captured(settings)

    from modeling_miescore.cli import serve

    monkeypatch.setattr(serve, "quiet_transformers", lambda: None)  # imports transformers: not what is tested
    monkeypatch.setattr(backends, "load_backend", lambda *a, **k: object())
    monkeypatch.setattr(app, "create_app", capture)
    monkeypatch.setenv("MIESCORE_SERVE_PREFETCH_GROUPS", "5")
    with pytest.raises(_Captured) as served:
        main(["serve", "--model", "m", "--port", "0", "--max-batch", "4"])
    settings = served.value.args[0]
    assert isinstance(settings, WithKnob) and (settings.prefetch_groups, settings.max_batch) == (5, 4)
