"""The chart's alert rules, evaluated by Prometheus' own rule engine: `promtool test rules`
(built from its Go module) runs the cases in alerts/rules_test.yaml against the rules exactly as
the chart renders them. Every alert has a case where it fires and one where it resolves."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kafka_mirror_dev.builds import PROMTOOL
from tests.helpers.helm import CHART, run_helm

pytestmark = pytest.mark.helm

CASES = Path(__file__).parent / "alerts" / "rules_test.yaml"


def rendered_rules(helm: Path, home: Path) -> dict[str, Any]:
    """The rule groups of the chart's PrometheusRule, with its default values."""
    rendered = run_helm(
        helm,
        home,
        *("template", "r", str(CHART), "--set", "prometheusRule.enabled=true"),
        *("--show-only", "templates/prometheusrule.yaml"),
    )
    return dict(yaml.safe_load(rendered)["spec"])


def test_every_alert_fires_and_resolves_in_promtools_rule_tests(helm: Path, tmp_path: Path) -> None:
    rules = rendered_rules(helm, tmp_path)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    shutil.copy(CASES, tmp_path / CASES.name)
    tested = subprocess.run(
        [str(PROMTOOL.ensure()), "test", "rules", CASES.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr

    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    fired: set[str] = set()
    resolved: set[str] = set()
    for case in yaml.safe_load(CASES.read_text())["tests"]:
        seen_firing: set[str] = set()
        for check in sorted(case["alert_rule_test"], key=lambda c: duration(c["eval_time"])):
            name = check["alertname"]
            if check["exp_alerts"]:
                seen_firing.add(name)
            elif name in seen_firing:
                resolved.add(name)
        fired |= seen_firing
    assert alerts - fired == set(), "alerts no case sees firing"
    assert alerts - resolved == set(), "alerts no case sees resolved after firing"


def duration(text: str) -> int:
    """Seconds of a Prometheus duration of minutes or seconds (what the cases use)."""
    return int(text[:-1]) * {"m": 60, "s": 1}[text[-1]]
