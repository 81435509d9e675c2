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


class Repo:
    """A git repository made for one test, with the commands the tests run in it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **WHO}
        assert self.sh("git", "init", "-q").returncode == 0

    def sh(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=self.path, env=self.env, capture_output=True, text=True, timeout=30)

    def commit(self, version: str, log: str) -> str:
        (self.path / "gateway").mkdir(exist_ok=True)
        (self.path / "gateway" / "__init__.py").write_text(f'"""x"""\n\n__version__ = "{version}"\n')
        (self.path / "CHANGELOG.md").write_text(log)
        self.sh("git", "add", "-A")
        assert self.sh("git", "commit", "-qm", f"{version}", "--allow-empty").returncode == 0
        return self.sh("git", "rev-parse", "HEAD").stdout.strip()

    def release(self, *args: str) -> tuple[int, str]:
        done = self.sh(str(REPO / "scripts" / "release"), *args)
        return done.returncode, done.stdout + done.stderr


@pytest.mark.spawns_process(reason="runs scripts/release and git in a repository made for the test")
def test_a_release_is_tagged_only_when_version_and_changelog_agree(tmp_path: Path) -> None:
    repo = Repo(tmp_path)
    sh, commit, release = repo.sh, repo.commit, repo.release
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
    (tmp_path / "CHANGELOG.md").write_text(changelog("\n- Not yet released.\n", "1.2.0"))
    code, said = release()  # the existing tag is said first, before any other check
    assert code == 1 and said.startswith("scripts/release: the tag v1.2.0 exists already"), said
    sh("git", "checkout", "-q", "--", "CHANGELOG.md")


@pytest.mark.spawns_process(reason="runs scripts/release and git in a repository made for the test")
def test_an_older_commit_is_tagged_only_as_the_newest_carrying_its_version(tmp_path: Path) -> None:
    repo = Repo(tmp_path)
    commit, release = repo.commit, repo.release
    first = commit("0.2.0", changelog("", "0.2.0"))
    last = commit("0.2.0", changelog("", "0.2.0") + "\n")
    commit("0.3.0", changelog("\n### Added\n- Next.\n", "0.2.0"))
    code, said = release(first, "--dry-run")
    assert code == 1 and f"{last[:12]}, a later commit, still carries version 0.2.0" in said
    assert release(last, "--dry-run") == (
        0,
        f"would tag v0.2.0 on {last[:12]} (version 0.2.0, CHANGELOG dated 2026-12-07)\n",
    )
    # The release after it: its CHANGELOG's newest section names it.
    commit("0.3.0", changelog("", "0.3.0") + "\n## [0.2.0] - 2026-12-01\n\n- Earlier.\n")
    code, said = release()
    assert code == 0 and "Tagged v0.3.0" in said
