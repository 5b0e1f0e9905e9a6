"""report: HTML, JSON, JUnit and Markdown from the results, written last on every exit path."""

from __future__ import annotations

from cvs_tui.core.events import StageState
from cvs_tui.core.runner.stages.base import Stage, StageContext


class Report(Stage):
    name = "report"
    closing = True

    async def run(self, ctx: StageContext) -> str | None:
        # imported here: `plan` lists this stage and must not pay for the report renderers and models
        from cvs_tui.core.report import REPORT_FILES, write_reports

        ctx.stage(self.name, StageState.RUNNING)
        # marked done before rendering so the report shows its own stage finished; a failure to write
        # is recorded as such and re-raised
        ctx.stage(self.name, StageState.PASSED, str(ctx.run_dir / REPORT_FILES["html"]))
        try:
            write_reports(ctx.results, ctx.run_dir)
        except Exception as exc:
            ctx.stage(self.name, StageState.FAILED, f"cannot write the reports: {exc}")
            raise
        return None
