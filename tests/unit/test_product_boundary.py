"""The shipped package `kafka_mirror` carries only the product: the development tooling (the dev
stack, the demo) is the package `kafka_mirror_dev` under dev/python, which the product imports
only when `kafka-mirror dev …` or `kafka-mirror demo` runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from setuptools import find_packages

from kafka_mirror.audit.spark import JARS_ENV, kafka_source_jars
from kafka_mirror_dev.builds import REPO_ROOT

# Run in a fresh interpreter where `kafka_mirror_dev` cannot be imported, as in the image.
_WITHOUT_DEV = "import sys\nsys.modules['kafka_mirror_dev'] = None  # import raises\n"


def _without_dev(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_DEV + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )


def test_the_product_package_has_no_development_modules() -> None:
    # What the wheel takes: pyproject.toml's `packages.find` under operator/.
    packages = find_packages(REPO_ROOT / "operator")
    assert "kafka_mirror" in packages
    assert not [p for p in packages if "dev" in p.split(".")], packages
    modules = {p.stem for p in (REPO_ROOT / "operator" / "kafka_mirror").rglob("*.py")}
    assert not {"devstack", "demo", "stack", "builds"} & modules


def test_every_product_module_imports_without_the_development_package() -> None:
    result = _without_dev(
        """
        import importlib, pkgutil
        import kafka_mirror

        for module in pkgutil.walk_packages(kafka_mirror.__path__, "kafka_mirror."):
            if module.name != "kafka_mirror.__main__":  # that one runs the command line
                importlib.import_module(module.name)
        print(kafka_mirror.__file__)
        print(sorted(n for n, m in sys.modules.items() if n.startswith("kafka_mirror") and m))
        """
    )
    assert result.returncode == 0, result.stderr
    where, imported = result.stdout.splitlines()
    assert where.startswith(str(REPO_ROOT / "operator")), where  # this checkout's product
    assert "'kafka_mirror.cli'" in imported and "'kafka_mirror.audit.main'" in imported
    assert "kafka_mirror_dev" not in imported


def test_the_command_line_works_without_it_and_names_the_fix_for_dev() -> None:
    help_text = _without_dev("from kafka_mirror.cli import main\nmain(['--help'])")
    assert help_text.returncode == 0, help_text.stderr
    assert "dev" in help_text.stdout and "worker" in help_text.stdout
    for command in (["dev", "env"], ["demo"]):
        result = _without_dev(f"from kafka_mirror.cli import main\nmain({command!r})")
        assert result.returncode == 1
        assert result.stderr.strip().splitlines() == [
            f"kafka-mirror {command[0]}: development tooling, not part of the product: run it "
            "from a checkout after `make build` (or `pip install -e dev/python`)"
        ]


def test_without_pyspark_everything_but_the_audit_imports_and_the_audit_names_its_image() -> None:
    """The operator and worker image has no PySpark (the package's `audit` extra)."""
    result = _without_dev(
        """
        sys.modules["pyspark"] = None  # as in the operator and worker image
        import importlib, pkgutil
        import kafka_mirror

        for module in pkgutil.walk_packages(kafka_mirror.__path__, "kafka_mirror."):
            if module.name != "kafka_mirror.__main__" and not module.name.startswith(
                "kafka_mirror.audit."
            ):
                importlib.import_module(module.name)
        from kafka_mirror.cli import main
        main(["audit", "--config", "/etc/kafka-mirror/worker.yaml"])
        """
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "the audit needs PySpark, which is not installed here: run it in the audit image "
        "(ghcr.io/kafka-mirror/kafka-mirror-operator-audit), or install "
        "kafka-mirror-operator[audit]"
    )


def test_the_audit_takes_its_jars_only_from_the_variable_and_names_it_when_unset(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(JARS_ENV, raising=False)
    with pytest.raises(RuntimeError, match=JARS_ENV):
        kafka_source_jars()
    jar = tmp_path / "spark-sql-kafka-0-10_2.13-4.0.0.jar"
    jar.touch()
    monkeypatch.setenv(JARS_ENV, str(tmp_path))
    assert kafka_source_jars() == [jar]
