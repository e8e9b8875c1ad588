"""The rules a policy run weighs, as knobs: today's rule, the working group's four
proposals (presets named `today`, `precision_rcp`, `factor`, `group`, `m_of_n`), and any
combination of their knobs, written `--rule "m=2,m0=5,norm=point"`.

Knobs (a rule with none is today's):
- `precision_rcp`: test against an RCP of the candidate's own precision (2N runs);
- `allowance`: a fixed allowance a on the reference RCPs: the minimum acceptable mean
  and the RCP mean a faster result is normalized to, both times (1 + a);
- `m0`, `bound`, `norm`, `confidence`: a convergence factor measured from M0 runs of
  each recipe at the smallest and largest batch size; its interval's `bound` scales the
  test, its `norm` bound (default: the same) the RCP mean results are normalized to;
- `group`, `z`, `p`: `rcpforge round`'s flags among G similar submissions;
- `m`: M > N runs scored by the median window, M as a multiple of N (2: M = 2N).

Out-of-range knobs raise `RuleError`, one line naming the knob and its range."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Bound = Literal["lower", "point", "upper"]
BOUNDS: tuple[str, ...] = ("lower", "point", "upper")
PRESETS = ("today", "precision_rcp", "factor", "group", "m_of_n")

# The family `--frontier` weighs when no --rule is given: each proposal along its knobs,
# the fixed allowance, their combinations, and rcpforge's own rule (a measured factor
# that tests at its interval's lower bound and normalizes at its point estimate, so that
# a cheater's luck is normalized away as a fast BF16 result's is today).
FAMILY = (
    "today", "allowance=0.02", "allowance=0.04", "allowance=0.08", "precision_rcp",
    "m0=5", "m0=10", "m0=5,bound=point", "m0=10,bound=point",
    "m0=5,norm=point", "m0=10,norm=point", "m0=20,norm=point",
    "group=8", "group=8,z=2.5", "group=16,z=2.5", "group=8,m0=5", "group=8,m0=10,norm=point",
    "m=1.5", "m=2", "m=3", "m=2,m0=5", "m=2,m0=5,norm=point", "m=2,m0=10,norm=point", "m=2,allowance=0.04",
    "precision_rcp,m=2",
)

_RANGES = {
    "allowance": "a fraction of the RCP mean from 0 to 0.5 (0.04: 4%)",
    "m0": "runs of each recipe per batch size for the factor, from 2 to 50",
    "bound": "one of lower, point, upper", "norm": "one of lower, point, upper",
    "confidence": "the factor interval's two-sided confidence, between 0 and 1 (0.95)",
    "group": "G similar submissions compared, from 1 to 64", "z": "the robust z flag, above 0 and at most 10 (3.5)",
    "p": "the p-value flag, from 0 to below 1 (0.001)", "m": "M as a multiple of N, above 1 and at most 5 (2: M = 2N)",
    "precision_rcp": "a flag: write precision_rcp alone",
}


class RuleError(ValueError):
    """A rule spec that cannot be read, said in one line."""


class Rule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = ""
    precision_rcp: bool = False
    allowance: float = Field(default=0.0, ge=0.0, le=0.5)
    m0: int | None = Field(default=None, ge=2, le=50)
    bound: Bound = "lower"
    norm: Bound | None = None
    confidence: float = Field(default=0.95, gt=0.0, lt=1.0)
    group: int | None = Field(default=None, ge=1, le=64)
    z: float = Field(default=3.5, gt=0.0, le=10.0)
    p: float = Field(default=0.001, ge=0.0, lt=1.0)
    m: float | None = Field(default=None, gt=1.0, le=5.0)

    @model_validator(mode="after")
    def _combinable(self) -> Rule:
        # the precision RCP is the candidate's own: an allowance or factor on top would count it twice;
        # a group's peers are N-run submissions, not comparable with an M > N score
        if self.precision_rcp and (self.allowance or self.m0 is not None):
            raise ValueError("precision_rcp already carries the candidate's factor: drop allowance and m0")
        if self.group is not None and self.m is not None:
            raise ValueError("group compares N-run submissions: drop m or group")
        return self

    @property
    def label(self) -> str:
        return self.name or self.spec

    @property
    def spec(self) -> str:
        """The knobs that differ from today's, in a form `parse_rule` reads back."""
        knobs = self.model_dump(exclude={"name"}, exclude_defaults=True)
        return ",".join("precision_rcp" if k == "precision_rcp" else f"{k}={v:g}" if isinstance(v, float)
                        else f"{k}={v}" for k, v in knobs.items()) or "today"

    @property
    def measures(self) -> bool:
        """Whether the rule measures a reference of its own (what a poisoner cherry-picks)."""
        return self.precision_rcp or self.m0 is not None

    def m_runs(self, n: int) -> int | None:
        return None if self.m is None else max(n + 1, round(self.m * n))

    def extra_runs(self, n: int, endpoints: int) -> int:
        """Runs beyond today's N per submission: 2N for an own RCP, M0 of each recipe at
        each batch size measured for a factor, M - N for M > N runs."""
        m = self.m_runs(n)
        return (2 * n if self.precision_rcp else 0) + (2 * self.m0 * endpoints if self.m0 else 0) + (m - n if m else 0)


def _error(text: str, err: ValidationError) -> RuleError:
    first = err.errors()[0]
    knob = str(first["loc"][0]) if first["loc"] else ""
    if knob in _RANGES:
        return RuleError(f"--rule {text!r}: {knob} is out of range; give {_RANGES[knob]}")
    if first["type"] == "extra_forbidden":
        return RuleError(f"--rule {text!r}: unknown knob {knob!r}; give {', '.join(_RANGES)} or a preset "
                         f"({', '.join(PRESETS)})")
    return RuleError(f"--rule {text!r}: {first['msg'].removeprefix('Value error, ')}")


def parse_rule(text: str, presets: dict[str, Rule] | None = None) -> Rule:
    """A rule from `key=value` knobs and preset names separated by commas; a preset alone
    keeps its name."""
    presets = presets if presets is not None else preset_rules()
    tokens = [t.strip() for t in text.split(",") if t.strip()]
    if len(tokens) == 1 and tokens[0] in presets:
        return presets[tokens[0]]
    knobs: dict = {}
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep:
            if key == "precision_rcp":
                knobs[key] = True
            elif key in presets:
                knobs.update(presets[key].model_dump(exclude={"name"}, exclude_defaults=True))
            else:
                raise RuleError(f"--rule {text!r}: {key!r} is neither a preset ({', '.join(PRESETS)}) nor a knob=value")
        else:
            knobs[key.strip()] = value.strip()
    try:
        return Rule(**knobs)
    except ValidationError as err:
        raise _error(text, err) from None


def preset_rules(m0: int = 5, bound: str = "lower", confidence: float = 0.95, group: int = 8, z: float = 3.5,
                 p: float = 0.001, m: float = 2.0) -> dict[str, Rule]:
    """The five policies of issue 32 under their names, their knobs as the flags set them."""
    return {"today": Rule(name="today"), "precision_rcp": Rule(name="precision_rcp", precision_rcp=True),
            "factor": Rule(name="factor", m0=m0, bound=bound, confidence=confidence),  # type: ignore[arg-type]  # the CLI checks it
            "group": Rule(name="group", group=group, z=z, p=p), "m_of_n": Rule(name="m_of_n", m=m)}


def family() -> tuple[Rule, ...]:
    presets = preset_rules()
    return tuple(parse_rule(spec, presets) for spec in FAMILY)
