"""Any host, any locale: observations run in the C locale, and a parser refuses a
translated header (naming the locale) instead of reading wrong values; more nvidia-smi
failures are typed conditions."""

from __future__ import annotations

import pytest

from conftest import FIXTURES, REPO
from runbook_runner.cli import main
from runbook_runner.errors import ParseError
from runbook_runner.exitcodes import ExitCode
from runbook_runner.observe import nvidia_smi
from runbook_runner.observe.free import parse_free
from runbook_runner.simhost.model import eight_gpu_server

LOCALES = FIXTURES / "locale"


@pytest.mark.parametrize(
    "name", ["constructed-procps-ng-de-default.txt", "constructed-procps-ng-fr-default.txt"]
)
def test_translated_free_is_refused_naming_the_locale(name):
    """French used to parse with used/free/available silently missing."""
    with pytest.raises(ParseError, match="locale") as refused:
        parse_free((LOCALES / name).read_text())
    assert "LC_ALL=C" in str(refused.value)


def test_english_free_still_parses():
    memory = parse_free((FIXTURES / "free" / "local-procps-ng-4.0.2-default.txt").read_text())
    assert memory.available_bytes == 24179084 * 1024


@pytest.mark.parametrize(
    ("output", "status", "condition"),
    [
        (
            "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error\n",
            15,
            "gpu-lost",
        ),
        (
            "unable to determine the device handle for gpu 0000:0B:00.0: GPU is lost\n",
            15,
            "gpu-lost",
        ),
        ("UNABLE TO DETERMINE THE DEVICE HANDLE FOR GPU 1\n", 15, "gpu-lost"),
        (
            "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure "
            "that the NVIDIA Display Driver is properly installed and present in your system.\n"
            "Please also try adding directory that contains libnvidia-ml.so to your system PATH.\n",
            12,
            "nvml-missing",
        ),
        (
            'Field "memory.usedd" is not a valid field to query.\n\n',
            2,
            "bad-field",
        ),
        ("", 127, "not-installed"),
        ("sh: 1: nvidia-smi: not found\n", 127, "not-installed"),
        ("bash: nvidia-smi: command not found\n", 127, "not-installed"),
    ],
)
def test_nvidia_smi_failures_are_typed_conditions(output, status, condition):
    failure = nvidia_smi.detect_failure(output, status)
    assert failure is not None
    assert failure.condition == condition


MINI = str(REPO / "tests" / "runbooks" / "mini-recovery.yaml")


@pytest.mark.ssh
@pytest.mark.parametrize("locale", ["de_DE.UTF-8", "fr_FR.UTF-8"])
def test_observations_run_in_the_c_locale_on_a_translated_host(gpu_host, capsys, locale):
    """The stand-in `free` speaks the host's locale unless LC_ALL says otherwise."""
    gpu_host.set_state(eight_gpu_server(locale=locale))
    printed = gpu_host.ssh("free -b").stdout
    assert "total" not in printed.split("\n")[0] or "utilisé" in printed  # the host is translated
    code = main(["check", MINI, *gpu_host.cli_args()])
    out, _ = capsys.readouterr()
    assert code == ExitCode.OK, out
    assert "host memory: unknown" not in out
    assert "440.0 GiB available of 449.0 GiB" in out
