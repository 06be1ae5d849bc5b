"""The start-up warning for what this library cannot mask: the Agents SDK's own spans.

Our journal, ``saga.*`` spans, log lines and exports carry sensitive values only as masks
(``core.scrub``). The SDK's own function spans carry a tool's input and output in clear when the
run's config has ``trace_include_sensitive_data`` (its default) and tracing is on, and send
them to its trace processors (the OpenAI traces dashboard by default); the model provider sees
whatever the conversation holds. Neither is ours to mask, so ``Sagacity.run`` (and its stream)
warns (:class:`~sagacity_agents.errors.SensitiveTraceWarning`) when a tool of the run has
sensitive fields and the config lets the SDK trace tool inputs (docs/observability.md).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from agents import RunConfig

from ..core.sensitive import Sensitivity
from ..errors import ConfigurationError, SensitiveTraceWarning
from .graph import agent_graph

__all__ = ["sensitive_tool_fields", "warn_if_sdk_traces_sensitive"]


def _schema_names(schema: Any, spec: Sensitivity) -> list[str]:
    """Parameter names in a JSON schema (nested objects and array items included) that
    ``spec`` calls sensitive."""
    found: list[str] = []
    if not isinstance(schema, dict):
        return found
    for name, sub in (schema.get("properties") or {}).items():
        if isinstance(name, str) and spec.names_field(name):
            found.append(name)
        found += _schema_names(sub, spec)
    found += _schema_names(schema.get("items"), spec)
    for key in ("$defs", "definitions"):
        for sub in (schema.get(key) or {}).values():
            found += _schema_names(sub, spec)
    return found


def sensitive_tool_fields(agent: Any) -> dict[str, list[str]]:
    """The tools a run of ``agent`` can reach that have sensitive fields: ``"AGENT: TOOL"`` ->
    the fields (declared ones, then parameters whose names are sensitive under the tool's
    ``Sensitivity``: the defaults unless it exempted them). Card numbers found by value (Luhn)
    cannot be foreseen from a schema and are not counted. Empty for a graph that cannot be
    walked (``bind_agent`` refuses it with the reason)."""
    try:
        graph = agent_graph(agent)
    except (ConfigurationError, TypeError, ValueError):
        return {}
    found: dict[str, list[str]] = {}
    for site in graph.sites:
        spec = Sensitivity.of(getattr(site.declaration, "sensitive", None))
        names = sorted(spec.fields) + _schema_names(getattr(site.tool, "params_json_schema", None), spec)
        if names:
            found[f"{site.agent}: {site.key}"] = list(dict.fromkeys(names))
    return found


def _sdk_traces_inputs(config: RunConfig) -> bool:
    """Whether a run under ``config`` lets the SDK put tool inputs in its spans."""
    disabled_env = os.environ.get("OPENAI_AGENTS_DISABLE_TRACING", "").strip().lower() in ("1", "true")
    return bool(config.trace_include_sensitive_data) and not config.tracing_disabled and not disabled_env


def warn_if_sdk_traces_sensitive(agent: Any, run_config: RunConfig | dict[str, Any] | None) -> None:
    """Warn (:class:`SensitiveTraceWarning`) when ``agent``'s tools have sensitive fields and
    ``run_config`` (a ``RunConfig``, a dict of its fields, ``None``: the defaults) lets the
    SDK trace tool inputs. Says nothing otherwise.

    Raises:
        TypeError: a dict with a key ``RunConfig`` does not have.
    """
    config = RunConfig(**run_config) if isinstance(run_config, dict) else (run_config or RunConfig())
    if agent is None or not _sdk_traces_inputs(config):
        return
    found = sensitive_tool_fields(agent)
    if found:
        listed = "; ".join(f"{tool} ({', '.join(names)})" for tool, names in found.items())
        warnings.warn(SensitiveTraceWarning(
            f"tools with sensitive fields: {listed}. The run config lets the Agents SDK trace "
            "tool inputs (trace_include_sensitive_data is true and tracing is on): its own "
            "function spans will carry these values in clear, outside what sagacity masks. Pass "
            "RunConfig(trace_include_sensitive_data=False) to keep them out of the trace."),
            stacklevel=4)
