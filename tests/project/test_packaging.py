"""The packaging's promises that need no pmcd: scripts/demo installs no test-only Debian
package (scripts/setup without --test), scripts/test and CI ask for them, the test tools
carry the build backend, and the Debian package depends on Debian's own python3-pcp,
python3-watchdog and python3-psutil."""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib

from tests.support.pmcd import CHECKOUT

SCRIPTS = CHECKOUT / "scripts"


def setup_words(name: str) -> list[str]:
    m = re.search(rf'^{name}="([^"]*)"$', (SCRIPTS / "setup").read_text(), flags=re.M)
    assert m, name
    return m.group(1).split()


def setup_calls(path: str) -> list[list[str]]:
    """Each call of scripts/setup in a script, as words."""
    calls = []
    for line in (CHECKOUT / path).read_text().splitlines():
        if "scripts/setup" in line and not line.lstrip().startswith("#"):
            words = shlex.split(line.split("&&")[0])
            calls.append(words)
    return calls


def test_demo_installs_no_test_only_package() -> None:
    runtime, test_only = setup_words("PACKAGES"), setup_words("TEST_PACKAGES")
    assert {"pcp", "python3-pcp", "python3-watchdog", "python3-psutil"} <= set(runtime)
    assert {
        "pcp-testsuite",
        "redis-server",
        "libpcp-mmv-perl",
        "libpcp-mmv1-dev",
        "prometheus",
        "man-db",
        "curl",
    } == set(test_only)
    assert not set(runtime) & set(test_only)
    (demo,) = setup_calls("scripts/demo")
    assert "--test" not in demo
    for path in ("scripts/test", ".ci/run"):
        assert any("--test" in call for call in setup_calls(path)), path


def test_the_test_tools_carry_the_build_backend() -> None:
    """The wheel test builds offline (--no-build-isolation) with the venv's own backend, and
    a venv of Python 3.12 or later starts without setuptools: `.[test]` installs it."""
    project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())
    backend = project["build-system"]["requires"]
    assert backend
    assert set(backend) <= set(project["project"]["optional-dependencies"]["test"])


def test_setup_refuses_unknown_arguments() -> None:
    done = subprocess.run([SCRIPTS / "setup", "--tests"], capture_output=True, text=True)
    assert done.returncode != 0
    assert "usage: scripts/setup [--test] [--no-pmcd]" in done.stderr


def test_the_debian_package_depends_on_debians_python_modules() -> None:
    control = (CHECKOUT / "debian" / "control").read_text()
    binary = control.split("\nPackage: pmda-mmv\n", 1)[1]
    depends = re.search(r"^Depends:(.*?)^\S", binary, flags=re.M | re.S)
    assert depends
    names = {d.strip().split()[0] for d in depends.group(1).split(",") if d.strip()}
    assert {"pcp", "python3-pcp", "python3-watchdog", "python3-psutil"} <= names
    assert re.search(r"^Build-Depends:.*debhelper-compat \(= 13\)", control, flags=re.M)


def test_pmda_help_points_at_pmda_mmv_install_not_at_a_pmcd_conf_line() -> None:
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "pmda_mmv", "pmda", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "'pmda-mmv install' (as root) registers it with pmcd" in text
    assert "pmdammv -d 70" not in text
