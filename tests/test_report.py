"""report: one self-contained HTML page, parsed as XML and as HTML5, held to what the SPEC and
the issue ask of it (charts as inline SVG with titles, nothing from the network, volume text
escaped), and rendered by headless Chromium where one is installed."""

from __future__ import annotations

import ast
import itertools
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import xml.etree.ElementTree as ET
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import html5lib
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_clean_error, examples
from tests.support.volumes import VolumeWriter, due_thread
from volumetool.report import page as page_module
from volumetool.report.charts import compact, nice_ticks
from volumetool.report.gather import read_volume, window
from volumetool.report.markup import EMPTY, Html
from volumetool.report.page import page
from volumetool.settings import MemorySettings
from volumetool.volume import Volume

XHTML = "{http://www.w3.org/1999/xhtml}"
SVG = "{http://www.w3.org/2000/svg}"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "esc\x1b[31mred\x07bell\x00nul",
    "&amp; ]]> <!-- -->",
]


def parse(document: str) -> ET.Element:
    """The page as XML (well-formed or this raises) after it parsed as strict HTML5."""
    html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(document)
    return ET.fromstring(document.split("\n", 1)[1])  # past the <!DOCTYPE html> line


def text_of(root: ET.Element) -> str:
    return " ".join("".join(root.itertext()).split())


def write_volume(path: Path, days_ago: float = 1.0) -> Path:
    """A small volume whose runs fall inside the report's window, counted back from now."""
    w = VolumeWriter(path)
    w.clock = datetime.now(UTC) - timedelta(days=days_ago)
    due = due_thread(w, "telegram:due", turns=4, tokens=60_000)
    w.run(None, trigger="schedule", input_tokens=500, output_tokens=50)
    w.run(due, trigger="compaction", status="error", error="timeout")
    small = w.thread("slack:small")
    w.turn(small, 1)
    w.run(small, input_tokens=12_000, last_input_tokens=12_000)
    w.close()
    return path


def test_the_page_is_well_formed_with_a_language_a_title_and_labelled_charts(tmp_path, run_cli):
    volume = write_volume(tmp_path / "agent.db")
    out = tmp_path / "report.html"
    result = run_cli("report", volume, "-o", out)
    assert result.exit_code == 0, result
    root = parse(out.read_text(encoding="utf-8"))
    assert root.get("lang") == "en"
    title = root.find(f"{XHTML}head/{XHTML}title")
    assert title is not None and "test-agent" in title.text
    charts = list(root.iter(f"{SVG}svg"))
    labelled = [c for c in charts if c.get("role") == "img"]
    assert len(labelled) >= 4  # tokens, threshold distribution and nearest, compactions
    for chart in labelled:
        assert chart.get("aria-label")
        assert chart.find(f"{SVG}title").text == chart.get("aria-label")
        desc = chart.find(f"{SVG}desc")
        assert desc is not None and desc.text and desc.get("id") == chart.get("aria-describedby")
    for decoration in (c for c in charts if c.get("role") != "img"):
        assert decoration.get("aria-hidden") == "true"
    ids = [e.get("id") for e in root.iter() if e.get("id")]
    assert len(ids) == len(set(ids))
    for figure in root.iter(f"{XHTML}figure"):  # a caption is a figure's first or last child
        children = list(figure)
        captions = [n for n, c in enumerate(children) if c.tag == f"{XHTML}figcaption"]
        assert captions in ([], [0], [len(children) - 1])


def test_nothing_in_the_page_reaches_the_network_or_needs_a_script(tmp_path, run_cli):
    volume = write_volume(tmp_path / "agent.db")
    out = tmp_path / "report.html"
    assert run_cli("report", volume, "-o", out).exit_code == 0
    document = out.read_text(encoding="utf-8")
    root = parse(document)
    tags = {element.tag.split("}")[-1] for element in root.iter()}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed", "image", "use"}
    for element in root.iter():
        for name, value in element.attrib.items():
            assert not name.startswith("on"), (element.tag, name)
            if name.endswith("href") or name == "src":
                assert value.startswith("#"), (element.tag, name, value)
    names = re.sub(r' xmlns="[^"]*"', "", document)  # namespace names are not fetched
    assert not re.search(r"url\((?!#)|@import|https?://|//[a-z]", names)


def test_volume_text_is_escaped_and_shown_as_text(tmp_path, run_cli):
    w = VolumeWriter(tmp_path / "agent.db", name=HOSTILE[1])
    w.clock = datetime.now(UTC) - timedelta(days=1)
    for n, key in enumerate(HOSTILE):
        s = due_thread(w, key, turns=3, tokens=70_000 + n)
        w.run(s, trigger=HOSTILE[0], model=HOSTILE[2], input_tokens=10, output_tokens=1)
    w.conn.execute("UPDATE sessions SET channel = ?", (HOSTILE[3],))
    for figure in (-5, 2**62):  # figures no provider reports, written by someone
        w.run(w.thread(f"odd:{figure}"), last_input_tokens=figure, input_tokens=figure)
    w.close()
    out = tmp_path / "report.html"
    result = run_cli("report", w.path, "-o", out)
    assert result.exit_code == 0, result
    document = out.read_text(encoding="utf-8")
    root = parse(document)
    assert not any(e.tag.split("}")[-1] in ("script", "img") for e in root.iter())
    assert "\x1b" not in document and "\x00" not in document and "\x07" not in document
    shown = text_of(root)
    assert HOSTILE[0] in shown and HOSTILE[1] in shown  # as text, for people to read
    assert "esc\\x1b[31mred\\x07bell\\x00nul" in shown  # controls written as escapes
    assert HOSTILE[3] in shown and "&amp;amp; ]]&gt; &lt;!--" in document


def marker(place: str) -> str:
    """Markup that would be an element with the id inj-PLACE if it reached the page unescaped
    (every character HTML escapes, and no slash: it names a directory too)."""
    return f"<b id=\"inj-{place}\" title='&amp;'>"


def test_every_text_the_page_shows_is_escaped_wherever_it_is_shown(tmp_path, run_cli, monkeypatch):
    """Agent name, volume path, conversation key, channel, trigger, a thread's updated_at and
    the last activity, the config's path, an error line, a schema note and the version: each
    is in the page as the text it is, and none became markup."""
    folder = tmp_path / marker("path")
    folder.mkdir()
    w = VolumeWriter(folder / "agent.db", name=marker("agent"))
    w.clock = datetime.now(UTC) - timedelta(days=1)
    s = due_thread(w, marker("key"), turns=3, tokens=70_000)
    w.run(s, trigger=marker("trigger"), input_tokens=10, output_tokens=1)
    w.conn.execute(
        "UPDATE sessions SET channel = ?, updated_at = ?", (marker("channel"), marker("updated"))
    )
    w.conn.execute(
        f"CREATE TRIGGER [{marker('note')}] AFTER UPDATE ON sessions BEGIN SELECT 1; END"
    )
    w.close()
    broken = tmp_path / marker("error")
    broken.write_text("not a database")
    config = tmp_path / marker("config")
    config.write_text("memory:\n  scope: thread\n")
    monkeypatch.setattr("volumetool.__version__", marker("version"))
    out = tmp_path / "report.html"
    result = run_cli("report", w.path, broken, "--config", config, "-o", out)
    assert result.exit_code == 2, result  # the file that is no database
    document = out.read_text(encoding="utf-8")
    root = parse(document)  # strict HTML5 and well-formed XML: nothing was opened unclosed
    assert not [e for e in root.iter() if (e.get("id") or "").startswith("inj-")]
    assert "<b " not in document
    shown = text_of(root) + " ".join(v for e in root.iter() for v in e.attrib.values())
    places = ["path", "agent", "key", "channel", "trigger", "updated", "note", "error", "config"]
    for place in [*places, "version"]:
        assert marker(place) in shown, place
    facts = next(d for d in root.iter(f"{XHTML}dl") if d.get("class") == "facts")
    terms, values = [text_of(t) for t in facts[::2]], [text_of(d) for d in facts[1::2]]
    named = dict(zip(terms, values, strict=True))
    assert named["Agent"] == marker("agent") and named["Last activity"] == marker("updated")


TAG_OR_ENTITY = re.compile(r"<[A-Za-z/!?]|&#?[A-Za-z0-9]+;")  # markup, not a comparison
REPORT_MODULES = sorted((Path(page_module.__file__).parent).glob("*.py"))


def _called(node: ast.Call) -> str:
    return node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")


@pytest.mark.parametrize("path", REPORT_MODULES, ids=lambda p: p.name)
def test_markup_is_made_only_from_string_literals(path):
    """The page is Html all through, and Html escapes whatever is put into it: markup is made
    only from a literal in the code (`Html("<p>{}</p>").format(value)`), never around a value
    (`Html(f"<p>{value}</p>")`, `Html(value)`), never by hand in an f-string; and nothing but
    report/markup.py reaches MarkupSafe or says it is markup (`__html__`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) in ("Html", "Markup"):
            literal = all(
                isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args
            )
            if node.keywords or len(node.args) > 1 or not literal:
                found.append(f"line {node.lineno}: {ast.unparse(node)[:70]}")
        elif isinstance(node, ast.JoinedStr):
            parts = "".join(str(v.value) for v in node.values if isinstance(v, ast.Constant))
            if TAG_OR_ENTITY.search(parts):
                found.append(f"line {node.lineno}: markup in an f-string: {ast.unparse(node)[:60]}")
        elif isinstance(node, ast.FunctionDef) and node.name in ("__html__", "__html_format__"):
            found.append(f"line {node.lineno}: {node.name}")
        elif isinstance(node, ast.ImportFrom | ast.Import) and path.name != "markup.py":
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names]
            if any(n.split(".")[0] == "markupsafe" for n in names):
                found.append(f"line {node.lineno}: imports markupsafe")
    assert found == []


def test_a_plain_string_put_into_the_page_is_escaped_never_trusted(tmp_path, monkeypatch):
    """Whichever way a str meets markup it is text: a part a builder forgot to make Html
    shows its tags as text rather than opening elements."""
    raw = "<i>\x1b&amp;\"'"
    shown = "&lt;i&gt;\\x1b&amp;amp;&quot;&#x27;"
    assert Html("<p>{}</p>").format(raw) == f"<p>{shown}</p>"
    assert Html("<p>{:>8}</p>").format("<") == "<p>       &lt;</p>"
    assert EMPTY.join([raw, Html("<br/>")]) == f"{shown}<br/>"
    assert Html("<p>") + raw == f"<p>{shown}" and raw + Html("<p>") == f"{shown}<p>"
    assert Html("<p>%s</p>") % raw == f"<p>{shown}</p>"
    assert isinstance(Html("<p>{}</p>").format(raw), Html)
    with Volume(_fixed_volume(tmp_path / "agent.db")) as vol:
        report = read_volume(vol, MemorySettings(scope="thread"), window(date(2026, 11, 30), 7))
    monkeypatch.setattr(page_module, "_facts", lambda r: '<dl id="forgotten"><dt>x</dt></dl>')
    document = page([report], [], NOW, "test", None)
    root = parse(document)
    assert root.find(f".//{XHTML}dl") is None
    assert "&lt;dl id=&quot;forgotten&quot;&gt;&lt;dt&gt;x&lt;/dt&gt;&lt;/dl&gt;" in document


def _fixed_volume(path: Path) -> Path:
    """Runs on known days of November 2026, with known figures."""
    w = VolumeWriter(path)
    s = w.thread("discord:1")
    w.clock = datetime(2026, 11, 28, 9, tzinfo=UTC)
    w.run(s, trigger="message", input_tokens=1_000, output_tokens=200)
    w.run(s, trigger="message", input_tokens=300, output_tokens=None)
    w.run(None, trigger="webhook", input_tokens=None, output_tokens=None)
    w.clock = datetime(2026, 11, 29, 9, tzinfo=UTC)
    compaction = w.run(s, trigger="compaction", input_tokens=5_000, output_tokens=400)
    w.insert("compactions", run_id=compaction, session_id=s, summary="x", saved_tokens=4_321)
    w.run(s, trigger="compaction", status="error", input_tokens=None, output_tokens=None)
    w.clock = datetime(2026, 11, 10, tzinfo=UTC)  # outside a 7-day window
    w.run(s, trigger="message", input_tokens=99_999, output_tokens=1)
    w.close()
    return path


def test_tokens_and_compactions_are_counted_per_day(tmp_path):
    days = window(date(2026, 11, 30), 7)
    assert days[0] == "2026-11-24" and days[-1] == "2026-11-30" and len(days) == 7
    with Volume(_fixed_volume(tmp_path / "agent.db")) as vol:
        report = read_volume(vol, MemorySettings(scope="thread"), days)
    tokens = {(t.day, t.trigger): (t.runs, t.input_tokens, t.output_tokens) for t in report.tokens}
    assert tokens == {
        ("2026-11-28", "message"): (2, 1_300, 200),
        ("2026-11-28", "webhook"): (1, 0, 0),
        ("2026-11-29", "compaction"): (2, 5_000, 400),
    }
    day = {c.day: c for c in report.compactions}
    assert len(day) == 7
    assert (day["2026-11-29"].ok, day["2026-11-29"].failed, day["2026-11-29"].saved_tokens) == (
        1,
        1,
        4_321,
    )
    assert all(c.ok == c.failed == 0 for d, c in day.items() if d != "2026-11-29")
    root = parse(page([report], [], NOW, "test", None))
    bars = [t.text for t in root.iter(f"{SVG}title") if t.text and " · " in t.text]
    assert "11-28 · message: 1,500 tokens" in bars  # input and output, NULL as none
    assert "11-29 · failed: 1 runs" in bars
    assert "11-29 · tokens saved: 4,321 tokens saved" in bars


def test_each_active_thread_is_shown_against_the_threshold_with_its_state(tmp_path, run_cli):
    w = VolumeWriter(tmp_path / "agent.db")
    w.clock = datetime.now(UTC) - timedelta(days=1)
    due_thread(w, "k:due", turns=4, tokens=2_000)
    due_thread(w, "k:two-turns", turns=2, tokens=3_000)
    due_thread(w, "k:under", turns=4, tokens=400)
    compacted = due_thread(w, "k:compacted", turns=4, tokens=9_000)
    w.run(compacted, trigger="compaction")
    archived = due_thread(w, "k:archived", turns=4, tokens=9_999)
    w.conn.execute("UPDATE sessions SET status = 'archived' WHERE id = ?", (archived,))
    w.close()
    config = tmp_path / "agent.yaml"
    config.write_text("memory:\n  scope: thread\n  compact_at_tokens: 1000\n")
    out = tmp_path / "report.html"
    assert run_cli("report", w.path, "--config", config, "-o", out).exit_code == 0
    root = parse(out.read_text(encoding="utf-8"))
    nearest = next(s for s in root.iter(f"{SVG}svg") if s.get("id", "").endswith("-nearest"))
    labels = [t.text for t in nearest.iter(f"{SVG}text") if t.get("class") == "label"]
    states = [t.text for t in nearest.iter(f"{SVG}text") if t.get("class", "").startswith("state")]
    assert labels == ["k:two-turns", "k:due", "k:under"]  # largest first; no figure, no bar
    assert states == ["over, only 2 live turns", "due now", "under (40%)"]
    assert "threshold 1,000 input tokens" in text_of(nearest)
    shown = text_of(root)
    assert "4 active threads: 1 due for compaction now, 1 at or over" in shown
    assert "1 under it, 1 with no figure yet" in shown


def test_compaction_turned_off_in_the_config_shows_sizes_without_a_threshold(tmp_path, run_cli):
    volume = write_volume(tmp_path / "agent.db")
    config = tmp_path / "agent.yaml"
    config.write_text("memory:\n  scope: none\n")
    out = tmp_path / "report.html"
    assert run_cli("report", volume, "--config", config, "-o", out).exit_code == 0
    root = parse(out.read_text(encoding="utf-8"))
    assert "Compaction is off in this config" in text_of(root)
    assert not [e for e in root.iter(f"{SVG}line") if e.get("class") == "mark"]


def test_several_volumes_get_a_fleet_table_and_a_section_each(tmp_path, run_cli):
    first = write_volume(tmp_path / "a" / "agent.db")
    second = write_volume(tmp_path / "b" / "agent.db", days_ago=3)
    out = tmp_path / "report.html"
    result = run_cli("report", tmp_path / "a", second, "-o", out)
    assert result.exit_code == 0, result
    root = parse(out.read_text(encoding="utf-8"))
    sections = [s for s in root.iter(f"{XHTML}section") if s.get("class") == "volume"]
    assert [s.find(f"{XHTML}h2").text for s in sections] == [
        f"test-agent — {first}",
        f"test-agent — {second}",
    ]
    links = [a.get("href") for a in root.iter(f"{XHTML}a")]
    assert links == [f"#{s.get('id')}" for s in sections]


def test_an_unreadable_volume_is_named_and_the_others_still_reported(tmp_path, run_cli):
    good = write_volume(tmp_path / "agent.db")
    bad = tmp_path / "notes.txt"
    bad.write_text("not a database")
    out = tmp_path / "report.html"
    result = run_cli("report", good, bad, "-o", out)
    assert result.exit_code == 2  # the most serious of the volumes': unusable input
    assert f"{bad}: not an SQLite database" in result.stderr
    root = parse(out.read_text(encoding="utf-8"))
    notes = [text_of(p) for p in root.iter(f"{XHTML}p") if p.get("role") == "note"]
    assert notes == [f"Not read: {bad}: not an SQLite database (exit code 2)."]
    assert len([s for s in root.iter(f"{XHTML}section") if s.get("class") == "volume"]) == 1


def test_no_readable_volume_is_exit_2_and_writes_nothing(tmp_path, run_cli):
    out = tmp_path / "report.html"
    result = run_cli("report", tmp_path / "missing.db", tmp_path / "nope", "-o", out)
    assert_clean_error_lines = [line for line in result.stderr.splitlines() if line]
    assert result.exit_code == 2
    assert "no volume could be read (2 tried)" in assert_clean_error_lines[-1]
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_no_volume_read_for_its_schema_is_exit_3_and_writes_nothing(tmp_path, run_cli):
    """Every volume needs migrate or was written by a newer version: a schema mismatch
    (SPEC 4: exit 3), not unusable input; with a missing one among them, exit 2."""
    from tests.support.legacy import write_legacy

    legacy = write_legacy(tmp_path / "old.db", [{"id": 1, "key": "k", "transcript": []}])
    newer = write_volume(tmp_path / "new.db")
    with sqlite3.connect(newer) as conn:
        conn.execute(
            "INSERT INTO _sqlite_migrations (migration_set, name, applied_at)"
            " VALUES ('agent-volume', 'm900_future', 'x')"
        )
    out = tmp_path / "report.html"
    for volumes in ([legacy], [newer], [legacy, newer]):
        result = run_cli("report", *volumes, "-o", out)
        assert result.exit_code == 3, result
        assert f"no volume could be read ({len(volumes)} tried)" in result.stderr.splitlines()[-1]
        assert not out.exists()
    assert run_cli("report", legacy, tmp_path / "missing.db", "-o", out).exit_code == 2


def test_dash_writes_the_page_to_stdout(tmp_path, run_cli):
    volume = write_volume(tmp_path / "agent.db")
    result = run_cli("report", volume, "-o", "-")
    assert result.exit_code == 0
    assert result.stdout.startswith("<!DOCTYPE html>")
    parse(result.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "agent.db",
        "agent.db-shm",
        "agent.db-wal",
    ]


def test_the_page_replaces_the_last_one_whole_and_keeps_its_mode(tmp_path, run_cli):
    volume = write_volume(tmp_path / "agent.db")
    out = tmp_path / "report.html"
    assert run_cli("report", volume, "-o", out).exit_code == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600  # new: private
    out.chmod(0o644)
    inode = out.stat().st_ino
    assert run_cli("report", volume, "-o", out).exit_code == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert out.stat().st_ino != inode  # a new file renamed into place, never rewritten
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report.html")]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--days", "0"], "--days"),
        (["--days", "367"], "--days"),
        (["--config", "missing.yaml"], "cannot read the config"),
    ],
)
def test_bad_options_are_usage_errors(tmp_path, run_cli, args, fragment):
    volume = write_volume(tmp_path / "agent.db")
    out = tmp_path / "report.html"
    result = run_cli("report", volume, "-o", out, *args)
    assert_clean_error(result, 2, fragment)
    assert not out.exists()


@settings(max_examples=examples(300))
@given(top=st.floats(min_value=0.001, max_value=1e15), whole=st.booleans())
def test_axis_ticks_start_at_zero_and_cover_the_largest_figure(top, whole):
    ticks = nice_ticks(top, whole=whole)
    assert ticks[0] == 0 and ticks[-1] >= top * (1 - 1e-9)
    assert 2 <= len(ticks) <= 6
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert len({round(s / max(steps), 6) for s in steps}) == 1  # evenly spaced
    if whole:
        assert all(float(t).is_integer() for t in ticks)


def test_figures_on_axes_are_short():
    assert [compact(n) for n in (0, 950, 12_000, 3_400_000, 1_200_000_000, 0.5)] == [
        "0",
        "950",
        "12k",
        "3.4M",
        "1.2B",
        "0.5",
    ]


# -- in a browser, and by HTML Tidy ---------------------------------------------------------------

TIDY = shutil.which("tidy")


@pytest.mark.skipif(
    TIDY is None and not os.environ.get("REQUIRE_CHROMIUM"),
    reason="no tidy installed (make report-check installs it)",
)
def test_html_tidy_finds_no_error_or_warning(tmp_path, run_cli):
    assert TIDY, "REQUIRE_CHROMIUM is set and no tidy is installed"
    first = write_volume(tmp_path / "a" / "agent.db")
    second = write_volume(tmp_path / "b" / "agent.db")
    (tmp_path / "bad.db").write_text("not a database")
    out = tmp_path / "report.html"
    run_cli("report", first, second, tmp_path / "bad.db", "-o", out)
    checked = subprocess.run([TIDY, "-quiet", "-errors", out], capture_output=True, text=True)
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(tmp_path: Path, page_file: Path, *args: str) -> None:
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            *args,
            page_file.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
        env={**os.environ, "HOME": str(tmp_path)},
    )


@pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("REQUIRE_CHROMIUM"),
    reason="no chromium installed (make report-check installs it)",
)
def test_headless_chromium_renders_the_page_and_prints_it_on_a4(tmp_path, run_cli):
    assert CHROMIUM, "REQUIRE_CHROMIUM is set and no chromium is installed"
    volume = write_volume(tmp_path / "agent.db")
    out = tmp_path / "report.html"
    assert run_cli("report", volume, "-o", out).exit_code == 0
    shot = tmp_path / "report.png"
    _chromium(tmp_path, out, f"--screenshot={shot}", "--window-size=1366,900")
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1366, 900)
    assert len(png) > 20_000  # drawn, not a blank page
    pdf = tmp_path / "report.pdf"
    _chromium(tmp_path, out, f"--print-to-pdf={pdf}", "--no-pdf-header-footer")
    boxes = re.findall(rb"/MediaBox\s*\[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", pdf.read_bytes())
    assert boxes and all(abs(float(w) - 595.3) < 2 and abs(float(h) - 841.9) < 2 for w, h in boxes)


def test_a_volume_to_migrate_is_named_with_what_to_do_and_a_planted_trigger_is_shown(
    tmp_path, run_cli
):
    from tests.support.legacy import write_legacy

    planted = write_volume(tmp_path / "agent.db")
    conn = sqlite3.connect(planted)
    conn.execute("CREATE TRIGGER evil AFTER UPDATE ON sessions BEGIN DELETE FROM memories; END")
    conn.close()
    legacy = write_legacy(tmp_path / "old.db", [{"id": 1, "key": "k", "transcript": []}])
    out = tmp_path / "report.html"
    result = run_cli("report", planted, legacy, "-o", out)
    assert result.exit_code == 3  # needs migrate: the most serious outcome
    assert "trigger evil on sessions" in result.stderr
    root = parse(out.read_text(encoding="utf-8"))
    notes = [text_of(p) for p in root.iter(f"{XHTML}p") if p.get("role") == "note"]
    assert (
        f"Not read: {legacy}: a runtime 0.x file — run: volumetool migrate {legacy}" in (notes[0])
    )
    assert "the schema departs from the format: trigger evil on sessions" in notes[1]


def test_a_locked_volume_is_busy_in_the_page_and_the_others_are_reported(tmp_path, run_cli):
    free = write_volume(tmp_path / "a" / "agent.db")
    locked = write_volume(tmp_path / "b" / "agent.db")
    holder = sqlite3.connect(locked, isolation_level=None)
    holder.execute("PRAGMA journal_mode = DELETE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        out = tmp_path / "report.html"
        result = run_cli("report", free, locked, "--busy-timeout", "0.1", "-o", out)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == 4  # busy: retry later
    root = parse(out.read_text(encoding="utf-8"))
    notes = [text_of(p) for p in root.iter(f"{XHTML}p") if p.get("role") == "note"]
    assert notes[0].startswith(f"Not read: {locked}: the database is locked")
    assert [s.get("id") for s in root.iter(f"{XHTML}section") if s.get("class") == "volume"] == [
        "volume-1"
    ]


@pytest.mark.parametrize("target", ["volume", "notes", "directory", "link to a page", "fifo"])
def test_the_page_never_replaces_a_volume_or_another_file(tmp_path, run_cli, target):
    """Nor a symbolic link (the rename would replace the link, not the page it points to: a
    link to /dev/stdout became a file), nor a FIFO."""
    volume = write_volume(tmp_path / "agent.db")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    page = tmp_path / "page.html"
    assert run_cli("report", volume, "-o", page).exit_code == 0
    link = tmp_path / "link.html"
    link.symlink_to(page)
    fifo = tmp_path / "fifo.html"
    os.mkfifo(fifo)
    out = {
        "volume": volume,
        "notes": notes,
        "directory": tmp_path,
        "link to a page": link,
        "fifo": fifo,
    }[target]
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    result = run_cli("report", volume, "-o", out)
    assert_clean_error(result, 2, str(out))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert link.is_symlink()


def test_an_empty_file_named_for_the_page_gets_a_new_pages_mode(tmp_path, run_cli):
    """Only an earlier page keeps its mode: an empty file anyone could have made 0666 first
    is no page, and the page written there is 0600 like a new one."""
    volume = write_volume(tmp_path / "agent.db")
    out = tmp_path / "page.html"
    out.touch()
    out.chmod(0o666)
    assert run_cli("report", volume, "-o", out).exit_code == 0
    assert out.read_bytes().startswith(b"<!DOCTYPE") and stat.S_IMODE(out.stat().st_mode) == 0o600


def test_one_active_thread_is_counted_in_the_singular(tmp_path, run_cli):
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "k:due", turns=4, tokens=2_000)
    w.close()
    config = tmp_path / "agent.yaml"
    config.write_text("memory:\n  scope: thread\n  compact_at_tokens: 1000\n")
    out = tmp_path / "report.html"
    assert run_cli("report", w.path, "--config", config, "-o", out).exit_code == 0
    shown = text_of(parse(out.read_text(encoding="utf-8")))
    assert "1 active thread: 1 due for compaction now" in shown
    assert "The 1 active thread nearest compaction" in shown
    config.write_text("memory:\n  scope: none\n")
    assert run_cli("report", w.path, "--config", config, "-o", out).exit_code == 0
    assert "1 active thread; 1 with a reported figure" in text_of(parse(out.read_text()))
