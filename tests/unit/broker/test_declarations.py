"""The 18 tools are declared once each with broker.md's exact names, arguments and hints."""

from __future__ import annotations

from gateway.tools import all_tools
from gateway.tools.broker import TOOLS
from gateway.tools.registry import Registry

ARGUMENTS = {
    "start_phase": {"phase", "issues"},
    "begin_developing": set(),
    "report_completion": {"issue", "result"},
    "report_review": {"result", "pr_id", "has_next_phase"},
    "set_phase_plan": {"plan_id", "phases", "auto_advance", "cooldown_minutes"},
    "get_phase_plan": set(),
    "set_auto_advance": {"enabled"},
    "cancel_auto_advance": {"reason"},
    "send_message": {"to", "subject", "body", "priority"},
    "wait_for_message": {"wait_seconds", "ack"},
    "reply_message": {"reply_to", "subject", "body", "priority"},
    "get_message_history": {"issue", "first", "after"},
    "get_pipeline_status": set(),
    "log_activity": {"message"},
    "get_activity_log": {"agent", "tail_lines"},
    "request_human": {"reason"},
    "resume": set(),
    "stop_pipeline": {"reason"},
}
REQUIRED = {
    "start_phase": {"phase", "issues"},
    "report_completion": {"issue", "result"},
    "report_review": {"result"},
    "set_phase_plan": {"plan_id", "phases"},
    "set_auto_advance": {"enabled"},
    "cancel_auto_advance": {"reason"},
    "send_message": {"to", "subject", "body"},
    "reply_message": {"reply_to", "subject", "body"},
    "log_activity": {"message"},
    "request_human": {"reason"},
}
READ_ONLY = {"get_phase_plan", "get_message_history", "get_pipeline_status", "get_activity_log"}


def test_eighteen_tools_with_exact_arguments() -> None:
    assert [t.name for t in TOOLS] == list(ARGUMENTS)
    for tool in TOOLS:
        schema = tool.input_schema()
        assert set(schema.get("properties", {})) == ARGUMENTS[tool.name], tool.name
        assert set(schema.get("required", [])) == REQUIRED.get(tool.name, set()), tool.name
        assert schema["additionalProperties"] is False
        assert tool.output_schema() is not None
        assert tool.toolset == "broker"
        assert tool.annotations.open_world is False
        assert tool.annotations.read_only is (tool.name in READ_ONLY), tool.name
        assert tool.long_running is (tool.name == "wait_for_message")


def test_registered_in_the_app_registry() -> None:
    names = {t.name for t in Registry(all_tools()).listed}
    assert set(ARGUMENTS) <= names


def test_read_only_gateway_keeps_monitoring() -> None:
    listed = {t.name for t in Registry(TOOLS, read_only=True).listed}
    assert listed == READ_ONLY
