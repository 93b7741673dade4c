"""`spec.worker` and `spec.audit`: the settings of a mirror's pods, its workers and its audit
CronJob (rendered by `kafka_mirror.render` and `render_audit`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kafka_mirror.api.base import ApiModel, SparkSettingsMap, StringMap, section

CRON_SCHEDULE = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|(\S+\s+){4}\S+)$"

# Kubernetes' own quantity syntax (as kubebuilder writes it for resource.Quantity): a looser
# pattern lets "1.2.3Gi" through to the Deployment, which the API server then fails with a 500.
QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
Quantity = Annotated[str, Field(max_length=64, pattern=QUANTITY)]
Image = Annotated[str, Field(min_length=1, max_length=1024)]  # an image reference


class SparkExecutors(ApiModel):
    """The executor pods of the audit on Spark on Kubernetes."""

    instances: Annotated[int, Field(ge=1, le=64)] = Field(default=2, description="Executor pods.")
    cores: Annotated[int, Field(ge=1, le=16)] = Field(default=1, description="Cores of each.")
    memory: Annotated[str, Field(pattern=r"^[1-9][0-9]{0,5}[mg]$")] = Field(
        default="1g", description="Java heap of each (Spark's `512m`, `2g`)."
    )
    cpu_request: Quantity | None = Field(
        default=None,
        description="CPU each executor pod requests (`500m`, say); by default `cores`, which a "
        "small node may not have room for.",
    )


class SparkSettings(ApiModel):
    """Where the audit's Spark job runs."""

    master: Annotated[str, Field(min_length=1, max_length=1024)] = Field(
        default="local[*]",
        description="Spark master URL: local mode inside the job pod (`local`, `local[N]`, "
        "`local[*]`), or a cluster the operator's installer allows (`--allowed-spark-master`); "
        "`k8s://…` runs executor pods of the audit image in the mirror's namespace (Spark on "
        "Kubernetes, docs/audit.md).",
    )
    executors: SparkExecutors = section(SparkExecutors, "Executor pods, with a `k8s://` master.")
    conf: SparkSettingsMap = Field(
        default_factory=dict,
        description="Spark tuning settings, from a closed list (memory, cores, parallelism, "
        "timeouts).",
    )


class AuditSettings(ApiModel):
    """The offset-translation and completeness audit, run by a CronJob."""

    schedule: Annotated[str, Field(max_length=128, pattern=CRON_SCHEDULE)] = Field(
        default="0 */6 * * *", description="Cron schedule of the audit."
    )
    suspend: bool = Field(default=False, description="Suspend the audit CronJob.")
    full_audit_request: Annotated[str, Field(max_length=128)] | None = Field(
        default=None,
        description="Each run audits only the records after the last verified watermark. Set "
        "this to a new value (a date, a ticket) to have the next run audit everything again, "
        "once.",
    )
    spark: SparkSettings = section(SparkSettings, "Spark settings.")
    image: Image | None = Field(
        default=None,
        description="Image of the audit pods: the operator's audit image (`--audit-image`, "
        "with PySpark, Java and Spark's Kafka source) if unset. Another image must match the "
        "installer's allow-list (`--allowed-worker-image`).",
    )


class Toleration(ApiModel):
    """A pod toleration (core/v1 Toleration)."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class Resources(ApiModel):
    """Container resources (core/v1 ResourceRequirements, quantities as strings)."""

    requests: Annotated[dict[str, Quantity], Field(max_length=16)] = Field(default_factory=dict)
    limits: Annotated[dict[str, Quantity], Field(max_length=16)] = Field(default_factory=dict)


class DisruptionBudget(ApiModel):
    """The workers' PodDisruptionBudget: how far a voluntary disruption may go."""

    max_unavailable: Annotated[int, Field(ge=0, le=1_000)] = Field(
        default=1,
        description="Worker pods that a voluntary disruption (a node drain, a cluster upgrade) "
        "may evict at once. The default, 1, lets a drain go on one worker at a time; 0 holds "
        "every drain until a person steps in.",
    )


class WorkerPod(ApiModel):
    """Settings of the worker pods."""

    image: Image | None = Field(
        default=None,
        description="Image of the worker pods; the operator's worker image (`--worker-image`) "
        "if unset. Another image must match the installer's allow-list "
        "(`--allowed-worker-image`).",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(default="IfNotPresent")
    resources: Resources = section(Resources, "Container resources.")
    processes: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=None,
        description="Mirroring processes in each pod, sharing its partitions like replicas "
        "(Python runs one thread at a time: one process uses one core). Unset: one per core "
        "of the pod's CPU limit, rounded up; one without a limit.",
    )
    node_selector: StringMap = Field(default_factory=dict)
    tolerations: Annotated[list[Toleration], Field(max_length=64)] = Field(default_factory=list)
    annotations: StringMap = Field(default_factory=dict, description="Extra pod annotations.")
    disruption_budget: DisruptionBudget = section(
        DisruptionBudget, "The workers' PodDisruptionBudget."
    )
