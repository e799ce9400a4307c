"""The agent config's `memory:` and `model:` blocks: the rules that check them over YAML nodes
with positions, and the effective settings of a file that passes.

    nodes     reading composed YAML nodes safely (merge keys, duplicates, the guarded walk)
    findings  the rules, a finding, the findings of one file
    keys      the key table: each key's default, schema, description and check
    secret    literal secrets, on every node
    document  one file: bytes, YAML, nodes, blocks; load_config

The settings themselves (and their defaults) live in volumetool.settings, which imports no YAML.
"""

from volumetool.config.document import (
    DEFAULT_MAX_BYTES,
    _Checker,
    check_source,
    load_config,
    looks_like_agent_config,
    read_source,
    source_size,
)
from volumetool.config.findings import RULES, Finding
from volumetool.config.keys import MEMORY_KEYS, MODEL_KEYS, json_schema
from volumetool.config.nodes import Loader
from volumetool.settings import (
    DEFAULT_THRESHOLD,
    AgentConfig,
    MemorySettings,
    ModelSettings,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_THRESHOLD",
    "MEMORY_KEYS",
    "MODEL_KEYS",
    "RULES",
    "AgentConfig",
    "Finding",
    "Loader",
    "MemorySettings",
    "ModelSettings",
    "_Checker",
    "check_source",
    "json_schema",
    "load_config",
    "looks_like_agent_config",
    "read_source",
    "source_size",
]
