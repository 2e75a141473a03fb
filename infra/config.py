"""Configuration: defaults for one machine, overridden by a TOML file and ``SF_*`` env vars.

Precedence (highest first): environment variables (``SF_KAFKA_BOOTSTRAP=host:9092``), the file
named by ``SF_CONFIG`` (or ``./safactory.toml`` if present), then these defaults.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


def default_home() -> Path:
    """Where jars, broker data and caches live unless ``SF_HOME`` says otherwise."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "safactory"


def config_file() -> Path | None:
    """The TOML config file in effect, if any."""
    named = os.environ.get("SF_CONFIG")
    if named:
        path = Path(named)
        if not path.is_file():
            raise FileNotFoundError(f"SF_CONFIG={named}: no such file; unset it or fix the path")
        return path
    local = Path("safactory.toml")
    return local if local.is_file() else None


class Settings(BaseSettings):
    """All knobs of a Safactory deployment. Field ``x`` is env var ``SF_X``."""

    model_config = SettingsConfigDict(env_prefix="SF_", extra="forbid")

    home: Path = Field(default_factory=default_home, description="cache and local broker data")
    kafka_bootstrap: str = Field(
        default="127.0.0.1:9092",
        description="bootstrap servers; point at an existing cluster to skip the local broker",
    )
    kafka_version: str = "4.1.1"
    broker_port: int = Field(default=9092, ge=1, le=65535, description="local broker's port")
    controller_port: int = Field(
        default=9093, ge=1, le=65535, description="local broker's KRaft controller port"
    )
    broker_heap: str = Field(default="768m", description="JVM -Xmx of the local broker")
    broker_name: str = Field(
        default="broker", description="folder under `home` holding the local broker's data"
    )
    topic_prefix: str = Field(
        default="sf.",
        description="prefix of every catalogue topic name (a '.' is added when it ends "
        "in none of . _ -)",
    )
    broker_wait_s: float = Field(
        default=60.0,
        ge=0,
        description="how long a starting worker waits for an unreachable broker (a broker or "
        "cluster restarting) before it gives up with one line",
    )
    default_partitions: int = 3
    client_id: str = "safactory"
    group_session_timeout_ms: int = Field(
        default=10_000,
        ge=6_000,
        le=300_000,
        description="a consumer group member is expelled after this long without a heartbeat "
        "(a crashed worker's partitions move then; docs/DECISIONS.md)",
    )
    group_heartbeat_interval_ms: int = Field(
        default=3_000, ge=100, le=100_000, description="how often a group member heartbeats"
    )
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="port of a worker's /metrics on 127.0.0.1 (0: off; one port per worker)",
    )
    event_loop: Literal["uvloop", "asyncio"] = Field(
        default="uvloop", description="event loop of the long-running workers"
    )
    control: dict[str, Any] = Field(
        default_factory=dict,
        description="the control worker's rules (`[control] rules = [...]`, see "
        "streams/control/policy.py; validated there); none: it stops nothing",
    )
    lance_uri: str = Field(
        default="lancedb",
        description="the LanceDB database: a folder, or s3://bucket/prefix on object storage "
        "(the commands' --db overrides it)",
    )
    lance_storage: dict[str, str | bool | int | float] = Field(
        default_factory=dict,
        description="lancedb storage options for an object-store lance_uri (`[lance_storage]` "
        'or SF_LANCE_STORAGE=\'{"aws_endpoint": "http://minio:9000", "allow_http": true}\'); '
        "the AWS_* variables (AWS_ENDPOINT, AWS_ACCESS_KEY_ID, ...) apply too",
    )

    @field_validator("topic_prefix")
    @classmethod
    def _separated(cls, prefix: str) -> str:
        """``gwtest`` becomes ``gwtest.`` (its topics ``gwtest.steps``, not ``gwteststeps``)."""
        return prefix if not prefix or prefix[-1] in "._-" else f"{prefix}."

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = config_file()
        if path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    def topic(self, name: str) -> str:
        """Full topic name of catalogue entry ``name`` (``steps`` → ``sf.steps``)."""
        return f"{self.topic_prefix}{name}"

    def group(self, name: str) -> str:
        """Consumer group ``name`` of this deployment: ``name`` itself under the default
        ``sf.`` prefix, ``name-<prefix>`` under any other (``audit`` → ``audit-team1`` for
        ``team1.``), so deployments sharing a cluster under different topic prefixes never
        join one group, share offsets or rebalance each other."""
        prefix = self.topic_prefix.strip(".")
        return name if prefix == "sf" else f"{name}-{prefix}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings (read once)."""
    return Settings()
