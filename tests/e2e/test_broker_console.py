"""The broker console in a real browser (headless Chromium, Debian's ``chromium`` and
``chromium-driver``): a person watches agents that are real MCP clients, sees a ``request_human``
arrive without reloading, answers it, sees the PM's ``resume`` arrive and the banner go, stops the
pipeline and starts over. A screenshot of each main state is written under the test's tmp dir."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import GatewayProcess, gateway_command, mcp_client

pytestmark = pytest.mark.e2e

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

TOKEN = "console-operator-token-for-tests"
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed: run scripts/install-test-tools")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1900",
        "--disable-extensions",
        "--no-first-run",
    ):
        options.add_argument(arg)
    try:
        driver = webdriver.Chrome(
            options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER)
        )
    except WebDriverException as err:
        pytest.skip(f"headless Chromium does not start here: {err.msg}")
    driver.set_page_load_timeout(15)
    try:
        yield driver
    finally:
        driver.quit()


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    data = result.structured_content
    assert isinstance(data, dict)
    return data


async def until(driver: Any, check: Callable[[Any], Any], timeout: float = 10.0) -> Any:
    """Wait (in a thread: the agents keep running) until ``check(driver)`` is truthy."""
    return await asyncio.to_thread(lambda: WebDriverWait(driver, timeout, poll_frequency=0.1).until(check))


def banner_text(driver: Any) -> str:
    found = driver.find_elements(By.ID, "human-banner")
    return str(found[0].text) if found else ""


def badge(driver: Any) -> str:
    return str(driver.find_element(By.ID, "state-badge").text)


def marked(driver: Any) -> bool:
    """Whether the page is still the one :func:`mark` marked (no reload since)."""
    return bool(driver.execute_script("return window.__notReloaded === true"))


def mark(driver: Any) -> None:
    driver.execute_script("window.__notReloaded = true")


async def test_watch_answer_a_request_human_stop_and_start_over(
    tmp_path: Path, start_gateway: Callable[..., GatewayProcess], browser: Any
) -> None:
    gateway = start_gateway(
        env={"GITLAB_URL": "http://127.0.0.1:9", "GATEWAY_CONSOLE__OPERATOR_TOKEN": TOKEN}
    )
    assert f"broker console on for operators at http://127.0.0.1:{gateway.port}/broker" in gateway.log()
    shots = tmp_path / "screenshots"
    shots.mkdir()

    def shot(name: str) -> None:
        browser.save_screenshot(str(shots / f"{name}.png"))

    async with (
        mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "pm"}) as pm,
        mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "dev"}) as dev,
    ):
        plan = {
            "planId": "console-demo",
            "phases": [{"phase": 1, "issues": ["DEMO-1", "DEMO-2"]}, {"phase": 2, "issues": ["DEMO-3"]}],
            "autoAdvance": True,
            "cooldownMinutes": 5,
        }
        structured(await pm.call_tool("set_phase_plan", plan))
        structured(await pm.call_tool("start_phase", {"phase": 1, "issues": ["DEMO-1", "DEMO-2"]}))
        structured(await pm.call_tool("begin_developing", {}))
        structured(
            await pm.call_tool(
                "send_message", {"to": "dev", "subject": "develop", "body": {"issue": "DEMO-1"}}
            )
        )
        got = structured(await dev.call_tool("wait_for_message", {"timeout_sec": 5}))["message"]
        structured(
            await dev.call_tool(
                "reply_message",
                {
                    "replyTo": got["messageId"],
                    "subject": "question",
                    "body": {"issue": "DEMO-1", "text": "<script>alert(1)</script>"},
                },
            )
        )
        structured(await dev.call_tool("log_activity", {"message": "working on DEMO-1"}))

        # sign in
        await asyncio.to_thread(browser.get, f"{gateway.url}/broker")
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        browser.find_element(By.ID, "name").send_keys("alice")
        browser.find_element(By.ID, "sign-in").click()
        await until(browser, lambda d: d.find_element(By.ID, "live").text == "live")
        assert badge(browser) == "PHASE_DEVELOPING"
        assert "<script>alert(1)</script>" in browser.find_element(By.ID, "threads").text  # shown as text
        shot("1-developing")

        # a request_human made by an MCP client appears without reloading
        mark(browser)
        structured(
            await dev.call_tool("request_human", {"reason": "DEMO-1 needs a decision: keep the v1 API?"})
        )
        await until(browser, lambda d: "keep the v1 API?" in banner_text(d))
        assert marked(browser) and badge(browser) == "HUMAN_NEEDED"
        current = browser.find_element(By.CSS_SELECTOR, "#machine .node.current")
        assert current.get_attribute("data-state") == "HUMAN_NEEDED"
        shot("2-human-needed")

        async def pm_waits_for_the_person() -> dict[str, Any]:
            while True:
                message = structured(await pm.call_tool("wait_for_message", {"timeout_sec": 15}))["message"]
                assert message is not None, "the PM's instruction never came"
                if message["subject"] == "human":
                    await asyncio.sleep(0.5)  # so the page shows the resume arriving live
                    structured(await pm.call_tool("resume", {}))
                    return dict(message)

        pm_task = asyncio.create_task(pm_waits_for_the_person())
        browser.find_element(By.ID, "instruct-text").send_keys("Keep v1 and add v2 beside it.")
        browser.find_element(By.ID, "instruct-confirm").click()
        browser.find_element(By.ID, "instruct-send").click()
        await until(browser, lambda d: d.find_elements(By.ID, "notice"))
        mark(browser)  # the action's redirect loaded the page; from here on everything is live
        instruction = await asyncio.wait_for(pm_task, 20)
        assert instruction["from"] == "human" and instruction["body"]["operator"] == "operator:alice"
        assert instruction["body"]["text"] == "Keep v1 and add v2 beside it."
        await until(browser, lambda d: badge(d) == "PHASE_DEVELOPING" and not banner_text(d))
        assert marked(browser)
        await until(browser, lambda d: "instruction" in d.find_element(By.ID, "log-pipeline").text)
        assert "[operator:alice] instruction" in browser.find_element(By.ID, "log-pipeline").text
        shot("3-resumed")

        # stop from the page; the agents see it
        browser.find_element(By.ID, "stop-confirm").click()
        browser.find_element(By.ID, "stop-button").click()
        await until(browser, lambda d: badge(d) == "STOPPED" and d.find_elements(By.ID, "stopped-banner"))
        status = structured(await pm.call_tool("get_pipeline_status", {}))
        assert status["state"] == "STOPPED" and status["stopped"]["by"] == "operator:alice"
        shot("4-stopped")

        # start over: a new pipeline, the old one archived
        browser.find_element(By.ID, "start-over-confirm").click()
        browser.find_element(By.ID, "start-over-button").click()
        await until(browser, lambda d: badge(d) == "IDLE")
        assert "Archived pipelines: 1 (STOPPED" in browser.find_element(By.ID, "machine").text
        status = structured(await pm.call_tool("get_pipeline_status", {}))
        assert status["state"] == "IDLE" and status["phase"] is None
        history = structured(await pm.call_tool("get_message_history", {}))
        assert [m["subject"] for m in history["messages"]] == []
        structured(await pm.call_tool("start_phase", {"phase": 1, "issues": ["DEMO-9"]}))
        await until(browser, lambda d: badge(d) == "PHASE_PREPARING")
        shot("5-started-over")

    for name in ("1-developing", "2-human-needed", "3-resumed", "4-stopped", "5-started-over"):
        assert (shots / f"{name}.png").stat().st_size > 10_000
    print(json.dumps({"screenshots": str(shots)}))


async def sign_in(driver: Any, url: str) -> None:
    await asyncio.to_thread(driver.get, f"{url}/broker")
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    driver.find_element(By.ID, "name").send_keys("alice")
    driver.find_element(By.ID, "sign-in").click()
    await until(driver, lambda d: d.find_element(By.ID, "live").text == "live")


def broker_command(gateway: GatewayProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``gitlab-mcp-gateway broker ...`` with ``gateway``'s configuration."""
    return subprocess.run(
        [*gateway_command(), "broker", *args],
        env=gateway.env,
        cwd=gateway.state_dir.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
async def test_a_replica_shows_what_another_replica_and_the_command_line_did(
    tmp_path: Path, postgres_url: str, browser: Any
) -> None:
    env = {
        "GITLAB_URL": "http://127.0.0.1:9",
        "GATEWAY_CONSOLE__OPERATOR_TOKEN": TOKEN,
        "GATEWAY_BROKER__DATABASE_URL": postgres_url,
    }
    first = GatewayProcess(env=env, state_dir=tmp_path / "state-a").start(60.0)
    second = GatewayProcess(env=env, state_dir=tmp_path / "state-b")
    try:
        second.start(60.0)
        await sign_in(browser, first.url)  # the page comes from the first replica
        mark(browser)
        async with mcp_client(second.mcp_url, headers={"X-Agent-Id": "pm"}) as pm:
            # a change that wakes nobody (no message): the console still hears of it
            structured(await pm.call_tool("start_phase", {"phase": 1, "issues": ["R-1"]}))
            await until(browser, lambda d: badge(d) == "PHASE_PREPARING")
            structured(await pm.call_tool("request_human", {"reason": "asked through the other replica"}))
            await until(browser, lambda d: "asked through the other replica" in banner_text(d))
            browser.save_screenshot(str(tmp_path / "replica-human-needed.png"))

        # the command line on the same database, beside both gateways
        done = broker_command(second, "instruct", "Go on.", "--as", "carol")
        assert done.returncode == 0, done.stderr
        await until(
            browser, lambda d: "[operator:carol] instruction" in d.find_element(By.ID, "log-pipeline").text
        )
        done = broker_command(second, "stop", "--yes", "--as", "carol")
        assert done.returncode == 0, done.stderr
        await until(browser, lambda d: badge(d) == "STOPPED")
        done = broker_command(second, "reset", "--yes", "--json", "--as", "carol")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["generation"] == 2
        await until(browser, lambda d: badge(d) == "IDLE")
        assert marked(browser)
        for replica in (first, second):
            for _ in range(100):  # each replica removes its own .stop-pipeline once it hears
                if not (replica.state_dir / ".stop-pipeline").exists():
                    break
                await asyncio.sleep(0.05)
            assert not (replica.state_dir / ".stop-pipeline").exists()
            async with mcp_client(replica.mcp_url, headers={"X-Agent-Id": "dev"}) as dev:
                # each replica takes up the new pipeline: its waits work again
                got = structured(await dev.call_tool("wait_for_message", {"timeout_sec": 0.2}))
                assert got.get("stopped") is not True and got["timedOut"] is True
    finally:
        first.stop()
        second.stop()
