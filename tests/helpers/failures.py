"""Each failure's reason printed the moment it happens, among the progress dots: CI shows a part
of a long output, and the FAILURES section of one test (its captured logs) can fill that part,
hiding why the others failed. A pytest plugin (the root conftest loads it)."""

from __future__ import annotations

import pytest

SHOWN_CHARACTERS = 1500  # enough for a wait's "what it waited for and what it saw"


class FailureLines:
    def __init__(self, terminal: pytest.TerminalReporter) -> None:
        self.terminal = terminal

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.failed:
            return
        crash = getattr(report.longrepr, "reprcrash", None)
        reason = crash.message if crash is not None else str(report.longrepr)
        if len(reason) > SHOWN_CHARACTERS:
            reason = reason[:SHOWN_CHARACTERS] + " […]"
        self.terminal.write_line("")
        self.terminal.write_line(f"FAILED ({report.when}) {report.nodeid}: {reason}")


@pytest.hookimpl(trylast=True)  # once the terminal reporter is registered
def pytest_configure(config: pytest.Config) -> None:
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None and not hasattr(config, "workerinput"):  # the controller's output
        config.pluginmanager.register(FailureLines(terminal), "failure-lines")
