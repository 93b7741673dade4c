"""`spec.autoscaling` and `status.autoscaling`: the operator sets the worker count from the lag
and latency it already reads for the status (`controller/autoscaler.py` decides)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from kafka_mirror.api.base import ApiModel, StatusModel

BOUNDS_MESSAGE = "minReplicas must not exceed maxReplicas"
TARGET_MESSAGE = "set targetLatencySeconds, targetLagPerPartition or both"


class Autoscaling(ApiModel):
    """Worker pods that follow the load: more while records wait, fewer once they do not."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.minReplicas <= self.maxReplicas", "message": BOUNDS_MESSAGE},
                {
                    "rule": "has(self.targetLatencySeconds) || has(self.targetLagPerPartition)",
                    "message": TARGET_MESSAGE,
                },
            ]
        }
    )

    min_replicas: Annotated[int, Field(ge=1, le=1_000)] = Field(
        default=1, description="Worker pods at the least, however quiet the mirror."
    )
    max_replicas: Annotated[int, Field(ge=1, le=1_000)] = Field(
        description="Worker pods at the most (never more than the source partitions mirrored "
        "can keep busy, one per process of each pod)."
    )
    target_latency_seconds: Annotated[int, Field(ge=1, le=86_400)] | None = Field(
        default=None,
        description="The age of the oldest record not yet mirrored (`status.maxLatencySeconds`) "
        "to hold the mirror at: above it the workers scale up.",
    )
    target_lag_per_partition: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="Records not yet mirrored per source partition (`status.totalLag` over "
        "the partitions) to hold the mirror at.",
    )
    scale_up_pause_seconds: Annotated[int, Field(ge=0, le=3_600)] = Field(
        default=60,
        description="After a step up, no further step up for this long: the workers it added "
        "join the group and take partitions before their effect shows in the lag (a pod that "
        "starts slowly wants more).",
    )
    scale_down_window_seconds: Annotated[int, Field(ge=0, le=3_600)] = Field(
        default=300,
        description="The workers scale down only after the load stayed below its target this "
        "long, and then to the most this window asked for: traffic that swings around the "
        "target does not add and remove workers (each change moves partitions).",
    )

    @model_validator(mode="after")
    def _usable(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(BOUNDS_MESSAGE)
        if self.target_latency_seconds is None and self.target_lag_per_partition is None:
            raise ValueError(TARGET_MESSAGE)
        return self


class AutoscalingStatus(StatusModel):
    """What the autoscaler decided last, and what it remembers for the next decision."""

    replicas: int = Field(description="The worker pods it wants.")
    reason: str = Field(default="", description="Why the count is what it is.")
    last_scale_time: datetime | None = None
    low_since: datetime | None = Field(
        default=None,
        description="Since when every reading asked for fewer workers (a scale-down waits "
        "for spec.autoscaling.scaleDownWindowSeconds of them).",
    )
    highest_since_low: int | None = Field(
        default=None, description="The most workers those readings asked for."
    )
