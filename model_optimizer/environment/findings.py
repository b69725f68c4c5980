"""A finding: what a rule concluded, why it matters for inference, and the commands that fix it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["ok", "warn", "error"]
SEVERITY_RANK = {"ok": 0, "warn": 1, "error": 2}
OS_FAMILIES = ("debian", "rhel", "wsl")


@dataclass
class Finding:
    """One conclusion of one rule."""

    id: str
    """Stable identifier, e.g. 'driver.module_not_loaded'; tests and tools key on it."""
    severity: Severity
    """ok: fine or informational; warn: works but slower or fragile; error: inference will fail."""
    title: str
    """What is wrong (or right), in one line, with the numbers."""
    why: str = ""
    """Why it matters for inference."""
    fix: dict[str, list[str]] = field(default_factory=dict)
    """Commands per OS family: 'any', 'debian' (Ubuntu/Debian), 'rhel' (RHEL/Rocky), 'wsl'."""
    details: dict[str, Any] = field(default_factory=dict)
    """The snapshot values the rule based itself on."""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"severity must be one of {', '.join(SEVERITY_RANK)}; got {self.severity!r}")

    def fix_for(self, family: str) -> list[str]:
        """The commands for one OS family, after the ones that apply everywhere."""
        return list(self.fix.get("any", [])) + list(self.fix.get(family, []))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def exit_code(findings: list[Finding]) -> int:
    """0 when all ok, 1 with warnings, 2 with errors."""
    return max((SEVERITY_RANK[f.severity] for f in findings), default=0)
