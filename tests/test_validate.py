"""validate: every rule with its position, every format, every exit code; nothing crashes it."""

from __future__ import annotations

import json
import os
import re
import string
import subprocess
import sys

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_clean_error
from tests.support import docs
from volumetool.config import RULES, Loader, _Checker, check_source
from volumetool.settings import base_url_problem

GOOD = """\
name: bot
model:
  name: gpt-4.1
  small: gpt-4.1-mini
  api: openai
  base_url: https://api.openai.com/v1
  api_key_env: OPENAI_API_KEY
memory:
  scope: thread
  persistent: true
  compact_at_tokens: 50000
"""


def findings(text: str | bytes, **kw):
    data = text.encode() if isinstance(text, str) else text
    return check_source(data, "agent.yaml", **kw)[0]


def only(text: str | bytes, rule: str, **kw):
    """The findings of `rule`, as (line, column, severity, path)."""
    return [(f.line, f.column, f.severity, f.path) for f in findings(text, **kw) if f.rule == rule]


def test_a_good_config_has_no_findings():
    assert findings(GOOD) == []


CASES = [
    # (text, rule, [(line, column, severity, path)])
    ("a: [1, 2\n", "yaml-syntax", [(2, 1, "error", "")]),
    ("memory: [scope, thread]\n", "memory-not-mapping", [(1, 9, "error", "$.memory")]),
    ("- a\n- b\n", "config-not-mapping", [(1, 1, "error", "$")]),
    ("", "config-not-mapping", [(1, 1, "error", "$")]),
    (
        "memory:\n  scope: thread\n  scope: none\n",
        "duplicate-key",
        [(3, 3, "error", "$.memory.scope")],
    ),
    ("memory:\n  scpoe: thread\n", "memory-unknown-key", [(2, 3, "error", "$.memory.scpoe")]),
    ("memory:\n  scope: threads\n", "scope-value", [(2, 10, "error", "$.memory.scope")]),
    (
        "memory:\n  persistent: 'true'\n",
        "persistent-type",
        [(2, 15, "error", "$.memory.persistent")],
    ),
    ("memory:\n  persistent: 1\n", "persistent-type", [(2, 15, "error", "$.memory.persistent")]),
    (
        "memory:\n  persistent: yes\n",
        "persistent-yaml11-bool",
        [(2, 15, "warning", "$.memory.persistent")],
    ),
    (
        "memory:\n  persistent: off\n",
        "persistent-yaml11-bool",
        [(2, 15, "warning", "$.memory.persistent")],
    ),
    (
        "memory:\n  scope: thread\n  compact_at_tokens: 0\n",
        "compact-at-tokens-type",
        [(3, 22, "error", "$.memory.compact_at_tokens")],
    ),
    (
        "memory:\n  scope: thread\n  compact_at_tokens: true\n",
        "compact-at-tokens-type",
        [(3, 22, "error", "$.memory.compact_at_tokens")],
    ),
    (
        "memory:\n  scope: thread\n  compact_at_tokens: yes\n",
        "compact-at-tokens-type",
        [(3, 22, "error", "$.memory.compact_at_tokens")],
    ),
    (
        "memory:\n  scope: thread\n  compact_at_tokens: -5\n",
        "compact-at-tokens-type",
        [(3, 22, "error", "$.memory.compact_at_tokens")],
    ),
    (
        "memory:\n  scope: thread\n  compact_at_tokens: 50000.5\n",
        "compact-at-tokens-type",
        [(3, 22, "error", "$.memory.compact_at_tokens")],
    ),
    (
        "memory:\n  scope: thread\n  compact_at_tokens: 50k\n",
        "compact-at-tokens-type",
        [(3, 22, "error", "$.memory.compact_at_tokens")],
    ),
    (
        "memory:\n  scope: thread\n  compact_at_tokens: '50000'\n",
        "compact-at-tokens-type",
        [(3, 22, "error", "$.memory.compact_at_tokens")],
    ),
    (
        "memory:\n  scope: thread\n  compact_at_tokens: no\n",
        "compact-at-tokens-yaml11-bool",
        [(3, 22, "warning", "$.memory.compact_at_tokens")],
    ),
    (
        "memory:\n  compact_at_tokens: 40000\n",
        "compact-at-tokens-no-effect",
        [(2, 3, "warning", "$.memory.compact_at_tokens")],
    ),
    (
        "memory:\n  scope: none\n  compact_at_tokens: false\n",
        "compact-at-tokens-no-effect",
        [(3, 3, "warning", "$.memory.compact_at_tokens")],
    ),
    (
        "memory:\n  scope: thread\n  compact_at_tokens: 200\n",
        "compact-at-tokens-implausible",
        [(3, 22, "warning", "$.memory.compact_at_tokens")],
    ),
    (
        "memory:\n  scope: thread\n  compact_at_tokens: 5000000\n",
        "compact-at-tokens-implausible",
        [(3, 22, "warning", "$.memory.compact_at_tokens")],
    ),
    ("memory:\n", "memory-empty", [(1, 1, "warning", "$.memory")]),
    ("model: [gpt-4.1]\n", "model-type", [(1, 8, "error", "$.model")]),
    ("model:\n  name: 4\n", "model-key-type", [(2, 9, "error", "$.model.name")]),
    ("model:\n  small: gpt-4.1-mini\n", "model-name-missing", [(2, 3, "error", "$.model")]),
    ("model:\n  name: a\n  smal: b\n", "model-unknown-key", [(3, 3, "warning", "$.model.smal")]),
    ("model:\n  name: a\n  api: azure\n", "model-api", [(3, 8, "error", "$.model.api")]),
    (
        "model:\n  name: a\n  base_url: ftp://x\n",
        "model-base-url",
        [(3, 13, "error", "$.model.base_url")],
    ),
    (
        "model:\n  name: a\n  api_key_env: my key\n",
        "model-api-key-env",
        [(3, 16, "error", "$.model.api_key_env")],
    ),
    ("model:\n  name: a\n  auth: basic\n", "model-auth", [(3, 9, "error", "$.model.auth")]),
    (
        "model:\n  name: a\n  max_tokens_param: max_output_tokens\n",
        "model-max-tokens-param",
        [(3, 21, "error", "$.model.max_tokens_param")],
    ),
    (
        "model:\n  name: a\n  api_version: latest\n",
        "model-api-version",
        [(3, 16, "warning", "$.model.api_version")],
    ),
    (
        "model:\n  name: a\n  api: anthropic\n  max_tokens_param: max_tokens\n",
        "model-no-effect",
        [(4, 3, "warning", "$.model.max_tokens_param")],
    ),
    (
        "model:\n  name: a\n  api: openai-responses\n  max_tokens_param: max_tokens\n",
        "model-no-effect",
        [(4, 3, "warning", "$.model.max_tokens_param")],
    ),
    (
        "model:\n  name: a\n  api_key: hunter2\n",
        "literal-secret",
        [(3, 12, "error", "$.model.api_key")],
    ),
    (
        "model:\n  name: a\n  api_key_env: sk-proj-abcdefghijklmnopqrstuvwx\n",
        "literal-secret",
        [(3, 16, "error", "$.model.api_key_env")],
    ),
    (
        "channels:\n  slack:\n    token: xoxb-1234567890-abcdefghij\n",
        "literal-secret",
        [(3, 12, "error", "$.channels.slack.token")],
    ),
    (
        "memory:\n  scope: thread\nmodel: gpt-4.1\n",
        "summary-model-main",
        [(1, 1, "note", "$.model.small")],
    ),
    ("memroy:\n  scope: thread\nmodel: a\n", "block-name-typo", [(1, 1, "error", "$.memroy")]),
    ("memory:\n  scope: thread\n", "compaction-no-model", [(1, 1, "error", "$.model")]),
    ("a: !env FOO\n", "yaml-unknown-tag", [(1, 4, "error", "$.a")]),
    ("a: &x [1, *x]\n", "yaml-recursive-alias", [(1, 4, "error", "$.a[1]")]),
    ("a: 1\n---\nb: 2\n", "yaml-multiple-documents", [(3, 1, "error", "")]),
    (b"memory:\n  scope: \xff\n", "yaml-encoding", [(2, 10, "error", "")]),
    ("a: " + "[" * 2000 + "]" * 2000 + "\n", "yaml-too-deep", [(1, 1003, "error", "")]),
]


@pytest.mark.parametrize(("text", "rule", "expected"), CASES, ids=[c[1] for c in CASES])
def test_each_rule_with_its_position(text, rule, expected):
    assert only(text, rule) == expected


def test_every_rule_has_a_case():
    assert {c[1] for c in CASES} | {"file-too-large"} == set(RULES)


def test_secret_values_are_never_echoed():
    text = "model:\n  name: a\n  api_key: sk-live-abcdefghijklmnopqrstuvwxyz\n"
    for finding in findings(text):
        assert "sk-live" not in finding.message


def test_env_references_are_not_secrets():
    assert only("model:\n  name: a\n  api_key: ${OPENAI_API_KEY}\n", "literal-secret") == []


def test_messages_say_how_to_fix():
    by_rule = {
        f.rule: f.message
        for f in findings(
            "memory:\n  scope: thread\n  persistent: yes\n  compact_at_tokens: 0\n  scop: x\n"
        )
    }
    assert "write true" in by_rule["persistent-yaml11-bool"]
    assert "use false to disable" in by_rule["compact-at-tokens-type"]
    assert "did you mean 'scope'" in by_rule["memory-unknown-key"]
    assert "scope, persistent, compact_at_tokens" in by_rule["memory-unknown-key"]


def test_merge_keys_are_applied_and_checked():
    text = (
        "base: &base\n  scope: thread\n  compact_at_tokens: 0\n"
        "memory:\n  <<: *base\n  persistent: true\n"
    )
    assert only(text, "compact-at-tokens-type") == [(3, 22, "error", "$.memory.compact_at_tokens")]
    config = check_source(
        (b"base: &base\n  scope: thread\nmemory:\n  <<: *base\nmodel: {name: a, small: b}\n"),
        "x",
    )[1]
    assert config.memory.scope == "thread"


def test_file_too_large():
    assert only(GOOD, "file-too-large", max_bytes=10) == [(1, 1, "error", "")]


def test_billion_laughs_is_walked_once_per_node():
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for n in range(1, 30):
        lines.append(f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]")
    text = "\n".join(lines) + "\nmemory:\n  scope: thread\n"
    root = yaml.compose(text, Loader=Loader)
    visited = list(_Checker("f", text).walk(root))
    assert len(visited) < 100  # 9**30 if an alias were ever expanded
    assert [f.rule for f in findings(text)] == ["compaction-no-model"]


# -- the command -------------------------------------------------------------------------


@pytest.fixture
def configs(tmp_path):
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "warn.yml").write_text("memory:\n  persistent: on\n")
    (tmp_path / "sub" / "bad.yaml").write_text("memory:\n  scope: everything\n")
    (tmp_path / "notes.txt").write_text("not yaml: [")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.yaml").write_text("memory: 5\n")
    return tmp_path


def test_directories_are_recursed_and_findings_sorted(configs, run_cli):
    result = run_cli("validate", configs)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines == [
        f"{configs}/sub/bad.yaml:2:10: error: $.memory.scope: scope is the string 'everything';"
        " it must be thread or none [scope-value]",
        f"{configs}/sub/warn.yml:2:15: warning: $.memory.persistent: on is read as true only by"
        " YAML 1.1 parsers; write true [persistent-yaml11-bool]",
    ]
    assert "3 files checked: 1 error, 1 warning, 0 notes" in result.stderr


def test_exit_codes(configs, run_cli):
    assert run_cli("validate", configs / "good.yaml").exit_code == 0
    assert run_cli("validate", configs / "sub" / "warn.yml").exit_code == 0
    assert run_cli("validate", "--strict", configs / "sub" / "warn.yml").exit_code == 1
    assert run_cli("validate", configs / "sub" / "bad.yaml").exit_code == 1
    missing = run_cli("validate", configs / "good.yaml", configs / "missing.yaml")
    assert missing.exit_code == 2
    assert "missing.yaml: cannot read" in missing.stderr


def test_stdin_with_a_filename(run_cli):
    result = run_cli(
        "validate", "-", "--stdin-filename", "agents/bot.yaml", input="memory:\n  scope: x\n"
    )
    assert result.exit_code == 1
    assert result.stdout.startswith("agents/bot.yaml:2:10: error:")


def test_stdin_named_twice_is_a_usage_error(run_cli, configs):
    """The second `-` would read nothing and report an empty file that is not there."""
    result = run_cli("validate", "-", configs / "good.yaml", "-", input=GOOD)
    assert_clean_error(result, 2, "stdin can be read only once")


def test_json_format(configs, run_cli):
    result = run_cli(
        "validate", "--format", "json", configs / "good.yaml", configs / "sub" / "bad.yaml"
    )
    document = json.loads(result.stdout)
    assert document["findings"] == [
        {
            "file": str(configs / "sub" / "bad.yaml"),
            "line": 2,
            "column": 10,
            "path": "$.memory.scope",
            "severity": "error",
            "rule": "scope-value",
            "message": "scope is the string 'everything'; it must be thread or none",
        }
    ]
    assert [(f["status"], f["errors"]) for f in document["files"]] == [("passed", 0), ("failed", 1)]


def test_github_format_escapes_and_keeps_text_lines(tmp_path, run_cli):
    path = tmp_path / "a,b:c.yaml"
    path.write_text('memory:\n  scope: "50%\\nx"\n')
    result = run_cli("validate", path, env={"GITHUB_ACTIONS": "true"})
    first, second = result.stdout.splitlines()[:2]
    assert first.startswith(
        f"::error file={tmp_path!s}/a%2Cb%3Ac.yaml,line=2,col=10,title=scope-value::"
    )
    assert "50%25" in first and "\n" not in first
    assert second.startswith(str(path))


def test_sarif_is_valid_sarif_2_1_0(configs, run_cli):
    schema = json.loads(
        (
            __import__("pathlib").Path(__file__).parent / "data" / "sarif-2.1.0-subset.schema.json"
        ).read_text()
    )
    result = run_cli("validate", "--format", "sarif", configs)
    log = json.loads(result.stdout)
    jsonschema.validate(log, schema)
    run = log["runs"][0]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert rule_ids == list(RULES) and len(set(rule_ids)) == len(rule_ids)
    for sarif_result in run["results"]:
        assert rule_ids[sarif_result["ruleIndex"]] == sarif_result["ruleId"]
    assert {r["ruleId"] for r in run["results"]} == {"scope-value", "persistent-yaml11-bool"}


def test_sarif_names_a_file_whose_name_is_not_utf8_by_its_bytes(tmp_path):
    """A file name that is not UTF-8 (held by Python as lone surrogates) is a URI of its
    bytes, percent-encoded, as in every other format; it was an error that wrote no SARIF."""
    import os
    import subprocess
    import sys

    (tmp_path / os.fsdecode(b"\xff.yaml")).write_text("memory:\n  scope: x\n")
    done = subprocess.run(
        [sys.executable, "-m", "volumetool", "validate", ".", "--format", "sarif"],
        cwd=tmp_path,
        capture_output=True,
    )
    assert done.returncode == 1, done.stderr
    [found] = json.loads(done.stdout)["runs"][0]["results"]
    assert found["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "%FF.yaml"


def test_json_schema_for_editors(run_cli):
    result = run_cli("validate", "--schema")
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors(yaml.safe_load(GOOD))) == []
    bad = yaml.safe_load("memory:\n  compact_at_tokens: 0\n  scpoe: thread\n")
    assert len(list(validator.iter_errors(bad))) == 2


def test_config_show_fills_in_defaults(tmp_path, run_cli):
    path = tmp_path / "a.yaml"
    path.write_text("name: bot\nmodel: gpt-4.1\n")
    shown = json.loads(run_cli("config", "show", path, "--json").stdout)
    assert shown["memory"] == {"scope": "none", "persistent": False, "compact_at_tokens": 50000}
    assert shown["model"]["base_url"] == "https://api.openai.com/v1"
    assert shown["compaction"] == {"enabled": False, "threshold": None, "summary_model": None}
    path.write_text(GOOD)
    shown = json.loads(run_cli("config", "show", path, "--json").stdout)
    assert shown["compaction"] == {
        "enabled": True,
        "threshold": 50000,
        "summary_model": "gpt-4.1-mini",
    }
    text = run_cli("config", "show", path).stdout
    assert "summaries written by gpt-4.1-mini" in text
    path.write_text(
        "memory:\n  scope: thread\n  compact_at_tokens: false\nmodel:\n"
        "  name: claude-sonnet-4\n  api: anthropic\n"
    )
    shown = json.loads(run_cli("config", "show", path, "--json").stdout)
    assert shown["memory"]["compact_at_tokens"] is False
    assert shown["model"]["api_key_env"] == "ANTHROPIC_API_KEY"
    path.write_text("memory:\n  scope: x\n")
    result = run_cli("config", "show", path)
    assert result.exit_code == 1 and "scope-value" in result.stderr


# -- properties ----------------------------------------------------------------------------

yamlish = st.text(
    st.sampled_from([*list(string.printable), "é", "ü", "\u2028", "😀", "\x00", "\ufeff"]),
    max_size=200,
)
scalars = st.one_of(
    st.sampled_from(
        [
            "thread",
            "none",
            "true",
            "false",
            "yes",
            "no",
            "on",
            "off",
            "0",
            "-1",
            "50000",
            "1e3",
            "0x10",
            "50_000",
            "1:30",
            "~",
            "null",
            "''",
            '"50000"',
            "50k",
            "[]",
            "{}",
            "*a",
            "&a x",
            "!!int '12'",
            "!!str 5",
            "!foo x",
        ]
    ),
    st.integers(-(10**12), 10**12).map(str),
    st.text(max_size=10).map(json.dumps),
)
memory_blocks = st.dictionaries(
    st.sampled_from(["scope", "persistent", "compact_at_tokens", "scopes", "<<", "x"]),
    scalars,
    max_size=5,
)


def inside(finding, data: bytes) -> bool:
    lines = data.decode("utf-8", "replace").split("\n")
    return (
        1 <= finding.line <= len(lines) and 1 <= finding.column <= len(lines[finding.line - 1]) + 1
    )


@settings(max_examples=400)
@given(yamlish)
def test_no_text_crashes_it_and_every_finding_has_a_position(text):
    data = text.encode("utf-8", "surrogatepass")
    result, _ = check_source(data, "f.yaml")
    for finding in result:
        assert finding.rule in RULES
        assert inside(finding, data), (finding, text)


@settings(max_examples=400)
@given(memory_blocks, st.booleans())
def test_memory_mappings_never_crash_and_accepted_configs_resolve(block, with_model):
    text = "memory:\n" + "".join(f"  {k}: {v}\n" for k, v in block.items())
    if with_model:
        text += "model:\n  name: gpt-4.1\n"
    data = text.encode()
    result, config = check_source(data, "f.yaml")
    for finding in result:
        assert inside(finding, data), (finding, text)
    if not any(f.severity == "error" for f in result):
        assert config is not None
        effective = config.as_dict()
        threshold = effective["memory"]["compact_at_tokens"]
        assert threshold is False or (isinstance(threshold, int) and threshold >= 1)
        assert effective["memory"]["scope"] in ("thread", "none")


def model_value(*values: str):
    return st.one_of(st.sampled_from(values), scalars)


model_blocks = st.fixed_dictionaries(
    {"name": st.just("gpt-4.1")},
    optional={
        "api": model_value("openai", "anthropic", "azure"),
        "base_url": model_value(
            "https://api.anthropic.com/v1",
            "https://api.anthropic.com",
            "http://localhost:11434/v1",
            "http://[::1",
            "http://h:99999",
            "https://u:p@h",
            "'https://h/v1?api-version=1'",
        ),
        "auth": model_value("bearer", "api-key", "x-api-key", "basic"),
        "max_tokens_param": model_value("max_tokens", "max_completion_tokens"),
        "api_version": model_value('"2024-10-21"', "2024-10-21", "v1"),
        "x": scalars,
    },
)


@settings(max_examples=400)
@given(model_blocks)
def test_model_mappings_never_crash_and_accepted_ones_can_be_used(block):
    text = "model:\n" + "".join(f"  {k}: {v}\n" for k, v in block.items())
    data = text.encode()
    result, config = check_source(data, "f.yaml")
    for finding in result:
        assert inside(finding, data), (finding, text)
    if config is not None:
        model = config.model
        assert model.api in ("openai", "anthropic")
        assert model.auth in ("bearer", "api-key", "x-api-key")
        assert model.max_tokens_param in ("max_tokens", "max_completion_tokens")
        assert base_url_problem(model.base_url, model.api) is None


def test_nesting_deeper_than_volumetool_reads_is_a_finding():
    deep = findings("a: " + "[" * 150 + "]" * 150 + "\n")
    assert [(f.rule, f.line) for f in deep] == [("yaml-too-deep", 1)]


def test_config_show_and_compact_read_the_config_from_stdin(run_cli, tmp_path):
    shown = json.loads(run_cli("config", "show", "-", "--json", input=GOOD).stdout)
    assert shown["compaction"]["summary_model"] == "gpt-4.1-mini"
    from volumetool.atomic import create_volume

    path = create_volume(tmp_path / "agent.db", "a")
    result = run_cli("compact", path, "--config", "-", "--dry-run", "--json", input=GOOD)
    assert result.exit_code == 0 and json.loads(result.stdout) == []


# -- provider settings (SPEC section 6, "Endpoints") ----------------------------------------

BAD_BASE_URLS = [
    # (api, base_url, what the message must name, rule)
    ("openai", "ftp://example.com/v1", "http:// or https://", "model-base-url"),
    ("openai", "localhost:11434/v1", "http:// or https://", "model-base-url"),
    ("openai", "http://", "no host", "model-base-url"),
    ("openai", "http://:8080/v1", "no host", "model-base-url"),
    ("openai", "http://localhost:99999/v1", "port '99999'", "model-base-url"),
    ("openai", "http://localhost:0/v1", "port '0'", "model-base-url"),
    ("openai", "http://localhost:eighty/v1", "port 'eighty'", "model-base-url"),
    ("openai", "http://[::1/v1", "not a URL", "model-base-url"),
    ("openai", "http://local host/v1", "space", "model-base-url"),
    ("anthropic", "https://api.anthropic.com/v1", "/v1/v1/messages", "model-base-url"),
    ("anthropic", "https://api.anthropic.com/v1/", "/v1/v1/messages", "model-base-url"),
    (
        "anthropic",
        "https://api.anthropic.com/v1/messages",
        "remove the /v1/messages",
        "model-base-url",
    ),
    (
        "openai",
        "https://x.example/v1/chat/completions",
        "remove the /chat/completions",
        "model-base-url",
    ),
    (
        "openai",
        "https://r.openai.azure.com/openai/deployments/d?api-version=2024-10-21",
        "query string",
        "model-base-url",
    ),
    ("openai", "http://localhost:8000/v1#models", "fragment", "model-base-url"),
    ("openai", "https://user:hunter2@proxy.example/v1", "password", "literal-secret"),
    ("anthropic", "https://token@proxy.example", "password", "literal-secret"),
]


@pytest.mark.parametrize(("api", "url", "named", "rule"), BAD_BASE_URLS)
def test_a_base_url_that_cannot_work_is_an_error_naming_the_problem(api, url, named, rule):
    text = f"model:\n  name: a\n  api: {api}\n  base_url: {json.dumps(url)}\n"
    found = [f for f in findings(text) if f.path == "$.model.base_url"]
    assert [(f.line, f.column, f.severity, f.rule) for f in found] == [(4, 13, "error", rule)]
    assert named in found[0].message
    assert "hunter2" not in found[0].message and "token@" not in found[0].message


@pytest.mark.parametrize(
    ("api", "url"),
    [
        ("openai", "https://api.openai.com/v1/"),
        ("openai", "HTTP://LOCALHOST:11434/v1"),
        ("openai", "http://[::1]:8000/v1"),
        ("openai", "http://127.0.0.1:4000"),
        ("openai", "https://api.anthropic.com/v1"),  # /v1 is right for chat completions
        ("anthropic", "https://api.anthropic.com"),
        ("anthropic", "https://openrouter.ai/api"),
        ("anthropic", "http://gateway.internal:8080/anthropic/"),
    ],
)
def test_base_urls_that_work_have_no_finding(api, url):
    assert findings(f"model:\n  name: a\n  api: {api}\n  base_url: {url}\n") == []


def test_an_unquoted_api_version_is_a_date_and_the_message_says_quote_it():
    found = findings("model:\n  name: a\n  api_version: 2024-10-21\n")
    assert [(f.rule, f.line, f.column) for f in found] == [("model-key-type", 3, 16)]
    assert 'quote it: "2024-10-21"' in found[0].message


@pytest.mark.parametrize("version", ["2024-10-21", "2025-04-01-preview"])
def test_azure_api_versions_are_accepted(version):
    assert findings(f'model:\n  name: a\n  api_version: "{version}"\n') == []


def test_config_show_resolves_the_provider_settings(tmp_path, run_cli):
    path = tmp_path / "a.yaml"
    path.write_text("model: gpt-4.1\n")
    model = json.loads(run_cli("config", "show", path, "--json").stdout)["model"]
    assert (model["max_tokens_param"], model["auth"], model["api_version"]) == (
        "max_tokens",
        "bearer",
        None,
    )
    path.write_text("model:\n  name: claude-sonnet-4-5\n  api: anthropic\n")
    assert json.loads(run_cli("config", "show", path, "--json").stdout)["model"]["auth"] == (
        "x-api-key"
    )
    path.write_text(
        "model:\n  name: o4-mini\n  max_tokens_param: max_completion_tokens\n  auth: api-key\n"
        '  api_version: "2024-10-21"\n'
    )
    result = run_cli("config", "show", path)
    assert result.exit_code == 0
    shown = yaml.safe_load(result.stdout)["model"]
    assert (shown["max_tokens_param"], shown["auth"], shown["api_version"]) == (
        "max_completion_tokens",
        "api-key",
        "2024-10-21",
    )


def test_config_show_prints_warnings_on_stderr(tmp_path, run_cli):
    path = tmp_path / "a.yaml"
    path.write_text("model:\n  name: a\n  api: anthropic\n  max_tokens_param: max_tokens\n")
    result = run_cli("config", "show", path)
    assert result.exit_code == 0
    assert f"{path}:4:3: warning: $.model.max_tokens_param: " in result.stderr
    assert "[model-no-effect]" in result.stderr


def test_json_schema_describes_the_provider_settings(run_cli):
    schema = json.loads(run_cli("validate", "--schema").stdout)
    model = schema["properties"]["model"]["oneOf"][1]["properties"]
    assert model["max_tokens_param"]["enum"] == ["max_tokens", "max_completion_tokens"]
    assert model["api"]["enum"] == ["openai", "anthropic", "openai-responses"]
    assert model["max_tokens_param"]["default"] == "max_tokens"
    assert set(model["auth"]["enum"]) == {"bearer", "api-key", "x-api-key"}
    assert model["api_version"]["type"] == "string"
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors({"model": {"name": "a", "auth": "api-key"}})) == []
    assert len(list(validator.iter_errors({"model": {"name": "a", "auth": "basic"}}))) == 1


# -- the docs say what the code does ---------------------------------------------------------


def test_the_docs_rule_table_is_the_rules():
    rows = re.findall(
        r"^\| `([a-z0-9-]+)` \| (\w+) \| (.*) \|$", docs.page("reference/config"), re.M
    )
    assert rows == [(rule, severity, text) for rule, (severity, text) in RULES.items()]


def test_every_provider_example_in_the_docs_validates_cleanly():
    blocks = re.findall(r"```yaml\n(.*?)```", docs.section("compaction", "## Providers"), re.S)
    assert len(blocks) >= 8
    models = []
    for block in blocks:
        found = findings(block)
        assert [f for f in found if f.severity != "note"] == [], (block, found)
        models.append(check_source(block.encode(), "docs")[1].model)
    shapes = {(m.api, m.auth, m.max_tokens_param, m.api_version is not None) for m in models}
    assert ("openai", "bearer", "max_tokens", False) in shapes  # OpenAI, Ollama, vLLM, LiteLLM
    assert ("openai", "bearer", "max_completion_tokens", False) in shapes  # reasoning model
    assert ("openai", "api-key", "max_tokens", True) in shapes  # Azure OpenAI
    assert ("anthropic", "x-api-key", "max_tokens", False) in shapes  # Anthropic
    assert ("anthropic", "bearer", "max_tokens", False) in shapes  # OpenRouter
    urls = {m.base_url for m in models}
    assert {"http://localhost:11434/v1", "http://localhost:8000/v1"} <= urls  # Ollama, vLLM


# -- what a directory holds ------------------------------------------------------------------


def validate_process(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "volumetool", "validate", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "GITHUB_ACTIONS": ""},
        **kw,
    )


def finished(process: subprocess.Popen, timeout: float = 60) -> tuple[str, str]:
    """stdout and stderr of a validate run, which fails (and is killed) if it hangs."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise


def test_a_fifo_in_a_directory_is_skipped_not_waited_on(tmp_path):
    (tmp_path / "good.yaml").write_text(GOOD)
    os.mkfifo(tmp_path / "x.yaml")
    process = validate_process(str(tmp_path))
    _, err = finished(process)
    assert process.returncode == 0, err
    assert "1 file checked" in err


def test_a_fifo_or_dev_fd_given_by_name_is_read(tmp_path):
    fifo = tmp_path / "x.yaml"
    os.mkfifo(fifo)
    process = validate_process(str(fifo))
    with open(fifo, "w") as writer:  # opens once validate opens it for reading
        writer.write("memory:\n  scope: everything\n")
    out, _ = finished(process)
    assert process.returncode == 1
    assert out.startswith(f"{fifo}:2:10: error:")
    read, write = os.pipe()
    os.write(write, b"memory:\n  scope: everything\n")
    os.close(write)
    process = validate_process(f"/dev/fd/{read}", pass_fds=(read,))
    os.close(read)
    out, _ = finished(process)
    assert process.returncode == 1 and "[scope-value]" in out


def test_control_characters_in_file_names_are_escaped_in_text_output(tmp_path, run_cli):
    path = tmp_path / "a\x1b]52;c;x\x07.yaml"
    path.write_text("memory:\n  scope: everything\n")
    result = run_cli("validate", tmp_path)
    assert "\x1b" not in result.stdout and "\\x1b]52" in result.stdout
    as_json = json.loads(run_cli("validate", "--format", "json", tmp_path).stdout)
    assert as_json["findings"][0]["file"] == str(path)  # machine formats stay exact


# -- what will not run (SPEC 13) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "meant"),
    [
        ("memroy:\n  scope: thread\nmodel: gpt-4.1\n", "memory"),
        ("memorry:\n  scope: thread\nmodel: gpt-4.1\n", "memory"),
        ("Memory:\n  scope: thread\nmodel: gpt-4.1\n", "memory"),
        ("memory:\n  scope: none\nmodle: gpt-4.1\n", "model"),
        ("modl:\n  name: gpt-4.1\n", "model"),
        ("mdoels: gpt-4.1\n", "model"),
    ],
)
def test_a_top_level_typo_of_a_block_is_an_error(text, meant, tmp_path, run_cli):
    [finding] = [f for f in findings(text) if f.rule == "block-name-typo"]
    assert finding.severity == "error"
    assert f"did you mean '{meant}'" in finding.message
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    result = run_cli("validate", path)
    assert result.exit_code == 1 and "[block-name-typo]" in result.stdout
    assert "block-name-typo" in run_cli("config", "show", path).stderr


@pytest.mark.parametrize(
    "text",
    [
        "memory:\n  scope: thread\nmodel: gpt-4.1\nmode: fast\n",  # the block is there
        "name: bot\nmodel: gpt-4.1\nmemory: {scope: none}\nmemo: x\n",
        "metadata: {}\nmodel: gpt-4.1\n",  # three or more edits
        "node: x\nmemory: {scope: none}\nmodel: a\n",
    ],
)
def test_keys_near_a_block_that_is_there_are_left_alone(text):
    assert [f.rule for f in findings(text) if f.severity == "error"] == []


def test_compaction_with_no_model_is_an_error_and_compact_says_why(tmp_path, run_cli):
    path = tmp_path / "agent.yaml"
    path.write_text("memory:\n  scope: thread\n")
    result = run_cli("validate", path)
    assert result.exit_code == 1, result
    assert "[compaction-no-model]" in result.stdout and "summary-model-main" not in result.stdout
    assert run_cli("config", "show", path).exit_code == 1
    # Off, or with a model, it is fine; a model: block without a name has its own error.
    for fine in (
        "memory:\n  scope: thread\n  compact_at_tokens: false\n",
        "memory:\n  scope: none\n",
        "memory:\n  scope: thread\nmodel: gpt-4.1\n",
    ):
        assert only(fine, "compaction-no-model") == [], fine
    assert only("memory:\n  scope: thread\nmodel:\n  small: x\n", "model-name-missing")
    # volumetool's own reads of the settings still work (a due column needs no model), and
    # compact names what is missing.
    vol = tmp_path / "vol"
    assert run_cli("demo", vol, "--sessions", "3").exit_code == 0
    assert run_cli("sessions", vol, "--due", "--config", path).exit_code == 0
    compact = run_cli("compact", vol, "--config", path)
    assert compact.exit_code == 2 and "no model to write summaries" in compact.stderr


def test_the_schema_requires_a_model_when_compaction_is_on(run_cli):
    validator = jsonschema.Draft202012Validator(json.loads(run_cli("validate", "--schema").stdout))
    assert list(validator.iter_errors({"memory": {"scope": "thread"}}))
    for fine in (
        {"memory": {"scope": "thread", "compact_at_tokens": False}},
        {"memory": {"scope": "thread"}, "model": "gpt-4.1"},
        {"memory": {"scope": "none"}},
        {},
    ):
        assert list(validator.iter_errors(fine)) == [], fine


def test_a_directory_with_no_yaml_is_exit_2(tmp_path, run_cli):
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("memory: {}\n")
    (tmp_path / "good.yaml").write_text(GOOD)
    for directory in ("empty", "other"):
        result = run_cli("validate", tmp_path / directory, tmp_path / "good.yaml")
        assert result.exit_code == 2, result
        assert f"no YAML files under {tmp_path / directory}" in result.stderr
        document = json.loads(run_cli("validate", tmp_path / directory, "--format", "json").stdout)
        assert document["files"][0]["status"] == "unreadable"
        sarif = json.loads(run_cli("validate", tmp_path / directory, "--format", "sarif").stdout)
        assert sarif["runs"][0]["invocations"][0]["executionSuccessful"] is False


KUBERNETES = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: agent
---
apiVersion: v1
kind: Service
metadata:
  name: agent
"""


def test_only_agent_configs_skips_other_yaml(tmp_path, run_cli):
    (tmp_path / "k8s.yaml").write_text(KUBERNETES)
    (tmp_path / "workflow.yml").write_text("on: push\njobs: {}\n")
    (tmp_path / "agent.yaml").write_text(GOOD)
    (tmp_path / "typo.yaml").write_text("memroy:\n  scope: thread\nmodel: gpt-4.1\n")
    (tmp_path / "broken.yaml").write_text("model: gpt-4.1\nmemory:\n  scope: [thread\n")
    files = [tmp_path / n for n in ("k8s.yaml", "workflow.yml", "agent.yaml")]
    assert run_cli("validate", *files).exit_code == 1  # as before: every file is a config
    result = run_cli("validate", "--only-agent-configs", *files)
    assert result.exit_code == 0, result
    assert "1 file checked" in result.stderr and "2 skipped (not agent configs)" in result.stderr
    for bad, rule in (("typo.yaml", "block-name-typo"), ("broken.yaml", "yaml-syntax")):
        result = run_cli("validate", "--only-agent-configs", *files, tmp_path / bad)
        assert result.exit_code == 1 and f"[{rule}]" in result.stdout, result
    only_k8s = tmp_path / "deploy"
    only_k8s.mkdir()
    (only_k8s / "k8s.yaml").write_text(KUBERNETES)
    result = run_cli("validate", "--only-agent-configs", only_k8s)
    assert result.exit_code == 2 and f"no agent configs under {only_k8s}" in result.stderr


# -- pre-commit and GitHub Actions -----------------------------------------------------------

ROOT = docs.ROOT
BIN = __import__("pathlib").Path(sys.executable).parent


def test_the_pre_commit_hook_checks_agent_configs_and_skips_other_yaml(tmp_path):
    """The hook's entry, run as pre-commit runs it (the commit's YAML files appended), passes
    a repository with a Kubernetes multi-document file and fails on a broken agent config."""
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["types"] == ["yaml"] and hook["language"] == "python"
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "app.yaml").write_text(KUBERNETES)
    (tmp_path / "agent.yaml").write_text(GOOD)
    files = ["deploy/app.yaml", "agent.yaml"]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "GITHUB_ACTIONS": ""}

    def hook_run(*names: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*hook["entry"].split(), *names], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    done = hook_run(*files)
    assert done.returncode == 0, done.stderr
    assert "1 skipped (not agent configs)" in done.stderr
    (tmp_path / "bot.yaml").write_text("memory:\n  scope: thread\n  compact_at_tokens: 0\n")
    done = hook_run(*files, "bot.yaml")
    assert done.returncode == 1 and "bot.yaml:3:22: error" in done.stdout, done
    # the docs' hook config, with its optional files: pattern, is the hook's id
    section = docs.section("validate", "## In pre-commit")
    config = next(b for b in re.findall(r"```yaml\n(.*?)```", section, re.S) if "rev:" in b)
    [repo] = yaml.safe_load(config)
    assert repo["hooks"][0]["id"] == hook["id"]
    pattern = re.search(r"# files: (\S+)", config).group(1)
    assert re.search(pattern, "agents/support.yaml") and not re.search(pattern, "deploy/app.yaml")


def docs_workflow() -> dict:
    section = docs.section("validate", "## In GitHub Actions")
    [workflow] = [b for b in re.findall(r"```yaml\n(.*?)```", section, re.S) if "upload" in b]
    return yaml.safe_load(workflow)


def test_the_docs_github_workflow_uploads_the_sarif_that_validate_writes(tmp_path):
    workflow = docs_workflow()
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as true
    assert "pull_request" in triggers and "push" in triggers
    assert workflow["permissions"]["security-events"] == "write"
    [job] = workflow["jobs"].values()
    steps = job["steps"]
    assert job["runs-on"].startswith("ubuntu")
    assert any(s.get("uses", "").startswith("actions/checkout@") for s in steps)
    [upload] = [s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload")]
    assert upload["uses"].split("@")[0] == "github/codeql-action/upload-sarif"
    assert upload["if"] == "always()"  # findings fail the validate step; the upload still runs
    sarif_file = upload["with"]["sarif_file"]
    [validate] = [s for s in steps if "volumetool validate" in s.get("run", "")]
    assert steps.index(validate) < steps.index(upload)
    command = validate["run"]
    assert "--format sarif" in command
    assert re.search(rf"(>|-o|--output)\s*{re.escape(sarif_file)}\s*$", command), command
    # The step itself, run as the runner's bash would, writes that file: SARIF with a finding.
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "bot.yaml").write_text("memory:\n  scope: everything\n")
    done = subprocess.run(
        ["bash", "-e", "-c", command],
        cwd=tmp_path,
        env={
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "GITHUB_ACTIONS": "true",
        },
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stderr
    sarif = json.loads((tmp_path / sarif_file).read_text())
    assert sarif["version"] == "2.1.0"
    [found] = sarif["runs"][0]["results"]
    assert found["ruleId"] == "scope-value"
    uri = found["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "agents/bot.yaml"  # relative to the checkout, as code scanning maps it


def test_a_file_over_the_limit_is_reported_with_its_own_size(tmp_path, run_cli):
    """Only the limit and one byte are read; the size shown is the file's, not that."""
    big = tmp_path / "big.yaml"
    big.write_bytes(b"memory: {}\n" * 500)  # 5,500 bytes
    result = run_cli("validate", big, "--max-bytes", "100")
    assert result.exit_code == 1, result
    assert "the file is 5,500 bytes, over the limit of 100 (--max-bytes)" in result.stdout
    piped = run_cli("validate", "-", "--max-bytes", "100", input=big.read_bytes())
    assert "the input is over the limit of 100 bytes (--max-bytes)" in piped.stdout
    assert "101" not in piped.stdout
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"memory: {}\n" * 100_000)  # 1,100,000 bytes: over the config's 1 MiB
    for command in (["config", "show", huge], ["sessions", "VOL", "--due", "--config", huge]):
        shown = run_cli(*command)
        assert shown.exit_code in (1, 2), shown
        assert "1,100,000 bytes" in shown.stdout + shown.stderr, shown
