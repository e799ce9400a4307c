"""RELIABILITY.md's two generated parts: each run rewrites its own and keeps the other's."""

from tests.reliability import HOSTILE, RELIABILITY, hostile_section, with_hostile_section

KILLS = "# Reliability\n\n| kill table |\n"
NOTES = "\n## What else is tested\n\n- notes\n"
SECTION = f"\n{HOSTILE}\n\n| fuzz table |\n"


def test_the_hostile_section_goes_before_the_notes_and_is_replaced_in_place():
    first = with_hostile_section(KILLS + NOTES, SECTION)
    assert first == KILLS + SECTION + NOTES
    assert hostile_section(first) == SECTION
    again = with_hostile_section(first, SECTION.replace("fuzz", "new"))
    assert again == KILLS + SECTION.replace("fuzz", "new") + NOTES


def test_the_kill_suite_keeps_it_when_it_rewrites_the_file():
    written = KILLS + hostile_section(with_hostile_section(KILLS + NOTES, SECTION)) + NOTES
    assert hostile_section(written) == SECTION


def test_the_tracked_file_has_a_clean_hostile_input_table():
    section = hostile_section(RELIABILITY.read_text())
    total = next(line for line in section.splitlines() if line.startswith("| **all**"))
    cells = [c.strip() for c in total.strip("|").split("|")]
    assert int(cells[1].replace(",", "")) >= 10_000
    assert cells[2:5] == ["0", "0", "0"]
