"""Approval policies (docs/contract.md, "Approval policies"): how many distinct operators must
approve a plan, and who may, per workflow and subject.

The policy is a TOML file named by ``ALFRED_APPROVAL_POLICY``, versioned with the deployment
and read once per process, at start (``ExecutionsConfig.ready``: a policy that does not parse,
or that asks more of a fixed list of approvers than it names, stops the process before it
serves anything). Without one, the built-in default applies: one approval, from any operator
but the execution's requester. ``manage.py alfred_policy check`` and ``explain`` read the same
file the same way, and add what only the database knows (the members of a group).

A rule (``[default]``, or one of ``[[rules]]``, the first that matches winning) says where it
applies (``workflows``: names or globs; ``subjects``: globs on what the execution acts on),
how many distinct operators must approve (``approvals``, 1–10), whether the requester
(``requester_may_approve``) and whoever approved an earlier plan of the execution
(``earlier_approvers_may_approve``) may, and who may (``approvers``); docs/contract.md,
"Approval policies", has an example.

``approvers`` says who may approve (default ``["operators"]``), each an operator besides:
``operators`` (every operator: users with the operate permission, operator tokens, the
command line), ``group:<name>`` (the users of that Django group), ``user:<username>``,
``token:<name>`` (the operator token of that name), ``cli:<actor>``, ``cli:*`` (the command
line, any ``--actor``). The command line acts with the machine's authority: a list that lets it
in (``operators``, ``cli:*``) can always be met by someone with a shell, so a policy whose
separation of duties must hold against that names its approvers without it.

Whether a plan's approval can still be met is :func:`standing`: the approvers the rule's list
holds now, less the requesters and earlier approvers it shuts out and those who approved
already; fewer than the approvals still owed, and the pending approval says so (``blocked``)
instead of waiting for its expiry in silence.

The engine is blind to workflows here as everywhere: a rule names a workflow and matches the
subject its workflow declares (``Workflow.subject``); a sixth workflow gets policies by its
name alone.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from alfred.db import Rows, Statement, statements_run
from alfred.models import ApiToken
from alfred.principals import OPERATE_PERMISSION, Caller, Role
from executions.models import Approval, DeliveryKey, Execution, Hook

OPERATORS = "operators"
CLI_ANYONE = "cli:*"
# operators | group:<name> | user:<username> | token:<name> | cli:<actor> | cli:*
Selector = Annotated[
    str,
    StringConstraints(pattern=r"^(operators|(group|user|token|cli):[^\s:][^:]{0,199})$"),
]


class Rule(BaseModel):
    """One rule of the policy: where it applies and what it asks."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: Annotated[str, StringConstraints(min_length=1, max_length=100)] = "default"
    workflows: tuple[str, ...] = ("*",)
    subjects: tuple[str, ...] = ("*",)
    approvals: Annotated[int, Field(ge=1, le=10)] = 1
    requester_may_approve: bool = False
    earlier_approvers_may_approve: bool = True
    approvers: Annotated[tuple[Selector, ...], Field(min_length=1)] = (OPERATORS,)

    def matches(self, workflow: str, subject: str) -> bool:
        return any(fnmatchcase(workflow, glob) for glob in self.workflows) and any(
            fnmatchcase(subject, glob) for glob in self.subjects
        )

    @property
    def open_to_cli(self) -> bool:
        """Whether anyone at the command line may approve (any ``--actor``)."""
        return OPERATORS in self.approvers or CLI_ANYONE in self.approvers

    def asks(self) -> str:
        """What it asks, in a sentence: "2 approvals from distinct operators of
        group:release-managers; not the requester; not an earlier approver"."""
        count = "1 approval" if self.approvals == 1 else f"{self.approvals} approvals"
        who = (
            "distinct operators"
            if self.approvers == (OPERATORS,)
            else "distinct operators among " + ", ".join(self.approvers)
        )
        also = [] if self.requester_may_approve else ["not the requester"]
        also += [] if self.earlier_approvers_may_approve else ["not an earlier approver"]
        return f"{count} from {who}" + "".join(f"; {part}" for part in also)

    def fixed_list(self) -> frozenset[str] | None:
        """The approvers, when the list names each one (``user:``, ``token:``, ``cli:<actor>``):
        what may be counted without the database; None when it names a group, or all."""
        if any(s in (OPERATORS, CLI_ANYONE) or s.startswith("group:") for s in self.approvers):
            return None
        return frozenset(self.approvers)


class Policy(BaseModel):
    """The policy file: its ``default`` rule and its ``rules``, the first match winning."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    default: Rule = Rule()
    rules: tuple[Rule, ...] = ()
    source: str = Field(default="built-in default", exclude=True)

    @model_validator(mode="after")
    def _default_everywhere(self) -> Policy:
        if self.default.workflows != ("*",) or self.default.subjects != ("*",):
            raise ValueError(
                "[default] applies where no rule does: it takes no workflows or subjects"
            )
        return self

    def rule_for(self, workflow: str, subject: str) -> Rule:
        return next((r for r in self.rules if r.matches(workflow, subject)), self.default)

    def problems(self, workflows: Iterable[str] | None = None) -> list[str]:
        """What makes a rule one nobody can meet, or one that never applies, as far as the
        file says: more approvals than a list of named approvers holds, two rules of one name,
        a workflow that does not exist (given ``workflows``, the names registered)."""
        found = []
        known = None if workflows is None else set(workflows)
        names = [rule.name for rule in self.rules]
        found += [f"two rules are named {n!r}" for n in sorted(set(names)) if names.count(n) > 1]
        for rule in (self.default, *self.rules):
            fixed = rule.fixed_list()
            if fixed is not None and rule.approvals > len(fixed):
                found.append(
                    f"rule {rule.name!r} asks for {rule.approvals} distinct approvers and names "
                    f"{len(fixed)} ({', '.join(sorted(fixed))}): nobody can satisfy it"
                )
            unknown = [] if known is None else _unknown(rule.workflows, known)
            if unknown:
                found.append(
                    f"rule {rule.name!r} names no workflow Alfred runs: {', '.join(unknown)}"
                )
        return found


def _unknown(globs: Iterable[str], known: set[str]) -> list[str]:
    return [g for g in globs if not any(fnmatchcase(name, g) for name in known)]


class PolicyInvalid(Exception):
    """The policy file does not parse, or asks for what nobody can give."""


def policy_read(path: str | Path) -> Policy:
    """The policy in ``path``, checked as far as the file alone says (``Policy.problems``)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PolicyInvalid(f"{path}: {exc}") from None
    try:
        policy = Policy.model_validate({**_lists_as_tuples(data), "source": str(path)})
    except ValidationError as exc:
        errors = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'the file'}: {e['msg']}" for e in exc.errors()
        )
        raise PolicyInvalid(f"{path}: {errors}") from None
    problems = policy.problems()
    if problems:
        raise PolicyInvalid(f"{path}: {'; '.join(problems)}")
    return policy


def _lists_as_tuples(value: Any) -> Any:
    """TOML's arrays as the tuples the frozen models hold (strict validation takes no list)."""
    if isinstance(value, list):
        return tuple(_lists_as_tuples(item) for item in value)
    if isinstance(value, dict):
        return {key: _lists_as_tuples(item) for key, item in value.items()}
    return value


@functools.cache
def _policy_at(path: str) -> Policy:
    return policy_read(path) if path else Policy()


def policy() -> Policy:
    """The policy in force: ``ALFRED_APPROVAL_POLICY``'s, read once per process (a changed
    file takes effect when the processes restart, as a deploy does)."""
    return _policy_at(str(getattr(settings, "ALFRED_APPROVAL_POLICY", "") or ""))


# --- who may approve -------------------------------------------------------------------------


def approvers_now(rule: Rule) -> dict[str, str]:
    """Every principal the rule's list holds now but the command line's (which is anyone at a
    shell, ``Rule.open_to_cli``): principal → the name people know it by. Users need the
    operate permission and to be active; tokens the operator role and not to be revoked."""
    return _approvers(rule, *statements_run(_approver_statements(rule)))


def _approver_statements(rule: Rule) -> list[Statement | None]:
    """The reads of the rule's approvers: its users and its tokens (None: the list names none)."""
    everyone = OPERATORS in rule.approvers  # then a name beside it narrows nothing
    users: Q | None = Q() if everyone else None
    tokens: Q | None = Q() if everyone else None
    for selector in rule.approvers:
        kind, _, name = selector.partition(":")
        if everyone:
            break
        if kind == "group":
            users = _or(users, Q(groups__name=name))
        elif kind == "user":
            users = _or(users, Q(username=name))
        elif kind == "token":
            tokens = _or(tokens, Q(name=name))
    app_label, codename = OPERATE_PERMISSION.split(".")
    operates = (
        Q(is_superuser=True)
        | Q(
            user_permissions__codename=codename, user_permissions__content_type__app_label=app_label
        )
        | Q(
            groups__permissions__codename=codename,
            groups__permissions__content_type__app_label=app_label,
        )
    )
    user_rows = get_user_model().objects.filter(operates, is_active=True)
    token_rows = ApiToken.objects.filter(role=Role.OPERATOR, revoked_at__isnull=True)
    return [
        None
        if users is None
        else _statement(user_rows.filter(users).values_list("pk", "username").distinct()),
        None
        if tokens is None
        else _statement(token_rows.filter(tokens).values_list("principal_id", "name")),
    ]


def _or(left: Q | None, right: Q) -> Q:
    return right if left is None else left | right


def _statement(rows: Any) -> Statement:
    sql, params = rows.query.sql_with_params()
    return Statement(sql, params)


def _approvers(rule: Rule, users: Rows | None, tokens: Rows | None) -> dict[str, str]:
    found = {f"user:{pk}": name for pk, name in users or ()}
    found |= {principal: name for principal, name in tokens or ()}
    for selector in rule.approvers:
        if selector.startswith("cli:") and selector != CLI_ANYONE:
            found[selector] = selector.removeprefix("cli:")
    return found


@dataclass(frozen=True)
class Given:
    """One approval given to the pending plan."""

    principal: str
    name: str
    at: Any  # datetime

    def as_dict(self) -> dict[str, Any]:
        return {"by": self.principal, "name": self.name, "at": self.at}


@dataclass(frozen=True)
class Standing:
    """Where the pending plan's approval stands under its rule."""

    rule: Rule
    given: tuple[Given, ...]
    shut_out: dict[str, str] = field(default_factory=dict)  # principal → why (may not approve)
    may_still: dict[str, str] = field(default_factory=dict)  # principal → name, listed, not given
    blocked: str = ""  # why it can no longer be met, or ""
    void: tuple[Given, ...] = ()  # given by someone the rule no longer lets approve
    listed: dict[str, str] = field(default_factory=dict)  # the list as read (not for operators)

    @property
    def owed(self) -> int:
        return max(self.rule.approvals - len(self.given), 0)

    def summary(self) -> str:
        """ "1 of 2 approvals (alice)"."""
        names = ", ".join(g.name or g.principal for g in self.given)
        return f"{len(self.given)} of {self.rule.approvals} approvals" + (
            f" ({names})" if names else ""
        )

    def refusal(self, caller: Caller) -> str:
        """Why ``caller`` may not approve this plan now, or "" (they may)."""
        if any(g.principal == caller.principal for g in (*self.given, *self.void)):
            return ""  # said by the service as already given
        if caller.principal in self.shut_out:
            return self.shut_out[caller.principal]
        if not _on(self.rule, self.listed, caller.principal):
            listed = ", ".join(self.rule.approvers)
            return f"the rule {self.rule.name!r} takes approvals from {listed} only"
        return ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule.name,
            "asks": self.rule.asks(),
            "approvals_required": self.rule.approvals,
            "approvals": [g.as_dict() for g in self.given],
            "no_longer_counted": [g.as_dict() for g in self.void],
            "summary": self.summary(),
            "requester_may_approve": self.rule.requester_may_approve,
            "earlier_approvers_may_approve": self.rule.earlier_approvers_may_approve,
            "approvers": list(self.rule.approvers),
            "blocked": self.blocked or None,
        }


def rule_of(execution: Execution, subject: str) -> Rule:
    return policy().rule_for(execution.workflow, subject)


def standing(execution: Execution, hook: Hook, subject: str) -> Standing:
    """How far the plan of ``hook`` is approved, and whether it still can be: what it reads
    (the approvals given in the hook's current run, the requesters and earlier approvers where
    its rule shuts them out, the approvers on its list unless it lets every operator in) in
    one round trip.

    An approval counts while its giver may still give it: one given by someone the rule now
    shuts out or no longer lists (a restart changed the policy, a group lost a member, a token
    was revoked) is shown as no longer counted. A hook reopened in a later run (a retry that
    made the same plan) starts its count again: what was given before the rejection, the
    expiry or the failure does not carry over."""
    rule = rule_of(execution, subject)
    given_rows = (
        Approval.objects.filter(hook=hook, run_id=hook.run_id)
        .order_by("created_at", "id")
        .values_list("principal", "actor_name", "created_at")
    )
    keys = DeliveryKey.objects.filter(execution=execution).values_list("principal")
    earlier = (
        Approval.objects.filter(execution=execution).exclude(hook=hook).values_list("principal")
    )
    everyone = OPERATORS in rule.approvers
    given, keyed, approved_before, users, tokens = statements_run(
        [
            _statement(given_rows),
            None if rule.requester_may_approve else _statement(keys),
            None if rule.earlier_approvers_may_approve else _statement(earlier),
            *([None, None] if everyone else _approver_statements(rule)),
        ]
    )
    shut_out: dict[str, str] = {}
    requesters = [] if keyed is None else [execution.principal, *(row[0] for row in keyed)]
    for principal in requesters:
        shut_out[principal] = (
            f"you asked for this execution, and the rule {rule.name!r} lets nobody approve "
            "their own request"
        )
    for (principal,) in approved_before or ():
        shut_out.setdefault(
            principal,
            f"you approved an earlier plan of this execution, and the rule {rule.name!r} "
            "asks another operator for this one",
        )
    listed = _approvers(rule, users, tokens)
    all_given = [Given(principal, name, at) for principal, name, at in given or ()]
    counted = tuple(
        g for g in all_given if g.principal not in shut_out and _on(rule, listed, g.principal)
    )
    void = tuple(g for g in all_given if g not in counted)
    done = {g.principal for g in all_given}
    may_still = {p: n for p, n in listed.items() if p not in shut_out and p not in done}
    owed = max(rule.approvals - len(counted), 0)
    blocked = ""
    if owed > len(may_still) and not rule.open_to_cli:
        who = ", ".join(sorted(may_still.values())) or "nobody"
        blocked = (
            f"the rule {rule.name!r} needs {owed} more approval{'s' if owed != 1 else ''} from "
            f"distinct operators, and only {len(may_still)} may still give one ({who}): "
            "reject the plan, or change the policy and restart"
        )
    return Standing(rule, counted, shut_out, may_still, blocked, void, listed)


def _on(rule: Rule, listed: Mapping[str, str], principal: str) -> bool:
    """Whether ``principal`` (an operator) is on the rule's list now (``listed``: the list as
    the database holds it; not read when the rule lets every operator in)."""
    if OPERATORS in rule.approvers or principal in listed:
        return True
    return CLI_ANYONE in rule.approvers and principal.startswith("cli:")


# --- check and explain (manage.py alfred_policy) ----------------------------------------------


@dataclass(frozen=True)
class RuleReport:
    """A rule as ``alfred_policy`` shows it: where it applies, what it asks, who may approve
    now, and why nobody can satisfy it (``unsatisfiable``, "" when somebody can)."""

    rule: Rule
    approvers: dict[str, str]  # principal → name, as the database holds them now
    unsatisfiable: str = ""
    warning: str = ""  # satisfiable, but not for every execution

    def lines(self) -> list[str]:
        rule = self.rule
        where = f"workflows {', '.join(rule.workflows)}; subjects {', '.join(rule.subjects)}"
        names = ", ".join(sorted(self.approvers.values())) or "none"
        cli = "; and anyone at the command line" if rule.open_to_cli else ""
        text = [
            f"rule {rule.name!r}: {where}",
            f"  asks {rule.asks()}",
            f"  may approve now: {len(self.approvers)} ({names}){cli}",
        ]
        text += [f"  UNSATISFIABLE: {self.unsatisfiable}"] if self.unsatisfiable else []
        return text + ([f"  warning: {self.warning}"] if self.warning else [])


def rule_report(rule: Rule) -> RuleReport:
    """How ``rule`` stands against the operators the database holds now: unsatisfiable when it
    asks more distinct approvers than its list holds (the command line aside, which anyone at a
    shell can act as)."""
    listed = approvers_now(rule)
    unsatisfiable = ""
    if not rule.open_to_cli and rule.approvals > len(listed):
        unsatisfiable = (
            f"it asks for {rule.approvals} distinct approvers and {len(listed)} may approve "
            f"({', '.join(sorted(listed.values())) or 'nobody'})"
        )
    warning = ""
    exact = rule.approvals == len(listed)
    if not unsatisfiable and not rule.open_to_cli and not rule.requester_may_approve and exact:
        warning = (
            f"it asks for {rule.approvals} distinct approvers and {len(listed)} may approve: "
            "an execution one of them asked for can never be approved (the requester may not)"
        )
    return RuleReport(rule, listed, unsatisfiable, warning)


__all__ = [
    "Given",
    "Policy",
    "PolicyInvalid",
    "Rule",
    "RuleReport",
    "Standing",
    "approvers_now",
    "policy",
    "policy_read",
    "rule_of",
    "rule_report",
    "standing",
]
