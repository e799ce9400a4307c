"""`make litellm` (bench/litellm.py) without LiteLLM: how it reads what the relay caught (the
proxy's recorded bytes, tests/data/litellm), how it judges a row, and the venv check."""

from __future__ import annotations

from pathlib import Path

from bench.litellm import HEADING, MODES, Row, describe, responses_of, stranger_pth, table, verdict

DATA = Path(__file__).parent / "data" / "litellm"


def chunked(body: bytes, size: int = 1000) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def test_the_relays_bytes_are_read_answer_by_answer():
    stream = (DATA / "bridge-cut-off.sse").read_bytes()
    error = (DATA / "bridge-429.json").read_bytes()
    caught = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        b"transfer-encoding: chunked\r\n\r\n" + chunked(stream)
    )
    caught += b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
    caught += b"content-length: %d\r\nretry-after: 1\r\n\r\n" % len(error) + error
    [(first, headers, body), second] = responses_of(caught)
    assert (first, body) == ("HTTP/1.1 200 OK", stream)
    assert describe(first, headers, body) == (
        "200 SSE `response.completed` status `completed`, usage 1580/343"
    )
    said = describe(*second)
    assert said.startswith("429 litellm.RateLimitError: RateLimitError: Hosted_vllmException")
    assert said.endswith("(retry-after: 1)")
    native = (DATA / "native-cut-off.sse").read_bytes()
    assert describe("HTTP/1.1 200 OK", {"content-type": "text/event-stream"}, native) == (
        "200 SSE `response.incomplete` status `incomplete` (max_output_tokens), usage 1200/80"
    )


def test_a_row_is_right_when_committed_as_spec_6_says_and_its_usage_is_the_servers():
    good, cut = MODES[0], MODES[1]
    assert (good.committed, cut.committed) == (True, False)
    right = Row("native", good, backend_calls=1, billed=1, committed=True, usage=(1200, 80))
    assert verdict(right) == "right"
    wrong = Row("bridge", cut, backend_calls=1, billed=1, committed=True, usage=(1580, 343))
    assert verdict(wrong) == (
        "**wrong**: committed a summary SPEC 6 refuses; the server reported 1200/80"
    )
    unpaid = Row("bridge", MODES[7], backend_calls=12, committed=False, usage=(None, None))
    assert verdict(unpaid) == "right"  # 429s: no usage to record
    wrong.verdict = verdict(wrong)
    assert "| bridge | cut off (length) |" in table([wrong], "1.0")


def test_a_venv_with_a_pth_file_of_its_own_is_refused(tmp_path):
    (tmp_path / "distutils-precedence.pth").write_text("import os")
    assert stranger_pth([tmp_path]) == []
    (tmp_path / "litellm_init.pth").write_text("import os")
    assert stranger_pth([tmp_path]) == [tmp_path / "litellm_init.pth"]


def test_its_section_is_replaced_and_make_bench_keeps_it_after_the_real_models(tmp_path):
    from bench import real_model
    from bench.run import kept_sections

    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n## Fact retention\n\ntable\n")
    real_model.write_section(path, f"{real_model.HEADING}\n\nllama\n")
    for run in ("first", "second"):
        real_model.write_section(path, f"{HEADING}\n\n{run}\n", HEADING)
    text = path.read_text()
    assert text.count(HEADING) == 1 and "second" in text and "first" not in text
    assert kept_sections(path) == text[text.index("\n## A real model") :]
