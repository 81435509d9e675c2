"""The console's controls follow the broker's state: "Resume auto-advance" only with a plan."""

from __future__ import annotations

from tests.unit.console.conftest import OPERATOR, Make, broker_of, sign_in


async def test_resume_auto_advance_is_offered_only_with_a_plan(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR)
    await sign_in(client, OPERATOR)
    page = await (await client.get("/broker")).text()
    assert "Resume auto-advance" not in page and 'id="auto-advance-no-plan"' in page
    phases = [{"phase": 1, "issues": ["X-1"]}]
    await broker_of(client).plan.set_phase_plan("pm", "demo", phases, False, 1)
    page = await (await client.get("/broker")).text()
    assert "Resume auto-advance" in page and 'id="auto-advance-no-plan"' not in page
