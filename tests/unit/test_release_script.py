"""``scripts/release``: a tag only when the code's version and CHANGELOG.md's newest section agree."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WHO = {
    "GIT_AUTHOR_NAME": "Release Test",
    "GIT_AUTHOR_EMAIL": "release@example.com",
    "GIT_COMMITTER_NAME": "Release Test",
    "GIT_COMMITTER_EMAIL": "release@example.com",
}


def changelog(unreleased: str, version: str, date: str = " - 2026-12-07") -> str:
    return f"# Changelog\n\n## [Unreleased]\n{unreleased}\n## [{version}]{date}\n\n### Added\n- It.\n"


@pytest.mark.spawns_process(reason="runs scripts/release and git in a repository made for the test")
def test_a_release_is_tagged_only_when_version_and_changelog_agree(tmp_path: Path) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **WHO}

    def sh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)

    def commit(version: str, log: str) -> None:
        (tmp_path / "gateway").mkdir(exist_ok=True)
        (tmp_path / "gateway" / "__init__.py").write_text(f'"""x"""\n\n__version__ = "{version}"\n')
        (tmp_path / "CHANGELOG.md").write_text(log)
        sh("git", "add", "-A")
        assert sh("git", "commit", "-qm", f"{version}").returncode == 0

    def release(*args: str) -> tuple[int, str]:
        done = sh(str(REPO / "scripts" / "release"), *args)
        return done.returncode, done.stdout + done.stderr

    assert sh("git", "init", "-q").returncode == 0
    commit("1.2.0", changelog("", "1.1.0"))
    code, said = release()
    assert code == 1 and "newest section is [1.1.0] but the code says 1.2.0" in said
    commit("1.2.0", changelog("\n### Fixed\n- Not yet in a version.\n", "1.2.0"))
    code, said = release()
    assert code == 1 and "[Unreleased] section has 1 line(s)" in said
    commit("1.2.0", changelog("", "1.2.0", date=""))
    assert "has no date" in release()[1]
    (tmp_path / "CHANGELOG.md").write_text(changelog("", "1.2.0"))
    code, said = release()
    assert code == 1 and "tracked files differ from HEAD" in said
    assert sh("git", "tag").stdout == ""  # every refusal tagged nothing

    sh("git", "commit", "-qam", "1.2.0 dated")
    assert release("--dry-run") == (
        0,
        f"would tag v1.2.0 on {sh('git', 'rev-parse', 'HEAD').stdout[:12]} "
        "(version 1.2.0, CHANGELOG dated 2026-12-07)\n",
    )
    code, said = release()
    assert code == 0 and "git push origin v1.2.0" in said
    assert sh("git", "cat-file", "-t", "v1.2.0").stdout.strip() == "tag"  # annotated
    assert (
        sh("git", "tag", "-l", "--format=%(contents:subject)", "v1.2.0").stdout.strip()
        == "gitlab-mcp-gateway 1.2.0"
    )
    code, said = release()
    assert code == 1 and "the tag v1.2.0 exists already" in said
