"""Fuzz the command line in-process: SF_* variables, config files, numeric and text options,
paths. Every run exits 0, 1 or 2 without a traceback; a refusal is a short error naming
what to fix (a usage error names the option, a settings error the variable or field)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import typer
from click.testing import CliRunner, Result
from fuzz_strategies import fuzz
from hypothesis import given
from hypothesis import strategies as st

from safactory.cli.main import app
from safactory.infra import config
from safactory.infra.config import Settings

COMMAND = typer.main.get_command(app)  # built once: typer rebuilds it on every invoke
RUNNER = CliRunner()
WORK = Path(tempfile.mkdtemp(prefix="sf-fuzz-cli-"))
MISSING_DB = str(WORK / "no-such-db")
CLOSED = "127.0.0.1:1"
"""A loopback port nothing listens on: connecting fails at once."""

# Environment values: no NUL and no surrogates (the OS cannot carry them).
env_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=20)
numbers = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats().map(str),
    st.sampled_from(["", "-", "1e999", "nan", "inf", "-inf", "0x10", "1_000", " 3", "٣"]),
    env_text,
)


def run(args: list[str], env: dict[str, str] | None = None) -> Result:
    """One in-process run with fresh settings (``env`` set for its duration)."""
    config.get_settings.cache_clear()
    try:
        return RUNNER.invoke(
            COMMAND, args, env={"COLUMNS": "200", **(env or {})}, prog_name="safactory"
        )
    finally:
        config.get_settings.cache_clear()


def assert_clean(result: Result, names: tuple[str, ...] = ()) -> None:
    """Exit 0/1/2, no traceback, and a refusal in a few lines naming one of ``names``."""
    said = result.output + result.stderr
    assert result.exit_code in (0, 1, 2), (result.exit_code, said, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in said, said
    if result.exit_code == 0:
        return
    lines = [line for line in result.stderr.split("\n") if line.strip(" │╭╰─")]
    limit = 5 if result.exit_code == 2 else 1  # usage errors: usage, hint, boxed message
    assert 1 <= len(lines) <= limit, result.stderr
    if names:
        assert any(name in result.stderr for name in names), (names, result.stderr)


# --------------------------------------------------------------------------- settings

FIELDS = sorted(Settings.model_fields)
ENV_NAMES = [f"SF_{f.upper()}" for f in FIELDS]


@fuzz()
@given(st.dictionaries(st.sampled_from(ENV_NAMES), env_text | numbers, min_size=1, max_size=3))
def test_any_sf_variables_run_or_are_named_in_one_line(env: dict[str, str]) -> None:
    # `broker status` reads settings and local files only: no broker needed
    assert_clean(run(["broker", "status", "--json"], env), names=tuple(env))


toml_values = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats().map(str),
    env_text.map(lambda t: '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'),
    st.sampled_from(
        [
            "true",
            "[]",
            "[1, 2]",
            "{}",
            "{a = 1}",
            "1979-05-27",
            '"uvloop"',
            '"asyncio"',
            '"127.0.0.1:9092"',
            '""',
        ]
    ),
    env_text,
)
toml_lines = st.tuples(
    st.sampled_from([*FIELDS, "kafka_bootstrapp", "[trainer]", "x.y"]), toml_values
).map(lambda kv: f"{kv[0]} = {kv[1]}")
toml_files = st.one_of(
    st.lists(toml_lines, max_size=4).map(lambda lines: "\n".join(lines).encode()),
    st.binary(max_size=60),
)


@fuzz()
@given(toml_files)
def test_any_config_file_runs_or_is_named_in_one_line(content: bytes) -> None:
    path = WORK / "safactory.toml"
    path.write_bytes(content)
    assert_clean(run(["broker", "status", "--json"], {"SF_CONFIG": str(path)}), names=(str(path),))


def test_a_missing_config_file_is_named_in_one_line() -> None:
    result = run(["broker", "status"], {"SF_CONFIG": str(WORK / "nope.toml")})
    assert result.exit_code == 1
    assert_clean(result, names=("SF_CONFIG=",))


# --------------------------------------------------------------------------- options


@fuzz()
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "--table": st.sampled_from(["steps", "verdicts", "skills"]) | env_text,
            "--limit": numbers,
            "--since": numbers,
            "--until": numbers,
            "--severity": st.sampled_from(["low", "HIGH", "none"]) | env_text,
            "--policy-version": numbers,
            "--min-policy-version": numbers,
            "--env": env_text,
        },
    )
)
def test_query_options_run_or_are_refused_naming_the_option(options: dict[str, str]) -> None:
    args = ["query", "--db", MISSING_DB, *(x for kv in options.items() for x in kv)]
    assert_clean(run(args), names=(*options, MISSING_DB, "table"))


@fuzz()
@given(
    st.fixed_dictionaries(
        {"--out": st.sampled_from(["x.jsonl", "x.parquet", "x", "x.csv"])},
        optional={
            "--format": st.sampled_from(["jsonl", "parquet"]) | env_text,
            "--min-reward": numbers,
            "--since": numbers,
            "--policy-version": numbers,
            "--tag": env_text,
        },
    )
)
def test_export_options_run_or_are_refused_naming_the_option(options: dict[str, str]) -> None:
    options["--out"] = str(WORK / options["--out"])
    args = ["export", "--db", MISSING_DB, *(x for kv in options.items() for x in kv)]
    assert_clean(run(args), names=(*options, MISSING_DB))


names = env_text.filter(lambda n: "/" not in n and n.strip(" .") != "")
paths = st.one_of(
    names.map(lambda n: str(WORK / n)),  # no such file, mostly
    st.sampled_from(["/dev/null", str(WORK / "bad.json"), str(WORK / "empty")]),
)
"""Paths an audit may be pointed at (not a folder as large as / or the checkout)."""
(WORK / "bad.json").write_bytes(b'{"contents": 1')
(WORK / "empty").mkdir(exist_ok=True)


@fuzz()
@given(
    paths,
    st.sampled_from(["rjudge", "openai", "generic"]) | env_text,
    st.none() | st.sampled_from(["harm.data_leak", "nope", ",", ""]) | env_text,
    st.none() | numbers,
)
def test_audit_paths_and_options_run_or_are_refused_in_one_line(
    path: str, fmt: str, checkers: str | None, timeout: str | None
) -> None:
    args = ["audit", path, "--format", fmt]
    if checkers is not None:
        args += ["--checkers", checkers]
    if timeout is not None:
        args += ["--judge-timeout", timeout]
    assert_clean(run(args))


@fuzz(scale=0.3)
@given(paths, st.sampled_from(["rjudge", "openai"]) | env_text)
def test_import_refuses_bad_paths_before_connecting(path: str, fmt: str) -> None:
    result = run(["import", path, "--format", fmt], {"SF_KAFKA_BOOTSTRAP": CLOSED})
    assert_clean(result)
    assert result.exit_code != 0


# --------------------------------------------------------------------------- no broker


@pytest.mark.parametrize(
    "args",
    [["topics", "list"], ["topics", "create"], ["import", "TRACE", "--format", "generic"]],
    ids=["topics-list", "topics-create", "import"],
)
def test_commands_against_a_closed_port_fail_in_one_line(args: list[str]) -> None:
    trace = WORK / "one.json"
    trace.write_text('{"id": "t1", "steps": [{"role": "agent", "content": "hi"}]}')
    args = [str(trace) if a == "TRACE" else a for a in args]
    result = run(args, {"SF_KAFKA_BOOTSTRAP": CLOSED})
    assert result.exit_code == 1
    assert_clean(result, names=(f"cannot reach the Kafka broker at {CLOSED}",))


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        # a pydantic ValidationError traceback
        (["broker", "status"], {"SF_BROKER_PORT": "abc"}, "SF_BROKER_PORT='abc'"),
        # a TOMLDecodeError traceback
        (["broker", "status"], {"SF_CONFIG": "BAD_TOML"}, "not valid TOML"),
        # the error did not say which option held the bad time
        (["query", "--db", MISSING_DB, "--since", "-"], {}, "--since"),
        # nan passed as a time
        (["query", "--db", MISSING_DB, "--until", "nan"], {}, "--until 'nan'"),
        # a control character in a path broke the error over two lines
        (["audit", str(WORK / "a\x1eb")], {}, "a\\x1eb"),
    ],
    ids=["bad-port-variable", "bad-toml", "since-not-named", "nan-until", "control-character"],
)
def test_minimal_cases_the_fuzzer_found(args: list[str], env: dict[str, str], named: str) -> None:
    bad_toml = WORK / "bad.toml"
    bad_toml.write_text("broker_port = = 1")
    env = {k: str(bad_toml) if v == "BAD_TOML" else v for k, v in env.items()}
    result = run(args, env)
    assert result.exit_code == 1
    assert_clean(result, names=(named,))
