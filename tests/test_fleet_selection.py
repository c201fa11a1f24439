"""Fleet selection and summaries, pure: inventories, node sets, --limit, grouping, exit codes."""

from __future__ import annotations

import pytest

from runbook_runner.exitcodes import ExitCode
from runbook_runner.fleet import summary
from runbook_runner.fleet.inventory import InventoryError, parse
from runbook_runner.fleet.rollout import batches
from runbook_runner.fleet.selection import FleetHost, SelectionError, fold, limit, select
from runbook_runner.fleet.summary import HostOutcome

YAML = """\
all:
  vars:
    ansible_user: ops
  children:
    gpus:
      vars:
        ansible_port: 2222
      hosts:
        gpu[01:03]:
        gpu04:
          ansible_host: 10.0.0.4
          ansible_port: 22
          ansible_ssh_private_key_file: ~/.ssh/gpu04
    infer:
      hosts:
        infer-a1: {ansible_user: root}
      children:
        gpus:
"""

INI = """\
bastion ansible_host=10.0.0.1

[gpus]
gpu[1:3] ansible_host=127.0.0.1
gpu10 ansible_port=2210 ansible_user=root  # a comment

[gpus:vars]
ansible_port=2200
ansible_user=ops

[pool:children]
gpus
"""


def test_yaml_inventory_groups_children_ranges_and_variable_precedence():
    inventory = parse(YAML, "hosts.yaml")
    assert list(inventory.hosts) == ["gpu01", "gpu02", "gpu03", "gpu04", "infer-a1"]
    assert inventory.group("gpus") == {"gpu01", "gpu02", "gpu03", "gpu04"}
    assert inventory.group("infer") == {"infer-a1", "gpu01", "gpu02", "gpu03", "gpu04"}
    assert inventory.group("all") == set(inventory.hosts)
    gpu01, gpu04 = inventory.hosts["gpu01"], inventory.hosts["gpu04"]
    assert (gpu01.user, gpu01.port, gpu01.host) == ("ops", 2222, None)  # group vars, all's vars
    assert (gpu04.host, gpu04.port, gpu04.identity) == ("10.0.0.4", 22, "~/.ssh/gpu04")
    assert inventory.hosts["infer-a1"].user == "root"  # a host's own variable wins


def test_ini_inventory_ungrouped_ranges_vars_and_children():
    inventory = parse(INI, "hosts")
    assert inventory.group("ungrouped") == {"bastion"}
    assert inventory.group("gpus") == {"gpu1", "gpu2", "gpu3", "gpu10"}
    assert inventory.group("pool") == inventory.group("gpus")
    assert inventory.hosts["gpu2"].host == "127.0.0.1"
    assert (inventory.hosts["gpu2"].port, inventory.hosts["gpu2"].user) == (2200, "ops")
    assert (inventory.hosts["gpu10"].port, inventory.hosts["gpu10"].user) == (2210, "root")
    assert inventory.hosts["bastion"].port is None


@pytest.mark.parametrize(
    ("text", "source", "message"),
    [
        ("[gpus]\ngpu1 ansible_port\n", "hosts", "hosts:2: expected NAME=VALUE"),
        ("[gpus:weird]\n", "hosts", "hosts:1: unknown section kind :weird"),
        ("all:\n  hosts: [a, b]\n", "h.yaml", "group all: hosts is a mapping"),
        ("all:\n  hosts:\n    a: {ansible_port: ssh}\n", "h.yaml", "not a number"),
        ("all: [\n", "h.yaml", "h.yaml:2: not valid YAML"),
        ("[g]\nnode[a:3]\n", "hosts", "neither numeric nor one letter"),
    ],
)
def test_bad_inventories_are_one_line_with_the_place(text, source, message):
    with pytest.raises(InventoryError, match=message.replace("[", r"\[")):
        parse(text, source)


def test_node_sets_expand_fold_and_carry_a_user():
    hosts = select(["ops@gpu[01-03,07]", "infer-a[1-2]"])
    assert [h.name for h in hosts] == ["gpu01", "gpu02", "gpu03", "gpu07", "infer-a1", "infer-a2"]
    assert {h.user for h in hosts if h.name.startswith("gpu")} == {"ops"}
    assert {h.user for h in hosts if h.name.startswith("infer")} == {None}
    assert fold(["gpu3", "gpu1", "gpu2", "gpu10"]) == "gpu[1-3,10]"


def test_groups_come_from_the_inventory_and_node_set_operators_work():
    inventory = parse(INI, "hosts")
    hosts = select(["@gpus!gpu2"], inventory)
    assert [h.name for h in hosts] == ["gpu1", "gpu3", "gpu10"]
    assert hosts[0] == FleetHost("gpu1", user="ops", address="127.0.0.1", port=2200)
    assert [h.name for h in select([], inventory)] == ["bastion", "gpu1", "gpu2", "gpu3", "gpu10"]


def test_an_unknown_group_or_a_broken_node_set_is_a_clear_error():
    inventory = parse(INI, "hosts")
    with pytest.raises(SelectionError, match="no group @nope with hosts in inventory hosts"):
        select(["@nope"], inventory)
    with pytest.raises(SelectionError, match="missing bracket"):
        select(["gpu[1-"])
    with pytest.raises(SelectionError, match="no hosts left after --limit"):
        select(["gpu[1-3]"], None, "other*")


def test_limit_globs_unions_exclusions_intersections_and_groups():
    inventory = parse(INI, "hosts")
    names = ["bastion", "gpu1", "gpu2", "gpu3", "gpu10"]
    assert limit(names, "gpu1*", inventory) == ["gpu1", "gpu10"]
    assert limit(names, "bastion:gpu2", inventory) == ["bastion", "gpu2"]
    assert limit(names, "bastion,gpu2", inventory) == ["bastion", "gpu2"]
    assert limit(names, "gpus:!gpu2", inventory) == ["gpu1", "gpu3", "gpu10"]
    assert limit(names, "!gpus", inventory) == ["bastion"]
    assert limit(names, "all:&gpu[12]", inventory) == ["gpu1", "gpu2"]
    assert limit(names, "~gpu1$", inventory) == ["gpu1"]


def outcome(host: str, code: ExitCode, line: str, kind: str = summary.OK) -> HostOutcome:
    return HostOutcome(host, kind, code, line)


def test_summary_groups_hosts_with_the_same_outcome_folded_ok_first():
    failing = "gpu-memory-released failing — GPU 3: 81,920 MiB"
    outcomes = [outcome(f"gpu{i:03d}", ExitCode.OK, "ok") for i in range(1, 129) if i != 121]
    outcomes.append(outcome("gpu121", ExitCode.GOAL_NOT_MET, failing, summary.FAILING))
    outcomes.append(
        outcome("db1", ExitCode.HOST_UNREACHABLE, "unreachable — refused", summary.UNREACHABLE)
    )
    lines = summary.grouped(outcomes, fold)
    assert lines == [
        ("gpu[001-120,122-128]", ExitCode.OK, "ok"),
        ("gpu121", ExitCode.GOAL_NOT_MET, failing),
        ("db1", ExitCode.HOST_UNREACHABLE, "unreachable — refused"),
    ]
    assert summary.progress(37, 129, outcomes[-2:]) == "37/129 hosts, 1 failing, 1 unreachable"
    assert summary.totals(outcomes) == "129 hosts: 127 ok, 1 failing, 1 unreachable"


def test_the_fleet_exit_code_is_the_worst_in_the_documented_order():
    assert summary.worst([]) == ExitCode.OK
    assert summary.worst([ExitCode.OK, ExitCode.GOAL_NOT_MET]) == ExitCode.GOAL_NOT_MET
    assert summary.worst([ExitCode.GOAL_NOT_MET, ExitCode.HOST_UNREACHABLE]) == 3
    assert summary.worst([ExitCode.HOST_UNREACHABLE, ExitCode.LOCKED]) == ExitCode.LOCKED
    assert summary.worst([ExitCode.LOCKED, ExitCode.DECLINED, ExitCode.OK]) == ExitCode.DECLINED
    assert set(summary.SEVERITY) == set(ExitCode)


def test_host_text_in_a_summary_cannot_steer_the_terminal():
    assert summary.printable("GPU 0: \x1b[2Jgone\r") == "GPU 0: \\x1b[2Jgone\\x0d"


def test_rollout_batches():
    assert batches([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]


def test_a_single_host_command_does_not_load_clustershell():
    import subprocess
    import sys

    from conftest import REPO

    probe = (
        "import sys; from runbook_runner.cli import build_parser; "
        "build_parser().parse_args(['check', 'x', '--host', 'h']); "
        "print('ClusterShell' in ' '.join(sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "gpu-node-health"], "name a host: --host HOST, --hosts NODESET"),
        (["check", "gpu-node-health", "--hosts", "gpu[1-", "--forks", "0"], "--forks must be"),
        (["check", "gpu-node-health", "--hosts", "gpu[1-"], "missing bracket"),
        (["check", "gpu-node-health", "--host", "h", "--jsonl"], "--jsonl is for many hosts"),
        (
            ["run", "gpu-oom-recovery", "--hosts", "g[1-2]", "--journal", "j"],
            "--journal is for one",
        ),
        (["run", "gpu-oom-recovery", "--hosts", "g[1-2]", "--serial", "0"], "--serial must be"),
    ],
)
def test_fleet_usage_errors_are_one_line_exit_2(in_repo, capsys, argv, message):
    from runbook_runner.cli import main

    assert main(argv) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_a_broken_inventory_is_one_line_with_file_and_line(in_repo, capsys, tmp_path):
    from runbook_runner.cli import main

    inventory = tmp_path / "hosts"
    inventory.write_text("[gpus]\ngpu1 ansible_port\n")
    assert main(["check", "gpu-node-health", "--inventory", str(inventory)]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"runbook: {inventory}:2: expected NAME=VALUE, found 'ansible_port'"
    )


# -- bounds (issue 25) ----------------------------------------------------------------------

HUGE = "h[1-100000000000000]"  # 10**14: expanding it would never end; refused by its count


def test_a_node_set_past_max_hosts_is_refused_by_its_count_before_it_is_expanded():
    with pytest.raises(SelectionError, match=r"names up to 100,000,000,000,000 hosts, more than"):
        select([HUGE])
    with pytest.raises(SelectionError, match=r"names up to 110,000 hosts"):
        select(["a[1-50000],b[1-60000]"])
    with pytest.raises(SelectionError, match=r"names up to 6 hosts, more than --max-hosts 5"):
        select(["g[1-2]-ib[1-3]"], max_hosts=5)  # ranges multiply
    assert len(select(["g[1-2]-ib[1-3]"], max_hosts=6)) == 6
    assert len(select(["g[1-10]!g[1-5]"], max_hosts=10)) == 5  # an upper bound, not exact


def test_an_inventory_range_past_max_hosts_is_refused_before_it_is_expanded():
    with pytest.raises(InventoryError, match=r"hosts:2: host range 'b\[1:100000000000000\]' names"):
        parse("[gpus]\nb[1:100000000000000]\n", "hosts")
    with pytest.raises(InventoryError, match=r"names 8 hosts, more than the 7 left"):
        parse("[a]\nx[1:3]\n[b]\ny[1:2][1:4]\n", "hosts", max_hosts=10)
    with pytest.raises(InventoryError, match=r"more than 3 hosts \(--max-hosts\)"):
        parse("[a]\nh1\nh2\nh3\nh4\n", "hosts", max_hosts=3)


def test_inventory_groups_nested_past_the_bound_are_one_error_not_a_recursion_error():
    chain = "".join(f"[g{i}:children]\ng{i + 1}\n" for i in range(5_000)) + "[g5000]\nh1\n"
    with pytest.raises(InventoryError, match=r"groups nested more than 64 levels deep"):
        parse(chain, "hosts")
    deep_yaml = "all:\n" + "".join(
        "  " * (2 * i + 1) + "children:\n" + "  " * (2 * i + 2) + f"g{i}:\n" for i in range(200)
    )
    with pytest.raises(
        InventoryError, match=r"hosts.yaml:\d+(:\d+)?: nested more than 64 levels deep"
    ):
        parse(deep_yaml, "hosts.yaml")
    assert parse("[a:children]\nb\n[b]\nh1\n", "hosts").group("a") == {"h1"}


def test_a_limit_regex_that_backtracks_is_stopped_as_matches_is():
    names = ["a" * 40 + "b", "gpu1"]
    with pytest.raises(SelectionError, match=r"the regular expression takes too long"):
        limit(names, "~(a|aa)+$")
    assert limit(names, "~^gpu") == ["gpu1"]
    with pytest.raises(SelectionError, match=r"not a regular expression"):
        limit(names, "~(")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--hosts", HUGE], "names up to 100,000,000,000,000 hosts, more than --max-hosts"),
        (["--hosts", "g[1-3]", "--max-hosts", "2"], "names up to 3 hosts, more than --max-hosts 2"),
        (["--hosts", "g[1-3]", "--max-hosts", "0"], "--max-hosts must be at least 1"),
        (["--hosts", "g[1-3]", "--limit", "~(("], "not a regular expression"),
    ],
)
def test_bounds_are_one_line_exit_2_and_no_host_is_contacted(in_repo, capsys, argv, message):
    from runbook_runner.cli import main

    assert main(["check", "gpu-node-health", *argv]) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
