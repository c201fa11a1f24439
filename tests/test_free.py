"""free(1) parsing across procps-ng 4.x/3.3.x, old procps and BusyBox, every unit flag."""

from __future__ import annotations

import pytest

from conftest import FIXTURES, fixture_index, fixture_text
from runbook_runner.errors import ParseError
from runbook_runner.observe.free import FreeUnits, parse_free, units_from_command

KiB, MiB, GiB = 1024, 1024**2, 1024**3
INDEX = fixture_index()


def parse_fixture(name: str):
    return parse_free(fixture_text(name), units_from_command(INDEX[name]["command"]))


# (fixture, total, used, available, buff/cache) as the numbers on the Mem: line read, in bytes.
EXACT = [
    ("free/local-procps-ng-4.0.2-b.txt", 25276518400, 517136384, 24759382016, 995618816),
    (
        "free/local-procps-ng-4.0.2-default.txt",
        24684100 * KiB,
        505016 * KiB,
        24179084 * KiB,
        972284 * KiB,
    ),
    (
        "free/local-procps-ng-4.0.2-k.txt",
        24684100 * KiB,
        505016 * KiB,
        24179084 * KiB,
        972284 * KiB,
    ),
    ("free/local-procps-ng-4.0.2-m.txt", 24105 * MiB, 493 * MiB, 23611 * MiB, 949 * MiB),
    ("free/local-procps-ng-4.0.2-g.txt", 23 * GiB, 0, 23 * GiB, 0),
    (
        "free/local-procps-ng-4.0.2-si.txt",
        25276518 * 1000,
        519389 * 1000,
        24757129 * 1000,
        995774 * 1000,
    ),
    (
        "free/local-procps-ng-4.0.2-t.txt",
        24684100 * KiB,
        507384 * KiB,
        24176716 * KiB,
        972436 * KiB,
    ),
    (
        "free/local-procps-ng-4.0.2-v.txt",
        24684100 * KiB,
        509336 * KiB,
        24174764 * KiB,
        972436 * KiB,
    ),
    (
        "free/local-procps-ng-4.0.2-l.txt",
        24684100 * KiB,
        507572 * KiB,
        24176528 * KiB,
        972436 * KiB,
    ),
    # -w splits buffers (5312) from cache (967124); buff/cache is their sum.
    (
        "free/local-procps-ng-4.0.2-w.txt",
        24684100 * KiB,
        507384 * KiB,
        24176716 * KiB,
        (5312 + 967124) * KiB,
    ),
    # -c 2: two reports; the last one is the state now.
    (
        "free/local-procps-ng-4.0.2-c2-s0.2.txt",
        24684100 * KiB,
        511376 * KiB,
        24172724 * KiB,
        972436 * KiB,
    ),
    (
        "free/procps-ng-3.3.10-centos7-default.txt",
        3861332 * KiB,
        222820 * KiB,
        3389588 * KiB,
        274336 * KiB,
    ),
    (
        "free/procps-ng-3.3.10-centos7-w.txt",
        8053804 * KiB,
        1262704 * KiB,
        6483996 * KiB,
        (61596 + 898640) * KiB,
    ),
    (
        "free/procps-ng-3.3.12-ubuntu1804-default.txt",
        2017300 * KiB,
        242740 * KiB,
        1585920 * KiB,
        1296332 * KiB,
    ),
    ("free/local-busybox-1.35.0-b.txt", 25276518400, 250503168, 24754675712, 995835904),
    (
        "free/local-busybox-1.35.0-default.txt",
        24684100 * KiB,
        244380 * KiB,
        24174840 * KiB,
        972496 * KiB,
    ),
    ("free/local-busybox-1.35.0-m.txt", 24106 * MiB, 239 * MiB, 23608 * MiB, 950 * MiB),
]


@pytest.mark.parametrize(("name", "total", "used", "available", "buff_cache"), EXACT)
def test_exact_fixtures(name, total, used, available, buff_cache):
    memory = parse_fixture(name)
    assert memory.total_bytes == total
    assert memory.used_bytes == used
    assert memory.available_bytes == available
    assert memory.buff_cache_bytes == buff_cache


# -h output is rounded by free itself: compare within the rounding of its last digit.
HUMAN = [
    ("free/local-procps-ng-4.0.2-h.txt", 23 * GiB, 494 * MiB, 23 * GiB),
    ("free/local-procps-ng-4.0.2-hwt.txt", 23 * GiB, 495 * MiB, 23 * GiB),
    ("free/local-procps-ng-4.0.2-h-si.txt", 25 * 10**9, 519 * 10**6, 24 * 10**9),
    ("free/procps-ng-3.3.10-centos7-h.txt", 3.7 * GiB, 217 * MiB, 3.2 * GiB),
    ("free/procps-ng-3.3.12-ubuntu1804-h.txt", 1.9 * GiB, 237 * MiB, 1.5 * GiB),
    ("free/local-busybox-1.35.0-h.txt", 23.5 * GiB, 238.9 * MiB, 23.1 * GiB),
]


@pytest.mark.parametrize(("name", "total", "used", "available"), HUMAN)
def test_human_readable_fixtures(name, total, used, available):
    memory = parse_fixture(name)
    assert memory.total_bytes == pytest.approx(total, rel=0.01)
    assert memory.used_bytes == pytest.approx(used, rel=0.01)
    assert memory.available_bytes == pytest.approx(available, rel=0.01)


def test_swap_line_is_read():
    memory = parse_fixture("free/procps-ng-3.3.12-ubuntu1804-default.txt")
    assert (memory.swap_total_bytes, memory.swap_used_bytes, memory.swap_free_bytes) == (
        2097148 * KiB,
        268 * KiB,
        2096880 * KiB,
    )
    assert parse_fixture("free/procps-ng-3.3.12-ubuntu1804-h.txt").swap_used_bytes == 268 * KiB


def test_old_busybox_takes_used_and_available_from_the_buffers_line():
    memory = parse_fixture("free/busybox-old-m-franklin-t9.txt")
    assert memory.total_bytes == 169 * MiB
    assert memory.used_bytes == 112 * MiB
    assert memory.available_bytes == 56 * MiB
    assert memory.buff_cache_bytes == 0


# procps 3.3.9 and older: no fixture from a public repository was found, so this is
# the documented layout (13 spaces before "total", six columns, then -/+ buffers/cache).
OLD_PROCPS = """\
             total       used       free     shared    buffers     cached
Mem:     197998432  190512344    7486088     296268     201040  178765852
-/+ buffers/cache:   11545452  186452980
Swap:      4194300      10744    4183556
"""


def test_old_procps_derives_used_and_available_without_the_page_cache():
    memory = parse_free(OLD_PROCPS)
    assert memory.total_bytes == 197998432 * KiB
    assert memory.used_bytes == 11545452 * KiB  # not 190512344: that counts the cache
    assert memory.available_bytes == 186452980 * KiB
    assert memory.buff_cache_bytes == (201040 + 178765852) * KiB


def test_all_free_fixtures_are_covered():
    covered = {name for name, *_ in EXACT + HUMAN} | {
        "free/busybox-old-m-franklin-t9.txt",
        "free/procps-ng-3.3.12-ubuntu1804-h.txt",
    }
    on_disk = {f"free/{p.name}" for p in (FIXTURES / "free").glob("*.txt")}
    assert on_disk == covered


def test_procps_4_and_busybox_disagree_on_used_and_we_keep_what_each_printed():
    # Same machine, seconds apart: procps-ng 4 used = total - available, BusyBox = total - free - cache.
    procps = parse_fixture("free/local-procps-ng-4.0.2-default.txt")
    busybox = parse_fixture("free/local-busybox-1.35.0-default.txt")
    assert procps.used_bytes == procps.total_bytes - procps.available_bytes
    assert busybox.used_bytes == busybox.total_bytes - busybox.free_bytes - busybox.buff_cache_bytes


def test_values_wider_than_their_columns():
    text = (
        "               total        used        free      shared  buff/cache   available\n"
        "Mem:    202770395136 34394607616 1234567890123 1 2 168375787520\n"
    )
    memory = parse_free(text, FreeUnits(multiplier=1))
    assert memory.total_bytes == 202770395136
    assert memory.available_bytes == 168375787520


@pytest.mark.parametrize(
    ("command", "units"),
    [
        ("free", FreeUnits(KiB)),
        ("free -b", FreeUnits(1)),
        ("free -m", FreeUnits(MiB)),
        ("free -g", FreeUnits(GiB)),
        ("free --si", FreeUnits(1000, si=True)),
        ("free --si -g", FreeUnits(10**9, si=True)),
        ("free --giga", FreeUnits(10**9)),
        ("free -h --si", FreeUnits(1000, human=True, si=True)),
        ("free -hwt", FreeUnits(KiB, human=True)),
        ("free -bt", FreeUnits(1)),
        ("free -c 2 -s 0.2", FreeUnits(KiB)),
        ("busybox free -m", FreeUnits(MiB)),
        ("LC_ALL=C free -b | tail -n 3", FreeUnits(1)),
    ],
)
def test_units_from_command(command, units):
    assert units_from_command(command) == units


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "printed nothing"),
        ("Mem: 1 2 3\n", "no header"),
        ("              total        used\nSwap: 1 2\n", "no 'Mem:' line"),
        ("              total        used        free\nMem: 1 2\n", "2 values for 3 columns"),
        ("              total        used\nMem: 1 lots\n", "not a size"),
    ],
)
def test_malformed_output_is_a_parse_error(text, message):
    with pytest.raises(ParseError, match=message):
        parse_free(text)
